"""Process control for the grader's executor: every process a submission starts dies with its run.

``_kill`` kills an executor's process group; on Linux the grader is a *child subreaper* while it
runs a submission (``_child_subreaper``), so that a process that left the group (setsid after a
double fork) is handed to the grader when its parents die, and ``_kill_adopted`` kills it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def _kill(proc: subprocess.Popen) -> None:
    """Kill the executor's whole process group, even when the executor itself has already exited:
    a child it forked stays in the group (and alive) after it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if proc.poll() is None:
            proc.kill()
    proc.wait()
    if proc.stdout:
        proc.stdout.close()


# A process the submission starts in a new session (setsid, after a double fork) leaves the
# executor's process group, so ``killpg`` misses it. On Linux the grader makes itself a *child
# subreaper* while it runs a submission: such a process, orphaned when its parents die, becomes
# the grader's child instead of init's, and is killed here with the rest. Elsewhere (and against
# code that tampers with the machine in other ways), grade untrusted work in a container.
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


def _child_subreaper(on: bool) -> bool:
    """Turn this process's child-subreaper flag on or off; True when it changed (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int(0)
    if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) != 0 or bool(was.value) == on:
        return False
    return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def _parents() -> dict[int, int]:
    """{pid: parent pid} of every process /proc shows (empty where there is no /proc)."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return parents
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        if len(fields) > 1:
            parents[int(entry)] = int(fields[1])
    return parents


def _children() -> set[int]:
    """Pids whose parent is this process."""
    me = os.getpid()
    return {pid for pid, parent in _parents().items() if parent == me}


def _kill_adopted(ours: set[int], seconds: float = 10.0) -> None:
    """Kill every process below each child of ours that was not ours before the executor started
    (orphans of the submission that the subreaper flag handed to us, and all they started), all
    at once, then reap those children. Killing a process hands us its children as they die, so
    repeat until no new child is left (for at most ``seconds``)."""
    me, deadline = os.getpid(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        parents = _parents()
        adopted = {pid for pid, parent in parents.items() if parent == me} - ours
        if not adopted:
            return
        below: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            below.setdefault(parent, []).append(pid)
        doomed, stack = set(), list(adopted)
        while stack:  # each adopted child and everything below it
            pid = stack.pop()
            if pid not in doomed:
                doomed.add(pid)
                stack.extend(below.get(pid, ()))
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        waiting = set(adopted)
        while waiting and time.monotonic() < deadline:  # reap, never blocking past the deadline
            for pid in list(waiting):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        waiting.discard(pid)
                except ChildProcessError:
                    waiting.discard(pid)
            if waiting:
                time.sleep(0.01)
        if waiting:
            return  # what would not die (not ours to kill, or stuck in the kernel) is left to the container

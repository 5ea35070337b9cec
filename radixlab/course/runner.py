"""The untrusted executor: run a student's exercise function on grader-chosen inputs, get plain data back.

``run_exercise`` builds the exercise's stripped copy of radixlab (``sandbox.build_copy``: the
reference and every part that computes the same answer are absent from it), starts a fresh Python
process on that copy (under bubblewrap where it works), sends it the graded program (the statements
``extract`` chose) and the cases' arguments, and reads back one line per case: the plain data
``spec.drive`` returned, or how the case failed (not done, raised, timed out). Every line is
untrusted data (``_validate``): a malformed one ends that submission's run, never the grader. Every
case has a time limit; a case that runs past it (or kills the process) is recorded and a new process
continues with the next case. Every process the submission started dies with its executor
(``procs.py``; in the sandbox, its PID namespace). The process never sees an expected value or a
verdict: the grader computes those itself (``grade.py``). For an exercise whose answer is a test
(``runs.py``), each case is one run in its own process, and the run's questions (``{"ask": …}``)
are answered here by the case's oracle, one reply line each on the executor's stdin.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import sandbox as sb
from .messages import validate as _validate
from .procs import _child_subreaper, _children, _kill, _kill_adopted
from .runs import ask_oracle

EXECUTOR = r'''
import __future__, ast, builtins, importlib, json, os, sys, time

def _main(job):
    sys.path[:] = job["path"]              # the stripped copy, the stdlib, site-packages: nothing else
    out = os.fdopen(os.dup(1), "w")        # the answer channel: a private copy of stdout...
    os.dup2(2, 1)                          # ...while fd 1 (and print) go to stderr, never to the grader
    sys.stdout = sys.stderr
    nonce, dumps, write, flush, perf = job.pop("nonce"), json.dumps, out.write, out.flush, time.perf_counter
    loads, readline = json.loads, sys.stdin.readline

    def emit(obj):
        write(nonce + dumps(obj, default=repr) + "\n")
        flush()

    def ask(question):  # an oracle spec's run: the grader answers each call (the implementation is not here)
        emit({"ask": question})
        return loads(readline() or "null")

    # The drive function's module, from the stripped copy: the reference is not in it.
    module, _, qualname = job["drive"].partition(":")
    drive = importlib.import_module(module)
    for part in qualname.split("."):
        drive = getattr(drive, part)
    from radixlab.course.spec import run_drive
    ns = {"__name__": "__main__", "__builtins__": builtins}
    trees, futures = {}, {}
    for cell, index, keep in job["statements"]:
        if cell not in trees:
            trees[cell] = ast.parse(job["cells"][str(cell)])
            futures[cell] = 0  # a cell's `from __future__` imports hold for its every statement
            for s in trees[cell].body:
                if isinstance(s, ast.ImportFrom) and s.module == "__future__":
                    for a in s.names:
                        futures[cell] |= getattr(__future__, a.name).compiler_flag
        stmt = trees[cell].body[index]
        if keep is not None:  # an import cut to the names the program uses
            stmt.names = [a for a in stmt.names if (a.asname or a.name.split(".")[0]) in keep]
        try:
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), f"<cell {cell}>", "exec",
                         flags=futures[cell], dont_inherit=True), ns)
        except BaseException as exc:
            emit({"def_error": {"cell": cell, "ename": type(exc).__name__, "evalue": str(exc)[:300]}})
    fn = ns.get(job["function"])
    emit({"defined": callable(fn)})
    if callable(fn):
        for k in range(job["start"], len(job["cases"])):
            t0 = perf()
            outcome = run_drive(drive, fn, job["cases"][k], job["time_limit"], ask if job["ask"] else None)
            outcome.update(case=k, seconds=perf() - t0)
            emit(outcome)
    emit({"done": True})

_main(json.loads(sys.stdin.readline()))
'''


@dataclass
class ExerciseRun:
    outcomes: list[dict]  # per case: {"answer": …} | {"not_done": True} | {"raised": …} | {"timeout": s} | {"error": …}
    defined: bool = False
    errors: list[dict] = field(default_factory=list)  # {cell, ename, evalue}: statements that raised while defining
    seconds: float = 0.0
    stopped: str = ""
    processes: int = 0
    sandbox: str = ""  # "bubblewrap", or why none ran


def run_exercise(exercise: str, function: str, cells: dict[int, str], statements: list,
                 cases: list, case_timeout: float, define_timeout: float = 60.0,
                 total_timeout: float = 600.0, drive: str = "", strip: tuple[str, ...] | None = None,
                 sandbox: bool | None = None, roots: tuple[str, ...] = (),
                 oracles: list | None = None) -> ExerciseRun:
    """Run ``function`` (defined by ``statements`` of ``cells``) on every case in fresh processes.

    ``oracles`` (an oracle spec's runs, ``runs.plan``): case k runs alone in its own process, and
    ``oracles[k]`` answers its questions here; what it records comes back as the outcome's ``asks``.

    ``statements``: ``(cell, index)`` or ``(cell, index, names)`` (an import cut to ``names``).
    ``drive`` is the spec's drive function as ``"module:qualname"`` and ``strip`` its strip targets
    (default: looked up from ``exercise`` here, in the grader's process). ``sandbox``: None uses
    bubblewrap where it works, False never does.
    """
    if not drive or strip is None or not roots:
        from .exercises import all_specs
        spec = all_specs()[exercise]
        d = spec.drive
        drive = drive or f"{d.__module__}:{d.__qualname__}"
        strip = spec.all_stripped() if strip is None else strip
        roots = roots or spec.copy_roots()
    use_box = sb.sandboxed() if sandbox is None else (sandbox and sb.sandboxed())
    run = ExerciseRun([{} for _ in cases], sandbox="bubblewrap" if use_box else
                      ("off" if sandbox is False else sb.sandbox_works()))
    statements = [list(s) + [None] * (3 - len(s)) for s in statements]
    t0 = time.monotonic()
    copy = Path(tempfile.mkdtemp(prefix="radixlab-copy-"))
    with _ONE_RUN:  # one run at a time per process: each run's sweep would take the other's processes
        adopted = _child_subreaper(True)  # orphans of the executor become our children, to be killed
        try:
            sb.build_copy(roots, strip, copy)
            for k, oracle in enumerate(oracles or [None]):  # an oracle spec: each run alone, in a fresh process
                one = ExerciseRun([{}], sandbox=run.sandbox) if oracles else run
                _run_processes(one, drive, function, cells, statements, [cases[k]] if oracles else cases,
                               case_timeout, define_timeout, total_timeout, t0, copy, use_box, oracle)
                if oracles:
                    run.outcomes[k], run.defined = one.outcomes[0], one.defined
                    run.processes += one.processes
                    run.errors += [e for e in one.errors if e not in run.errors]
                    run.stopped = run.stopped or one.stopped
                    if not one.defined:
                        break
        finally:
            if adopted:
                _child_subreaper(False)
            sb.remove_copy(copy)
    for k, o in enumerate(run.outcomes):
        if not o:
            run.outcomes[k] = {"error": run.stopped or "the executor stopped before this case"}
    run.seconds = round(time.monotonic() - t0, 2)
    return run


_ONE_RUN = threading.Lock()


def _run_processes(run: ExerciseRun, drive: str, function: str, cells: dict[int, str],
                   statements: list, cases: list, case_timeout: float, define_timeout: float,
                   total_timeout: float, t0: float, copy: Path, use_box: bool, oracle=None) -> None:
    start = 0
    while True:
        left = total_timeout - (time.monotonic() - t0)
        if left < 1:
            run.stopped = f"total time limit ({total_timeout:g} s) reached"
            break
        run.processes += 1
        nxt = _one_process(run, drive, function, cells, statements, cases, start, case_timeout,
                           min(define_timeout, left), t0 + total_timeout, copy, use_box, oracle)
        if nxt is None or nxt >= len(cases) or not run.defined:
            break
        start = nxt


def executor_argv(copy: Path | None = None, use_box: bool = False) -> list[str]:
    """The executor's command line: ``sandbox.executor_argv`` (``-I -S -B``: isolated, no ``site``,
    no bytecode written), under bubblewrap when ``use_box``."""
    argv = sb.executor_argv(EXECUTOR)
    return sb.sandbox_command(copy, argv) if use_box and copy is not None else argv


def _one_process(run: ExerciseRun, drive: str, function: str, cells: dict[int, str],
                 statements: list, cases: list, start: int, case_timeout: float,
                 define_timeout: float, hard_deadline: float, copy: Path, use_box: bool,
                 oracle=None) -> int | None:
    """One executor process from case ``start``; returns the case to resume at, or None when finished."""
    nonce = secrets.token_hex(8)
    workdir = tempfile.mkdtemp(prefix="radixlab-grade-")
    ours = _children()  # what was ours before: never killed
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp" if use_box else workdir,
           "RADIXLAB_DEVICE": "cpu", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    job = {"nonce": nonce, "drive": drive, "function": function, "cells": {str(k): v for k, v in cells.items()},
           "statements": statements, "cases": cases, "start": start, "time_limit": case_timeout,
           "path": sb.python_path(sb.COPY_MOUNT if use_box else str(copy)), "ask": oracle is not None}
    proc = subprocess.Popen(executor_argv(copy, use_box), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=workdir, env=env, start_new_session=True)
    asks: list = []  # the oracle's records of this process's questions: the grader's own data
    try:
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.flush()
        if oracle is None:
            proc.stdin.close()
        else:  # a reply that would block (the run stopped reading) ends the run, never the grader
            os.set_blocking(proc.stdin.fileno(), False)
    except BrokenPipeError:
        pass
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf, phase_deadline = b"", time.monotonic() + define_timeout + 20  # + the import of radixlab and torch
    current = start
    try:
        while True:
            now = time.monotonic()
            deadline = min(phase_deadline, hard_deadline)
            if now >= deadline:
                if not run.defined:
                    run.errors.append({"cell": None, "ename": "Timeout",
                                       "evalue": f"defining {function} ran past {define_timeout:g} s"})
                    run.stopped = f"defining {function} ran past {define_timeout:g} s"
                    return None
                if now >= hard_deadline:
                    run.stopped = "total time limit reached"
                    return None
                run.outcomes[current] = {"timeout": case_timeout, "seconds": case_timeout}
                return current + 1
            # A process the executor started may hold the pipe open after the executor itself
            # exits: look at the executor too (every 0.1 s), not only for the pipe's end.
            ready = sel.select(timeout=min(deadline - now, 0.1))
            if not ready:
                if proc.poll() is None:  # asked once: its answer must hold for the look at the pipe below
                    continue
                ready = sel.select(timeout=0)  # exited: what it wrote just before is still to be read
            chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""  # b"": exited, nothing left unread
            if not chunk:  # the process ended
                if not run.defined:
                    run.stopped = run.stopped or f"the executor exited while defining {function}"
                    return None
                if current < len(cases):
                    run.outcomes[current] = {"raised": "the process exited (exit() or a crash) during this case"}
                    return current + 1
                return None
            buf += chunk
            if len(buf) > MAX_LINE and b"\n" not in buf:
                run.stopped = "the executor sent a line longer than the grader reads"
                return None
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                text = line.decode("utf-8", "replace")
                if not text.startswith(nonce):
                    continue
                try:
                    # NaN and Infinity arrive as text: no number the JSON report could not hold
                    msg = _validate(json.loads(text[len(nonce):], parse_constant=lambda c: f"<{c}>"), len(cases))
                except (ValueError, RecursionError) as exc:  # Malformed, or not JSON: this submission's failure
                    why = f"the executor sent a malformed message ({_short(exc)})"
                    if not run.defined:
                        run.errors.append({"cell": None, "ename": "Malformed", "evalue": why})
                    elif current < len(cases):
                        run.outcomes[current] = {"raised": why}
                    run.stopped = why
                    return None
                if "ask" in msg:
                    if not _reply(proc, oracle, asks, msg["ask"], run.defined and current < len(cases)):
                        if current < len(cases):
                            run.outcomes[current] = {"raised": "your test stopped reading the answers to its calls"}
                        return None
                elif "def_error" in msg:
                    run.errors.append(msg["def_error"])
                elif "defined" in msg:
                    run.defined = msg["defined"]
                    phase_deadline = time.monotonic() + case_timeout + 5
                elif "case" in msg:
                    k = msg.pop("case")
                    if k == current and not run.outcomes[k]:
                        run.outcomes[k] = {**msg, "asks": asks} if oracle else msg
                        current += 1
                        phase_deadline = time.monotonic() + case_timeout + 5
                elif "done" in msg:
                    return None
    finally:
        sel.close()
        if proc.stdin and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        _kill(proc)
        _kill_adopted(ours)
        shutil.rmtree(workdir, ignore_errors=True)


MAX_LINE = 64 * 1024 * 1024


def _reply(proc: subprocess.Popen, oracle, asks: list, question: object, running: bool) -> bool:
    """Answer one question of a run (only while its case runs); False when the reply would block."""
    if oracle is None or proc.stdin is None or proc.stdin.closed:
        return True  # no oracle: the question is ignored (its asker reads nothing)
    reply = ask_oracle(oracle, asks, question) if running else \
        {"raised": "RuntimeError", "message": "calls are answered only while your test runs"}
    line = (json.dumps(reply, default=repr) + "\n").encode()
    if len(line) > PIPE_BUF:  # a pipe write up to PIPE_BUF bytes is atomic: whole or not at all
        line = b'{"raised": "RuntimeError", "message": "an answer too long to send"}\n'
    try:
        os.write(proc.stdin.fileno(), line)
        return True
    except (BlockingIOError, BrokenPipeError):
        return False


PIPE_BUF = 4096


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:160]

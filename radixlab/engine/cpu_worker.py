"""The CPU "device": a worker process (or, for comparison, a thread) that executes launches in order.

On a laptop there is no GPU to run ahead of the scheduler, so we make one: a daemon process that
owns the model and plays the part of a CUDA stream. The scheduler and the worker share the staging
buffer, the result ring (and, in the engine, the KV pool and req-to-token table) through shared
memory (``Tensor.share_memory_()``); launches and completions are small messages on a
``multiprocessing`` Pipe. The worker is started lazily (first ``write_inputs``), is a daemon, and is
stopped by ``shutdown()``, by ``with`` or by a finalizer, so an open backend never delays exit.

Failures: a worker that dies (killed, crashed) or sends nothing for ``watchdog_timeout`` seconds
(SGLang's ``--watchdog-timeout``, 300 s) while the host waits raises ``WorkerDiedError`` /
``WorkerTimeoutError``; the backend forgets what was in flight and its next launch starts a fresh
worker. The worker ignores SIGINT: Ctrl-C and JupyterLab's "Interrupt kernel" signal the whole
process group, and the interrupt is the host's to handle (it aborts the requests and waits for the
device, as an interrupted CUDA program's stream finishes its kernels). It stays in the group, unlike
a worker in its own session, so that a signal that ends the group (SIGTERM, SIGKILL) ends it too;
and a forked worker closes its copy of the host's end of the pipe, so that a host killed outright
(a kernel restart) is an end of file to it, not an orphan waiting forever.

Measured on a 2-core machine (notebook 08): with a process the scheduler's Python and the model's
ops truly run at the same time; with a *thread* the GIL serialises the two, and overlap mostly
vanishes. Overlap is a property of the device, not of the Python code.

``adversarial=True`` (teaching): the worker reads a launch's inputs only once the CPU has launched
the next batch or blocks waiting on this one, and likewise delays the result. Every CPU wait sends
a ``block`` message first, so the two sides never wait for each other: the run is deterministic.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import threading
import time
import traceback
import weakref
from collections import deque
from typing import Any

import torch
import torch.multiprocessing as tmp

from .device_backend import (HEADER, DeviceBackend, DeviceProgram, Launch, WorkerDiedError, WorkerTimeoutError,
                             checksum, unpack)

RING = 4  # result slots: the overlap loop has at most two batches in flight


def _device_loop(conn: Any, program: DeviceProgram, staging: torch.Tensor, results: torch.Tensor,
                 max_reqs: int, adversarial: bool, num_threads: int | None, own_process: bool = False,
                 host_end: Any = None) -> None:
    """The worker's body: one launch at a time, in order, like a stream."""
    if own_process:  # the host blocked SIGINT around the start: ignore it, then unblock
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if host_end is not None:  # forked with the host's end of the pipe: close it, so the host's death is EOF
        host_end.close()
    try:
        if num_threads:
            torch.set_num_threads(num_threads)
        device = torch.device("cpu")
        program.setup(device)
        future = torch.zeros(max_reqs, dtype=torch.int64)  # FutureMap.output_tokens_buf
        pending: deque = deque()  # messages received but not handled yet (a later launch, blocks)

        blocked = {"read": -1, "done": -1}  # the latest step the CPU said it is blocked on, per kind

        def wait_release(step: int, kinds: tuple[str, ...]) -> str:
            """Adversarial hold: until the CPU launches a later step or blocks on this one."""
            while True:
                for msg in list(pending):
                    if msg[0] == "block":
                        pending.remove(msg)
                        blocked[msg[1]] = max(blocked[msg[1]], msg[2])
                    elif msg[0] in ("stop", "flush", "reset"):
                        return msg[0]
                    elif msg[0] == "launch" and msg[1] > step:
                        return "launch"
                if any(blocked[k] >= step for k in kinds):
                    return "block"
                pending.append(conn.recv())

        with torch.inference_mode():
            while True:
                msg = pending.popleft() if pending else conn.recv()
                if msg[0] == "stop":
                    break
                if msg[0] == "block":
                    blocked[msg[1]] = max(blocked[msg[1]], msg[2])
                    continue
                if msg[0] == "reset":  # a new run: its step numbers start again
                    blocked.update(read=-1, done=-1)
                    continue
                if msg[0] == "flush":
                    continue
                _, step, layout, batch_size, resolve_future = msg
                if adversarial:
                    wait_release(step, ("read", "done"))
                # 1. read the staging buffer (what the WAR barrier waits for)
                t_read = time.perf_counter()
                n = layout[-1][1] + layout[-1][2]
                image = staging[:n].clone()
                inputs = unpack(image, layout)
                # 2. future token ids, resolved on the device side
                if resolve_future:
                    inputs["input_ids"] = future[inputs["req_pool_indices"]]
                program.snapshot(inputs)  # e.g. the engine's req-to-token rows
                conn.send(("read", step, t_read, time.perf_counter()))
                t_dev = time.perf_counter()
                # 3. the forward, then stash the sampled ids for the next step
                try:
                    tokens = program.forward(inputs).to(torch.int64)
                except Exception as exc:
                    if int(image[0]) != step:  # say why: the inputs were overwritten before they were read
                        raise RuntimeError(f"batch {step} read batch {int(image[0])}'s inputs (a WAR hazard: the "
                                           f"staging buffer was overwritten before the device read it): {exc}") from exc
                    raise
                future[inputs["req_pool_indices"]] = tokens
                t_copy = time.perf_counter()
                overlapped = None
                if adversarial:  # the hold is idle time, not part of the copy
                    overlapped = wait_release(step, ("done",)) == "launch"
                t_copy_start = time.perf_counter()
                # 4. "device → host": into the shared result ring
                results[step % RING, :batch_size] = tokens
                extra = program.take_extra()
                conn.send(("done", step, checksum(image), int(image[0]), t_dev, t_copy, t_copy_start,
                           time.perf_counter(), overlapped, extra))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    except BaseException:  # report, so the scheduler raises instead of hanging
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:
            pass


def _stop(conn: Any, worker: Any) -> None:
    """Finalizer: ask the worker to stop, then make sure it is gone (never blocks for long)."""
    try:
        conn.send(("stop",))
    except Exception:
        pass
    worker.join(timeout=2.0)
    if hasattr(worker, "terminate") and worker.is_alive():
        worker.terminate()
        worker.join(timeout=1.0)
    try:
        conn.close()
    except Exception:
        pass


class CPUProcessBackend(DeviceBackend):
    """The device is a daemon worker process; buffers are in shared memory, messages on a Pipe."""

    kind = "cpu-process"
    use_thread = False

    def __init__(self, program: DeviceProgram, *, device_threads: int | None = 1, start_method: str | None = None,
                 watchdog_timeout: float | None = 300.0, **kwargs: Any) -> None:
        super().__init__(program, **kwargs)
        if watchdog_timeout is not None and (isinstance(watchdog_timeout, bool) or
                                             not isinstance(watchdog_timeout, (int, float)) or watchdog_timeout <= 0):
            raise ValueError(f"watchdog_timeout must be a positive number of seconds or None, got {watchdog_timeout!r}")
        self.watchdog_timeout = watchdog_timeout  # seconds without a word from the worker while the host waits
        self.device_threads = device_threads
        methods = mp.get_all_start_methods()
        self.start_method = start_method or ("fork" if "fork" in methods else "spawn")
        if self.start_method not in methods:
            raise ValueError(f"start_method must be one of {methods}, got {self.start_method!r}")
        self.staging = torch.zeros(self.staging_capacity, dtype=torch.int64).share_memory_()
        self.results = torch.zeros(RING, self.max_batch, dtype=torch.int64).share_memory_()
        self._conn: Any = None
        self._worker: Any = None
        self._finalizer: weakref.finalize | None = None
        self._inbox: deque = deque()  # a message received but not handled (an interrupt came in between)

    # -- life cycle ---------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._worker is not None

    def _ensure_started(self) -> None:
        if self._worker is not None:
            return
        args = (self.program, self.staging, self.results, self.max_reqs, self.adversarial)
        if self.use_thread:
            here, there = mp.Pipe()
            worker = threading.Thread(target=_device_loop, args=(there, *args, None), daemon=True,
                                      name="radixlab-device")
        else:
            ctx = tmp.get_context(self.start_method)
            here, there = ctx.Pipe()
            host_end = here if self.start_method == "fork" else None  # spawn inherits no descriptors
            worker = ctx.Process(target=_device_loop, args=(there, *args, self.device_threads, True, host_end),
                                 daemon=True, name="radixlab-device")
        mask = hasattr(signal, "pthread_sigmask") and not self.use_thread
        if mask:  # the child starts with SIGINT blocked, so no interrupt lands before it ignores SIGINT
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            worker.start()
        finally:
            if mask:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if not self.use_thread:
            there.close()  # the worker's end lives in the worker only: its death is an end of file here
        self._conn, self._worker = here, worker
        self._finalizer = weakref.finalize(self, _stop, here, worker)

    def new_timeline(self, loop: str):
        timeline = super().new_timeline(loop)
        if self._conn is not None and self.adversarial:
            self._send(("reset",))  # the worker forgets what the last run blocked on
        return timeline

    def _died(self, what: str, kill: bool = False, cls: type = WorkerDiedError) -> WorkerDiedError:
        """Forget the worker and what was in flight; the error to raise says what happened."""
        worker = self._worker
        self._reset(kill=kill)  # joins it, so a killed process has its exit code
        code = getattr(worker, "exitcode", None)
        how = ""
        if code is not None and code < 0:
            try:
                how = f" (killed by {signal.Signals(-code).name})"
            except ValueError:
                how = f" (killed by signal {-code})"
        elif code is not None:
            how = f" (exit code {code})"
        return cls(f"the device worker {what}{how}; the batches in flight are lost, so the requests were "
                   "aborted. The next generate starts a fresh worker.")

    def _send(self, msg: tuple) -> None:
        try:
            self._conn.send(msg)
        except (OSError, EOFError) as exc:  # BrokenPipeError, ConnectionResetError: the worker is gone
            raise self._died(f"died ({type(exc).__name__} on the pipe)") from exc

    def _shutdown(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # runs _stop once
        self._conn = self._worker = None

    def restart(self) -> None:
        """Stop the worker (nothing may be in flight); the next launch forks a fresh one that sees the
        program's model as it is now (an adapter added since, say)."""
        if self._in_flight:
            raise RuntimeError("cannot restart the device worker with launches in flight")
        self._reset()

    def _reset(self, kill: bool = False) -> None:
        """After a device error: stop the worker and forget what was in flight; the next launch starts
        a fresh worker (the shared KV pool and tables stay). ``kill``: it is hung, do not ask."""
        if kill and self._worker is not None and hasattr(self._worker, "terminate"):
            self._worker.terminate()
        self._shutdown()
        self._finalizer = None
        self._inbox.clear()
        for launch in self._in_flight.values():
            launch.done = launch.inputs_read = True
            launch.tokens = torch.zeros(launch.batch_size, dtype=torch.int64)
        self._in_flight.clear()

    # -- commands -----------------------------------------------------------------------------

    def _stage(self, image: torch.Tensor) -> None:
        self.staging[:image.numel()] = image

    def _launch(self, launch: Launch, resolve_future: bool) -> None:
        if len(self._in_flight) >= RING - 1:
            raise RuntimeError(f"at most {RING - 1} launches may be in flight; process a result first")
        self._send(("launch", launch.step, launch.layout, launch.batch_size, resolve_future))

    def _wait_inputs_read(self, launch: Launch) -> None:
        if launch.inputs_read:
            return
        t0 = self.timeline.now()
        if self.adversarial:
            self._send(("block", "read", launch.step))
        deadline = self._deadline()
        while not launch.inputs_read:
            deadline = self._pump(deadline)
        launch.record.barrier = (t0, self.timeline.now())

    def _wait_done(self, launch: Launch) -> None:
        t0 = self.timeline.now()
        if self.adversarial:
            self._send(("block", "done", launch.step))
        deadline = self._deadline()
        while not launch.done:
            deadline = self._pump(deadline)
        launch.record.wait = (t0, self.timeline.now())

    def _deadline(self) -> float | None:
        return None if self.watchdog_timeout is None else time.monotonic() + self.watchdog_timeout

    def _pump(self, deadline: float | None) -> float | None:
        """Handle one message from the worker (or find it dead or hung); returns the next deadline."""
        if self._worker is None:
            raise RuntimeError("the device worker is not running (it failed or was shut down)")
        if self._inbox:
            msg = self._inbox.popleft()
        else:
            try:
                ready = self._conn.poll(1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic())))
                msg = self._conn.recv() if ready else None
            except (OSError, EOFError) as exc:  # EOFError, ConnectionResetError: the worker is gone
                raise self._died(f"died ({type(exc).__name__} on the pipe)") from exc
            if msg is None:
                if not self._worker.is_alive():
                    raise self._died("died")
                if deadline is not None and time.monotonic() >= deadline:
                    raise self._died(f"sent nothing for watchdog_timeout={self.watchdog_timeout} s and was "
                                     "stopped", kill=True, cls=WorkerTimeoutError)
                return deadline
        try:
            self._handle(msg)
        except KeyboardInterrupt:  # handling is idempotent: keep the message for the next pump
            self._inbox.appendleft(msg)
            raise
        return self._deadline()

    def _handle(self, msg: tuple) -> None:
        t0 = self.timeline.t0
        if msg[0] == "error":
            self._reset()
            raise RuntimeError(f"the device worker failed:\n{msg[1]}")
        launch = self._in_flight.get(msg[1])
        if launch is None:
            return
        if msg[0] == "read":
            launch.inputs_read = True
            launch.record.read = (msg[2] - t0, msg[3] - t0)
        elif msg[0] == "done":
            _, step, got_sum, consumed_step, t_dev, t_dev_end, t_copy, t_copy_end, overlapped, extra = msg
            if extra is not None:
                launch.extra["logits"] = extra
            rec = launch.record
            rec.dev = (t_dev - t0, t_dev_end - t0)
            rec.copy = (t_copy - t0, t_copy_end - t0)
            rec.overlapped = overlapped
            tokens = self.results[step % RING, :launch.batch_size].clone()
            self._finish(launch, tokens, got_sum, consumed_step)


class CPUThreadBackend(CPUProcessBackend):
    """The same worker on a thread of this process: one GIL for the scheduler and the device."""

    kind = "cpu-thread"
    use_thread = True


__all__ = ["CPUProcessBackend", "CPUThreadBackend", "RING", "HEADER"]

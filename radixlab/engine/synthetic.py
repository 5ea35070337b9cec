"""A synthetic decode workload for notebook 08: a tiny torch model and a toy scheduler.

It isolates what notebook 08 measures, the proportion between the scheduler's CPU time per step and
the device's, with two knobs: ``ToyDecodeModel(layers, hidden)``, a seeded random network whose next
token depends on the input id and the position (so corrupted inputs change the output), and
``ToyScheduler(cpu_ms)``, which spends ``cpu_ms`` of real Python per step (2/3 building the batch, 1/3
processing results), standing in for radix matching, allocation and detokenizing. ``ToyScheduler``
inherits the engine's two event loops (``event_loop.py``) and runs on the same device backends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from .backends import make_backend
from .device_backend import DeviceBackend, DeviceProgram, Launch
from .event_loop import EventLoopMixin, check_war_barrier
from .timeline import Timeline

LOOPS = {"normal": EventLoopMixin.event_loop_normal, "overlap": EventLoopMixin.event_loop_overlap}


class ToyDecodeModel(DeviceProgram):
    """A seeded random network that maps (token id, position) to the next token id (greedy)."""

    def __init__(self, layers: int = 8, hidden: int = 256, vocab: int = 512, max_pos: int = 4096,
                 seed: int = 0, device_ms: float = 0.0) -> None:
        for name, value in (("layers", layers), ("hidden", hidden), ("vocab", vocab), ("max_pos", max_pos)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(device_ms, bool) or not isinstance(device_ms, (int, float)):
            raise TypeError(f"device_ms must be a number of milliseconds, got {device_ms!r}")
        if device_ms < 0:
            raise ValueError(f"device_ms must be >= 0, got {device_ms}")
        self.layers, self.hidden, self.vocab, self.max_pos, self.seed = layers, hidden, vocab, max_pos, seed
        # device_ms: a forward lasts at least this long, the rest asleep: a device that holds no host core
        # (as a GPU), so its timeline stays readable on a busy machine
        self.device_ms = device_ms
        self.weights: dict[str, Any] | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["weights"] = None  # rebuilt on the device side by setup()
        return state

    def setup(self, device: torch.device) -> None:
        g = torch.Generator().manual_seed(self.seed)
        scale = self.hidden ** -0.5
        w = {
            "emb": torch.randn(self.vocab, self.hidden, generator=g),
            "pos": torch.randn(self.max_pos, self.hidden, generator=g),
            "layers": torch.randn(self.layers, self.hidden, self.hidden, generator=g) * scale * 1.5,
        }
        self.weights = {k: v.to(device) for k, v in w.items()}

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.weights is None:
            raise RuntimeError("ToyDecodeModel.setup(device) must run before forward")
        w = self.weights
        start = time.perf_counter()
        x = w["emb"][inputs["input_ids"]] + w["pos"][inputs["positions"] % self.max_pos]
        for layer in w["layers"]:
            x = torch.tanh(x @ layer)
        tokens = (x @ w["emb"].T).argmax(dim=-1)
        rest = self.device_ms / 1e3 - (time.perf_counter() - start)
        if rest > 0:
            time.sleep(rest)
        return tokens


def python_work(seconds: float) -> None:
    """Real interpreter work for ``seconds`` (holds the GIL, like a scheduler's bookkeeping)."""
    deadline = time.perf_counter() + seconds
    table: dict[int, int] = {}
    i = 0
    while time.perf_counter() < deadline:
        for j in range(50):
            table[(i + j) & 1023] = i ^ j
        i += 1


@dataclass
class ToyRequest:
    rid: int
    pool_idx: int
    first_token: int
    max_new_tokens: int
    scheduled: int = 0  # steps launched for it (the CPU knows this without seeing tokens)
    output_ids: list[int] = field(default_factory=list)


@dataclass
class ToyBatch:
    step: int
    reqs: list[ToyRequest]
    is_prefill: bool
    fields: dict[str, torch.Tensor]


class ToyScheduler(EventLoopMixin):
    """Decode ``num_reqs`` requests for ``max_new_tokens`` each, ``cpu_ms`` of Python per step.

    ``war_barrier``: ``True`` waits for the launch's inputs to be read (the WAR barrier), ``False``
    not at all, ``"full"`` for its tokens (``result()``: correct, but the device idles while the CPU
    works). ``run_batch_fn(device, batch, in_flight)`` replaces the launch (exercise 08.1: the student
    places the barrier there, and the loop's own barrier is off: ``war_barrier=False``)."""

    def __init__(self, backend: DeviceBackend, *, num_reqs: int = 8, max_new_tokens: int = 16,
                 cpu_ms: float = 3.0, war_barrier: bool | str = True, seed: int = 0,
                 run_batch_fn: Any = None, needs_previous_tokens: bool = False) -> None:
        if num_reqs <= 0 or num_reqs > backend.max_reqs:
            raise ValueError(f"num_reqs must be in 1..{backend.max_reqs}, got {num_reqs}")
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
        if cpu_ms < 0:
            raise ValueError(f"cpu_ms must be >= 0, got {cpu_ms}")
        check_war_barrier(war_barrier)
        self.backend = backend
        self.cpu_ms = cpu_ms
        self.war_barrier = war_barrier
        self.run_batch_fn = run_batch_fn
        self.needs_previous_tokens = needs_previous_tokens  # next batch built from the last tokens
        g = torch.Generator().manual_seed(seed)
        vocab = getattr(backend.program, "vocab", 512)
        firsts = torch.randint(0, vocab, (num_reqs,), generator=g).tolist()
        self.reqs = [ToyRequest(i, i, firsts[i], max_new_tokens) for i in range(num_reqs)]
        self.step = 0
        self.in_flight: Launch | None = None

    def has_work(self) -> bool:
        return any(r.scheduled < r.max_new_tokens for r in self.reqs)

    def get_next_batch_to_run(self) -> ToyBatch | None:
        active = [r for r in self.reqs if r.scheduled < r.max_new_tokens]
        if not active:
            return None
        if self.needs_previous_tokens and self.in_flight is not None:
            self.in_flight.result()  # the CPU must see step N's tokens before it can build step N+1
        python_work(self.cpu_ms * 2 / 3 / 1e3)
        return self.make_batch(active, is_prefill=active[0].scheduled == 0)

    def make_batch(self, reqs: list[ToyRequest], is_prefill: bool) -> ToyBatch:
        """The next batch of ``reqs``: its input fields, each request one token further."""
        fields = {
            "req_pool_indices": torch.tensor([r.pool_idx for r in reqs]),
            "positions": torch.tensor([r.scheduled for r in reqs]),
        }
        if is_prefill:
            fields["input_ids"] = torch.tensor([r.first_token for r in reqs])
        for r in reqs:
            r.scheduled += 1
        batch = ToyBatch(self.step, reqs, is_prefill, fields)
        self.step += 1
        return batch

    def run_batch(self, batch: ToyBatch) -> Launch:
        if self.run_batch_fn is not None:  # exercise 08.1: the student's version
            launch = self.run_batch_fn(self.backend, batch, self.in_flight)
            if not isinstance(launch, Launch):
                raise TypeError(f"run_batch must return the Launch from device.launch(...), got {type(launch).__name__}")
        else:  # the loop applies the WAR barrier right after this launch
            layout = self.backend.write_inputs(batch.step, batch.fields)
            launch = self.backend.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)
        launch.record.kind = "prefill" if batch.is_prefill else "decode"
        self.in_flight = launch
        return launch

    def process_batch_result(self, batch: ToyBatch, launch: Launch) -> None:
        tokens = launch.result().tolist()
        for r, t in zip(batch.reqs, tokens):
            r.output_ids.append(t)
        python_work(self.cpu_ms / 3 / 1e3)

    def outputs(self) -> list[list[int]]:
        return [r.output_ids for r in self.reqs]


@dataclass
class RunResult:
    timeline: Timeline
    outputs: list[list[int]]


def run_toy(loop: str, backend: DeviceBackend, **scheduler_kwargs: Any) -> RunResult:
    """Run the toy workload once with ``loop`` ("normal" or "overlap") on an open backend."""
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {sorted(LOOPS)}, got {loop!r}")
    sched = ToyScheduler(backend, **scheduler_kwargs)
    LOOPS[loop](sched)
    return RunResult(sched.timeline, sched.outputs())


def compare_loops(backend: DeviceBackend, repeats: int = 1, **scheduler_kwargs: Any) -> tuple[RunResult, RunResult]:
    """The normal and the overlap loop on the same backend and workload (the faster of ``repeats`` each)."""
    run_toy("normal", backend, **{**scheduler_kwargs, "max_new_tokens": 2})  # warm up the worker
    best: dict[str, RunResult] = {}
    for _ in range(repeats):
        for loop in ("normal", "overlap"):
            r = run_toy(loop, backend, **scheduler_kwargs)
            if loop not in best or r.timeline.wall_time() < best[loop].timeline.wall_time():
                best[loop] = r
    return best["normal"], best["overlap"]


def toy_backend(kind: str = "cpu-process", *, layers: int = 8, hidden: int = 256, adversarial: bool = False,
                max_reqs: int = 64, device_ms: float = 0.0, **kwargs: Any) -> DeviceBackend:
    """A backend running ``ToyDecodeModel(layers, hidden, device_ms=device_ms)``."""
    return make_backend(kind, ToyDecodeModel(layers=layers, hidden=hidden, device_ms=device_ms), max_reqs=max_reqs,
                        max_batch=max_reqs, adversarial=adversarial, **kwargs)

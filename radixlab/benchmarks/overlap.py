"""``python -m radixlab bench overlap``: the overlap loop vs the normal loop, in one process.

Three parts, each a decode-heavy workload run with both loops on the *same* device backend:

1. **The curve** (synthetic, ``radixlab.engine.synthetic``): the scheduler spends ``--cpu-ms`` of
   Python per step; ``ToyDecodeModel``'s depth is calibrated so a device step takes a chosen multiple
   of that. For each proportion: measured throughput ratio overlap/normal, the ideal ratio
   ``(cpu + device) / max(cpu, device)`` predicted from the CPU and device times measured in the
   normal run, and the device idle fraction of both loops.
2. **Process vs thread** at the issue's setting (12 ms device, 3 ms Python per step): overlap is a
   property of the device; a worker thread shares the GIL with the scheduler.
3. **The engine**: ``Engine(load_model("tiny"))`` decoding a batch, ``device_backend="cpu-process"``
   for the normal loop and ``disable_overlap_schedule=False`` for the overlap loop.

``--device cuda`` runs part 1 on the CUDA backend (streams, events) and, with ``--trace FILE``,
saves a ``torch.profiler`` trace of one overlap run (open it in https://ui.perfetto.dev or
``chrome://tracing``). Ratios are medians over ``--repeats`` interleaved runs. Notebook 08 explains them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Sequence

import torch

from ..engine.synthetic import run_toy, toy_backend
from ..engine.timeline import Timeline, ideal_overlap_ratio

PROPORTIONS = (0.5, 1.0, 1.5, 2.0, 3.0, 5.0)


def _pair(backend: Any, repeats: int, **kw: Any) -> dict:
    """Normal and overlap runs, interleaved; medians of the measured facts."""
    rows = []
    for _ in range(repeats):
        n = run_toy("normal", backend, **kw).timeline
        o = run_toy("overlap", backend, **kw).timeline
        rows.append(_facts(n, o))
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def _facts(n: Timeline, o: Timeline) -> dict:
    cpu, dev = n.cpu_time_per_step(), n.device_time_per_step()
    return {"cpu_ms": cpu * 1e3, "device_ms": dev * 1e3, "proportion": dev / cpu if cpu else float("inf"),
            "ratio": o.throughput() / n.throughput(), "ideal": ideal_overlap_ratio(cpu, dev),
            "idle_normal": n.device_idle_fraction(), "idle_overlap": o.device_idle_fraction(),
            "corrupted": len(n.corrupted_steps()) + len(o.corrupted_steps())}


def calibrate_layers(kind: str, target_ms: float, batch: int, hidden: int, probe_layers: int = 16) -> int:
    """Depth of ``ToyDecodeModel`` whose device step takes about ``target_ms`` at this batch size."""
    with toy_backend(kind, layers=probe_layers, hidden=hidden) as be:
        run_toy("normal", be, num_reqs=batch, max_new_tokens=4, cpu_ms=0.0)  # warm up
        dev = statistics.median(run_toy("normal", be, num_reqs=batch, max_new_tokens=12, cpu_ms=0.0)
                                .timeline.device_time_per_step() for _ in range(2))
    per_layer = dev * 1e3 / probe_layers
    return max(1, round(target_ms / per_layer))


def curve(kind: str, cpu_ms: float, batch: int, hidden: int, steps: int, repeats: int,
          proportions: Sequence[float] = PROPORTIONS, progress: bool = True) -> list[dict]:
    rows = []
    base = calibrate_layers(kind, cpu_ms, batch, hidden)  # layers for device ≈ 1 × CPU
    for p in proportions:
        layers = max(1, round(base * p))
        with toy_backend(kind, layers=layers, hidden=hidden) as be:
            run_toy("normal", be, num_reqs=batch, max_new_tokens=3, cpu_ms=cpu_ms)  # warm up
            facts = _pair(be, repeats, num_reqs=batch, max_new_tokens=steps, cpu_ms=cpu_ms)
        facts.update(target=p, layers=layers)
        rows.append(facts)
        if progress:
            print(_row(facts), flush=True)
    return rows


def thread_vs_process(cpu_ms: float, device_ms: float, batch: int, hidden: int, steps: int, repeats: int) -> dict:
    out = {}
    layers = calibrate_layers("cpu-process", device_ms, batch, hidden)
    for kind in ("cpu-process", "cpu-thread"):
        with toy_backend(kind, layers=layers, hidden=hidden) as be:
            run_toy("normal", be, num_reqs=batch, max_new_tokens=3, cpu_ms=cpu_ms)
            out[kind] = _pair(be, repeats, num_reqs=batch, max_new_tokens=steps, cpu_ms=cpu_ms)
    out["layers"] = layers
    return out


def engine_pair(batch: int, steps: int, repeats: int, device: str = "cpu") -> dict:
    import random

    from ..engine import Engine
    from ..model import load_model

    model = load_model("tiny", device=device)
    rng = random.Random(0)
    prompts = [[rng.randrange(model.config.vocab_size) for _ in range(16)] for _ in range(batch)]
    backend = "cuda" if device == "cuda" else "cpu-process"
    rows, outputs = [], {}
    with Engine(model, max_running_requests=max(batch, 1), device_backend=backend) as normal, \
            Engine(model, max_running_requests=max(batch, 1), disable_overlap_schedule=False) as overlap:
        for e in (normal, overlap):
            e.generate(prompts[:2], {"max_new_tokens": 2})  # start the workers
        for _ in range(repeats):
            timelines = []
            for name, e in (("normal", normal), ("overlap", overlap)):
                e.flush_cache()
                outputs[name] = [o["output_ids"] for o in e.generate(prompts, {"max_new_tokens": steps})]
                timelines.append(e.scheduler.timeline)
            rows.append(_facts(*timelines))
    facts = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    facts["same_tokens"] = outputs["normal"] == outputs["overlap"]
    return facts


def _row(f: dict) -> str:
    return (f"  device/CPU {f['proportion']:4.2f} (CPU {f['cpu_ms']:5.2f} ms, device {f['device_ms']:6.2f} ms): "
            f"overlap/normal {f['ratio']:.2f}x, ideal {f['ideal']:.2f}x ({f['ratio'] / f['ideal']:.0%} of ideal); "
            f"device idle {f['idle_normal']:.0%} -> {f['idle_overlap']:.0%}")


def plot_curve(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..viz.timeline import plot_ratio_curve
    fig = plot_ratio_curve(rows)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m radixlab bench overlap", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--cpu-ms", type=float, default=3.0, help="scheduler Python per step (default 3)")
    p.add_argument("--batch", type=int, default=8, help="requests decoded together (default 8)")
    p.add_argument("--hidden", type=int, default=256, help="ToyDecodeModel width (default 256)")
    p.add_argument("--steps", type=int, default=40, help="decode steps per run (default 40)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats, medians reported (default 3)")
    p.add_argument("--engine-batch", type=int, default=16, help="engine part: requests decoded together")
    p.add_argument("--skip-engine", action="store_true")
    p.add_argument("--quick", action="store_true", help="tiny sizes (tests)")
    p.add_argument("--plot", help="save the ratio-vs-proportion curve as PNG")
    p.add_argument("--json", help="write every measured figure as JSON")
    p.add_argument("--trace", help="cuda: save a torch.profiler chrome trace of one overlap run")
    p.add_argument("--threads", type=int, default=1, help="torch threads of this process (default 1)")
    a = p.parse_args(argv)
    for name in ("cpu_ms", "batch", "hidden", "steps", "repeats", "engine_batch"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available on this machine")
    torch.set_num_threads(a.threads)
    if a.quick:
        a.steps, a.repeats, a.batch, a.engine_batch = 8, 1, 4, 4
    kind = "cuda" if a.device == "cuda" else "cpu-process"
    t_start = time.perf_counter()
    result: dict = {"device": a.device, "cpu_ms": a.cpu_ms, "batch": a.batch, "hidden": a.hidden}

    print(f"1. the curve: ToyDecodeModel(hidden={a.hidden}), batch {a.batch}, {a.cpu_ms:g} ms of scheduler "
          f"Python per step, {kind} backend, {a.steps} steps, median of {a.repeats}")
    props = (1.0, 2.0) if a.quick else PROPORTIONS
    rows = curve(kind, a.cpu_ms, a.batch, a.hidden, a.steps, a.repeats, props)
    result["curve"] = rows
    sweet = [r for r in rows if 1.5 <= r["proportion"] <= 2.2] or [min(rows, key=lambda r: abs(r["proportion"] - 1.75))]
    best = sweet[0]
    print(f"   device ≈ 1.5–2× CPU{'' if 1.5 <= best['proportion'] <= 2.2 else ' (closest measured)'}: "
          f"ToyDecodeModel(layers={best['layers']}, hidden={a.hidden}) at batch {a.batch} "
          f"(device {best['device_ms']:.1f} ms vs CPU {best['cpu_ms']:.1f} ms = {best['proportion']:.2f}x): "
          f"ratio {best['ratio']:.2f}x "
          f"vs ideal {best['ideal']:.2f}x, device idle {best['idle_normal']:.0%} (normal) -> "
          f"{best['idle_overlap']:.0%} (overlap)")
    result["sweet_spot"] = best

    if a.device == "cpu":
        print(f"2. process vs thread: 12 ms device, 3 ms Python per step, batch {a.batch}")
        tv = thread_vs_process(3.0, 12.0, a.batch, a.hidden, a.steps, a.repeats)
        for k in ("cpu-process", "cpu-thread"):
            f = tv[k]
            print(f"   {k:<12} overlap/normal {f['ratio']:.2f}x (ideal {f['ideal']:.2f}x from CPU "
                  f"{f['cpu_ms']:.1f} ms, device {f['device_ms']:.1f} ms); device idle {f['idle_normal']:.0%} -> "
                  f"{f['idle_overlap']:.0%}")
        result["thread_vs_process"] = tv

    if not a.skip_engine:
        print(f"3. the engine: load_model('tiny'), {a.engine_batch} requests decoding {a.steps} tokens each")
        ef = engine_pair(a.engine_batch, a.steps, a.repeats, a.device)
        print(_row(ef) + f"; same tokens: {ef['same_tokens']}")
        result["engine"] = ef

    if a.trace:
        if a.device != "cuda":
            print("   (--trace: only the CUDA backend runs in this process; skipped on cpu)")
        else:
            save_cuda_trace(a.trace, best["layers"], a.hidden, a.batch, a.cpu_ms)
            print(f"   torch.profiler trace saved to {a.trace} (open in https://ui.perfetto.dev)")
    if a.plot:
        plot_curve(rows, a.plot)
        print(f"   curve saved to {a.plot}")
    corrupted = sum(r["corrupted"] for r in rows)
    print(f"corrupted steps with the barrier: {corrupted}; total time {time.perf_counter() - t_start:.0f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(result, fh, indent=1, default=float)
    return 0 if corrupted == 0 else 1


def save_cuda_trace(path: str, layers: int, hidden: int, batch: int, cpu_ms: float) -> None:
    from torch.profiler import ProfilerActivity, profile

    with toy_backend("cuda", layers=layers, hidden=hidden) as be:
        run_toy("overlap", be, num_reqs=batch, max_new_tokens=3, cpu_ms=cpu_ms)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run_toy("normal", be, num_reqs=batch, max_new_tokens=6, cpu_ms=cpu_ms)
            run_toy("overlap", be, num_reqs=batch, max_new_tokens=6, cpu_ms=cpu_ms)
        prof.export_chrome_trace(path)


if __name__ == "__main__":
    raise SystemExit(main())

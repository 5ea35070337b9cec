"""``python -m radixlab bench serve``: every workload through the engine, with and without prefix caching.

The SGLang paper's evaluation, scaled to a laptop CPU (notebook 09_scheduling_and_serving). Each
workload of ``radixlab.sim.workloads`` runs through one ``Engine`` per configuration, all at the same KV
capacity (``--kv-tokens``) and in the same process, so the ratios are fair:

* ``no-cache``: ``disable_radix_cache=True`` (SGLang's ``ChunkCache``), the baseline of every ratio;
* ``hash``: ``prefix_cache="hash"``, vLLM's block-hash cache (blocks of 16, hashes kept on the request,
  blocks cached when allocated, so requests of one batch share them);
* ``radix-p1`` / ``radix-p16``: the radix cache with pages of 1 and 16 tokens;
* ``radix-lpm``: pages of 1 with SGLang's longest-prefix-match policy and its in-batch prefix check
  (the SGLang paper's setting; v0.5.17's default policy is FCFS, vLLM's is FCFS), radixlab's way:
  the requests the check deprioritizes wait for the next batch, so a shared prefix is computed once;
* ``radix-lpm-sglang``: the same policy as SGLang v0.5.17 runs it (``hold_back_deprioritized=False``):
  the deprioritized requests only sort last, and join this batch when it has room.

All requests of a workload arrive together (an offline batch, like SGLang's ``bench_offline_throughput``),
FCFS unless the configuration says otherwise, greedy, each generating its trace's output length (``ignore_eos``). Per configuration: hit rate
(cached prompt tokens / prompt tokens), prefill tokens computed, mean and maximum time to first token (the
tables print the maximum: over a few dozen requests a 99th percentile is almost the maximum; the JSON keeps both),
output throughput, and the CPU time spent inside the cache's methods per request. Two more tables:
the throughput ratio radix/no-cache against output length (decode dominates long outputs on a tiny
model), and the scheduling policies on a queue longer than a batch with a KV pool too small for it.
Every configuration must produce the same tokens; the run says so. Writes a JSON record and a plot.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from typing import Any, Callable, Sequence

from ..sim.workloads import (TraceRequest, few_shot, generated_shared_prefix, multi_turn_chat, random_prompts,
                         tree_of_thought)

CACHES: dict[str, dict] = {
    "no-cache": dict(disable_radix_cache=True),
    "hash": dict(prefix_cache="hash"),
    "radix-p1": dict(page_size=1),
    "radix-p16": dict(page_size=16),
    "radix-lpm": dict(page_size=1, schedule_policy="lpm"),
    "radix-lpm-sglang": dict(page_size=1, schedule_policy="lpm", hold_back_deprioritized=False),
}
CACHE_METHODS = ("match_prefix", "inc_lock_ref", "dec_lock_ref", "evict", "cache_finished_req", "cache_unfinished_req")


def workloads(vocab: int, scale: float = 1.0, seed: int = 0) -> dict[str, list[TraceRequest]]:
    """The default traces (``scale`` 2 or more for ``--full``); token ids below ``vocab``."""
    s = lambda n: max(1, round(n * scale))  # noqa: E731
    return {
        "shared_system_prompt": generated_shared_prefix(num_groups=4, prompts_per_group=s(8), system_prompt_len=512,
                                                        question_len=24, output_len=4, vocab=vocab, seed=seed),
        "multi_turn_chat": multi_turn_chat(num_conversations=s(6), turns=4, system_len=64, user_len=(16, 32),
                                           reply_len=(8, 16), vocab=vocab, seed=seed),
        "few_shot": few_shot(num_requests=s(24), num_tasks=3, shots=4, instruction_len=32, example_len=(32, 48),
                             question_len=(8, 16), output_len=(4, 8), vocab=vocab, seed=seed),
        "tree_of_thought": tree_of_thought(num_problems=s(2), fan_out=(3, 3), question_len=128, thought_len=(16, 32),
                                           output_len=(4, 8), vocab=vocab, seed=seed),
        "random": random_prompts(num_requests=s(24), prompt_len=(96, 320), output_len=(4, 8), vocab=vocab, seed=seed),
    }


def _instrument(cache: Any) -> list[float]:
    """Wrap the cache's methods with a timer (outermost call only); returns the running total."""
    total, depth = [0.0], [0]

    def wrap(fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    total[0] += time.perf_counter() - t0
        return timed

    for name in CACHE_METHODS:
        if hasattr(cache, name):
            setattr(cache, name, wrap(getattr(cache, name)))
    return total


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear between the closest ranks (numpy's default)."""
    v = sorted(values)
    if not v:
        return 0.0
    k = (len(v) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def serve_once(model: Any, trace: Sequence[TraceRequest], engine_kwargs: dict, max_new_tokens: int | None = None,
               extra_key: Any = None) -> dict:
    """One fresh engine, one ``generate`` of the whole trace: the metrics and the output tokens."""
    from ..engine import Engine

    gc.collect()  # the garbage of earlier runs goes now, not in a collection that lands inside this run's timings
    engine = Engine(model, **engine_kwargs)
    cache_s = _instrument(engine.tree_cache)
    prompts = [list(r.prompt_ids) for r in trace]
    params = [{"max_new_tokens": max_new_tokens or len(r.output_ids), "ignore_eos": True} for r in trace]
    t0 = time.perf_counter()
    out = engine.generate(prompts, params, extra_key=extra_key)
    wall = time.perf_counter() - t0
    ttft = [o["meta_info"]["ttft"] for o in out]
    prompt_tokens = sum(len(p) for p in prompts)
    cached = sum(o["meta_info"]["cached_tokens"] for o in out)
    out_tokens = sum(len(o["output_ids"]) for o in out)
    return {"hit_rate": cached / prompt_tokens, "prefill_tokens": engine.stats.prefill_tokens,
            "prompt_tokens": prompt_tokens, "ttft_mean": statistics.fmean(ttft), "ttft_p99": percentile(ttft, 99),
            "ttft_max": max(ttft),
            "throughput": out_tokens / wall, "wall_s": wall, "cache_ms_per_req": 1e3 * cache_s[0] / len(trace),
            "evicted_tokens": engine.stats.evicted_tokens, "extend_batches": engine.stats.extend_batches,
            "held_back": engine.stats.held_back, "outputs": [o["output_ids"] for o in out]}


def add_ratios(rows: dict[str, dict], baseline: str = "no-cache") -> None:
    """Ratios against the baseline row of the same run: ``x`` less prefill, ``x`` lower TTFT, ``x`` throughput."""
    b = rows[baseline]
    for r in rows.values():
        r["prefill_ratio"] = b["prefill_tokens"] / max(r["prefill_tokens"], 1)
        r["ttft_ratio"] = b["ttft_mean"] / r["ttft_mean"]
        r["throughput_ratio"] = r["throughput"] / b["throughput"]
        r["same_tokens"] = r["outputs"] == b["outputs"]


def compare_caches(model: Any, traces: dict[str, list[TraceRequest]], kv_tokens: int, max_running: int,
                   repeats: int = 1, caches: Sequence[str] = tuple(CACHES), progress: bool = True) -> dict:
    """``{workload: {cache: metrics}}`` with ratios against no-cache."""
    # Round robin over the configurations, ``repeats`` times (the random workload at least 3: its
    # ratios are small and the machine is noisy); the fastest run of each configuration is kept.
    jobs = [(w, c) for w in traces for r in range(max(repeats, 3 if w == "random" else 1)) for c in caches]
    if progress:
        from tqdm.auto import tqdm
        jobs = tqdm(jobs, desc="bench serve: caches", leave=False)
    out: dict = {w: {} for w in traces}
    for w, c in jobs:
        kw = dict(max_total_tokens=kv_tokens, max_running_requests=max_running, **CACHES[c])
        r = serve_once(model, traces[w], kw)
        if c not in out[w] or r["wall_s"] < out[w][c]["wall_s"]:
            out[w][c] = r
    for rows in out.values():
        add_ratios(rows)
    return out


def output_length_sweep(model: Any, trace: Sequence[TraceRequest], lengths: Sequence[int], kv_tokens: int,
                        max_running: int, progress: bool = True, repeats: int = 1) -> list[dict]:
    """Radix (page 1, LPM) vs no cache at several output lengths: where decode takes over.

    Each length runs its pair ``repeats`` times, round robin over the lengths (so a busy spell of the
    machine spreads over all of them); a row's ratios are the medians of the runs, ``throughput_ratios``
    keeps every run's (one run of a timing is noisy enough to make the curve non-monotonic)."""
    jobs = [(i, n) for _ in range(repeats) for i, n in enumerate(lengths)]
    if progress:
        from tqdm.auto import tqdm
        jobs = tqdm(jobs, desc="bench serve: output lengths", leave=False)
    runs: list[list[dict]] = [[] for _ in lengths]
    for i, n in jobs:
        need = max(len(r.prompt_ids) for r in trace) + n
        kw = dict(max_total_tokens=max(kv_tokens, need * max_running), max_running_requests=max_running)
        pair = {c: serve_once(model, trace, dict(kw, **CACHES[c]), max_new_tokens=n) for c in ("no-cache", "radix-lpm")}
        add_ratios(pair)
        runs[i].append(pair["radix-lpm"])
    rows = []
    for n, rs in zip(lengths, runs):
        row = {"output_len": n, "repeats": len(rs),
               "throughput_ratios": [r["throughput_ratio"] for r in rs],
               "same_tokens": all(r["same_tokens"] for r in rs)}
        for k in ("throughput_ratio", "prefill_ratio", "ttft_ratio"):
            row[k] = statistics.median(r[k] for r in rs)
        rows.append(row)
    return rows


def compare_policies(model: Any, trace: Sequence[TraceRequest], kv_tokens: int, max_running: int,
                     policies: Sequence[str] = ("fcfs", "lpm", "dfs-weight", "lof", "random"),
                     progress: bool = True) -> dict:
    """The radix cache (page 1) under each scheduling policy, same queue, same (small) KV pool."""
    it = policies
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(policies, desc="bench serve: policies", leave=False)
    rows = {p: serve_once(model, trace, dict(max_total_tokens=kv_tokens, max_running_requests=max_running,
                                             schedule_policy=p)) for p in it}
    add_ratios(rows, baseline="fcfs")
    return rows


def policy_trace(vocab: int, scale: float = 1.0, seed: int = 0) -> list[TraceRequest]:
    """More groups than the pool can hold at once, shuffled: where the order of service matters."""
    return generated_shared_prefix(num_groups=8, prompts_per_group=max(1, round(4 * scale)), system_prompt_len=192,
                                   question_len=16, output_len=4, vocab=vocab, seed=seed)


def format_cache_table(results: dict) -> str:
    head = (f"{'workload':<21} {'cache':<16} {'hit':>6} {'prefill':>8} {'×less':>6} {'TTFT mean':>10} {'×lower':>7} "
            f"{'max':>8} {'tok/s':>7} {'×thru':>6} {'cache ms/req':>12}")
    lines = [head, "-" * len(head)]
    for w, rows in results.items():
        for c, r in rows.items():
            lines.append(f"{w:<21} {c:<16} {r['hit_rate']:>6.1%} {r['prefill_tokens']:>8} {r['prefill_ratio']:>5.2f}× "
                         f"{r['ttft_mean'] * 1e3:>8.0f}ms {r['ttft_ratio']:>6.2f}× {r['ttft_max'] * 1e3:>6.0f}ms "
                         f"{r['throughput']:>7.1f} {r['throughput_ratio']:>5.2f}× {r['cache_ms_per_req']:>12.3f}")
    return "\n".join(lines)


def format_policy_table(rows: dict) -> str:
    head = f"{'policy':<11} {'hit':>6} {'prefill':>8} {'tok/s':>7} {'max TTFT':>9} {'evicted':>8}"
    lines = [head, "-" * len(head)]
    for p, r in rows.items():
        lines.append(f"{p:<11} {r['hit_rate']:>6.1%} {r['prefill_tokens']:>8} {r['throughput']:>7.1f} "
                     f"{r['ttft_max'] * 1e3:>7.0f}ms {r['evicted_tokens']:>8}")
    return "\n".join(lines)


def plot_sweep(ax: Any, sweep: Sequence[dict]) -> None:
    """The output-length sweep on ``ax``: every run as a faint dot, the median of the runs as the line."""
    xs = [r["output_len"] for r in sweep]
    for r in sweep:
        runs = r.get("throughput_ratios", [r["throughput_ratio"]])
        ax.plot([r["output_len"]] * len(runs), runs, ".", color="tab:blue", alpha=0.35, ms=6)
    n = max(len(r.get("throughput_ratios", [0])) for r in sweep)
    ax.plot(xs, [r["throughput_ratio"] for r in sweep], "o-", color="tab:blue",
            label=f"median of {n} runs" if n > 1 else "one run")
    if n > 1:
        ax.plot([], [], ".", color="tab:blue", alpha=0.35, label="each run")
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("output tokens per request")
    ax.set_ylabel("throughput radix (lpm) / no cache")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)


def plot(record: dict, path: str | None = None):
    """Left: prefill and mean-TTFT ratios vs no cache, per workload and cache. Right: throughput
    ratio radix/no-cache against output length. Returns the figure (saved to ``path`` if given)."""
    import matplotlib.pyplot as plt

    results, sweep = record["caches"], record["output_length_sweep"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.8))
    workloads_ = list(results)
    caches = [c for c in next(iter(results.values())) if c != "no-cache"]
    width = 0.8 / len(caches)
    for i, c in enumerate(caches):
        xs = [j + i * width for j in range(len(workloads_))]
        ax.bar(xs, [results[w][c]["prefill_ratio"] for w in workloads_], width, label=f"{c}: prefill ×less")
        ax.plot(xs, [results[w][c]["ttft_ratio"] for w in workloads_], "k.", ms=8)
    ax.plot([], [], "k.", label="mean TTFT ×lower")
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(workloads_))], [w.replace("_", "\n") for w in workloads_],
                  fontsize=8)
    ax.set_ylabel("× better than no cache")
    ax.set_title("Prefix caching, same KV capacity")
    ax.set_ylim(0, 1.45 * max(r["prefill_ratio"] for rows in results.values() for r in rows.values()))
    ax.legend(fontsize=7, ncol=2, loc="upper center")
    plot_sweep(bx, sweep)
    bx.set_title("shared system prompt: decode dilutes the gain")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


def run(model_name: str = "tiny", full: bool = False, kv_tokens: int = 8192, max_running: int = 8,
        repeats: int = 1, progress: bool = True, seed: int = 0, quick: bool = False) -> dict:
    """The whole benchmark; returns the JSON record (``quick``: tiny sizes, a smoke test)."""
    from ..model import load_model

    model = load_model(model_name)
    vocab = model.config.vocab_size
    scale = 2.0 if full else 0.25 if quick else 1.0
    traces = workloads(vocab, scale, seed)
    serve_once(model, traces["random"][:2], dict(max_total_tokens=kv_tokens))  # warm up torch
    record: dict = {"model": model_name, "kv_tokens": kv_tokens, "max_running_requests": max_running,
                    "full": full, "repeats": repeats}
    record["caches"] = compare_caches(model, traces, kv_tokens, max_running, repeats, progress=progress)
    lengths = (1, 4, 16, 64, 256) if full else (1, 4) if quick else (1, 4, 16, 64)
    sweep_trace = generated_shared_prefix(num_groups=2, prompts_per_group=round(8 * scale), system_prompt_len=512,
                                          question_len=24, output_len=1, vocab=vocab, seed=seed)
    record["output_length_sweep"] = output_length_sweep(model, sweep_trace, lengths, kv_tokens, max_running, progress,
                                                        repeats)
    ptrace = policy_trace(vocab, scale, seed)
    pool = 4 * (192 + 16 + 4) + 192  # room for the running requests and one more system prompt
    record["policies"] = compare_policies(model, ptrace, pool, 4, progress=progress)
    record["policy_setup"] = {"requests": len(ptrace), "kv_tokens": pool, "max_running_requests": 4}
    return record


def targets(record: dict) -> list[tuple[str, bool, str]]:
    """The issue's targets, checked on a record: (what, met, measured)."""
    ssp = record["caches"]["shared_system_prompt"]["radix-lpm"]
    rnd = record["caches"]["random"]
    overhead = rnd["radix-p1"]["wall_s"] / rnd["no-cache"]["wall_s"] - 1
    return [("shared system prompt: radix-lpm ≥ 5× less prefill", ssp["prefill_ratio"] >= 5, f"{ssp['prefill_ratio']:.2f}×"),
            ("shared system prompt: radix-lpm ≥ 3× lower mean TTFT", ssp["ttft_ratio"] >= 3, f"{ssp['ttft_ratio']:.2f}×"),
            ("random prompts: radix-p1 overhead < 5% of wall time", overhead < 0.05, f"{overhead:+.1%}")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radixlab bench serve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    parser.add_argument("--full", action="store_true", help="twice the requests, longer output sweep")
    parser.add_argument("--kv-tokens", type=int, default=8192, help="KV pool size for every cache (default 8192)")
    parser.add_argument("--max-running", type=int, default=8, help="max_running_requests (default 8)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per configuration (the fastest of the cache table's is kept) and of each point of the "
                             "output-length sweep (its median is reported)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: the tiny model's ops are too small to gain from more, "
                             "and on a busy machine extra threads only wait for each other; 0 = torch's choice)")
    parser.add_argument("--json", default="build/bench_serve.json", help="where to write the record ('' for none)")
    parser.add_argument("--plot", default="build/bench_serve.png", help="where to save the plot ('' for none)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (targets not meaningful)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.kv_tokens <= 0 or args.max_running <= 0 or args.repeats <= 0:
        parser.error("--kv-tokens, --max-running and --repeats must be positive")
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    record = run(args.model, args.full, args.kv_tokens, args.max_running, args.repeats, not args.no_progress,
                 quick=args.quick)
    print(f"bench serve: model {args.model}, KV pool {args.kv_tokens} tokens, max_running_requests "
          f"{args.max_running}, all requests at once, FCFS except the radix-lpm rows; ratios vs no-cache in this run")
    print(format_cache_table(record["caches"]))
    same = all(r["same_tokens"] for rows in record["caches"].values() for r in rows.values())
    print(f"same tokens from every cache: {'yes' if same else 'NO'}")
    print(f"\nthroughput radix-lpm / no-cache by output length (shared system prompt, median of {args.repeats} "
          f"run{'s' if args.repeats > 1 else ''}):")
    print("  " + "  ".join(f"{r['output_len']}: {r['throughput_ratio']:.2f}×" for r in record["output_length_sweep"]))
    s = record["policy_setup"]
    print(f"\npolicies (radix-p1, {s['requests']} requests, KV pool {s['kv_tokens']}, "
          f"max_running_requests {s['max_running_requests']}):")
    print(format_policy_table(record["policies"]))
    print("\ntargets:")
    for what, met, got in targets(record):
        print(f"  {'✓' if met else '✗'} {what}: {got}")
    record["targets"] = [dict(what=w, met=m, measured=g) for w, m, g in targets(record)]
    record["wall_s"] = time.perf_counter() - t0
    for rows in list(record["caches"].values()) + [record["policies"]]:
        for r in rows.values():
            r.pop("outputs", None)
    for out in (args.json, args.plot):  # default: build/ (git-ignored), never the working tree's root
        if out:
            os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        plot(record, args.plot)
        print(f"wrote {args.plot}")
    print(f"total {record['wall_s']:.0f} s")
    return 0 if same else 1

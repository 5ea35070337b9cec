"""``python -m radixlab bench prefill``: the same requests served with no cache and with the radix cache.

Workload: a shared system prompt (``--system-tokens``) and a different user question per request
(``--question-tokens``; by default ~85% of every prompt is the shared prefix). The first request
arrives alone (it puts the system prompt into the tree, like the first user of a deployment); the
others arrive together in waves of ``--wave`` requests, one ``Engine.generate`` call per wave. Both
engines run the identical requests in this process, one after the other:

* **no cache**: ``Engine(model, disable_radix_cache=True)`` — every prompt computed in full;
* **radix**: ``Engine(model)`` — the system prompt's KV is computed once and reused.

Printed: prefill tokens computed, mean and p99 time to first token (from the ``generate`` call,
queueing in the wave included) and the ratios; and whether both engines answered identically
(greedy decoding: they must). Notebook 07 calls ``run`` with smaller sizes.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import torch

SYSTEM_TEXT = ("You are a careful assistant for a public library. Answer in one short paragraph, cite the "
               "shelf code when you know it, never invent a book, and say so when you are unsure. Opening "
               "hours are nine to six on weekdays and ten to four on Saturdays; the library is closed on "
               "Sundays. Members may borrow twelve items for three weeks and renew them twice online. ")
TOPICS = ["opening hours", "late fees", "children's books", "printing", "study rooms", "e-books", "maps",
          "local history", "language courses", "the reading club", "parking", "donations", "wifi", "audiobooks"]


def make_workload(tokenizer: Any, num_requests: int, system_tokens: int, question_tokens: int,
                  seed: int = 0) -> list[list[int]]:
    """``num_requests`` token-id prompts: the same ``system_tokens`` head, then a distinct question."""
    for name, value in (("num_requests", num_requests), ("system_tokens", system_tokens),
                        ("question_tokens", question_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    text = SYSTEM_TEXT
    while len(tokenizer.encode(text)) < system_tokens:  # repeat the text until it has enough tokens
        text += SYSTEM_TEXT
    system = tokenizer.encode(text)[:system_tokens]
    rng = random.Random(seed)
    prompts = []
    for i in range(num_requests):
        words = " ".join(rng.choice(TOPICS) for _ in range(question_tokens))
        question = tokenizer.encode(f"\nQ{i}: what about {words}?")[:question_tokens]
        prompts.append(system + question)
    return prompts


def serve(engine: Any, prompts: list[list[int]], wave: int, max_new_tokens: int) -> dict:
    """First prompt alone, then waves; returns per-request outputs and the prefill tokens computed."""
    sp = {"max_new_tokens": max_new_tokens, "temperature": 0.0}
    outs = [engine.generate(prompts[0], sp)]
    rest = prompts[1:]
    for i in range(0, len(rest), wave):
        outs.extend(engine.generate(rest[i:i + wave], sp))
    ttft = [o["meta_info"]["ttft"] for o in outs]
    return {"outputs": [o["output_ids"] for o in outs],
            "prefill_tokens": sum(o["meta_info"]["prompt_tokens"] - o["meta_info"]["cached_tokens"] for o in outs),
            "cached_tokens": sum(o["meta_info"]["cached_tokens"] for o in outs),
            "ttft_mean": sum(ttft) / len(ttft), "ttft_p99": percentile(ttft, 99), "ttft": ttft}


def distinct_prefix_tokens(prompts: list[list[int]]) -> int:
    """Tokens a perfect prefix cache would compute: the size of the trie of all prompts (each
    distinct prefix once; the last token of a prompt is counted once more when it is cached)."""
    from ..mem_cache import FastRadixCache

    tree = FastRadixCache()
    extra = 0
    for p in prompts:
        extra += len(tree.match_prefix(p)) == len(p)  # a fully cached prompt still computes its last token
        tree.insert(p)
    return tree.total_size() + extra


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile, linear interpolation (numpy's default)."""
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def run(model: Any, num_requests: int = 32, system_tokens: int = 425, question_tokens: int = 75,
        max_new_tokens: int = 4, wave: int = 8, page_size: int = 1, seed: int = 0) -> dict:
    """Serve one workload with no cache and with the radix cache; the dict the CLI prints."""
    from ..engine import Engine

    prompts = make_workload(model.tokenizer, num_requests, system_tokens, question_tokens, seed)
    longest = max(len(p) for p in prompts) + max_new_tokens
    size = (wave + 1) * (longest + page_size)
    kwargs = dict(page_size=page_size, max_total_tokens=size, max_running_requests=wave + 1,
                  max_prefill_tokens=max(16384, wave * longest))
    Engine(model, **kwargs).generate(prompts[0][:16], {"max_new_tokens": 2})  # warm-up, not timed
    out: dict = {"requests": num_requests, "prompt_tokens": sum(len(p) for p in prompts),
                 "shared_fraction": system_tokens / (system_tokens + question_tokens)}
    for name, disable in (("no_cache", True), ("radix", False)):
        engine = Engine(model, disable_radix_cache=disable, **kwargs)
        t0 = time.perf_counter()
        out[name] = serve(engine, prompts, wave, max_new_tokens)
        out[name]["wall_s"] = time.perf_counter() - t0
        out[name]["evicted_tokens"] = engine.stats.evicted_tokens
    out["identical_outputs"] = out["no_cache"]["outputs"] == out["radix"]["outputs"]
    out["prefill_ratio"] = out["no_cache"]["prefill_tokens"] / out["radix"]["prefill_tokens"]
    out["ttft_mean_ratio"] = out["no_cache"]["ttft_mean"] / out["radix"]["ttft_mean"]
    out["ttft_p99_ratio"] = out["no_cache"]["ttft_p99"] / out["radix"]["ttft_p99"]
    out["best_prefill_ratio"] = out["prompt_tokens"] / distinct_prefix_tokens(prompts)
    return out


def format_report(r: dict, model_name: str) -> str:
    lines = [f"prefill: {model_name}, {r['requests']} requests, {r['prompt_tokens']} prompt tokens, "
             f"{r['shared_fraction']:.0%} of each prompt shared",
             f"{'engine':<9} {'prefill tokens':>14} {'mean TTFT':>10} {'p99 TTFT':>10} {'wall':>8}"]
    for name in ("no_cache", "radix"):
        row = r[name]
        lines.append(f"{name:<9} {row['prefill_tokens']:>14} {row['ttft_mean'] * 1e3:>7.1f} ms "
                     f"{row['ttft_p99'] * 1e3:>7.1f} ms {row['wall_s']:>6.2f} s")
    lines.append(f"no cache / radix: prefill tokens {r['prefill_ratio']:.2f}× (best possible "
                 f"{r['best_prefill_ratio']:.2f}×), mean TTFT {r['ttft_mean_ratio']:.2f}×, p99 TTFT {r['ttft_p99_ratio']:.2f}×")
    lines.append(f"identical outputs: {'yes' if r['identical_outputs'] else 'NO'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radixlab bench prefill", description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    parser.add_argument("--requests", type=int, default=32, help="requests (default 32)")
    parser.add_argument("--system-tokens", type=int, default=None,
                        help="shared system prompt length (default 425 tiny, 255 smollm2-135m)")
    parser.add_argument("--question-tokens", type=int, default=None,
                        help="question length (default 75 tiny, 45 smollm2-135m: ~85%% shared)")
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--wave", type=int, default=8, help="requests arriving together (default 8)")
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--device", default=None, help="torch device (default: radixlab.device.default_device())")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (default 1 for tiny, whose ops are too small to split "
                             "and whose timings thread spin-waits ruin on a busy machine; torch's default otherwise)")
    args = parser.parse_args(argv)
    small = args.model != "tiny"
    system = args.system_tokens if args.system_tokens is not None else (255 if small else 425)
    question = args.question_tokens if args.question_tokens is not None else (45 if small else 75)
    if min(args.requests - 1, system, question, args.wave, args.page_size) < 1 or args.max_new_tokens < 0:
        parser.error("--requests must be >= 2; --system-tokens, --question-tokens, --wave, --page-size positive")
    threads = args.threads if args.threads is not None else (1 if args.model == "tiny" else torch.get_num_threads())
    if threads < 1:
        parser.error("--threads must be positive")
    torch.set_num_threads(threads)
    from ..model import load_model

    model = load_model(args.model, device=args.device)
    with torch.inference_mode():
        r = run(model, args.requests, system, question, args.max_new_tokens, args.wave, args.page_size)
    print(format_report(r, f"{args.model} on {model.device}, {threads} thread(s)"))
    return 0 if r["identical_outputs"] else 1

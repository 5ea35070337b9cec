"""``python -m radixlab bench lookup``: hash lookups (re-hashing, or hashes kept on the request) vs radix match.

One run builds, for each prefix length L, a hash cache and a radix cache holding the same prompts
(one long prompt of L tokens plus a few short distractors), then times the lookups of a request
that extends the long prompt by a new question:

* probe-down (the seed's chained-hash baseline): hash every block of the request, probe from the longest down;
* forward walk, re-hashing: hash block 0, probe, hash block 1, probe, ...;
* kept hashes (what vLLM runs): the request computed its block hashes once, when its blocks filled
  (``RequestBlockHashes``, vLLM's ``request.block_hashes``); the lookup only probes the dict.
  That one-time hashing is timed separately ("hash once");
* radix ``match_prefix``.

Each lookup gets the request as a ready ``RadixKey`` (built once per request, outside the timing),
so the times compare lookup work only; building that key (packing the token ids) is the tree's
once-per-request cost and is timed separately ("pack once"), beside "hash once". Each time is the
median of ``repeats`` rounds, every round running every lookup once, so a slow moment of a shared
machine falls on all of them alike rather than deciding one best-of-N. Ratios are printed from the
same run; notebook 03_hash_vs_radix plots them.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..mem_cache import HashPrefixCache, FastRadixCache, RadixCache, RadixKey, RequestBlockHashes

DEFAULT_LENGTHS = (1024, 4096, 16384, 32768)
VOCAB = 50_000
QUESTION_TOKENS = 64


@dataclass
class LookupSetup:
    """Both caches, holding the same prompts, and the query that extends the long one."""

    prefix_len: int
    hash_cache: HashPrefixCache
    radix_cache: RadixCache
    query: RadixKey
    kept: RequestBlockHashes


@dataclass
class LookupRow:
    """One prefix length: cost counters (deterministic) and median times in seconds."""

    prefix_len: int
    hit_tokens_hash: int
    hit_tokens_radix: int
    probe_down_hashes: int
    probe_down_probes: int
    forward_hashes: int
    forward_probes: int
    kept_probes: int
    radix_nodes_visited: int
    probe_down_s: float = float("nan")
    forward_s: float = float("nan")
    kept_s: float = float("nan")
    hash_once_s: float = float("nan")
    radix_s: float = float("nan")
    pack_once_s: float = float("nan")  # the tree's once-per-request cost: token list -> RadixKey (packed int64)

    @property
    def probe_down_vs_radix(self) -> float:
        return self.probe_down_s / self.radix_s

    @property
    def forward_vs_radix(self) -> float:
        return self.forward_s / self.radix_s

    @property
    def break_even_lookups(self) -> float:
        """Lookups of one request after which keeping hashes has paid back hashing it once.

        Per request the hash cache pays ``hash_once + n * kept`` and the tree ``pack_once + n * radix``
        (``pack_once`` counts as 0 when not measured); the two meet at
        ``n = (hash_once - pack_once) / (radix - kept)``: infinite when the probe is not faster than
        the match (keeping hashes never pays back), 0 when hashing once costs no more than packing once.
        """
        saved = self.radix_s - self.kept_s
        if saved <= 0:
            return float("inf")
        pack = 0.0 if math.isnan(self.pack_once_s) else self.pack_once_s
        return max(0.0, (self.hash_once_s - pack) / saved)

    @property
    def kept_vs_radix(self) -> float:
        """Below 1: the probe with kept hashes is faster than the radix match."""
        return self.kept_s / self.radix_s


def _fresh_tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(n)]


def build_setup(prefix_len: int, block_size: int = 16, seed: int = 0, distractors: int = 8) -> LookupSetup:
    """Caches holding one ``prefix_len``-token prompt plus ``distractors`` short prompts."""
    rng = random.Random(seed)
    prompt = _fresh_tokens(rng, prefix_len)
    hc, rc = HashPrefixCache(block_size), FastRadixCache()
    for _ in range(distractors):
        other = _fresh_tokens(rng, 512)
        hc.insert(other)
        rc.insert(RadixKey(other))
    hc.insert(prompt)
    rc.insert(RadixKey(prompt))
    # The request: same prompt, fresh int objects (as from a tokenizer), plus a new question.
    query = RadixKey([int(str(t)) for t in prompt] + _fresh_tokens(rng, QUESTION_TOKENS))
    # vLLM hashes a request's full blocks once, when it arrives (and as output tokens fill more).
    kept = RequestBlockHashes(query.token_ids, block_size)
    return LookupSetup(prefix_len, hc, rc, query, kept)


def _median_times(fns: dict[str, Callable[[], object]], repeats: int,
                  clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median seconds of each function over ``repeats`` rounds; a round calls every function once."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def measure(setup: LookupSetup, repeats: int = 0) -> LookupRow:
    """Count the work of each lookup; with ``repeats > 0`` also time each (median of ``repeats`` rounds)."""
    hc, rc, q, hashes = setup.hash_cache, setup.radix_cache, setup.query, setup.kept.hashes
    down, fwd, kept = hc.match_probe_down(q), hc.match_forward(q), hc.match_kept_hashes(hashes)
    res = rc.match_prefix(q)
    visited, node = 0, res.last_node
    while node is not rc.root_node:
        visited, node = visited + 1, node.parent
    assert down.hit_tokens == fwd.hit_tokens == kept.hit_tokens, "the hash lookups disagree"
    row = LookupRow(setup.prefix_len, down.hit_tokens, len(res), down.hash_computations, down.dict_probes,
                    fwd.hash_computations, fwd.dict_probes, kept.dict_probes, visited)
    if repeats > 0:
        bs = setup.kept.block_size
        tokens = list(q.token_ids)  # the request's token ids, as a tokenizer hands them over
        medians = _median_times({
            "probe_down_s": lambda: hc.match_probe_down(q),
            "forward_s": lambda: hc.match_forward(q),
            "kept_s": lambda: hc.match_kept_hashes(hashes),
            "hash_once_s": lambda: RequestBlockHashes(q.token_ids, bs),
            "radix_s": lambda: rc.match_prefix(q),
            "pack_once_s": lambda: RadixKey(tokens),
        }, repeats)
        for attr, seconds in medians.items():
            setattr(row, attr, seconds)
    return row


def run(lengths: Sequence[int] = DEFAULT_LENGTHS, repeats: int = 20, block_size: int = 16) -> list[LookupRow]:
    """Measure every length in one run (so the ratios share one machine state)."""
    return [measure(build_setup(n, block_size), repeats) for n in lengths]


def format_counts(rows: Sequence[LookupRow]) -> str:
    """The deterministic part: hit tokens and how many hashes/probes/nodes each lookup needed.

    "kept" hashes nothing per lookup: its hashes were computed once per request (``hash once``).
    """
    lines = [f"{'prefix':>7} {'hit(hash)':>9} {'hit(radix)':>10} | {'probe-down: hashes':>18} {'probes':>6} | "
             f"{'forward: hashes':>15} {'probes':>6} | {'kept: hashes':>12} {'probes':>6} | "
             f"{'hash once':>9} | {'radix: nodes':>12}"]
    for r in rows:
        lines.append(f"{r.prefix_len:>7} {r.hit_tokens_hash:>9} {r.hit_tokens_radix:>10} | "
                     f"{r.probe_down_hashes:>18} {r.probe_down_probes:>6} | {r.forward_hashes:>15} "
                     f"{r.forward_probes:>6} | {0:>12} {r.kept_probes:>6} | {r.probe_down_hashes:>9} | "
                     f"{r.radix_nodes_visited:>12}")
    return "\n".join(lines)


def format_times(rows: Sequence[LookupRow]) -> str:
    """Times (µs) and ratios, measured side by side in one run.

    ``hash once`` is what a request pays once in its life to compute its kept hashes, not per lookup.
    """
    lines = [f"{'prefix':>7} | {'probe-down µs':>13} {'forward µs':>10} {'kept µs':>8} {'radix µs':>9} | "
             f"{'probe-down/radix':>16} {'forward/radix':>13} {'kept/radix':>10} | {'hash once µs':>12}"]
    for r in rows:
        lines.append(f"{r.prefix_len:>7} | {r.probe_down_s * 1e6:>13.1f} {r.forward_s * 1e6:>10.1f} "
                     f"{r.kept_s * 1e6:>8.1f} {r.radix_s * 1e6:>9.1f} | {r.probe_down_vs_radix:>15.2f}× "
                     f"{r.forward_vs_radix:>12.2f}× {r.kept_vs_radix:>9.2f}× | {r.hash_once_s * 1e6:>12.1f}")
    return "\n".join(lines)


def format_per_request(rows: Sequence[LookupRow]) -> str:
    """What one request costs with one lookup: hashing it once plus a probe, vs packing its key once
    plus a match; and after how many lookups keeping hashes pays back ("never" if the probe is not faster)."""
    lines = [f"{'prefix':>7} | {'hash once + 1 probe':>19} | {'pack once + 1 match':>19} | {'break-even lookups':>18}"]
    for r in rows:
        pack = 0.0 if math.isnan(r.pack_once_s) else r.pack_once_s
        n = r.break_even_lookups
        lines.append(f"{r.prefix_len:>7} | {(r.hash_once_s + r.kept_s) * 1e6:>16.1f} µs | "
                     f"{(pack + r.radix_s) * 1e6:>16.1f} µs | {'never' if math.isinf(n) else f'{n:.1f}':>18}")
    return "\n".join(lines)


def verdict(rows: Sequence[LookupRow]) -> str:
    """One line saying which lookup this run found faster, kept-hash probe or radix match, and by how much."""
    timed = [r for r in rows if not (math.isnan(r.kept_s) or math.isnan(r.radix_s))]
    if not timed:
        raise ValueError("rows must be timed (run with repeats > 0)")
    faster = sum(r.kept_s < r.radix_s for r in timed)
    ratios = [r.kept_vs_radix for r in timed]
    who = ("the kept-hash probe was faster" if faster == len(timed) else
           "the radix match was faster" if faster == 0 else "neither was faster everywhere")
    return (f"kept hashes vs radix match, this run: {who} (kept/radix from {min(ratios):.2f}× to {max(ratios):.2f}×; "
            f"probe faster at {faster} of {len(timed)} lengths)")


# -- the branching workload: where block granularity loses hits --------------------------------


def branching_prompts(n_branches: int = 8, shared: int = 100, suffix: int = 40, seed: int = 0) -> list[list[int]]:
    """``n_branches`` prompts sharing a ``shared``-token stem, each then going its own way.

    With ``shared`` not a multiple of the block size, every branch diverges mid-block.
    """
    rng = random.Random(seed)
    stem = _fresh_tokens(rng, shared)
    return [stem + _fresh_tokens(rng, suffix) for _ in range(n_branches)]


def hit_tokens(prompts: Sequence[Sequence[int]], block_size: int = 16) -> dict[str, int]:
    """Serve ``prompts`` in order through both caches; total tokens each one finds cached."""
    hc, rc = HashPrefixCache(block_size), FastRadixCache()
    hits = {"hash": 0, "radix": 0, "total": 0}
    for p in prompts:
        key = RadixKey(p)
        hits["hash"] += hc.match_forward(key).hit_tokens
        hits["radix"] += len(rc.match_prefix(key))
        hits["total"] += len(p)
        hc.insert(key)
        rc.insert(key)
    return hits


def decision_table(rows: Sequence[LookupRow], hit_rows: dict[int, dict[str, int]]) -> str:
    """The seed's "hash or radix?" table, re-derived from this run's counts (notebook 03).

    ``rows`` come from ``run`` (the longest prefix is quoted); ``hit_rows[stem]`` from
    ``hit_tokens(branching_prompts(shared=stem))`` for stems 8 and 96 (six whole blocks of 16). Only deterministic counts
    appear here, except the first row's choice, which follows the same times as ``verdict`` (untimed rows:
    "the times decide"). Who shares what (a table's rows point only up) is drawn in the notebook's "Going
    further", so it is no row of this core table.
    """
    r = rows[-1]
    k = f"{r.prefix_len // 1024}k" if r.prefix_len >= 1024 else str(r.prefix_len)
    timed = [x for x in rows if not (math.isnan(x.kept_s) or math.isnan(x.radix_s))]
    faster = sum(x.kept_s < x.radix_s for x in timed)
    first_choice = ("either: the times decide (kept/radix)" if not timed else
                    "hash (kept): faster this run" if faster == len(timed) else
                    "radix tree: faster this run" if faster == 0 else "either: neither faster everywhere")
    table = [
        ("situation", "measured in this notebook", "choose"),
        ("one lookup, hashes kept on the request",
         f"{k}: {r.kept_probes} dict probes, 0 hashes vs {r.radix_nodes_visited} node, "
         f"{r.hit_tokens_radix} tokens compared", first_choice),
        ("each new request, once",
         f"{k}: {r.probe_down_hashes} hashes of the whole prompt, shared part included vs none",
         "radix tree (no hashing)"),
        ("re-hashing at every lookup (the chained-hash baseline)",
         f"{k}: {r.probe_down_hashes} hashes per lookup (probe-down), {r.forward_hashes} (forward)",
         "neither: keep the hashes"),
        ("few fixed prompts, block-aligned",
         f"stem 96: {hit_rows[96]['hash']} vs {hit_rows[96]['radix']} hit tokens", "hash is enough"),
        ("prompts branching mid-block",
         f"stem 8: {hit_rows[8]['hash']} vs {hit_rows[8]['radix']} hit tokens", "radix tree (page_size 1)"),
    ]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    return "\n".join(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radixlab bench lookup", description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS),
                        help="cached prefix lengths in tokens (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=30, help="timed rounds per lookup; the median is kept")
    parser.add_argument("--block-size", type=int, default=16, help="hash cache block size (default 16)")
    args = parser.parse_args(argv)
    if args.repeats <= 0 or any(n <= 0 for n in args.lengths) or args.block_size <= 0:
        parser.error("--lengths, --repeats and --block-size must be positive")
    print(f"lookup: one cached prompt of L tokens (+8 distractors); request = prompt + {QUESTION_TOKENS} "
          f"new tokens; block_size={args.block_size}; median of {args.repeats}")
    rows = run(args.lengths, args.repeats, args.block_size)
    print(format_counts(rows))
    print()
    print(format_times(rows))
    print()
    print(format_per_request(rows))
    last = rows[-1]
    print(f"\n{last.prefix_len}-token cached prefix, lookup time / radix match_prefix time:")
    print(f"  probe-down, re-hashing every block (the baseline)  : {last.probe_down_vs_radix:.2f}×")
    print(f"  forward walk, re-hashing every block            : {last.forward_vs_radix:.2f}×")
    print(f"  forward probe with hashes kept on the request   : {last.kept_vs_radix:.2f}×  (vLLM's lookup)")
    print(f"  hashing the request once (paid once per request): {last.hash_once_s / last.radix_s:.2f}×")
    print(f"  packing the request's key once (the tree's share): {last.pack_once_s / last.radix_s:.2f}×")
    print(verdict(rows))
    return 0


def plot_lookup_times(rows: Sequence[LookupRow]):
    """Log-log plots against prefix length (notebook 03): the four lookups' times (left) and the two
    once-per-request costs (right), on a shared time axis, since the two are paid at different rates."""
    import matplotlib.pyplot as plt

    fig, (per_lookup, per_request) = plt.subplots(1, 2, figsize=(10.5, 4.6), sharey=True)
    xs = [r.prefix_len for r in rows]
    panels = [(per_lookup, "per lookup", [("hash, probe-down, re-hash (tree lesson)", "probe_down_s", "o-"),
                                          ("hash, forward, re-hash", "forward_s", "s-"),
                                          ("hash, kept hashes (vLLM)", "kept_s", "D-"),
                                          ("radix match_prefix", "radix_s", "^-")]),
              (per_request, "per request, once", [("hash its blocks (to keep)", "hash_once_s", "x-C4"),
                                                  ("pack its key (radix)", "pack_once_s", "+-C5")])]
    for ax, title, lines in panels:
        for label, attr, style in lines:
            ax.plot(xs, [getattr(r, attr) * 1e6 for r in rows], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x // 1024}k" if x >= 1024 else str(x) for x in xs])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_xlabel("cached prefix length (tokens)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)  # off the lines
    per_lookup.set_ylabel("time (µs, median)")
    fig.suptitle("Longest-prefix lookup: what each design pays, and how often")
    fig.tight_layout()
    return fig

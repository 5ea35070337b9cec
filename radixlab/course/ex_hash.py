"""Exercise 03.1 (notebook 03_hash_vs_radix): the forward probe with hashes kept on the request.

``kept_hash_hit(req, table)`` gets a ``RequestBlockHashes`` (its ``hashes`` were computed once, when
its blocks filled) and a flat ``chain hash -> block`` table; it returns how many leading blocks are
cached. The drive hands it a table that records every probe and a request whose ``hash_fn`` counts
its calls (and is salted per case: hashes computed with any other function miss), so the check can
say *how* an answer went wrong: probed past the first miss, probed from the longest prefix down,
re-hashed the tokens, scanned the table, counted tokens instead of blocks.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping

import xxhash

from ..mem_cache.hash_cache import RequestBlockHashes
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

KeptHashHit = Callable[[Any, Mapping[int, Any]], int]


def _reference(req: Any, table: Mapping[int, Any]) -> int:
    from .answers_hash import reference_kept_hash_hit  # only ever in the grader's (or the check cell's) process

    return reference_kept_hash_hit(req, table)


class ProbeTable(dict):
    """A dict that writes down every hash it is asked about (``probes``) and every full scan."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.probes: list[int] = []
        self.scanned = False

    def get(self, key: Any, default: Any = None) -> Any:
        self.probes.append(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.probes.append(key)
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        self.probes.append(key)
        return super().__contains__(key)

    def __iter__(self) -> Any:
        self.scanned = True
        return super().__iter__()

    def keys(self) -> Any:
        self.scanned = True
        return super().keys()

    def values(self) -> Any:
        self.scanned = True
        return super().values()

    def items(self) -> Any:
        self.scanned = True
        return super().items()


def drive(fn: KeptHashHit, args: dict) -> dict:
    """Build the request (salted, counting hash) and the table, call ``fn``, report what it did."""
    salt = str(args["salt"]).encode()
    calls = [0]

    def hash_fn(data: bytes) -> int:
        calls[0] += 1
        return xxhash.xxh64_intdigest(salt + data)

    bs = args["block_size"]
    req = RequestBlockHashes(args["tokens"], block_size=bs, hash_fn=hash_fn)
    table = ProbeTable()
    for i in args["cached"]:  # the blocks of this very prompt that are cached (a middle one may be evicted)
        table[req.hashes[i]] = {"block": i, "tokens": tuple(args["tokens"][i * bs:(i + 1) * bs])}
    for tokens in args.get("others", []):  # blocks of other prompts: rows the probe never needs
        other = RequestBlockHashes(tokens, block_size=bs, hash_fn=hash_fn)
        for i, h in enumerate(other.hashes):
            table.setdefault(h, {"block": i, "tokens": tuple(tokens[i * bs:(i + 1) * bs])})
    table.probes.clear()
    calls[0] = 0
    returned = fn(req, table)
    index = {h: i for i, h in enumerate(req.hashes)}
    probes: list[int] = []
    for h in table.probes:  # `h in table` then `table[h]` is one probe of block i
        i = index.get(h, -1) if isinstance(h, int) else -1
        if not probes or probes[-1] != i:
            probes.append(i)
    ok = isinstance(returned, int) and not isinstance(returned, bool)
    return {"returned": returned if ok else repr(returned)[:80], "probes": probes, "hashes": calls[0],
            "scanned": table.scanned, "n_blocks": len(req.hashes), "block_size": bs}


def compare(got: dict, want: dict, args: dict) -> str | None:
    if got == want:
        return None
    hit, n, bs = want["returned"], want["n_blocks"], want["block_size"]
    what = f"{args['label']}: {n} kept hashes, blocks {args['cached']} cached"
    if got["hashes"]:
        return (f"{what}: your function computed {got['hashes']} hashes. The request keeps its block hashes "
                "(req.hashes, computed once when its blocks filled): a lookup only probes the table with them; "
                "you re-hashed the tokens")
    if -1 in got["probes"]:
        return (f"{what}: you probed the table with a hash the request does not keep, so it missed: the table is "
                "keyed by the request's kept hashes (req.hashes), not by hashes you compute yourself")
    if not isinstance(got["returned"], int):
        return f"{what}: kept_hash_hit must return a number of blocks (an int), got {got['returned']}"
    if got["scanned"]:
        return (f"{what}: your function went through the whole table. A hash table is for probing: one lookup "
                "per kept hash, no scan")
    if got["returned"] == hit * bs and hit:
        return f"{what}: returned {got['returned']}, the cached tokens; the exercise asks for blocks ({hit})"
    if got["probes"] and got["probes"][0] == n - 1 and n > 1 and got["probes"] != want["probes"]:
        return (f"{what}: you probed from the longest prefix down (first probe: block {n - 1}). Probe forward from "
                "block 0 and stop at the first miss: a chained hash is only a hit if every block before it is")
    if len(got["probes"]) > len(want["probes"]) and got["probes"][:len(want["probes"])] == want["probes"]:
        return (f"{what}: you kept probing after the first miss (block {hit} is not cached, yet you probed "
                f"blocks {got['probes'][len(want['probes']):]}): stop there, nothing after a miss can be used")
    if got["returned"] == hit + 1:
        return f"{what}: returned {hit + 1}, one too many: the block that missed is not cached (the answer is {hit})"
    if got["returned"] > hit:
        return (f"{what}: returned {got['returned']}, expected {hit}: you counted cached blocks past the first miss "
                f"(block {hit} is missing, so blocks after it cannot be used)")
    if got["probes"] != want["probes"]:
        return (f"{what}: you probed blocks {got['probes']}, expected {want['probes']}: probe each kept hash once, "
                "front to back, and stop at the first miss")
    return f"{what}: returned {got['returned']}, expected {hit}"


def _tokens(rng: random.Random, n: int, first: int) -> list[int]:
    return [first + rng.randrange(1000) for _ in range(n)]


def cases(seed: int = 0) -> list[GradedCase]:
    rng = random.Random(seed)
    first = 1000 if seed == 0 else rng.randrange(2000, 9000)
    salt = seed if seed else "course"

    def case(label: str, tokens: list[int], cached: list[int], bs: int = 4, others: list | None = None) -> dict:
        return {"label": label, "tokens": tokens, "cached": cached, "block_size": bs, "salt": salt,
                "others": others or []}

    # seed 0: the notebook's worked example, 5 blocks of 4 tokens (+2), the first 3 cached
    example = list(range(first, first + 22))
    long = _tokens(rng, 16 * rng.randint(20, 40) + rng.randrange(16), first)
    n_long = len(long) // 16
    cut = rng.randrange(3, n_long - 3)
    evicted = rng.randrange(1, 6)
    return [
        GradedCase("the worked example: 5 kept hashes, blocks 0-2 cached → 3",
                   case("worked example", example, [0, 1, 2], others=[[first + 500 + t for t in range(12)]]), weight=2),
        GradedCase("every block cached", case("every block cached", example[:20], [0, 1, 2, 3, 4])),
        GradedCase("block 0 missing → 0", case("block 0 missing", example, [], others=[example[4:]])),
        GradedCase("a middle block was evicted, later ones are still in the table",
                   case("evicted middle block", example, [0, 1, 3, 4]), "boundary", 2),
        GradedCase("a prompt shorter than one block: no hashes, no probes",
                   case("shorter than a block", example[:3], []), "boundary"),
        GradedCase("a long prompt, 16-token blocks, a random hit length",
                   case("long prompt", long, list(range(cut)) + list(range(cut + 1, n_long)), 16), "boundary", 2),
        GradedCase("block 0 evicted, the rest still cached",
                   case("block 0 evicted", example[:4 * (evicted + 1)], list(range(1, evicted + 1))), "boundary"),
    ]


SPEC = ExerciseSpec(
    id="03.1", title="the forward probe with kept hashes", function="kept_hash_hit", check="check_kept_hash_hit",
    reference=_reference, drive=drive, cases=cases, compare=compare,
    forbidden=("match_kept_hashes", "match_forward", "reference_kept_hash_hit", "_walk"),
    strip=("radixlab.mem_cache.hash_cache:HashPrefixCache.match_kept_hashes",
           "radixlab.mem_cache.hash_cache:HashPrefixCache.match_forward",
           "radixlab.mem_cache.hash_cache:HashPrefixCache.match_prefix",
           "radixlab.mem_cache.hash_block_cache:HashBlockCache._walk"))
SPECS = [SPEC]


def check_kept_hash_hit(kept_hash_hit: KeptHashHit, *, record: bool = True) -> CheckResult:
    """Check a student's ``kept_hash_hit(req, table)`` (exercise 03.1)."""
    return check_exercise(SPEC, kept_hash_hit, record=record)

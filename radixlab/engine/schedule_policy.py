"""The scheduling policy: in which order waiting requests run, and whether they fit (notebooks 07, 09).

Mirrors ``sglang/srt/managers/schedule_policy.py``. The orderings are pure functions over a waiting
queue and the tree (``order_queue``: ``fcfs``, ``lpm``, ``dfs-weight``, ``lof``, ``random``), so a
notebook, a simulator and the engine call the same code; ``SchedulePolicy`` applies one to the
engine's queue; ``PrefillAdder`` fills one prefill batch under the KV and prefill-token budgets.

Where radixlab differs from SGLang, on purpose: requests the in-batch prefix check deprioritizes stay
out of the current prefill batch (``hold_back``; SGLang only sorts them last: ``hold_back=False``);
``random`` is seeded; admission reserves a request's whole ``max_new_tokens`` (SGLang reserves a
``new_token_ratio`` of it and retracts on decode OOM), so a request admitted always finishes.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING, Any, Hashable, Protocol, Sequence

from ..mem_cache import FastRadixCache, RadixCache, RadixKey, Request, TreeNode

if TYPE_CHECKING:
    from .schedule_batch import Req

POLICIES = ("fcfs", "lpm", "dfs-weight", "lof", "random")
CACHE_AWARE = ("lpm", "dfs-weight")

LPM_FALLBACK_QUEUE_LEN = 128
"""LPM is switched off (FCFS for that step) when *more than* this many requests wait (SGLang v0.5.17)."""
IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD = 32
"""Only requests whose cached prefix is at most this long get the in-batch check (SGLang's default)."""
IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD = 32
"""A request sharing at least this many tokens with an earlier waiting request is deprioritized."""


class WaitingRequest(Protocol):
    """What a policy needs from a waiting request (SGLang's ``Req`` field names)."""

    rid: Any
    origin_input_ids: Sequence[int]
    output_ids: Sequence[int]
    extra_key: Hashable | None


@dataclass
class SimRequest:
    """A plain waiting request for simulators, tests and exercises (the engine has its own ``Req``)."""

    rid: Any
    origin_input_ids: tuple[int, ...]
    output_ids: tuple[int, ...] = ()
    extra_key: Hashable | None = None
    max_new_tokens: int = 16


@dataclass
class PolicyDecision:
    """The result of one scheduling step: the order, and why.

    ``active_policy`` differs from the requested one when LPM fell back to FCFS (long queue) or a
    cache-aware policy had no tree. ``prefix_len`` and ``last_node`` are each request's match
    against the tree (cache-aware policies only); ``deprioritized`` holds the rids the in-batch
    check held back; ``matches`` counts tree walks (the cost the LPM fallback avoids).
    """

    order: list
    policy: str
    active_policy: str
    prefix_len: dict = field(default_factory=dict)
    last_node: dict = field(default_factory=dict)
    deprioritized: set = field(default_factory=set)
    matches: int = 0


def validate_policy(policy: Any) -> str:
    """The policy name, or ``ValueError`` naming the choices."""
    if policy not in POLICIES:
        raise ValueError(f"schedule_policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    return policy


def active_policy(policy: str, queue_len: int, has_tree: bool = True) -> str:
    """The policy SGLang actually runs this step: LPM falls back to FCFS when the queue is long."""
    validate_policy(policy)
    if policy in CACHE_AWARE and not has_tree:
        return "fcfs"
    if policy == "lpm" and queue_len > LPM_FALLBACK_QUEUE_LEN:
        return "fcfs"
    return policy


def request_ids(req: WaitingRequest) -> list[int]:
    """The tokens a policy matches: ``origin_input_ids + output_ids`` (as SGLang)."""
    return list(req.origin_input_ids) + list(req.output_ids)


def request_key(req: WaitingRequest) -> RadixKey:
    """The key a policy matches, in the request's namespace. A ``radixlab.mem_cache.common.Request`` packed its
    prompt once, at creation: the key reuses those bytes (no per-step conversion of the token list)."""
    if isinstance(req, Request):
        return RadixKey.from_packed(req.packed_ids(len(req.origin_input_ids) + len(req.output_ids)), req.extra_key)
    return RadixKey(request_ids(req), req.extra_key)


def max_new_tokens(req: Any) -> int:
    """``req.sampling_params.max_new_tokens`` (SGLang's place) or ``req.max_new_tokens``."""
    params = getattr(req, "sampling_params", None)
    value = getattr(params, "max_new_tokens", None) if params is not None else None
    if value is None:
        value = getattr(req, "max_new_tokens", None)
    if value is None and isinstance(params, dict):
        value = params.get("max_new_tokens")
    if value is None:
        raise TypeError(f"lof needs max_new_tokens on request {getattr(req, 'rid', req)!r}")
    return int(value)


def compute_prefix_matches(queue: Sequence[WaitingRequest], tree: RadixCache,
                           in_batch_check: bool = True) -> tuple[dict, dict, set]:
    """Match every waiting request against ``tree``; run the in-batch prefix check.

    Returns ``(prefix_len, last_node, deprioritized)`` keyed by rid. Like SGLang, matching may split
    a tree edge (so ``last_node`` ends exactly at the match) and refreshes access times.
    """
    prefix_len: dict = {}
    last_node: dict = {}
    deprioritized: set = set()
    # 1. A scratch tree of the waiting queue itself: which waiting requests share uncached prefixes?
    waiting_tree = FastRadixCache(page_size=1)
    for r in queue:
        key = request_key(r)
        match = tree.match_prefix(key, r if isinstance(r, Request) else None)
        prefix_len[r.rid], last_node[r.rid] = len(match), match.last_node
        # 2. Short cached prefix: does an earlier waiting request share a long prefix with us?
        if in_batch_check and len(match) <= IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD:
            in_batch = len(waiting_tree.match_prefix(key))
            if in_batch >= IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD:
                deprioritized.add(r.rid)  # 3. yes: let the earlier one compute it first
            else:
                waiting_tree.insert(key)
    return prefix_len, last_node, deprioritized


def sort_by_longest_prefix(queue: Sequence[WaitingRequest], prefix_len: dict,
                           deprioritized: set = frozenset()) -> list:
    """LPM: longest cached prefix first; deprioritized requests last; ties keep arrival order."""
    return sorted(queue, key=lambda r: float("inf") if r.rid in deprioritized else -prefix_len[r.rid])


def sort_by_dfs_weight(queue: Sequence[WaitingRequest], tree: RadixCache, last_node: dict) -> list:
    """DFS weight: walk the tree depth first, heaviest subtree first; a node's requests after its subtree."""
    # 1. Group the waiting requests by the node where their cached prefix ends.
    reqs_at: dict[TreeNode, list] = defaultdict(list)
    for r in queue:
        reqs_at[last_node[r.rid]].append(r)
    # 2. A node's weight = waiting requests ending at it or anywhere below it.
    weight: dict[TreeNode, int] = defaultdict(int)

    def calc_weight(node: TreeNode) -> int:
        weight[node] = len(reqs_at.get(node, ())) + sum(calc_weight(c) for c in node.children.values())
        return weight[node]

    calc_weight(tree.root_node)
    # 3. Depth first, heaviest child first (ties: the tree's child order); emit after the subtree.
    order: list = []

    def visit(node: TreeNode) -> None:
        for child in sorted(node.children.values(), key=lambda c: -weight[c]):
            visit(child)
        order.extend(reqs_at.get(node, ()))

    visit(tree.root_node)
    return order


def sort_by_longest_output(queue: Sequence[Any]) -> list:
    """LOF: largest ``max_new_tokens`` first (ties keep arrival order)."""
    return sorted(queue, key=lambda r: -max_new_tokens(r))


def order_queue(policy: str, queue: Sequence[WaitingRequest], tree: RadixCache | None,
                rng: random.Random | None = None, in_batch_check: bool = True) -> PolicyDecision:
    """One scheduling step's ordering of ``queue`` under ``policy`` against ``tree`` (SGLang's ``calc_priority``).

    ``tree`` is None when the prefix cache is off (or is not a radix tree): cache-aware policies
    then serve FCFS. The queue itself is not changed; the decision's ``order`` is a new list.
    """
    validate_policy(policy)
    queue = list(queue)
    rids = [r.rid for r in queue]
    if len(set(rids)) != len(rids):
        raise ValueError("queue holds two requests with the same rid")
    active = active_policy(policy, len(queue), tree is not None)
    decision = PolicyDecision(queue, policy, active)
    if active in CACHE_AWARE:
        decision.prefix_len, decision.last_node, deprioritized = compute_prefix_matches(queue, tree, in_batch_check)
        decision.deprioritized = deprioritized
        decision.matches = len(queue)
        if active == "lpm":
            decision.order = sort_by_longest_prefix(queue, decision.prefix_len, deprioritized)
        else:
            decision.order = sort_by_dfs_weight(queue, tree, decision.last_node)
    elif active == "lof":
        decision.order = sort_by_longest_output(queue)
    elif active == "random":
        (rng or random.Random(0)).shuffle(queue)
        decision.order = queue
    return decision


def ceil_page(n: int, page_size: int) -> int:
    """``n`` rounded up to whole pages."""
    return -(-n // page_size) * page_size


class SchedulePolicy:
    """Orders the engine's waiting queue before each prefill batch (SGLang: ``SchedulePolicy.calc_priority``).

    ``decision`` is the last step's ``PolicyDecision``; ``deprioritized`` its in-batch check's rids,
    which the scheduler keeps out of this prefill batch while ``hold_back`` is True. A cache that is not
    a radix tree (no cache, the hash cache) makes a cache-aware policy serve FCFS, as in SGLang.
    """

    def __init__(self, policy: str, tree_cache: Any, seed: int = 0, *, hold_back: bool = True,
                 in_batch_check: bool = True) -> None:
        self.policy = validate_policy(policy)
        self.tree_cache = tree_cache
        self.rng = random.Random(seed)
        self.hold_back = hold_back
        self.in_batch_check = in_batch_check
        self.decision: PolicyDecision | None = None

    @property
    def deprioritized(self) -> set:
        return self.decision.deprioritized if self.decision is not None else set()

    def calc_priority(self, waiting_queue: list[Req]) -> None:
        """Reorder ``waiting_queue`` in place (the first one is considered first)."""
        tree = self.tree_cache if isinstance(self.tree_cache, RadixCache) else None
        self.decision = order_queue(self.policy, waiting_queue, tree, self.rng, self.in_batch_check)
        waiting_queue[:] = self.decision.order


class AddReqResult(Enum):
    CONTINUE = auto()  # added; try the next one
    NO_TOKEN = auto()  # not enough KV slots: stop, it waits for memory
    OTHER = auto()  # batch is full for another reason (rows, prefill token budget)


def remaining_kv_need(req: Req, page_size: int) -> int:
    """Slots ``req`` may still allocate before it finishes: its whole sequence, in pages, minus
    the pages its row already covers (tree pages or its own)."""
    total = len(req.origin_input_ids) + req.max_new_tokens
    return max(ceil_page(total, page_size) - ceil_page(req.seq_len, page_size), 0)


class PrefillAdder:
    """Fills one prefill batch under the KV budget, the prefill-token budget and the row limit."""

    def __init__(self, tree_cache: Any, allocator: Any, in_flight: list[Req], page_size: int,
                 rem_input_tokens: int, rem_chunk_tokens: int | None, rem_rows: int) -> None:
        self.tree_cache = tree_cache
        self.allocator = allocator
        self.page_size = page_size
        self.rem_input_tokens = rem_input_tokens
        self.rem_chunk_tokens = rem_chunk_tokens
        self.rem_rows = rem_rows
        # What requests already running (or mid-chunk) may still allocate.
        self.rem_total_token_offset = sum(remaining_kv_need(r, page_size) for r in in_flight)
        self.can_run_list: list[Req] = []
        self.new_chunked_req: Req | None = None

    @property
    def rem_total_tokens(self) -> int:
        """Free + evictable slots, minus what admitted requests may still need."""
        return (self.allocator.available_size() + self.tree_cache.evictable_size()
                - self.rem_total_token_offset)

    def _take(self, req: Req, extend_len: int) -> None:
        req.extend_input_len = extend_len
        self.can_run_list.append(req)
        self.rem_input_tokens -= extend_len
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= extend_len

    def allocated(self, req: Req, from_len: int) -> None:
        """``req``'s slots from ``from_len`` to its ``seq_len`` were allocated at admission: they count
        as taken, no longer as still to allocate."""
        self.rem_total_token_offset -= ceil_page(req.seq_len, self.page_size) - ceil_page(from_len, self.page_size)

    def add_chunked_req(self, req: Req) -> Req | None:
        """The request in the middle of a chunked prefill goes first; returns it if still unfinished."""
        left = len(req.origin_input_ids) - req.seq_len
        size = min(left, self.rem_chunk_tokens) if self.rem_chunk_tokens is not None else left
        if size < left:  # more chunks to come: keep chunk ends on page boundaries
            size = (req.seq_len + size) // self.page_size * self.page_size - req.seq_len
        if size <= 0:
            return req
        self._take(req, size)
        return req if size < left else None

    def add_one_req(self, req: Req, match_len: int, locked_evictable: int) -> AddReqResult:
        """Try to admit ``req`` whose cached prefix is ``match_len`` tokens.

        ``locked_evictable`` is how many evictable tokens locking that prefix would protect: they
        stop counting as evictable once ``req`` holds them.
        """
        if self.rem_rows <= 0:
            return AddReqResult.OTHER
        need = ceil_page(len(req.origin_input_ids) + req.max_new_tokens, self.page_size) - match_len
        if need > self.rem_total_tokens - locked_evictable:
            return AddReqResult.NO_TOKEN
        extend_len = len(req.origin_input_ids) - match_len
        if self.rem_chunk_tokens is None:
            # Without chunking the first request always goes; later ones while the budget lasts.
            if self.can_run_list and extend_len > self.rem_input_tokens:
                return AddReqResult.OTHER
        elif extend_len > self.rem_chunk_tokens:
            size = (match_len + self.rem_chunk_tokens) // self.page_size * self.page_size - match_len
            if size <= 0:
                return AddReqResult.OTHER
            self.new_chunked_req = req
            self.rem_total_token_offset += need
            self.rem_rows -= 1
            self._take(req, size)
            return AddReqResult.OTHER  # a chunk fills the batch
        self.rem_total_token_offset += need
        self.rem_rows -= 1
        self._take(req, extend_len)
        return AddReqResult.CONTINUE

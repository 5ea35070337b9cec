"""Cache-aware scheduling: in which order should waiting requests run? (notebook 09_scheduling_and_serving)

The radix tree only *offers* reuse; the order in which the scheduler takes requests from the
waiting queue decides how much of the tree is still there when a request needs it. These are
SGLang's policies (``managers/schedule_policy.py``), written as pure functions over a waiting queue
and the tree, so a notebook, a simulator and the engine all call the same code:

* ``fcfs``: arrival order.
* ``lpm`` (longest prefix match): match every waiting request against the tree, run the longest
  cached prefix first. When more than ``LPM_FALLBACK_QUEUE_LEN`` (128) requests wait, SGLang
  turns LPM off for that step and serves FCFS: matching every waiting request costs a tree walk
  each, every scheduling step (``_determine_active_policy``).
* ``dfs-weight``: group waiting requests by the tree node where their match ends, weight every
  node by the requests below it, walk the tree depth first taking the heaviest child first,
  and emit each node's requests after its subtree (``_sort_by_dfs_weight``).
* ``lof`` (longest output first): largest ``max_new_tokens`` first.
* ``random``: a shuffle (seeded here, so runs repeat).

The in-batch prefix check (``_compute_prefix_matches``): requests whose cached prefix is short
(<= ``IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD`` = 32 tokens) are matched against a scratch radix
tree of the *waiting queue*; if an earlier waiting request already shares >= 32 tokens with it
(``IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD``), it is *deprioritized*: computing that shared
prefix once and reusing it next step beats computing it twice now. SGLang applies the result in
the LPM sort key only (deprioritized requests sort last, and ``PrefillAdder`` still admits them
when there is room; under ``dfs-weight`` the set is computed and not used). radixlab sorts them
last too, and by default **differs on purpose**: it hands the set to the engine, which keeps
deprioritized requests out of the current prefill batch under both policies, so the shared prefix
is computed once. That makes radixlab's LPM reuse more than SGLang's on the same trace when the
batch has room for everyone. ``Engine(hold_back_deprioritized=False)`` runs SGLang's way, and
``bench serve`` (notebook 09) shows both: ``radix-lpm`` and ``radix-lpm-sglang``.

Where radixlab differs from SGLang, on purpose: ``random`` takes a seeded ``random.Random``; a
request's ``max_new_tokens`` is read from ``req.sampling_params.max_new_tokens`` or
``req.max_new_tokens`` (whichever exists); and with the cache disabled (``tree is None``) a
cache-aware policy quietly becomes FCFS, as SGLang's ``_validate_and_adjust_policy`` does.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Hashable, Protocol, Sequence

from ..mem_cache import FastRadixCache, RadixCache, RadixKey, Request, TreeNode

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

"""Differential test: radixlab's RadixCache against SGLang v0.5.17's own RadixCache.

A hypothesis state machine drives both caches with the same random operations (insert with a
priority, match_prefix, inc_lock_ref / dec_lock_ref on the nodes matches returned, evict) over a
small alphabet (so edges share prefixes and split often), in two namespaces (``extra_key``), page
sizes 1, 2 and 4, the EAGLE bigram view, every eviction policy, and both radixlab matchers
(``fast`` and ``readable``). After every step it requires identical hit lengths and slot indices,
insert prefix lengths, lock deltas, evicted token counts and freed slots (in eviction order),
evictable/protected sizes, identical trees (every node's path, slots and lock_ref), and the same
eviction order between any two nodes that could meet in the heap, so a policy difference shows as
soon as the state that exposes it exists (not only when an evict happens to pop those nodes).

SGLang is imported unmodified from its wheel (radixlab/sglang_ref.py stubs only its server-side
imports); ``make setup`` fetches the wheel (``python -m radixlab fetch-sglang``), so no network is
needed here. The test skips, saying so, when the wheel is absent.

How the clocks map: SGLang stamps nodes with ``time.monotonic()``; here that module-level ``time``
is replaced by a counter (``sglang_ref.CounterClock``), one tick per call, so SGLang's order of
stamps is kept and runs are reproducible. radixlab's logical clock ticks once per match/insert and
breaks ties by node id (within a tick SGLang stamps the walked nodes first, then the created
ones, in creation order), so every policy sees the same order on both sides.

Misuse radixlab rejects and SGLang does not check (locking an evicted node, unlocking an unlocked
one) is not generated: locks are only taken on live nodes and only released by their holder.
"""

from __future__ import annotations

from array import array

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from radixlab import sglang_ref
from radixlab.mem_cache import EVICTION_POLICIES, FastRadixCache, RadixCache, RadixKey

CACHES = {"fast": FastRadixCache, "readable": RadixCache}  # the packed-bytes walk and the readable one
MATCHERS = tuple(CACHES)

if sglang_ref.wheel_path() is None:
    pytest.skip(sglang_ref.missing_reason(), allow_module_level=True)

SG = sglang_ref.load()

tokens = st.lists(st.integers(0, 1), max_size=8)
namespaces = st.sampled_from([None, "lora_a"])


def sg_units(key) -> list:
    return list(key)  # SGLang's RadixKey iterates units: ints, or (t, t') pairs in the bigram view


def tree_rows(root, units) -> list[tuple]:
    """Every node below the root as (namespace, path units, slots, lock_ref, hit_count), sorted."""
    rows, stack = [], [(child, ()) for child in root.children.values()]
    while stack:
        node, path = stack.pop()
        path = path + tuple(units(node.key))
        rows.append((repr(node.key.extra_key), path, tuple(node.value.tolist()), node.lock_ref, node.hit_count))
        stack.extend((child, path) for child in node.children.values())
    return sorted(rows)


def path_of(node, root, units) -> tuple:
    parts = []
    while node is not root:
        parts.append(tuple(units(node.key)))
        node = node.parent
    return tuple(u for part in reversed(parts) for u in part)


class Differential(RuleBasedStateMachine):
    policy = "lru"
    matcher = "fast"

    @initialize(page_size=st.sampled_from([1, 2, 4]), is_eagle=st.booleans())
    def setup(self, page_size: int, is_eagle: bool) -> None:
        sglang_ref.use_counter_clock(SG)
        self.sg_alloc, self.rl_alloc = sglang_ref.RecordingAllocator(), sglang_ref.RecordingAllocator()
        self.sg = SG.RadixCache(SG.CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=self.sg_alloc,
            page_size=page_size, is_eagle=is_eagle, eviction_policy=self.policy))
        self.rl = CACHES[self.matcher](page_size, token_to_kv_pool_allocator=self.rl_alloc,
                                       eviction_policy=self.policy, is_eagle=is_eagle)
        self.next_slot = 100
        self.handles: list[list] = []  # [radixlab node, SGLang node, locks we hold on it]

    def _slots(self, n: int) -> torch.Tensor:
        v = torch.arange(self.next_slot, self.next_slot + n, dtype=torch.int64)
        self.next_slot += n
        return v

    @rule(toks=tokens, ns=namespaces, priority=st.integers(0, 2), chunked=st.booleans())
    def insert(self, toks, ns, priority, chunked):
        value = self._slots(len(toks))
        got = self.rl.insert(RadixKey(toks, ns), value.clone(), priority=priority, chunked=chunked)
        want = self.sg.insert(SG.InsertParams(key=SG.RadixKey(array("q", toks), ns), value=value.clone(),
                                              priority=priority, chunked=chunked)).prefix_len
        assert got == want, f"insert {toks} ns={ns}: prefix_len radixlab={got} sglang={want}"

    @rule(toks=tokens, ns=namespaces)
    def match(self, toks, ns):
        got = self.rl.match_prefix(RadixKey(toks, ns))
        want = self.sg.match_prefix(SG.MatchPrefixParams(key=SG.RadixKey(array("q", toks), ns)))
        assert got.device_indices.tolist() == want.device_indices.tolist(), f"match {toks} ns={ns}"
        rl_path = path_of(got.last_node, self.rl.root_node, list)
        sg_path = path_of(want.last_device_node, self.sg.root_node, sg_units)
        assert rl_path == sg_path, f"match {toks}: last node at {rl_path} vs {sg_path}"
        self.handles.append([got.last_node, want.last_device_node, 0])

    @precondition(lambda self: self.handles)
    @rule(i=st.integers(0, 10**6))
    def lock(self, i):
        h = self.handles[i % len(self.handles)]
        if h[0].evicted:  # SGLang would lock an evicted node: misuse, not generated
            return
        assert self.rl.inc_lock_ref(h[0]) == self.sg.inc_lock_ref(h[1]).delta
        h[2] += 1

    @precondition(lambda self: any(h[2] for h in self.handles))
    @rule(i=st.integers(0, 10**6))
    def unlock(self, i):
        held = [h for h in self.handles if h[2]]
        h = held[i % len(held)]
        assert self.rl.dec_lock_ref(h[0]) == self.sg.dec_lock_ref(h[1]).delta
        h[2] -= 1

    @rule(num_tokens=st.integers(0, 8))
    def evict(self, num_tokens):
        got = self.rl.evict(num_tokens)
        want = self.sg.evict(SG.EvictParams(num_tokens=num_tokens)).num_tokens_evicted
        assert got == want, f"evict({num_tokens}): radixlab freed {got} tokens, sglang {want}"
        assert self.rl_alloc.freed == self.sg_alloc.freed, "evicted different slots (or in another order)"

    @invariant()
    def same_state(self):
        if not hasattr(self, "rl"):
            return
        assert (self.rl.evictable_size(), self.rl.protected_size()) == \
            (self.sg.evictable_size(), self.sg.protected_size())
        self.rl.check_invariants()
        assert tree_rows(self.rl.root_node, list) == tree_rows(self.sg.root_node, sg_units)

    @invariant()
    def same_eviction_priorities(self):
        """Any two nodes that could meet in the eviction heap are ordered alike on both sides.

        Compares ``(policy key, node)`` exactly as ``heapq`` does, for every pair of nodes where
        neither is an ancestor of the other (an ancestor is never a leaf while its descendant
        lives). Finds a policy difference as soon as the two nodes exist, not only when an evict
        happens to pop them.
        """
        if not hasattr(self, "rl"):
            return
        rl = {(repr(n.key.extra_key), path_of(n, self.rl.root_node, list)): (self.rl._priority_fn(n), n)
              for n in self.rl.nodes()}
        strategy = self.sg.eviction_strategy
        sg = {}
        stack = list(self.sg.root_node.children.values())
        while stack:
            n = stack.pop()
            sg[(repr(n.key.extra_key), path_of(n, self.sg.root_node, sg_units))] = (strategy.get_priority(n), n)
            stack.extend(n.children.values())
        paths = sorted(rl)
        for a in range(len(paths)):
            for b in range(a + 1, len(paths)):
                p, q = paths[a], paths[b]
                if _related(rl[p][1], rl[q][1]):
                    continue
                assert (rl[p] < rl[q]) == (sg[p] < sg[q]), (
                    f"{self.policy}: nodes at {p} and {q} are ordered differently "
                    f"(radixlab keys {rl[p][0]} / {rl[q][0]}, SGLang {sg[p][0]} / {sg[q][0]})")


def _related(a, b) -> bool:
    """Is one node an ancestor of the other (or the same)?"""
    for x, y in ((a, b), (b, a)):
        n = y
        while n is not None:
            if n is x:
                return True
            n = n.parent
    return False


POLICIES = sorted(EVICTION_POLICIES)
SETTINGS = settings(max_examples=50, stateful_step_count=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

for _policy in POLICIES:
    for _matcher in MATCHERS:
        _machine = type(f"Differential_{_policy}_{_matcher}", (Differential,), {"policy": _policy, "matcher": _matcher})
        _case = _machine.TestCase
        _case.settings = SETTINGS
        globals()[f"TestDifferential_{_policy}_{_matcher}"] = _case
del _machine, _case


def test_every_sglang_policy_is_covered():
    """radixlab offers every eviction policy SGLang 0.5.17 does (so the machine above covers them all)."""
    sg_policies = set(SG.radix_cache.__dict__["get_eviction_strategy"].__globals__["_EVICTION_POLICY_FACTORIES"])
    assert sg_policies == set(EVICTION_POLICIES)


def test_reference_is_sglangs_own_file():
    """The reference really is the wheel's radix_cache.py, and its clock is the counter."""
    assert SG.version == sglang_ref.SGLANG_VERSION
    assert all(f.endswith(f"sglang/srt/mem_cache/{m}.py") for m, f in SG.real_files.items())
    clock = sglang_ref.use_counter_clock(SG)
    SG.new_cache().insert(SG.InsertParams(key=SG.RadixKey(array("q", [1, 2])), value=torch.tensor([5, 6])))
    assert clock.now > 0


def _replay(policy: str, matcher: str, ops: list[tuple]) -> tuple[list[int], list[int]]:
    """Run ``ops`` on both caches; returns the slots each freed, in order."""
    sglang_ref.use_counter_clock(SG)
    sg_alloc, rl_alloc = sglang_ref.RecordingAllocator(), sglang_ref.RecordingAllocator()
    sg = SG.new_cache(1, policy, sg_alloc)
    rl = CACHES[matcher](1, token_to_kv_pool_allocator=rl_alloc, eviction_policy=policy)
    slot = 0
    for op, arg in ops:
        if op == "insert":
            v = torch.arange(slot, slot + len(arg))
            slot += len(arg)
            rl.insert(RadixKey(arg), v.clone())
            sg.insert(SG.InsertParams(key=SG.RadixKey(array("q", arg)), value=v.clone()))
        elif op == "match":
            rl.match_prefix(RadixKey(arg))
            sg.match_prefix(SG.MatchPrefixParams(key=SG.RadixKey(array("q", arg))))
        else:
            rl.evict(arg)
            sg.evict(SG.EvictParams(num_tokens=arg))
    return rl_alloc.freed, sg_alloc.freed


@pytest.mark.parametrize("matcher", MATCHERS)
@pytest.mark.parametrize("policy", ["fifo", "filo"])
def test_split_head_is_created_at_the_split(policy, matcher):
    """Found by the machine above: SGLang's split makes a new TreeNode, so the shared head's
    creation_time is the split's time; radixlab used to copy the old node's creation_time."""
    # A=[0,0,0] (slots 0-2), B=[1] (slot 3), then a match splits A into head [0,0] and tail [0].
    ops = [("insert", [0, 0, 0]), ("insert", [1]), ("match", [0, 0]), ("evict", 1), ("evict", 1)]
    rl, sg = _replay(policy, matcher, ops)
    assert rl == sg
    if policy == "fifo":  # tail (A's time) first, then B (older than the head made at the split)
        assert sg == [2, 3]


@pytest.mark.parametrize("matcher", MATCHERS)
def test_mru_tie_goes_to_the_node_stamped_last(matcher):
    """Found by the machine above: inserting [0,1] after [0,0] stamps the old tail [0] and the new
    leaf [1] in one radixlab tick; SGLang's clock stamps the new leaf later, so MRU evicts it first."""
    rl, sg = _replay("mru", matcher, [("insert", [0, 0]), ("insert", [0, 1]), ("evict", 1)])
    assert rl == sg == [3]  # the new leaf [1] holds slot 3 (the old tail [0] holds slot 1)

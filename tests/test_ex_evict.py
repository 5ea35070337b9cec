"""Exercise 06.1 (the eviction loop): the solution passes, a blank and plausible wrong answers fail."""

import heapq
from pathlib import Path

import pytest


from radixlab.course.ex_evict import (check_evict_loop, chain, three_requests, forgets_parent_loop, ignores_lock_loop,
                                      initial_heap, locked_parent, loop_with_parent_rule,
                                      reference_evict_loop)
from grade_helpers import notebook_solution as _notebook_solution


NOTEBOOK = next(p for p in sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
                if "def evict_loop" in p.read_text())


def blank(cache, heap, num_tokens):
    raise NotImplementedError()


pushes_internal_parent = loop_with_parent_rule(lambda parent: parent.lock_ref == 0)


def does_not_free_slots(cache, heap, num_tokens):
    evicted = 0
    while evicted < num_tokens and heap:
        _, node = heapq.heappop(heap)
        evicted += len(node.key)
        cache._delete_leaf(node)
        parent = node.parent
        if parent is not cache.root_node and not parent.children and parent.lock_ref == 0:
            heapq.heappush(heap, (cache._priority_fn(parent), parent))
    return evicted


def evicts_everything(cache, heap, num_tokens):
    return reference_evict_loop(cache, heap, 10**9)


def notebook_solution():
    return _notebook_solution(NOTEBOOK, "evict_loop", heapq=heapq)


def test_handing_in_radixlab_own_loop_or_calling_evict_fails():
    for shortcut in (reference_evict_loop, evicts_everything, lambda cache, heap, n: cache.evict(n)):
        result = check_evict_loop(shortcut)
        assert result.score == 0 and not result.passed


def test_reference_passes_and_matches_radix_cache_evict():
    result = check_evict_loop(notebook_solution())
    assert result.passed and result.score == result.max_score == 3
    assert repr(result).startswith("✅ Exercise 06.1 (the eviction loop)")
    for build in (chain, locked_parent, three_requests):
        for n in (0, 1, 3, 6, 100):
            a, b = build(), build()
            assert reference_evict_loop(a, initial_heap(a), n) == b.evict(n)
            assert a.format() == b.format()


def test_blank_is_not_done_yet():
    result = check_evict_loop(blank)
    assert not result.passed and result.not_done and result.score == 0
    assert repr(result).startswith("⏳ Exercise 06.1") and "not done yet" in repr(result)


def test_forgetting_the_parent_push_fails_and_says_so():
    result = check_evict_loop(forgets_parent_loop)
    assert not result.passed and not result.not_done
    assert repr(result).startswith("❌ Exercise 06.1") and "push its parent onto the heap" in repr(result)


def test_evicting_a_locked_parent_fails_and_says_so():
    result = check_evict_loop(ignores_lock_loop)
    assert not result.passed and not result.not_done
    assert "a live request holds it" in repr(result)


def appends_the_parent(cache, heap, num_tokens):  # found by an attack review: list.append, not heappush
    import heapq
    evicted = 0
    while evicted < num_tokens and heap:
        _, node = heapq.heappop(heap)
        cache.token_to_kv_pool_allocator.free(node.value)
        evicted += len(node.value)
        parent = node.parent
        cache._delete_leaf(node)
        if parent is not cache.root_node and not parent.children and parent.lock_ref == 0:
            heap.append((cache._priority_fn(parent), parent))
    return evicted


def test_the_first_heap_is_laid_out_the_same_in_every_process():
    """The leaves are a set: its order decided the heap's layout, and so the score of an answer that
    pops heap[0] with list.pop(0), which differed between the check cell and the grader."""
    import subprocess
    import sys
    code = ("from radixlab.course.ex_evict import SCENARIOS, initial_heap\n"
            "cache = SCENARIOS['bushy']()\nprint([n.id for _, n in initial_heap(cache)])")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**__import__('os').environ,
                           "PYTHONHASHSEED": str(seed)}).stdout for seed in range(4)}
    assert len(runs) == 1 and runs != {""}, runs


@pytest.mark.parametrize("wrong", [pushes_internal_parent, does_not_free_slots, evicts_everything, appends_the_parent])
def test_other_wrong_answers_fail(wrong):
    result = check_evict_loop(wrong)
    assert not result.passed and not result.not_done and result.score < result.max_score


def test_check_rejects_a_non_function():
    with pytest.raises(TypeError, match="evict_loop"):
        check_evict_loop(42)


def test_under_eviction_message_says_what_the_evidence_shows():
    """Only a stranded parent earns the "push it" hint; a loop that stops early is told so."""
    assert "lost its children and became an unlocked leaf" in repr(check_evict_loop(forgets_parent_loop))

    def stops_after_one(cache, heap, num_tokens):
        evicted = 0
        if heap and num_tokens > 0:
            _, node = heapq.heappop(heap)
            cache.token_to_kv_pool_allocator.free(node.value)
            evicted += len(node.key)
            cache._delete_leaf(node)
        return evicted

    text = repr(check_evict_loop(stops_after_one))
    assert "stopped before the heap was empty" in text


def test_exercise_id_follows_the_notebook():
    from radixlab.course.ex_evict import SPEC
    assert SPEC.id == "06.1" and SPEC.lesson == "06"


@pytest.mark.parametrize("wrong, says", [
    ("child_key_parent_loop", "with its own policy key, cache._priority_fn(parent), not the popped child's key"),
    ("fifo_parent_loop", "push the parent onto the heap, so it competes by its key, not after every leaf"),
])
def test_a_parent_pushed_with_the_wrong_key_or_in_fifo_order_fails_for_each_policy(wrong, says):
    """Issue 19: both loops scored full marks; a pushed parent whose age lies between two leaves catches them."""
    from radixlab.course import ex_evict

    result = check_evict_loop(getattr(ex_evict, wrong))
    assert not result.passed and result.score < result.max_score
    failed = [o for o in result.outcomes if not o.passed]
    assert {o.name.split(":")[0] for o in failed if "between two leaves" in o.name} == {"lru", "lfu"}
    assert all(says in o.message for o in failed if "between two leaves" in o.name), repr(result)

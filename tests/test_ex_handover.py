"""Exercise 05.1: the check passes the reference, says "not done yet" to the blank, and fails each
plausible wrong answer with a message naming its mistake."""

from __future__ import annotations

import pytest

from radixlab.course.answers_handover import reference_cache_finished_req
from radixlab.course.ex_handover import cases, check_cache_finished_req, drive
from radixlab.mem_cache import RadixCache, RadixKey


def blank(cache, req):
    raise NotImplementedError()


def _handover(cache, req, *, tokens=None, free_from=None, tail=True, dups=True, unlock=True, ns=True,
              aligned=True, free_adopted=False):
    """The reference with one step changed (each wrong answer below turns one switch)."""
    alloc = cache.token_to_kv_pool_allocator
    kv = cache.req_to_token_pool.req_to_token[req.req_pool_idx, : req.seq_len]
    if tokens is None:
        tokens = (req.origin_input_ids + req.output_ids)[: req.seq_len]
    key_len = len(tokens) // cache.page_size * cache.page_size if aligned else len(tokens)
    prefix_len = cache.insert(RadixKey(tokens, req.extra_key if ns else None), kv[: len(tokens)].clone())
    start = req.cache_protected_len if free_from is None else free_from
    if dups:
        alloc.free(kv[start:prefix_len])
    if free_adopted:
        alloc.free(kv[prefix_len:key_len])
    if tail:
        alloc.free(kv[key_len:])
    if unlock:
        cache.dec_lock_ref(req.last_node)


def keeps_duplicates(cache, req):
    _handover(cache, req, dups=False)


def frees_from_zero(cache, req):
    _handover(cache, req, free_from=0)


def keeps_the_tail(cache, req):
    _handover(cache, req, tail=False)


def unaligned_tail(cache, req):
    _handover(cache, req, aligned=False)


def keeps_the_lock(cache, req):
    _handover(cache, req, unlock=False)


def unlocks_where_the_insert_ended(cache, req):
    _handover(cache, req, unlock=False)
    tokens = (req.origin_input_ids + req.output_ids)[: req.seq_len]
    cache.dec_lock_ref(cache.match_prefix(RadixKey(tokens, req.extra_key)).last_node)


def prompt_only(cache, req):
    _handover(cache, req, tokens=req.origin_input_ids[: req.seq_len])


def every_token(cache, req):
    _handover(cache, req, tokens=req.origin_input_ids + req.output_ids)


def forgets_the_namespace(cache, req):
    _handover(cache, req, ns=False)


def frees_everything_it_owned(cache, req):
    _handover(cache, req, free_adopted=True)


WRONG = {
    keeps_duplicates: "your copies are duplicates: free them",
    frees_from_zero: "free duplicates from cache_protected_len on",
    keeps_the_tail: "the unaligned tail",
    unaligned_tail: "the unaligned tail",
    keeps_the_lock: "is still locked",
    unlocks_where_the_insert_ended: "not the node where your insert ended",
    prompt_only: "the decoded tokens too",
    every_token: "the last sampled token was never fed back",
    forgets_the_namespace: "wrong namespace",
    frees_everything_it_owned: "pages the tree just adopted",
}


def test_reference_passes_with_full_score():
    result = check_cache_finished_req(lambda cache, req: reference_cache_finished_req(cache, req), record=False)
    assert result.passed, repr(result)
    assert (result.score, result.max_score) == (3, 3)


def test_insert_without_aligning_the_key_also_passes():
    def lets_insert_align(cache, req):  # insert keeps whole pages itself; the tail is freed by position
        _handover(cache, req)
    assert check_cache_finished_req(lets_insert_align, record=False).passed


def test_blank_is_not_done_yet():
    result = check_cache_finished_req(blank, record=False)
    assert result.not_done and "not done yet" in repr(result)


@pytest.mark.parametrize("wrong", list(WRONG), ids=lambda f: f.__name__)
def test_wrong_answers_fail_for_the_reason_named(wrong):
    result = check_cache_finished_req(wrong, record=False)
    assert not result.passed and result.score < 3, repr(result)
    assert WRONG[wrong] in repr(result), repr(result)


def test_radixlabs_own_method_is_refused_in_the_check_cell():
    assert "write your own" in repr(check_cache_finished_req(RadixCache.cache_finished_req, record=False))


def test_the_replay_has_decode_tokens_duplicates_and_tails():
    """The cases reach every part of the hand-over: a cached prefix, duplicates, a tail, a namespace."""
    steps = [s for c in cases(0) for s in drive(reference_cache_finished_req, c.args)]
    assert any(s["protected"] for s in steps)
    assert any(s["seq_len"] % s["page_size"] for s in steps)
    assert any(s["n_tokens"] > s["seq_len"] for s in steps)  # the last sampled token has no KV
    assert not any(s["leaked"] or s["freed_but_cached"] for s in steps)
    assert cases(0)[0].args != cases(3)[0].args

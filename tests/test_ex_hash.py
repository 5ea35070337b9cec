"""Exercise 03.1: the check passes the reference, says "not done yet" to the blank, and fails each
plausible wrong answer with a message naming its mistake."""

from __future__ import annotations

import pytest

from radixlab.course.answers_hash import reference_kept_hash_hit
from radixlab.course.ex_hash import check_kept_hash_hit
from radixlab.mem_cache import HashPrefixCache, chain_hashes


def blank(req, table):
    raise NotImplementedError()


def counts_every_cached_hash(req, table):
    return sum(h in table for h in req.hashes)


def probe_down(req, table):
    for k in range(len(req.hashes) - 1, -1, -1):
        if req.hashes[k] in table:
            return k + 1
    return 0


def rehash_with_the_requests_hash_fn(req, table):
    hit = 0
    for h in chain_hashes(req.tokens, req.block_size, hash_fn=req.hash_fn):
        if h not in table:
            break
        hit += 1
    return hit


def rehash_with_xxh64(req, table):
    hit = 0
    for h in chain_hashes(req.tokens, req.block_size):
        if h not in table:
            break
        hit += 1
    return hit


def returns_tokens(req, table):
    return reference_kept_hash_hit(req, table) * req.block_size


def counts_the_miss(req, table):
    hit = 0
    for h in req.hashes:
        hit += 1
        if h not in table:
            break
    return hit


def probes_everything_first(req, table):
    found = [h in table for h in req.hashes]
    return found.index(False) if False in found else len(found)


def scans_the_table(req, table):
    keys = set(table)
    hit = 0
    for h in req.hashes:
        if h not in keys:
            break
        hit += 1
    return hit


WRONG = {
    counts_every_cached_hash: "kept probing after the first miss",
    probe_down: "from the longest prefix down",
    rehash_with_the_requests_hash_fn: "you re-hashed the tokens",
    rehash_with_xxh64: "a hash the request does not keep",
    returns_tokens: "the cached tokens",
    counts_the_miss: "one too many",
    probes_everything_first: "kept probing after the first miss",
    scans_the_table: "went through the whole table",
}


def test_reference_passes_with_full_score():
    result = check_kept_hash_hit(lambda req, table: reference_kept_hash_hit(req, table), record=False)
    assert result.passed, repr(result)
    assert (result.score, result.max_score) == (3, 3)


def test_other_honest_styles_pass():
    def with_getitem(req, table):
        n = 0
        while n < len(req.hashes):
            try:
                table[req.hashes[n]]
            except KeyError:
                break
            n += 1
        return n

    def with_contains_then_get(req, table):
        n = 0
        for h in req.hashes:
            if h in table and table[h] is not None:
                n += 1
            else:
                break
        return n

    for fn in (with_getitem, with_contains_then_get):
        assert check_kept_hash_hit(fn, record=False).passed, fn.__name__


def test_blank_is_not_done_yet():
    result = check_kept_hash_hit(blank, record=False)
    assert result.not_done and "not done yet" in repr(result)


@pytest.mark.parametrize("wrong", list(WRONG), ids=lambda f: f.__name__)
def test_wrong_answers_fail_for_the_reason_named(wrong):
    result = check_kept_hash_hit(wrong, record=False)
    assert not result.passed and result.score < 3, repr(result)
    assert WRONG[wrong] in repr(result), repr(result)


def test_radixlabs_own_probe_is_refused_in_the_check_cell():
    assert "write your own" in repr(check_kept_hash_hit(HashPrefixCache.match_kept_hashes, record=False))


def test_grader_seeds_rename_the_visible_cases():
    from radixlab.course.ex_hash import cases

    assert cases(0)[0].args["tokens"] != cases(5)[0].args["tokens"]
    assert cases(0)[0].args == cases(0)[0].args

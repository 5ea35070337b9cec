"""Exercise 07.2 (the write side): the check passes the reference, says "not done yet" to the blank and
fails each plausible wrong answer with a message that names the mistake."""

from __future__ import annotations

import json

import pytest
import torch

from radixlab.course import spec
from radixlab.course.ex_kvwrite import SPEC, build, cases, check_write_new_kv
from radixlab.course.exercises import all_specs


def _slots(req_to_token_pool, allocator, batch, *, row_at=None, cached=True, record=True):
    """Each request's new slots (alloc_extend after its cached prefix), written into its row at prefix_len.
    The wrong answers below vary one step: where the row is written (row_at), whether the allocator is told
    of the cached prefix and its last slot (cached), whether the row is written at all (record)."""
    locs = []
    for row, prefix_len, n in batch:
        last = int(req_to_token_pool.req_to_token[row, prefix_len - 1]) if prefix_len and cached else -1
        slots = allocator.alloc_extend(prefix_len if cached else 0, last, n)
        if record:
            req_to_token_pool.write(row, prefix_len if row_at is None else row_at, slots)
        locs.append(slots)
    return torch.cat(locs)


def _store(kv_pool, loc, new_kv, *, layers=None, v_from_k=False):
    for layer, (k, v) in enumerate(new_kv[:layers]):
        kv_pool.set_kv_buffer(layer, loc, k, k if v_from_k else v)
    return loc


def solution(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    return _store(kv_pool, _slots(req_to_token_pool, allocator, batch), new_kv)


def blank(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    raise NotImplementedError()


def forgets_the_row(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    """Allocates and stores the K/V, but never records the new slots in the rows."""
    return _store(kv_pool, _slots(req_to_token_pool, allocator, batch, record=False), new_kv)


def row_from_position_zero(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    """Writes each request's new slots at the start of its row, over its cached prefix."""
    return _store(kv_pool, _slots(req_to_token_pool, allocator, batch, row_at=0), new_kv)


def first_layer_only(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    return _store(kv_pool, _slots(req_to_token_pool, allocator, batch), new_kv, layers=1)


def k_as_v(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    return _store(kv_pool, _slots(req_to_token_pool, allocator, batch), new_kv, v_from_k=True)


def one_alloc_for_the_batch(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    """allocator.alloc for the whole batch, split by request: ignores the page each request has begun."""
    total = sum(n for _, _, n in batch)
    pages = -(-total // allocator.page_size) * allocator.page_size
    loc = allocator.alloc(pages)[:total]
    start = 0
    for row, prefix_len, n in batch:
        req_to_token_pool.write(row, prefix_len, loc[start:start + n])
        start += n
    return _store(kv_pool, loc, new_kv)


def no_last_loc(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    """alloc_extend as if nothing were cached (prefix 0, no last page)."""
    return _store(kv_pool, _slots(req_to_token_pool, allocator, batch, cached=False), new_kv)


def sorted_out_cache_loc(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    """Rows right, but out_cache_loc sorted: new K/V land in another token's slot."""
    return _store(kv_pool, _slots(req_to_token_pool, allocator, batch).sort().values, new_kv)


def every_request_takes_the_first_rows(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    """Stores new_kv[:n] for every request: the batch's rows of new_kv are not cut request by request."""
    locs = [_slots(req_to_token_pool, allocator, [req]) for req in batch]
    for slots, (_, _, n) in zip(locs, batch):
        _store(kv_pool, slots, [(k[:n], v[:n]) for k, v in new_kv])
    return torch.cat(locs)


def returns_a_list(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    return solution(req_to_token_pool, allocator, kv_pool, batch, new_kv).tolist()


def test_reference_passes_with_full_score():
    result = check_write_new_kv(solution, record=False)
    assert result.passed and repr(result).startswith("✅ Exercise 07.2 (the write side): passed."), repr(result)


@pytest.mark.parametrize("seed", [1, 7, 12345])
def test_reference_passes_on_the_graders_seeds_and_visible_cases_change(seed):
    assert spec.check_exercise(SPEC, solution, seed=seed, record=False).passed
    assert [c.args for c in cases(seed) if c.part == "main"] != [c.args for c in cases(0) if c.part == "main"]


def test_registered_and_plain_data_for_the_grader():
    assert all_specs()["07.2"] is SPEC and SPEC.function == "write_new_kv"
    for case in cases(0):
        json.dumps(SPEC.drive(solution, case.args))


def test_blank_is_not_done_yet():
    result = check_write_new_kv(blank, record=False)
    assert not result.passed and "not done yet" in repr(result) and "07.2" in repr(result)


@pytest.mark.parametrize("wrong, says", [
    (forgets_the_row, "record each request's new slots in its row"),
    (row_from_position_zero, "cached prefix"),
    (first_layer_only, "every layer has its own"),
    (k_as_v, "holds K"),
    (one_alloc_for_the_batch, "last page still had room"),
    (no_last_loc, "alloc_extend"),
    (sorted_out_cache_loc, "batch order"),
    (every_request_takes_the_first_rows, "set_kv_buffer"),
    (returns_a_list, "1-D tensor"),
])
def test_each_plausible_wrong_answer_fails_and_says_why(wrong, says):
    result = check_write_new_kv(wrong, record=False)
    assert not result.passed
    assert says in repr(result), repr(result)


def test_pages_only_wrong_answers_pass_the_page_1_cases():
    """one_alloc_for_the_batch and no_last_loc are right without pages: the page cases are what catch them."""
    for wrong in (one_alloc_for_the_batch, no_last_loc):
        result = check_write_new_kv(wrong, record=False)
        assert [o.passed for o in result.outcomes][:3] == [True, True, True]


def test_scenario_has_a_cached_prefix_a_shared_one_and_scrambled_pages():
    rows, alloc, pool, batch, new_kv = build(cases(0)[1].args)
    assert torch.equal(rows.req_to_token[1, :4], rows.req_to_token[0, :4])
    assert alloc.free_pages != sorted(alloc.free_pages)
    assert len(new_kv) == 2 and new_kv[0][0].shape[0] == sum(n for *_, n in batch)


def test_handing_in_the_instructors_answer_fails():
    from radixlab.course.answers_kvwrite import reference_write_new_kv
    assert "write your own" in repr(check_write_new_kv(reference_write_new_kv, record=False))


def test_reference_and_the_tests_solution_agree():
    from radixlab.course.answers_kvwrite import reference_write_new_kv
    for case in cases(3):
        assert SPEC.drive(reference_write_new_kv, case.args) == SPEC.drive(solution, case.args)

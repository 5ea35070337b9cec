"""Exercise 07.1: the check passes the solution, says "not done yet" to the blank, fails each wrong answer."""

from __future__ import annotations

import pytest
import torch

import json

from radixlab.course import spec
from radixlab.course.answers_kvpool import reference_gather_kv
from radixlab.course.ex_kvpool import SPEC, build_scenario, check_gather_kv, extend_with, gather_cases
from radixlab.course.exercises import all_specs
from radixlab.model.layers import gather_kv as model_gather_kv


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def solution(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    slots = req_to_token[req_pool_idx, :seq_len]
    return k_buffer[slots], v_buffer[slots]


def blank(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    raise NotImplementedError()


def slot_as_position(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    return k_buffer[:seq_len], v_buffer[:seq_len]


def forgets_the_prefix(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    """Reads only the newest token, as if the pool held nothing older."""
    slots = req_to_token[req_pool_idx, seq_len - 1:seq_len]
    return k_buffer[slots], v_buffer[slots]


def zeros_for_the_prefix(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    """Right shape, but only the request's own (non-shared) pages filled in."""
    k, v = solution(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len)
    shared = {int(s) for r in range(req_to_token.shape[0]) if r != req_pool_idx for s in req_to_token[r]}
    own = torch.tensor([int(s) not in shared for s in req_to_token[req_pool_idx, :seq_len]])
    return k * own[:, None, None], v * own[:, None, None]


def one_short(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    return solution(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len - 1)


def one_long(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    return solution(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len + 1)


def shifted_by_one(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    slots = req_to_token[req_pool_idx, 1:seq_len + 1]
    return k_buffer[slots], v_buffer[slots]


def whole_row(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    return k_buffer[req_to_token[req_pool_idx]], v_buffer[req_to_token[req_pool_idx]]


def always_row_zero(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    return solution(req_to_token, k_buffer, v_buffer, 0, seq_len)


def sorted_slots(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    slots = req_to_token[req_pool_idx, :seq_len].sort().values
    return k_buffer[slots], v_buffer[slots]


def k_twice(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    k, _ = solution(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len)
    return k, k


def heads_first(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    k, v = solution(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len)
    return k.transpose(0, 1), v.transpose(0, 1)


def writes_the_row(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    out = solution(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len)
    req_to_token[req_pool_idx, :seq_len] = 0
    return out


def nonzero_entries(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
    """Ignores seq_len: takes every filled slot of the row (slot 0 is never handed out here)."""
    row = req_to_token[req_pool_idx]
    slots = row[row != 0]
    return k_buffer[slots], v_buffer[slots]


def test_solution_passes_with_full_score():
    result = check_gather_kv(solution, record=False)
    assert result.passed, repr(result)
    assert (result.score, result.max_score) == (3, 3)
    assert repr(result).startswith("✅ Exercise 07.1 (gather_kv): passed.")


def test_solution_passes_on_the_graders_fresh_seeds_and_wrong_answers_fail_there():
    for seed in (1, 2):
        assert spec.check_exercise(SPEC, solution, seed=seed, record=False).passed
        assert not spec.check_exercise(SPEC, sorted_slots, seed=seed, record=False).passed


def test_registered_and_plain_data_for_the_grader():
    assert all_specs()["07.1"] is SPEC and SPEC.function == "gather_kv" and SPEC.check == "check_gather_kv"
    for case in SPEC.cases(3):
        json.dumps(case.args)
    answer = SPEC.drive(solution, SPEC.cases(0)[1].args)
    assert json.loads(json.dumps(answer)) == answer  # what the executor sends back is plain JSON


def test_handing_in_radixlab_own_gather_fails():
    for own in (reference_gather_kv, model_gather_kv):
        result = check_gather_kv(own, record=False)
        assert result.score == 0 and "write your own" in repr(result), repr(result)


def test_blank_is_not_done_yet_and_recorded():
    n = len(spec.RESULTS)
    result = check_gather_kv(blank)
    assert result.not_done and not result.passed and result.score == 0
    assert "not done yet" in repr(result) and "07.1" in repr(result)
    assert spec.RESULTS[n:] == [result]
    spec.RESULTS[n:] = []


@pytest.mark.parametrize("wrong, hint", [
    (slot_as_position, "position 0"),
    (forgets_the_prefix, "has shape (1, 2, 16)"),
    (zeros_for_the_prefix, "a cached-prefix token, computed by another request"),
    (one_short, "expected (30, 2, 16)"),
    (one_long, "expected (30, 2, 16)"),
    (shifted_by_one, "position 0"),
    (whole_row, "has shape (64, 2, 16)"),
    (nonzero_entries, "expected (30, 2, 16)"),
    (always_row_zero, "request B"),
    (sorted_slots, "of position"),
    (k_twice, "V of position 0"),
    (heads_first, "has shape (2, 30, 16)"),
])
def test_each_plausible_wrong_answer_fails(wrong, hint):
    result = check_gather_kv(wrong, record=False)
    assert not result.passed and result.score < 3
    assert hint in repr(result), repr(result)
    # The mapping case sees it too, through the model's attention, unless the extra rows are ones
    # the causal mask hides anyway (reading past seq_len is wrong, but harmless there).
    assert result.outcomes[-1].passed == (wrong in (one_long, whole_row, nonzero_entries))


@pytest.mark.parametrize("seed", [0, 4242])
def test_reading_past_seq_len_fails_the_main_cases_too(seed):
    """A reused row holds stale slots past seq_len: an answer that ignores seq_len (the row's non-zero
    entries, the whole row) fails every gather case, not only the short ones (it scored 2.67/3)."""
    for wrong in (nonzero_entries, whole_row):
        result = spec.check_exercise(SPEC, wrong, seed=seed, record=False)
        failed = [o for o in result.outcomes if not o.passed]
        assert [o.part for o in result.outcomes[:2]] == ["main", "main"] and not result.outcomes[0].passed
        assert not result.outcomes[1].passed and len(failed) >= 6 and result.score <= 0.5, repr(result)
        assert "past seq_len" in repr(result)


def test_a_gather_that_writes_fails():
    result = check_gather_kv(writes_the_row, record=False)
    assert result.score == 0 and "a read must not write" in repr(result), repr(result)


def test_hidden_cases_need_the_blank_line():
    result = check_gather_kv(lambda *args: (torch.zeros(1), torch.zeros(1)), record=False)
    assert not any(o.passed for o in result.outcomes)


def test_nan_is_never_close_enough():
    """NaN > tolerance is False: a compare written that way passed a gather of all-NaN tensors."""
    def nan_gather(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len):
        shape = (seq_len, *k_buffer.shape[1:])
        return torch.full(shape, float("nan")), torch.full(shape, float("nan"))
    result = check_gather_kv(nan_gather, record=False)
    assert result.outcomes and not any(o.passed for o in result.outcomes)


def test_scenario_shares_a_prefix_in_scrambled_slots():
    s = build_scenario(4)
    a, b = s.rows["A"], s.rows["B"]
    assert b == 2 and s.prefix_len_b == 24
    assert torch.equal(s.req_to_token[a, :24], s.req_to_token[b, :24])       # B reads A's prefix slots
    assert not torch.equal(s.req_to_token[b, :len(s.tokens["B"])],
                           torch.arange(len(s.tokens["B"])))                 # slot != position
    assert s.tokens["B"][:24] == s.tokens["A"][:24]
    case = gather_cases(4)["B"]
    assert case.seq_len == len(s.tokens["B"]) and all(k.shape == (case.seq_len, 2, 16) for k in case.want_k)


def test_plugged_in_reference_extends_like_dense():
    got, want = extend_with(solution)
    assert (got - want).abs().max() < 1e-4
    for wrong in (slot_as_position, sorted_slots, forgets_the_prefix):
        got, want = extend_with(wrong)
        assert (got - want).abs().max() > 1e-2

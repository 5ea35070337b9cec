"""``python -m radixlab bench prefill``: runs small, prints both engines and ratios; its counts are exact."""

from __future__ import annotations

import re

import pytest
import torch

from radixlab.__main__ import main as cli
from radixlab.benchmarks.prefill import distinct_prefix_tokens, make_workload, percentile, run
from radixlab.model import load_model
from radixlab.tokenizer import ByteTokenizer


def test_small_run_prints_both_engines_and_ratios(capsys):
    threads = torch.get_num_threads()
    try:
        rc = cli(["bench", "prefill", "--requests", "6", "--system-tokens", "60", "--question-tokens", "10",
                  "--wave", "3", "--max-new-tokens", "2"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.startswith("prefill: tiny on cpu, 1 thread(s), 6 requests, 420 prompt tokens, 86% of each prompt shared")
    assert re.search(r"^no_cache\s+420\s+\d+\.\d ms\s+\d+\.\d ms\s+\d+\.\d\d s$", out, re.M)
    assert re.search(r"^radix\s+\d+\s+\d+\.\d ms", out, re.M)
    assert re.search(r"no cache / radix: prefill tokens \d+\.\d\d× \(best possible \d+\.\d\d×\), mean TTFT \d+\.\d\d×", out)
    assert "identical outputs: yes" in out


def test_counts_are_exact_and_reach_the_best_possible():
    model = load_model("tiny", device="cpu")
    r = run(model, num_requests=5, system_tokens=40, question_tokens=8, max_new_tokens=2, wave=2)
    assert r["identical_outputs"]
    assert r["no_cache"]["prefill_tokens"] == r["prompt_tokens"] == 5 * 48
    assert r["no_cache"]["cached_tokens"] == 0
    # Radix computes the first prompt in full, then each later one past the system prompt (and the
    # question prefix an earlier wave already cached): exactly the trie of all prompts.
    prompts = make_workload(model.tokenizer, 5, 40, 8)
    assert r["radix"]["prefill_tokens"] == distinct_prefix_tokens(prompts)
    assert r["radix"]["prefill_tokens"] + r["radix"]["cached_tokens"] == r["prompt_tokens"]


def test_workload_shape_and_helpers():
    prompts = make_workload(ByteTokenizer(), 4, 30, 6)
    assert all(len(p) == 36 and p[:30] == prompts[0][:30] for p in prompts)
    assert len({tuple(p) for p in prompts}) == 4
    assert distinct_prefix_tokens([[1, 2, 3], [1, 2, 4], [1, 2, 3]]) == 4 + 1
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5 and percentile([5.0], 99) == 5.0
    with pytest.raises(ValueError, match="system_tokens"):
        make_workload(ByteTokenizer(), 2, 0, 5)

"""``python -m radixlab bench serve``: a smoke run prints every table, writes JSON and a plot; ratios are
computed against the no-cache row of the same run; every configuration gives the same tokens."""

from __future__ import annotations

import json
import statistics
import re

from radixlab.__main__ import main as cli
from radixlab.benchmarks.serve import add_ratios, output_length_sweep, percentile, serve_once, targets
from radixlab.model import load_model
from radixlab.sim.workloads import generated_shared_prefix


def test_quick_run_prints_tables_and_writes_json_and_plot(tmp_path, capsys):
    js, png = tmp_path / "r.json", tmp_path / "r.png"
    assert cli(["bench", "serve", "--quick", "--no-progress", "--json", str(js), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    for workload in ("shared_system_prompt", "multi_turn_chat", "few_shot", "tree_of_thought", "random"):
        for cache in ("no-cache", "hash", "radix-p1", "radix-p16", "radix-lpm", "radix-lpm-sglang"):
            assert re.search(rf"^{workload}\s+{cache}\s+\d+\.\d%", out, re.M), (workload, cache)
    assert "same tokens from every cache: yes" in out
    assert re.search(r"^lpm\s+\d+\.\d%", out, re.M) and "targets:" in out
    record = json.loads(js.read_text())
    assert record["caches"]["shared_system_prompt"]["no-cache"]["prefill_ratio"] == 1.0
    assert png.stat().st_size > 10_000
    assert len(targets(record)) == 3


def test_ratios_and_percentile():
    rows = {"no-cache": dict(prefill_tokens=100, ttft_mean=2.0, throughput=10.0, outputs=[[1]]),
            "radix": dict(prefill_tokens=20, ttft_mean=0.5, throughput=15.0, outputs=[[1]])}
    add_ratios(rows)
    assert rows["radix"]["prefill_ratio"] == 5 and rows["radix"]["ttft_ratio"] == 4
    assert rows["radix"]["throughput_ratio"] == 1.5 and rows["radix"]["same_tokens"]
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([5], 99) == 5 and percentile(list(range(101)), 99) == 99


def test_serve_once_counts_hits_and_prefill():
    model = load_model("tiny")
    trace = generated_shared_prefix(num_groups=1, prompts_per_group=3, system_prompt_len=32, question_len=4,
                                    output_len=2, vocab=256, ordered=True)
    r = serve_once(model, trace, dict(max_total_tokens=512, max_running_requests=1))
    # one at a time: the 2nd and 3rd find the 32-token system prompt
    assert r["prefill_tokens"] == 36 + 2 * 4 and abs(r["hit_rate"] - 64 / 108) < 1e-9
    assert r["cache_ms_per_req"] > 0 and len(r["outputs"]) == 3


def test_repeats_reach_the_output_length_sweep(tmp_path, capsys):
    js = tmp_path / "r.json"
    assert cli(["bench", "serve", "--quick", "--no-progress", "--repeats", "2", "--json", str(js), "--plot", ""]) == 0
    out = capsys.readouterr().out
    assert "median of 2 runs" in out
    sweep = json.loads(js.read_text())["output_length_sweep"]
    assert [r["output_len"] for r in sweep] == [1, 4]
    for r in sweep:
        assert r["repeats"] == 2 and len(r["throughput_ratios"]) == 2
        assert r["throughput_ratio"] == statistics.median(r["throughput_ratios"]) and r["same_tokens"]


def test_output_length_sweep_reports_medians():
    model = load_model("tiny")
    trace = generated_shared_prefix(num_groups=1, prompts_per_group=2, system_prompt_len=32, question_len=4,
                                    output_len=1, vocab=256, ordered=True)
    rows = output_length_sweep(model, trace, (1, 2), kv_tokens=512, max_running=2, progress=False, repeats=3)
    assert [r["repeats"] for r in rows] == [3, 3]
    for r in rows:
        assert r["throughput_ratio"] == statistics.median(r["throughput_ratios"])
        assert r["prefill_ratio"] > 1 and r["same_tokens"]

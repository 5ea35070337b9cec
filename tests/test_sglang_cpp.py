"""SGLang 0.5.17's C++ radix tree, built once from the cached wheel, agrees with radixlab's tree.

The first run compiles it into the course cache (~1-2 minutes); every later run reuses that build.
Skipped, with the reason, when the wheel is not cached or no compiler or ninja is found.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from radixlab import sglang_cpp, sglang_ref
from radixlab.benchmarks import tree as bt
from radixlab.mem_cache import FastRadixCache
from radixlab.sim.workloads import ReferenceTreeWorkload


@pytest.fixture(scope="module")
def cpp():
    if sglang_ref.wheel_path() is None:
        pytest.skip(sglang_ref.missing_reason())
    if sglang_cpp.unavailable_reason(build=False) and sglang_cpp.toolchain_problem():
        pytest.skip(sglang_cpp.unavailable_reason(build=False) + f" ({sglang_cpp.toolchain_problem()})")
    try:
        sglang_cpp.load(build=True)  # builds only when the course cache holds no build for these sources
    except sglang_cpp.CppTreeUnavailable as exc:
        pytest.skip(str(exc))
    side = bt.sglang_cpp_side(build=False)
    assert type(side).__name__ == "Side", side
    return side


def test_the_build_is_reused_and_imported_from_the_course_cache(cpp):
    lib = sglang_cpp.load(build=False)  # no compiler needed once built
    assert lib.__file__.startswith(str(sglang_cpp.build_dir()))
    assert (sglang_cpp.build_dir() / "stamp").read_text() == sglang_cpp._stamp(sglang_cpp.source_dir())
    repo = Path(sglang_cpp.__file__).resolve().parents[1]
    assert not sglang_cpp.source_dir().resolve().is_relative_to(repo)  # SGLang's sources stay outside the repo


def test_cpp_tree_agrees_with_radixlab_on_matches_inserts_and_evict(cpp):
    wl = ReferenceTreeWorkload(4, 3, system_len=40, turn_len=12, seed=5)
    reqs = wl.requests()
    ours, theirs = FastRadixCache(), cpp.new()
    for i, toks in enumerate(reqs):
        value = torch.arange(i * len(toks), (i + 1) * len(toks))
        assert ours.insert(toks, value) == cpp.insert_native(theirs, cpp.native(toks), value)
    queries = [reqs[3], wl.system_hit(), wl.miss(), reqs[5][:45], reqs[7][:40] + [31_999] * 3, []]
    for q in queries:  # a full hit, a system-prompt hit, a miss, one that splits an edge, one past a prompt, empty
        a, b = ours.match_prefix(q), cpp.match_native(theirs, cpp.native(q))
        assert torch.equal(a.device_indices, b.device_indices), q[:5]
    assert len(cpp.match(theirs, cpp.key(reqs[5][:45])).device_indices) == 45  # the split edge now ends at 45
    cached = ours.total_size()
    assert theirs.total_size() == cached and theirs.evictable_size() == ours.evictable_size()
    assert cpp.evict_all(theirs) == cached and theirs.total_size() == 0


def test_a_small_bench_run_has_the_cpp_lane_and_its_record_round_trips(cpp, tmp_path):
    rec = bt.run(prompts=3, turns=2, ops=12, evict_reps=1, growth_sizes=(), growth_ops=5, use_sglang=False,
                 progress=False, timeit_number=2, threads=(1, 2), thread_calls=10)
    assert bt.CPP in rec["env"]["sides"] and rec["env"]["cpp_skipped"] is None, rec["env"]["cpp_skipped"]
    assert rec["reference"]["agree"] and rec["native"]["agree"]
    assert bt.CPP in rec["reference"]["ops"]["full-hit match (list)"]
    assert set(rec["native"]["threads"]["scaling"]) >= {"fast full hit (list)", bt.CONTROL}
    probe = rec["native"]["gil_probe"]  # the binding holds the GIL for a whole call; hashlib lets go of it
    assert probe[f"{bt.CPP}: the binding alone, a list"]["ticks_inside"] == 0
    assert probe["control: hashlib.sha256 of 16 MiB"]["ticks_inside"] > 0
    path = tmp_path / "tree.json"
    assert bt.main(["--prompts", "2", "--turns", "2", "--ops", "4", "--evict-reps", "1", "--growth", "",
                    "--no-sglang", "--threads", "1,2", "--thread-calls", "4", "--json", str(path)]) == 0
    saved = bt.load_record(path)
    text = bt.format_record(saved)
    assert "SGLang's C++ tree by input form" in text and "fast/sglang-cpp" in text and "Threads:" in text


def test_without_a_toolchain_the_lane_is_skipped_saying_how_to_enable_it(monkeypatch, tmp_path):
    monkeypatch.setattr(sglang_cpp, "_LOADED", None)
    monkeypatch.setattr(sglang_cpp, "_CALLER", None)
    monkeypatch.setattr(sglang_cpp, "build_dir", lambda: tmp_path / "nothing-built-here")
    monkeypatch.setattr(sglang_cpp, "source_dir", lambda: tmp_path)  # empty sources: no wheel needed
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    reason = sglang_cpp.unavailable_reason(build=True)
    assert "no C++ compiler found" in reason and "pip install ninja" in reason and "fetch-sglang --cpp" in reason
    side = bt.sglang_cpp_side(build=True)
    assert isinstance(side, str) and "no C++ compiler found" in side
    assert "not built in" in sglang_cpp.unavailable_reason(build=False)

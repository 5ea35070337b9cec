"""bench tree: a small run holds every section, its sides agree, the saved record is complete."""

from __future__ import annotations

import pytest

from radixlab.benchmarks import tree as bt
from radixlab.benchmarks import tree_ops
from radixlab.mem_cache import RadixCache, RadixKey
from radixlab.sim.workloads import ReferenceTreeWorkload


def test_small_run_has_every_section_and_agrees():
    rec = bt.run(prompts=4, turns=3, ops=20, evict_reps=1, growth_sizes=(200,), growth_ops=10,
                 use_sglang=False, progress=False, timeit_number=2, use_cpp=False)
    assert rec["reference"]["agree"] and all(g["agree"] for g in rec["growth"])
    ops = rec["reference"]["ops"]
    for op in ("full-hit match (key)", "full-hit match (list)", "system-prompt hit (key)", "miss (list)",
               "mid-edge hit (split) (key)", "mid-edge hit (split) (list)", "insert (key)", "insert (list)", "build (key)", "evict all"):
        assert set(ops[op]) == {"fast", "readable"}, op
    assert rec["memory"][0]["packed_key_bytes_per_token"] == 8.0
    assert rec["memory"][0]["tree_bytes_per_token"] < rec["memory"][1]["tree_bytes_per_token"]  # tuples cost more
    packs = {bt.pack_floor(op) for op in ("full-hit match", "system-prompt hit", "miss", "mid-edge hit (split)", "insert")}
    assert bt.FLOOR_PACK in packs and len(packs) == 5  # each list op times its own packing, in its own loop
    assert bt.packing_us(rec["reference"]) == rec["reference"]["floors"][bt.FLOOR_PACK]["median_us"] > 0
    assert set(rec["reference"]["floors"]) == {bt.FLOOR_CAT, bt.FLOOR_MATCH, bt.FLOOR_BARE_MATCH, bt.FLOOR_BARE_WALK, bt.SKIPPED_COPY,
                                               bt.FLOOR_INSERT, bt.FLOOR_BARE_INSERT} | packs
    faults = rec["reference"]["faults_per_call"]
    assert set(faults) == set(ops) - {"build (key)", "build (list)", "evict all"} and all(f >= 0 for f in faults.values())
    us, measured, with_copy = bt.skipped_copy(rec, base="readable")
    assert us > 0 and with_copy > measured
    floors = bt.floor_ratios(rec, base="readable")  # SGLang's place when its wheel is cached
    assert set(floors) == {"full-hit match (key)", "full-hit match (key), C-level", "full-hit match (key), bare Python",
                           "full-hit match (key), no copy",
                           "insert (key), C-level", "insert (key), bare Python", "full-hit match (list)",
                           "system-prompt hit (list)", "miss (list)", "insert (list)"}
    assert all(us > 0 and ratio > 0 for us, ratio in floors.values())
    rows = {r["op"]: r for r in bt.standing(rec)}  # the fast tree against its floors (no SGLang side here)
    assert set(rows) == {op for op, _ in bt.STANDING} and all(r["vs"] == {} for r in rows.values())
    insert = rows["insert (key)"]
    assert insert["floor"] == "insert (key), bare Python" and insert["floor_us"] > 0
    assert insert["over_floor"] == pytest.approx(insert["us"] / insert["floor_us"])
    assert rows["miss (key)"]["floor"] is None and rows["miss (key)"]["over_floor"] is None
    assert rec["env"]["cpp_skipped"] == "left out (--no-cpp)" and "native" not in rec
    text = bt.format_record(rec)
    assert "fast/readable" in text and "Growing trees" in text and "same run: torch.cat" in text
    assert "Targets" not in text and "MISS" not in text and "<=0.3x" not in text  # issue 11's targets are retired
    assert "## SGLang's C++ tree: skipped. left out (--no-cpp)" in text


def test_floor_lanes_do_the_work_they_name_and_leave_the_tree_alone():
    wl = ReferenceTreeWorkload(3, 4, system_len=20, turn_len=10, seed=3)
    reqs = wl.requests()
    fast = bt.build(bt.radixlab_side("fast"), reqs)[0]
    before = fast.format()
    lanes = {name: args for name, fn, args in bt._insert_floor_lanes(wl, lambda: fast, 5, 30)}
    packed, edge, value, kept = lanes[bt.FLOOR_INSERT][0]
    tail, indices = bt._insert_c_work((packed, edge, value, kept))
    assert tail == packed[20 * 8:] and indices.tolist() == value[20:].tolist() and kept == [(tail, indices)]
    assert indices.untyped_storage().data_ptr() != value.untyped_storage().data_ptr()  # a private copy
    root, packed, value, scratch, kept = lanes[bt.FLOOR_BARE_INSERT][0]
    leaf = bt._bare_insert((root, packed, value, scratch, kept))
    assert len(leaf.key) == 10 and leaf.value.tolist() == value[20:].tolist() and leaf.parent.parent is root
    assert list(scratch.values()) == [leaf] and kept[-1] is leaf  # kept for good, as a tree keeps it
    assert fast.format() == before  # the leaf went to the lane's scratch dict, not into the tree
    with pytest.raises(AssertionError, match="cached edge"):
        bt._insert_c_work((b"\x01" * 8 + packed[8:], edge, value, []))
    with pytest.raises(AssertionError, match="new tail"):
        bt._bare_insert((root, RadixKey(reqs[0]).packed, value, {}, []))  # nothing new: not the insert the lane times
    cached = RadixKey(reqs[0]).packed
    hit = fast.match_prefix(reqs[0]).device_indices
    assert bt._bare_match((root, cached, True)).tolist() == hit.tolist()
    last = fast.match_prefix(reqs[0]).last_node
    assert bt._bare_match((root, cached, False)) is last.value  # no copy: a tensor the tree already holds
    system = root.children[cached[:8]]
    assert bt._match_c_work((cached, [(system.key.packed, 0)], [system.value])).tolist() == hit[:20].tolist()
    with pytest.raises(AssertionError, match="full hit"):
        bt._bare_match((root, cached[:-8] + b"\xff" * 8, True))
    with pytest.raises(AssertionError, match="whole path"):
        bt._match_c_work((cached, [(cached[8:16], 0)], [hit]))


def test_mid_edge_hits_split_an_edge_and_every_side_agrees():
    wl = ReferenceTreeWorkload(3, 4, system_len=20, turn_len=10, seed=2)
    reqs = wl.requests()
    fast, readable = (bt.build(bt.radixlab_side(m), reqs)[0] for m in ("fast", "readable"))
    before = fast.num_nodes()
    for _ in range(20):
        query, hit = wl.mid_edge_hit(reqs[wl.rng.randrange(len(reqs))])
        assert 20 < hit < 30 and len(query) == 30
        result = fast.match_prefix(query)
        assert len(result) == len(readable.match_prefix(query)) == hit
        depth, node = 0, result.last_node  # the match ends exactly at a node: the turn's edge was split there
        while node is not fast.root_node:
            depth, node = depth + len(node.key), node.parent
        assert depth == hit
    assert fast.num_nodes() > before
    assert fast.format() == readable.format()  # same splits, same tree
    with pytest.raises(ValueError, match="turn_len"):
        ReferenceTreeWorkload(2, 2, system_len=5, turn_len=1).mid_edge_hit([0] * 6)
    short = ReferenceTreeWorkload(2, 2, system_len=5, turn_len=1)  # no mid-edge row, the rest still runs
    assert "mid-edge hit (split) (key)" not in bt.op_table([bt.radixlab_side("fast")], short, short.requests(), 3)["ops"]
    rec = bt.op_table([bt.radixlab_side("fast"), bt.radixlab_side("readable")], wl, reqs, ops=6)
    assert rec["agree"] and "mid-edge hit (split) (key)" in rec["ops"]


def test_reference_workload_shape():
    wl = ReferenceTreeWorkload(5, 4, system_len=30, turn_len=10, seed=1)
    reqs = wl.requests()
    sides = [bt.radixlab_side("fast")]
    cache, _ = bt.build(sides[0], reqs)
    assert cache.num_nodes() == 5 * (1 + 4) and len(reqs) == 20
    assert len(cache.match_prefix(wl.system_hit())) == 30 and len(cache.match_prefix(wl.miss())) == 0
    with pytest.raises(ValueError, match="num_prompts"):
        ReferenceTreeWorkload(0)


def test_saved_record_is_complete():
    rec = bt.load_record()
    assert rec["reference"]["agree"] and rec["reference"]["nodes"] == 5100
    text = bt.format_record(rec)  # a record saved before the C++ lane existed still prints
    assert "## The fast tree against its floors" in text and "Targets" not in text
    assert {"fast", "readable"} <= set(rec["env"]["sides"])
    assert max(g["nodes"] for g in rec["growth"]) >= 100_000  # the record is saved with --big
    assert rec["yardstick"]["bytes_eq_ns"] > 0


def test_bottleneck_rate():
    assert bt.bottleneck_rate(10.0) == pytest.approx(100_000)
    with pytest.raises(ValueError, match="tree_us_per_request"):
        bt.bottleneck_rate(0)


def test_cli_rejects_bad_sizes(capsys):
    with pytest.raises(SystemExit):
        bt.main(["--ops", "0"])
    assert "--ops" in capsys.readouterr().err


def test_engine_cache_share_counts_outermost_calls_and_lpm_matches_more():
    """The engine share counts each outermost tree call once, deterministically; lpm's scheduler matches
    every waiting request at every step, so it calls match_prefix more often than fcfs on the same trace."""
    from radixlab.model import load_model
    from radixlab.sim.workloads import generated_shared_prefix

    model = load_model("tiny", device="cpu")
    trace = generated_shared_prefix(num_groups=2, prompts_per_group=4, system_prompt_len=64, question_len=16,
                                    output_len=4, vocab=256, seed=0)
    runs = {p: [bt.engine_cache_share(trace, model, schedule_policy=p, max_running_requests=4) for _ in range(2)]
            for p in ("fcfs", "lpm")}
    for p, (a, b) in runs.items():
        assert a["calls_by_method"] == b["calls_by_method"], p  # counts do not depend on timing
        assert a["tree_calls"] == sum(a["calls_by_method"].values())
        assert a["calls_by_method"]["cache_finished_req"] == len(trace)  # nested insert not counted again
        assert "insert" not in a["calls_by_method"]
        assert a["tree_us_per_request_median"] > 0
    assert runs["lpm"][0]["calls_by_method"]["match_prefix"] > runs["fcfs"][0]["calls_by_method"]["match_prefix"]


def test_by_key_length_keeps_the_shape_and_checks_hits():
    rows = bt.by_key_length([bt.radixlab_side("fast"), bt.radixlab_side("readable")], lengths=(12, 60), ops=5,
                            prompts=3, turns=2)
    assert [r["tokens"] for r in rows] == [12, 60] and all(r["agree"] for r in rows)
    assert set(rows[0]["median_us"]["full-hit match (list)"]) == {"fast", "readable"}
    with pytest.raises(ValueError, match="lengths"):
        bt.by_key_length([bt.radixlab_side("fast")], lengths=(1,))


def test_interleaved_keeps_only_the_results_in_flight_and_checks_every_call():
    import weakref

    class Result:
        pass

    made, seen = [], []

    def make(i):
        r = Result()
        made.append(weakref.ref(r))
        return r

    times, faults = bt.interleaved([("a", make, list(range(10))), ("b", make, list(range(10)))],
                                   check=lambda i, res: seen.append((i, sorted(res))), keep=3, warmup=3)
    assert len(times["a"]) == len(times["b"]) == 7 and faults >= 0  # the first 3 calls ran untimed
    assert len(bt.interleaved([("a", make, list(range(6)))], keep=3, warmup=3)[0]["a"]) == 6  # too few to drop any
    assert seen == [(i, ["a", "b"]) for i in range(10)]
    assert sum(ref() is not None for ref in made) == 0  # all freed once the loop returned
    alive = []
    bt.interleaved([("a", make, list(range(6)))], check=lambda i, res: alive.append(sum(r() is not None for r in made)),
                   keep=2)
    assert alive[-1] == 2  # during the loop, only the last `keep` results of the lane stay alive


def test_the_agreement_check_fails_on_a_side_that_answers_wrong():
    """op_table's inline checks: a wrong hit length, other slot indices or a wrong insert prefix each clear agree."""
    from radixlab.mem_cache import MatchResult

    wl = ReferenceTreeWorkload(3, 4, system_len=20, turn_len=10, seed=4)
    reqs = wl.requests()
    assert bt.op_table([bt.radixlab_side("fast"), bt.radixlab_side("readable")], wl, reqs, ops=6)["agree"]

    def liar(name, match=None, insert=None):
        side = bt.radixlab_side("readable")
        side.name = name
        if match:
            real = side.match
            side.match = lambda c, k: match(real(c, k))
        if insert:
            side.insert = lambda c, k, v: insert(c.insert(k, v))
        return side

    short = liar("short", match=lambda r: MatchResult(r.device_indices[:-1], r.last_node) if len(r) else r)
    shifted = liar("shifted", match=lambda r: MatchResult(r.device_indices + 1, r.last_node))
    off = liar("off", insert=lambda n: n + 1)
    for wrong in (short, shifted, off):
        assert not bt.op_table([bt.radixlab_side("fast"), wrong], wl, reqs, ops=6, forms=("key",))["agree"], wrong.name


def test_page_faults_are_counted_per_timed_call_after_the_warm_up(monkeypatch):
    """The fault count starts again after the warm-up and is divided by timed calls x lanes."""
    import types

    counter = {"n": 0}

    def fake_getrusage(who):
        counter["n"] += 1000  # every reading: a thousand more faults than the last
        return types.SimpleNamespace(ru_minflt=counter["n"])
    resource = pytest.importorskip("resource")  # Unix only; bench tree reads it lazily
    monkeypatch.setattr(resource, "getrusage", fake_getrusage)
    lanes = [("a", lambda x: x, list(range(10))), ("b", lambda x: x, list(range(10)))]
    _, faults = bt.interleaved(lanes, keep=2, warmup=3)  # readings: start, at call 3, end
    assert faults == pytest.approx(1000 / (7 * 2))
    _, faults = bt.interleaved(lanes[:1], keep=2, warmup=5)  # too few calls to drop any: start, at 0, end
    assert faults == pytest.approx(1000 / 10)


def test_the_skipped_copy_from_a_record_built_by_hand():
    def med(us):
        return {"median_us": us, "p90_us": us}
    rec = {"reference": {
        "ops": {"system-prompt hit (key)": {"fast": med(2), "sglang": med(10)}},
        "floors": {bt.SKIPPED_COPY: med(1)}}}
    assert bt.skipped_copy(rec) == pytest.approx((1, 0.2, 0.3))
    del rec["reference"]["floors"][bt.SKIPPED_COPY]
    assert bt.skipped_copy(rec) is None
    assert not hasattr(bt, "targets") and not hasattr(bt, "bytes_eq_target")  # issue 11's targets are retired


def test_floor_lanes_each_start_at_another_request():
    assert bt._rotated(list(range(8)), 7, 8) == [7, 0, 1, 2, 3, 4, 5, 6]
    assert bt._rotated(list(range(8)), 1) == [2, 3, 4, 5, 6, 7, 0, 1]
    with pytest.raises(ValueError, match="k must be in"):
        bt._rotated([1, 2], 4)  # a whole turn would put the lane back on the tree's own request
    wl = ReferenceTreeWorkload(4, 4, system_len=20, turn_len=10, seed=3)
    reqs = wl.requests()
    fast = bt.build(bt.radixlab_side("fast"), reqs)[0]
    qs = reqs[:8]
    lanes = bt._floor_lanes("full-hit match", "key", qs, lambda: fast, 30)
    firsts = {name: args[0] for name, _, args in lanes}
    packed = {bt.FLOOR_BARE_MATCH: firsts[bt.FLOOR_BARE_MATCH][1], bt.FLOOR_BARE_WALK: firsts[bt.FLOOR_BARE_WALK][1],
              bt.FLOOR_MATCH: firsts[bt.FLOOR_MATCH][0]}
    starts = [RadixKey(qs[0]).packed] + list(packed.values())
    assert len(set(starts)) == len(starts)  # at call 0, no two lanes read the same request's path


def test_floor_lanes_read_twins_never_the_timed_tree(monkeypatch):
    wl = ReferenceTreeWorkload(3, 4, system_len=20, turn_len=10, seed=4)
    reqs = wl.requests()
    built = []
    real_build = bt.build

    def spy(side, rs, native=False):
        cache, t = real_build(side, rs, native)
        built.append(cache)
        return cache, t
    monkeypatch.setattr(tree_ops, "build", spy)  # where op_table looks them up
    seen = []
    real_lanes = bt._floor_lanes

    def lanes_spy(*a):
        out = real_lanes(*a)
        seen.extend(out)
        return out
    monkeypatch.setattr(tree_ops, "_floor_lanes", lanes_spy)
    out = bt.op_table([bt.radixlab_side("fast")], wl, reqs, 6, forms=("key",))
    timed, twins = built[0], built[1:]
    assert len(twins) == 7 and all(t is not timed for t in twins)  # 4 full-hit lanes, 1 system-prompt, 2 insert
    roots = {id(args[0]) for name, _, lane in seen if name in (bt.FLOOR_BARE_MATCH, bt.FLOOR_BARE_WALK) for args in lane}
    assert id(timed.root_node) not in roots and len(roots) == 2  # each bare lane walks its own twin
    assert bt.FLOOR_BARE_WALK in out["floors"]
    built.clear()
    out = bt.op_table([bt.radixlab_side("fast")], wl, reqs, 6, forms=("key",), floors=False)
    assert len(built) == 1 and out["floors"] == {}


def test_path_memo_cost_counts_each_node_s_whole_path():
    cache = RadixCache()
    toks = list(range(1, 31))
    for k in (10, 20, 30):  # a chat of three turns of 10 tokens: a chain of three nodes
        cache.insert(toks[:k])
    cache.insert([99] * 5)  # and a separate one-edge request
    cost = bt.path_memo_cost(cache)
    assert cost["tokens"] == 35 and cost["nodes"] == 4
    assert cost["growth"] == pytest.approx((10 + 20 + 30 + 5) / 35)
    assert cost["memo_bytes_per_token"] == pytest.approx(8 * cost["growth"])
    with pytest.raises(ValueError, match="cache must hold"):
        bt.path_memo_cost(RadixCache())


def test_ladders_from_a_record_built_by_hand():
    def med(us):
        return {"median_us": us, "p90_us": us}
    rec = {"reference": {
        "ops": {"full-hit match (key)": {"fast": med(6), "sglang": med(20)}, "insert (key)": {"fast": med(8), "sglang": med(20)}},
        "floors": {bt.FLOOR_CAT: med(2), bt.FLOOR_MATCH: med(4), bt.FLOOR_BARE_MATCH: med(5), bt.FLOOR_BARE_WALK: med(3)}}}
    lines = bt.format_ladders(rec)
    assert lines[0] == "full-hit match (key): SGLang 20.0 µs" and len(lines) == 7  # the insert has no floors here
    assert "2.0 µs = 0.10x SGLang" in lines[1] and "5.0 µs = 0.25x SGLang" in lines[3]
    assert "6.0 µs = 0.30x SGLang" in lines[4] and "1.0 µs = 17% of it beyond the bare walk" in lines[4]
    assert lines[5].startswith("   no copy:") and "3.0 µs = 0.15x SGLang" in lines[5] and lines[6] == ""


def test_bench_tree_imports_and_times_without_resource(monkeypatch):
    """On Windows there is no ``resource`` module: bench tree still imports and times, faults read 0."""
    import builtins
    import importlib

    real_import = builtins.__import__

    def no_resource(name, *args, **kwargs):
        if name == "resource":
            raise ImportError("No module named 'resource'")
        return real_import(name, *args, **kwargs)

    import importlib.util

    # A private copy of the module (its own name, never in sys.modules): reloading the real one would give
    # it a new ``Side`` class that the modules which imported the old one no longer recognise.
    real = importlib.import_module("radixlab.benchmarks.tree_timing")
    spec = importlib.util.spec_from_file_location("radixlab.benchmarks._tree_timing_no_resource", real.__file__)
    timing = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(builtins, "__import__", no_resource)
    spec.loader.exec_module(timing)
    assert timing.minor_faults() == 0
    _, faults = timing.interleaved([("a", lambda x: x, list(range(4)))], keep=1, warmup=0)
    assert faults == 0
    monkeypatch.undo()


def _med(us):
    return {"median_us": us, "p90_us": us}


def test_standing_reads_the_fast_tree_against_its_floors_and_both_sglang_trees():
    rec = {"env": {"sides": ["fast", "sglang", bt.CPP]}, "reference": {
        "ops": {"full-hit match (key)": {"fast": _med(4), "sglang": _med(10), bt.CPP: _med(16)},
                "insert (key)": {"fast": _med(9), "sglang": _med(20)},
                "miss (list)": {"fast": _med(1)}},
        "floors": {bt.FLOOR_BARE_MATCH: _med(2)}}}
    rows = {r["op"]: r for r in bt.standing(rec)}
    assert set(rows) == {"full-hit match (key)", "insert (key)"}  # miss (list) is not read
    full = rows["full-hit match (key)"]
    assert full["vs"] == {"sglang": pytest.approx(0.4), bt.CPP: pytest.approx(0.25)}
    assert full["floor_us"] == 2 and full["over_floor"] == pytest.approx(2.0)
    assert rows["insert (key)"]["vs"] == {"sglang": pytest.approx(0.45)} and rows["insert (key)"]["floor"] is None
    lines = bt.format_standing(list(rows.values()))
    assert "0.40x" in lines[1] and "0.25x" in lines[1] and "the call 2.00x that" in lines[1]
    assert lines[2].split()[-1] == "-"  # no C++ figure for the insert


def _native_record():
    forms = {"full-hit match": {"fast: key built": _med(2), "sglang-cpp: the binding alone, a list": _med(10)}}
    threads = {"threads": [1, 2], "calls_per_thread": 5, "rate_per_s": {"x": [100.0, 110.0]},
               "scaling": {"x": [1.0, 1.1]}}
    return {"env": {"cpp_skipped": None}, "native": {"ops": forms, "agree": True, "threads": threads}}


def test_format_native_prints_the_lane_or_why_it_was_skipped():
    lines = bt.format_native(_native_record())
    text = "\n".join(lines)
    assert "10.0 /   10.0 us   5.00x" in text and "| 1.00x | 1.10x | 100 |" in text
    assert "results agree across lanes: True" in text
    skipped = bt.format_native({"env": {"cpp_skipped": "no C++ compiler found; install g++"}})
    assert skipped == ["", "## SGLang's C++ tree: skipped. no C++ compiler found; install g++"]
    assert bt.format_native({"env": {}}) == []  # a record saved before the lane existed


def test_thread_scaling_counts_calls_per_second_per_thread_count():
    seen = []
    out = bt.thread_scaling({"noop": (seen.append, lambda k: list(range(k)))}, threads=(1, 3), calls=20, reps=2)
    assert out["threads"] == [1, 3] and len(seen) == 2 * (1 + 3) * 20  # every thread made all its calls
    assert out["scaling"]["noop"][0] == 1.0 and len(out["rate_per_s"]["noop"]) == 2
    assert all(r > 0 for r in out["rate_per_s"]["noop"])


def test_cli_rejects_bad_thread_counts(capsys):
    for bad in ("0", "a,b", ""):
        with pytest.raises(SystemExit):
            bt.main(["--threads", bad])
        assert "--threads" in capsys.readouterr().err


def test_gil_probe_sees_no_stamps_in_a_call_that_holds_the_gil_and_many_in_one_that_releases_it():
    import hashlib
    import random

    data = list(range(400_000))
    random.Random(0).shuffle(data)
    held = bt.gil_probe(lambda: sorted(data), reps=2)  # a C loop that never lets go of the GIL
    blob = bytes(16 * 1024 * 1024)
    released = bt.gil_probe(lambda: hashlib.sha256(blob).digest(), reps=2)  # hashlib releases it
    assert held["ticks_inside"] == 0 and held["call_ms"] > 0
    assert released["ticks_inside"] > 0


def test_format_native_prints_the_gil_probe():
    rec = _native_record()
    rec["native"]["gil_probe"] = {"sglang-cpp: the binding alone, a list": {"call_ms": 2.0, "ticks_inside": 0}}
    text = "\n".join(bt.format_native(rec))
    assert "clock stamps during one long call" in text and "2.0 ms,         0 stamps" in text

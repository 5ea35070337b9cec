"""Notebook 07's experiments as functions: adapter namespaces, half-page sharing, the page-size
trade-off and the index-flow picture, checked against what they must show."""

from __future__ import annotations

import pytest

from radixlab.benchmarks.prefill import make_workload
from radixlab.engine import Engine
from radixlab.engine.studies import (adapter_namespace_demo, dense_greedy, half_page_demo, logit_error,
                                     page_size_tradeoff)
from radixlab.model import load_model
from radixlab.viz.kvpool import index_flow, plot_page_tradeoff

from engine_helpers import one_thread

_one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


@pytest.fixture(scope="module")
def tiny():
    model = load_model("tiny", device="cpu")
    model.add_adapter("A", seed=1, scale=2.0)
    model.add_adapter("B", seed=2, scale=2.0)
    return model


def test_dense_reference_and_logit_error(tiny):
    prompt = list(b"reference")
    e = Engine(tiny, keep_logits=True)
    out = e.generate(prompt, {"max_new_tokens": 5})
    assert out["output_ids"] == dense_greedy(tiny, prompt, 5)
    assert logit_error(tiny, prompt, out) < 1e-4
    out["meta_info"]["output_logits"][2] = out["meta_info"]["output_logits"][2] + 0.5
    assert logit_error(tiny, prompt, out) == pytest.approx(0.5, abs=1e-3)


def test_adapter_demo(tiny):
    safe, unsafe = adapter_namespace_demo(tiny, list(b"a prompt served under two adapters"), 6)
    assert safe["adapter_in_namespace"] and safe["cached_tokens"] == 0 and safe["namespaces"] == [("", "A"), ("", "B")]
    assert safe["output_ids"] == safe["reference_ids"] and safe["logit_error"] < 1e-4
    assert unsafe["cached_tokens"] > 0 and unsafe["namespaces"] == [None]
    assert unsafe["logit_error"] > 1.0 and unsafe["output_ids"] != unsafe["reference_ids"]


def test_half_page_demo(tiny):
    safe, unsafe = half_page_demo(tiny, list(b"Hello!"), list(b"HelloXYZ"), page_size=4)
    assert safe["b_cached_tokens"] == 4 and safe["a_ok"] and safe["b_ok"]
    assert max(safe["error_a"], safe["error_b"]) < 1e-4
    assert not set(safe["rows"]["A"][4:]) & set(safe["rows"]["B"][4:])  # no half page shared
    assert unsafe["b_cached_tokens"] == 5 and unsafe["error_a"] > 1.0 and not unsafe["a_ok"]
    assert unsafe["rows"]["B"][5:8] == unsafe["rows"]["A"][5:8]  # B wrote into A's slots


def test_page_size_tradeoff_trends(tiny):
    prompts = make_workload(tiny.tokenizer, 6, 40, 10)
    rows = page_size_tradeoff(tiny, prompts, [1, 4, 16, 64], max_new_tokens=4)
    assert [r["page_size"] for r in rows] == [1, 4, 16, 64]
    assert rows[0]["fragmentation"] == 0  # page 1: no slot is ever wasted
    assert rows[0]["reusable_prefix_tokens"] >= 5 * 40  # every later request reuses the system prompt
    assert rows[-1]["reusable_prefix_tokens"] == 0  # 64-token pages: the 41-token shared prefix is no page
    frag = [r["fragmentation"] for r in rows]
    entries = [r["page_table_entries"] for r in rows]
    assert frag == sorted(frag) and entries == sorted(entries, reverse=True)
    fig = plot_page_tradeoff(rows)
    assert len(fig.axes) == 3


def test_index_flow_from_live_objects(tiny):
    e = Engine(tiny)
    e.generate("Be brief. Hi?", {"max_new_tokens": 2})
    a, b = e.add_requests(["Be brief. Who?", "Be brief. Tell me."], {"max_new_tokens": 3})
    with pytest.raises(ValueError, match="no row"):
        index_flow(e, {"A": a})
    e.step(), e.step()  # prefill both, then one decode step
    d = index_flow(e, {"A": a, "B": b})
    rows = {n: e.req_to_token_pool.req_to_token[r.req_pool_idx, :r.seq_len].tolist() for n, r in (("A", a), ("B", b))}
    assert rows["A"][:10] == rows["B"][:10]  # the system prompt: the same slots in both rows
    assert "node #" in d.text and "'Be brief. '" in d.text and "(its own)" in d.text
    assert f"{len(set(rows['A']) | set(rows['B']))} distinct slots hold the {a.seq_len + b.seq_len} row entries" in d.text
    assert "kv:s0:w" in d.dot_source
    shared = a.last_node.parent  # the system prompt's node: the parent of A's and of B's own node
    assert shared is b.last_node.parent and f"n{shared.id} -> n{a.last_node.id};" in d.dot_source  # tree edges drawn
    assert "(shared)" not in d.dot_source  # the legend does not call every tree node shared

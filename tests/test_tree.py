"""The teaching tree keeps the seed's semantics exactly (adv05): refs, splits, matches."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.tree import PlainTrie, RadixNode, RadixTree

A, B = ["sys", "prompt", "A"], ["sys", "prompt", "B"]


def test_seed_requests_a_and_b():
    t = RadixTree()
    t.insert(A, "KV_A")
    assert t.match_prefix(B) == (0, None)  # diverges inside the edge: no hit
    t.insert(B, "KV_B")
    shared = t.find(["sys", "prompt"])
    assert (shared.key, shared.ref, shared.value) == (["sys", "prompt"], 2, None)
    assert sorted(shared.children) == ["A", "B"]
    assert shared.children["A"].key == ["A"] and shared.children["A"].value == "KV_A"
    assert shared.children["B"].ref == 1
    assert t.match_prefix(A) == (3, "KV_A") and t.match_prefix(B) == (3, "KV_B")
    assert t.match_prefix(["sys", "prompt", "C"]) == (0, None)  # internal node holds no value
    assert t.format() == (
        "root\n"
        "└─ key=['sys', 'prompt']  ref=2  value=None\n"
        "   └─ key=['A']  ref=1  value=<kv>\n"
        "   └─ key=['B']  ref=1  value=<kv>")


def test_split_inherits_value_children_and_ref():
    below = RadixNode(["x"], "v", ref=1)
    node = RadixNode([1, 2, 3], "KV", {"x": below}, ref=4)
    suffix = RadixTree()._split(node, 1)
    assert node.key == [1] and node.value is None and node.children == {2: suffix}
    assert suffix.key == [2, 3] and suffix.value == "KV" and suffix.ref == 4 and suffix.children == {"x": below}


@pytest.mark.parametrize("idx", [0, 3, -1])
def test_split_rejects_index_outside_edge(idx):
    node = RadixNode([1, 2, 3], "KV", ref=1)
    with pytest.raises(ValueError, match="idx"):
        RadixTree()._split(node, idx)
    assert node.key == [1, 2, 3] and node.value == "KV"


def test_insert_that_ends_on_a_split_point_holds_the_value():
    t = RadixTree()
    t.insert([1, 2, 3], "long")
    t.insert([1, 2], "short")
    assert t.find([1, 2]).value == "short" and t.find([1, 2]).ref == 2
    assert t.match_prefix([1, 2, 9]) == (2, "short")
    assert t.root.value is None


def test_bad_input():
    t = RadixTree()
    with pytest.raises(ValueError, match="tokens"):
        t.insert([], "v")
    with pytest.raises(TypeError, match="tokens"):
        t.insert("abc", "v")
    with pytest.raises(TypeError, match="tokens"):
        t.insert([[1], [2]], "v")
    assert t.num_nodes() == 0


def test_plain_trie_counts_one_node_per_distinct_prefix():
    trie = PlainTrie()
    trie.insert([1, 2, 3])
    trie.insert([1, 2, 4])
    assert trie.num_nodes() == 4


tokens = st.lists(st.integers(0, 3), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(tokens, min_size=1, max_size=12), st.lists(st.lists(st.integers(0, 3), max_size=9), max_size=6))
def test_matches_brute_force(seqs, queries):
    """match = longest inserted sequence that prefixes the query; ref = inserts through the node."""
    t = RadixTree()
    last_value = {}
    for i, s in enumerate(seqs):
        t.insert(s, i)
        last_value[tuple(s)] = i
    for q in queries + seqs:
        best = max((len(s) for s in last_value if tuple(q[: len(s)]) == s), default=0)
        want = (best, last_value[tuple(q[:best])]) if best else (0, None)
        assert t.match_prefix(q) == want
    # ref counts, edge compression and child keys
    path_of = {}
    stack = [((), t.root)]
    while stack:
        path, node = stack.pop()
        for first, child in node.children.items():
            assert child.key and child.key[0] == first
            p = path + tuple(child.key)
            path_of[id(child)] = p
            assert child.ref == sum(1 for s in seqs if tuple(s[: len(p)]) == p)
            # compressed: a node with one child and no value would be mergeable... unless a split made it
            stack.append((p, child))
    assert t.num_nodes() <= 2 * len(set(map(tuple, seqs)))

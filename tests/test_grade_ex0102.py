"""Exercises 01.1, 01.2, 02.1 and 02.2 through the grader (issue 20): honest answers score full marks and the
check cell agrees, wrong answers lose points with the same message, forgeries through radixlab's own code score
nothing because the grader's copy lacks it. Modelled on tests/test_grade_sandbox.py."""

from __future__ import annotations

import textwrap

import pytest

from grade_helpers import assert_full_marks_and_parity, grade_cells, in_kernel
from radixlab.course import sandbox as sb
from radixlab.course.exercises import all_specs
from test_grade_sandbox import solution

boxed = pytest.mark.skipif(not sb.sandboxed(), reason=f"no bubblewrap here: {sb.sandbox_works()}")

_, MATCH = solution("match_prefix")
_, MATCH_SLOTS = solution("match_slots")
_, SPLIT = solution("split")
_, SPLIT_NODE = solution("split_node")
IMPORTS_01 = "from radixlab.tree import common_prefix_len"
IMPORTS_01_2 = "from radixlab.mem_cache import RadixKey, TreeNode"
IMPORTS_02 = "from radixlab import RadixCache, RadixKey, RadixNode, RadixTree"
IMPORTS_02_2 = "from radixlab import RadixCache, RadixKey\nfrom radixlab.mem_cache import TreeNode"

HONEST = {
    "01.1 the notebook's answer": ("01.1", [IMPORTS_01, MATCH]),
    "01.1 recursion, no helper": ("01.1", [textwrap.dedent("""
        def match_prefix(root, tokens, i=0, best=(0, None)):
            tokens = list(tokens)
            child = root.children.get(tokens[i]) if i < len(tokens) else None
            if child is None or tokens[i:i + len(child.key)] != child.key:
                return best
            i += len(child.key)
            return match_prefix(child, tokens, i, (i, child.value) if child.value is not None else best)
        """)]),
    "01.2 the notebook's answer": ("01.2", [IMPORTS_01_2, MATCH_SLOTS]),
    "01.2 token by token, a tensor returned": ("01.2", [textwrap.dedent("""
        import torch

        def match_slots(root, key, split):
            node, parts = root, []
            while len(key):
                child = node.children.get(key.child_key())
                if child is None:
                    break
                ids, edge = list(key.token_ids), list(child.key.token_ids)
                n = 0
                while n < min(len(ids), len(edge)) and ids[n] == edge[n]:
                    n += 1
                if n < len(edge):
                    child = split(child, n)
                    parts.append(child.value)
                    node = child
                    break
                parts.append(child.value)
                node, key = child, key[n:]
            return (torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)), node
        """)]),
    "02.1 the notebook's answer": ("02.1", [IMPORTS_02, SPLIT]),
    "02.2 the notebook's answer": ("02.2", [IMPORTS_02_2, SPLIT_NODE]),
    "02.2 narrow_copy and a helper": ("02.2", [IMPORTS_02_2, textwrap.dedent("""
        def halves(t, n):
            return t.narrow_copy(0, 0, n), t.narrow_copy(0, n, t.numel() - n)

        def split_node(cache, key, child, split_len):
            head, tail = halves(child.value, split_len)
            new = cache._new_node(child.key[:split_len], head, child.parent, child.priority)
            for field in ("lock_ref", "hit_count", "last_access_time"):
                setattr(new, field, getattr(child, field))
            child.parent.children[key.child_key(cache.page_size)] = new
            child.key, child.value, child.parent = child.key[split_len:], tail, new
            new.children = {child.key.child_key(cache.page_size): child}
            return new
        """)]),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_answers_score_full_marks_and_the_check_cell_agrees(name):
    exercise, cells = HONEST[name]
    assert_full_marks_and_parity(exercise, cells)


WRONG = {
    "01.1 partial edge": ("01.1", [IMPORTS_01, MATCH.replace(
        "        if j < len(child.key):            # the query ends or differs inside this edge: no boundary here\n"
        "            break\n", "")], "stopped inside an edge"),
    "01.2 no split": ("01.2", [IMPORTS_01_2, MATCH_SLOTS.replace(
        "            new_node = split(child, n)\n            return slots + new_node.value.tolist(), new_node",
        "            break")], "SGLang does not stop at the last boundary"),
    "02.1 ref not inherited": ("02.1", [IMPORTS_02, SPLIT.replace("    suffix_child.ref = node.ref\n", "")],
                               "inherits the node's ref"),
    "02.2 lock_ref not copied": ("02.2", [IMPORTS_02_2, SPLIT_NODE.replace(
        "    new_node.lock_ref = child.lock_ref", "    pass")], "copy the child's lock_ref"),
    "02.2 a view kept": ("02.2", [IMPORTS_02_2, SPLIT_NODE.replace(
        "child.value[:split_len].clone()", "child.value[:split_len]")], "a view of the old index tensor"),
    "02.2 priority not inherited": ("02.2", [IMPORTS_02_2, textwrap.dedent("""
        def split_node(cache, key, child, split_len):
            new = cache._new_node(child.key[:split_len], child.value.narrow_copy(0, 0, split_len), child.parent)
            for field in ("lock_ref", "hit_count", "last_access_time"):
                setattr(new, field, getattr(child, field))
            child.parent.children[key.child_key(cache.page_size)] = new
            child.key, child.value, child.parent = child.key[split_len:], child.value.narrow_copy(0, split_len, child.value.numel() - split_len), new
            new.children = {child.key.child_key(cache.page_size): child}
            return new
        """)], "inherits the child's priority"),
    "02.2 parent not re-pointed": ("02.2", [IMPORTS_02_2, SPLIT_NODE.replace(
        "    parent.children[key.child_key(cache.page_size)] = new_node\n", "")], "re-point the parent"),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_answers_lose_points_with_the_same_message_in_both(name):
    exercise, cells, says = WRONG[name]
    assert cells[1] != {"01.1": MATCH, "01.2": MATCH_SLOTS, "02.1": SPLIT, "02.2": SPLIT_NODE}[exercise]
    result, _ = grade_cells(exercise, cells)
    kernel = in_kernel(exercise, cells)
    assert not result.passed and result.score < 3 and says in repr(result), repr(result)
    assert [o.passed for o in kernel.outcomes] == [o.passed for o in result.outcomes]
    assert [o.message for o in kernel.outcomes] == [o.message for o in result.outcomes]


FORGERIES = {
    "01.2 RadixCache.match_prefix on the student's root": ("01.2", [textwrap.dedent("""
        from radixlab.mem_cache import RadixCache

        def match_slots(root, key, split):
            cache = RadixCache()
            cache.root_node = root
            m = cache.match_prefix(key)
            return m.device_indices.tolist(), m.last_node
        """)]),
    "01.2 the readable walk, _match_prefix_helper": ("01.2", [textwrap.dedent("""
        from radixlab.mem_cache.radix_cache import RadixCache

        def match_slots(root, key, split):
            cache = RadixCache()
            cache.root_node = root
            values, node = cache._match_prefix_helper(root, key)
            return [int(v) for t in values for v in t.tolist()], node
        """)]),
    "01.2 the fast walk": ("01.2", [textwrap.dedent("""
        from radixlab.mem_cache import FastRadixCache

        def match_slots(root, key, split):
            cache = FastRadixCache()
            cache.root_node = root
            values, node = cache._match_prefix_helper(root, key)
            return [int(v) for t in values for v in t.tolist()], node
        """)]),
    "01.2 the insert walk, through split's closure": ("01.2", [textwrap.dedent("""
        import torch

        def match_slots(root, key, split):
            cache = split.__closure__[0].cell_contents  # the drive's cache
            next_id = cache._next_id
            n, node = cache._insert_helper(root, key, torch.zeros(len(key), dtype=torch.int64))
            if n < len(key):  # it hung the rest of the query as a new leaf: take it off again
                leaf, node = node, node.parent
                cache._delete_leaf(leaf)
                cache._next_id = next_id + (cache._next_id - next_id - 1)
            slots, walk = [], node
            while walk.parent is not None:
                slots, walk = walk.value.tolist() + slots, walk.parent
            return slots, node
        """)]),
    "01.2 the insert, the cache found through gc": ("01.2", [textwrap.dedent("""
        import gc
        import torch

        def match_slots(root, key, split):
            cache = next(o for o in gc.get_objects() if type(o).__name__ == "RadixCache" and o.root_node is root)
            n, node = cache._insert(key, torch.zeros(len(key), dtype=torch.int64))
            if n < len(key):
                leaf, node = node, node.parent
                cache._delete_leaf(leaf)
                cache._next_id -= 1
            slots, walk = [], node
            while walk.parent is not None:
                slots, walk = walk.value.tolist() + slots, walk.parent
            return slots, node
        """)]),
    "02.2 RadixCache._split_node": ("02.2", [textwrap.dedent("""
        from radixlab.mem_cache.radix_cache import RadixCache

        def split_node(cache, key, child, split_len):
            return RadixCache._split_node(cache, key, child, split_len)
        """)]),
    "02.2 a fresh cache's split on the student's node": ("02.2", [textwrap.dedent("""
        from radixlab.mem_cache import RadixCache

        def split_node(cache, key, child, split_len):
            return RadixCache()._split_node(key, child, split_len)
        """)]),
    "02.2 the instructor's answer": ("02.2", [textwrap.dedent("""
        from radixlab.course import answers_tree

        def split_node(cache, key, child, split_len):
            return answers_tree.reference_split_node(cache, key, child, split_len)
        """)]),
    "02.1 the teaching tree's _split": ("02.1", [textwrap.dedent("""
        from radixlab.tree import RadixTree

        def split(node, idx):
            return RadixTree._split(None, node, idx)
        """)]),
}


@pytest.mark.parametrize("name", ["02.2 RadixCache._split_node", "02.1 the teaching tree's _split",
                                  "01.2 the insert walk, through split's closure",
                                  "01.2 the insert, the cache found through gc"])
def test_these_forgeries_are_real_ones_in_the_students_kernel(name):
    """With the whole of radixlab at hand they pass: only the stripped copy stops them in the grader."""
    exercise, cells = FORGERIES[name]
    spec = all_specs()[exercise]
    ns: dict = {}
    exec(cells[0], ns)
    from radixlab.course.spec import check_exercise
    from radixlab.course import spec as spec_module
    # the check cell refuses radixlab code the copy lacks: bypass that notice to see the forgery work
    real = spec_module._imported_reference
    spec_module._imported_reference = lambda s, f: ""
    try:
        assert check_exercise(spec, ns[spec.function], record=False, seed=7).passed
    finally:
        spec_module._imported_reference = real


@boxed
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forgery_scores_nothing_in_the_grader(name):
    exercise, cells = FORGERIES[name]
    result, run = grade_cells(exercise, cells)
    assert run.sandbox == "bubblewrap"
    assert result is None or result.score == 0, repr(result)


@pytest.mark.parametrize("exercise, target", [
    ("01.2", "radixlab.mem_cache.radix_cache:RadixCache._match_prefix_helper"),
    ("01.2", "radixlab.mem_cache.base_prefix_cache:BasePrefixCache.match_prefix"),
    ("01.2", "radixlab.mem_cache.radix_cache:RadixCache._insert_helper"),
    ("01.2", "radixlab.mem_cache.radix_cache:RadixCache.insert"),
    ("02.2", "radixlab.mem_cache.radix_cache:RadixCache._split_node"),
])
def test_the_reference_is_stripped_from_the_copy(exercise, target):
    assert target in all_specs()[exercise].all_stripped()


def test_01_2_s_check_cell_says_it_counts_in_no_total():
    result = in_kernel("01.2", [IMPORTS_01_2, MATCH_SLOTS])
    assert result.passed and "optional: counted in no total" in repr(result) and "mapping" not in repr(result)


def test_the_blank_student_edition_is_not_done_for_every_exercise_here(tmp_path):
    import json

    import nbformat

    from radixlab.course import grade
    from radixlab.course.edition import student_notebook

    paths = []
    for function in ("match_prefix", "split"):
        path, _ = solution(function)
        paths.append(tmp_path / path.name)
        nbformat.write(student_notebook(nbformat.read(path, as_version=4)), paths[-1])
    out = tmp_path / "g.json"
    grade.main([str(p) for p in paths] + ["--notebooks", str(path.parent), "--seed", "3", "--json", str(out)])
    seen = {e["exercise"]: e for r in json.loads(out.read_text())["reports"] for e in r["exercises"]}
    assert {"01.1", "01.2", "02.1", "02.2"} <= set(seen), seen
    for ex in ("01.1", "01.2", "02.1", "02.2"):
        assert seen[ex]["status"] == "not done" and seen[ex]["points"] == 0, seen[ex]


LEANING = {
    "a wrapper around the course's answer": ("01.1", """
        from radixlab.course import answers_match

        def match_prefix(root, tokens):
            return answers_match.reference_match_prefix(root, tokens)
        """, "radixlab.course"),
    "radixlab's match_prefix on a tree given the student's root": ("01.1", """
        from radixlab.tree import RadixTree

        def match_prefix(root, tokens):
            tree = RadixTree()
            tree.root = root
            return tree.match_prefix(tokens)
        """, "RadixTree.match_prefix"),
    "the teaching tree's _split, called on the class": ("02.1", FORGERIES["02.1 the teaching tree's _split"][1][0],
                                                         "RadixTree._split"),
}


@pytest.mark.parametrize("name", sorted(LEANING))
def test_the_check_cell_says_when_an_answer_leans_on_code_the_grader_lacks(name):
    """Such an answer passes with the whole of radixlab at hand and scores 0 in the grader: the check cell says so
    before the student hands it in, instead of showing a pass."""
    exercise, source, what = LEANING[name]
    kernel = in_kernel(exercise, [textwrap.dedent(source)])
    assert not kernel.passed and what in repr(kernel) and "grader's copy" in repr(kernel), repr(kernel)

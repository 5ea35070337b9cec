"""Tree drawings and step-through replays (pure functions; the widget is a thin wrapper)."""

import shutil

import pytest

from radixlab import RadixCache, RadixKey, RadixTree
from radixlab.tokenizer import encode, text_label
from radixlab.viz import draw_tree, match_path, replay, step_through
from radixlab.viz import trees as trees_mod

A, B = ["sys", "prompt", "A"], ["sys", "prompt", "B"]


def seed_tree():
    t = RadixTree()
    t.insert(A, "KV_A")
    t.insert(B, "KV_B")
    return t


def test_text_form_and_deterministic_dot():
    d1, d2 = draw_tree(seed_tree()), draw_tree(seed_tree())
    assert d1.text == ("root\n└─ key=['sys', 'prompt']  ref=2  value=None\n"
                       "   └─ key=['A']  ref=1  value=<kv>\n   └─ key=['B']  ref=1  value=<kv>")
    assert d1.dot_source == d2.dot_source
    assert "n1 [label=\"key=['sys', 'prompt']\\nref=2\\nvalue=None\"" in d1.dot_source
    assert "0x" not in repr(d1)


def test_long_edges_are_abbreviated():
    cache = RadixCache()
    cache.insert(list(range(1, 38)))
    text = draw_tree(cache).text
    assert "[1, 2, 3, 4, 5, 6, 7, … 37] (37 tok)" in text
    assert "lock_ref=0" in text


def test_text_label_for_byte_tokens():
    assert text_label(encode("hello world, long text"), max_chars=8) == "'hello w…' (22 tok)"


def test_highlight_and_split_marks():
    t = seed_tree()
    path = match_path(t, A)
    assert [n.key for n in path] == [["sys", "prompt"], ["A"]]
    text = draw_tree(t, highlight=path, split=path[1]).text
    assert "key=['A']  ref=1  value=<kv>  [path]  [created by split]" in text
    assert "key=['B']  ref=1  value=<kv>\n" not in text.split("[path]")[0]


def test_match_path_is_read_only_for_the_cache():
    cache = RadixCache()
    cache.insert([1, 2, 3])
    before = cache.format()
    assert len(match_path(cache, [1, 2, 9])) == 1
    assert cache.format() == before


def test_replay_marks_the_split_node_for_both_trees():
    steps = replay(RadixTree(), [("insert", A), ("insert", B), ("match", A)])
    assert [s.index for s in steps] == [0, 1, 2, 3]
    assert "key=['A']  ref=1  value=<kv>  [created by split]" in steps[2].drawing.text
    assert steps[3].result == "hit_len=3"
    cache = RadixCache()
    steps = replay(cache, [("insert", [1, 2, 3]), ("insert", RadixKey([1, 2, 4])), ("split", 2, 1), ("match", [1, 2])])
    assert "#2 [1, 2]  slots=[1, 2]  lock_ref=0  t=2  [path]  [created by split]" in steps[2].drawing.text
    assert "#3 [4]  slots=[4]  lock_ref=0  t=2  [path]" in steps[2].drawing.text  # an insert marks its path, as for RadixTree
    assert "[path]" not in steps[2].drawing.text.split("#3")[0].split("#2")[0]
    assert "#4" not in steps[2].drawing.text
    assert "#4 [1]  slots=[1]  lock_ref=0  t=2  [created by split]" in steps[3].drawing.text
    assert steps[4].result == "2 tokens cached"
    assert "_split_node" not in vars(cache)  # the spy is removed


def test_replay_validates_every_op_before_running_any():
    t = RadixTree()
    with pytest.raises(ValueError, match=r"ops\[1\]"):
        replay(t, [("insert", A), ("delete", A)])
    assert t.num_nodes() == 0
    for bad in [("match",), ("insert",), ("split", A), ("insert", A, "v", "extra")]:
        with pytest.raises(ValueError, match=r"ops\[1\]"):
            replay(t, [("insert", A), bad])
        assert t.num_nodes() == 0
    with pytest.raises(TypeError, match="tree"):
        replay([], [])


def test_svg_when_dot_is_installed_and_text_when_not(monkeypatch):
    drawing = draw_tree(seed_tree())
    if shutil.which("dot"):
        svg = drawing._repr_svg_()
        assert svg.lstrip().startswith("<?xml") and "sys" in svg
    monkeypatch.setattr(trees_mod, "has_dot", lambda: False)
    assert drawing._repr_svg_() is None
    assert repr(drawing).startswith("root")


def test_has_dot_without_dot_is_a_notice_not_an_error(monkeypatch, caplog):
    trees_mod.has_dot.cache_clear()
    monkeypatch.setattr(trees_mod.shutil, "which", lambda name: None)
    try:
        assert trees_mod.has_dot() is False
        assert "Graphviz 'dot' not found" in caplog.text
    finally:
        trees_mod.has_dot.cache_clear()


def test_step_through_builds_a_slider(capsys):
    pytest.importorskip("ipywidgets")
    assert step_through(RadixTree(), [("insert", A), ("insert", B)]) is None


def test_frame_slider_over_sequences_and_mappings():
    pytest.importorskip("ipywidgets")
    from radixlab.viz.widgets import frame_slider

    assert frame_slider(["a", "b"]) is None
    assert frame_slider({1: "one", 4: "four"}, "page_size", value=4) is None
    with pytest.raises(ValueError, match="frames"):
        frame_slider([])


def test_tags_and_legend_are_in_the_picture_not_only_in_the_text():
    """The SVG carries the same tags as the text form, and a key for every colour it uses."""
    steps = replay(RadixTree(), [("insert", A), ("insert", B), ("match", C := ["sys", "prompt", "C"])])
    plain, inserted, split = steps[0].drawing, steps[1].drawing, steps[2].drawing
    assert "legend" not in plain.dot_source  # nothing coloured, no key
    assert "[path]" in inserted.dot_source and trees_mod.LEGEND["path"] in inserted.dot_source
    assert trees_mod.LEGEND["split"] not in inserted.dot_source
    assert "[created by split]" in split.dot_source and trees_mod.LEGEND["split"] in split.dot_source
    for step in steps:  # every tag of the text form is in the dot source
        for tag in ("[path]", "[created by split]"):
            assert step.drawing.text.count(tag) == step.drawing.dot_source.count(f"\\n{tag}")
    if shutil.which("dot"):
        svg = split.svg()
        assert "created by split" in svg and "[path]" in svg and "walked" in svg


def test_hash_table_picture_has_the_parent_column_of_its_text():
    from radixlab.mem_cache import HashPrefixCache
    from radixlab.viz.hashtable import draw_hash_table

    c = HashPrefixCache(block_size=2)
    c.insert([1, 2, 3, 4])
    c.insert([1, 2, 5, 6])
    d = draw_hash_table(c)
    assert "parent=-" in d.text and d.text.count("parent=#0") == 2
    assert "<b>parent</b>" in d.dot_source
    assert d.dot_source.count("<td>#0</td>") == 2 and d.dot_source.count("<td>-</td>") == 1
    with pytest.raises(TypeError, match="cache must be a HashPrefixCache"):
        draw_hash_table(RadixCache())


def test_hash_table_picture_shows_its_caption_like_draw_tree():
    """Notebook 03 sets the table beside a tree drawing: both pictures carry their caption."""
    from radixlab.mem_cache import HashPrefixCache
    from radixlab.viz.hashtable import draw_hash_table

    c = HashPrefixCache(block_size=2)
    c.insert([1, 2, 3, 4])
    assert "graph [label=" not in draw_hash_table(c).dot_source
    d = draw_hash_table(c, caption='the "hash" cache')
    assert 'graph [label="the \\"hash\\" cache"' in d.dot_source
    assert str(d).startswith('the "hash" cache\n')


def test_page_table_svg_carries_the_verdict():
    """The ✗/✓ verdict of the text form is a row of the drawing too (notebook 04)."""
    from radixlab.viz.pages import page_table_view

    bad = page_table_view([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 9], 4, align=False)
    good = page_table_view([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 9], 4, align=True)
    assert "✗ B writes token 9 into page 1 slot 3" in bad.dot_source
    assert "✓ no slot of A is written by B" in good.dot_source


def test_page_size_view_gives_each_path_its_own_slots():
    """Slots are not token ids, and no slot appears in two nodes."""
    from radixlab.viz.pages import page_size_view

    view = page_size_view([([1, 2, 3, 4, 5, 6, 7, 8], "f"), ([1, 2, 3, 4, 5, 6, 10, 11], "f")], [1, 2, 3, 4, 5, 6, 7, 9], "f", 2)
    assert "slots=[100, 101, 102, 103, 104, 105]" in view.drawing.text and "slots=[206, 207]" in view.drawing.text

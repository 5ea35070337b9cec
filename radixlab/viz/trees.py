"""Tree drawings: graphviz pictures for people, a stable text form for nbval and for no-``dot`` machines.

``draw_tree`` works for both trees of the course (the teaching ``RadixTree`` of notebooks 01–02 and
the SGLang-style ``RadixCache`` of notebooks 03–05). It returns a ``TreeDrawing``: in Jupyter it
shows an SVG (when Graphviz's ``dot`` is installed) and its text form is the indented tree.
"""

from __future__ import annotations

import functools
import html
import logging
import shutil
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..mem_cache import RadixCache, TreeNode
from ..mem_cache.utils import abbreviate
from ..tree import RadixNode, RadixTree

log = logging.getLogger("radixlab")


@functools.lru_cache(maxsize=1)
def has_dot() -> bool:
    """Is Graphviz's ``dot`` on PATH? Without it radixlab draws trees as text (one notice, no error)."""
    found = shutil.which("dot") is not None
    if not found:
        log.warning("Graphviz 'dot' not found: trees are drawn as text. Install it with "
                    "'apt-get install graphviz' (Debian/Ubuntu), 'brew install graphviz' or "
                    "'conda install -c conda-forge graphviz'.")
    return found


@dataclass
class TreeDrawing:
    """A rendered tree: ``text`` (compared by nbval) and ``dot_source`` (an SVG for people)."""

    text: str
    dot_source: str
    caption: str = ""

    def __repr__(self) -> str:
        return (self.caption + "\n" if self.caption else "") + self.text

    def _repr_svg_(self) -> str | None:
        if not has_dot():
            return None
        return self.svg()

    def svg(self) -> str:
        return self.digraph_source().pipe(format="svg", encoding="utf-8")

    def digraph_source(self):
        """The drawing as a ``graphviz.Source`` (render it to a file with ``.render(...)``)."""
        import graphviz

        return graphviz.Source(self.dot_source)


# -- one generic view over both kinds of node -----------------------------------------------------


def _children(node: Any) -> list:
    return list(node.children.values())


def _walk(root: Any) -> Iterable[tuple[int, Any, Any]]:
    """Yield (depth, node, parent) depth first, children in insertion order."""
    stack = [(1, c, root) for c in reversed(_children(root))]
    while stack:
        depth, node, parent = stack.pop()
        yield depth, node, parent
        stack.extend((depth + 1, c, node) for c in reversed(_children(node)))


def _teaching_label(node: RadixNode, max_tokens: int, fmt: Callable[[list], str] | None) -> list[str]:
    key = fmt(node.key) if fmt else abbreviate(node.key, max_tokens)
    return [f"key={key}", f"ref={node.ref}",
            "value=None" if node.value is None else "value=<kv>"]


def _cache_label(node: TreeNode, max_tokens: int, fmt: Callable[[list], str] | None) -> list[str]:
    units = list(node.key.units)
    lines = [f"#{node.id} {fmt(units) if fmt else abbreviate(units, max_tokens)}"]
    if node.key.extra_key is not None:
        lines.append(f"extra_key={node.key.extra_key!r}")
    slots = "evicted" if node.value is None else abbreviate([int(v) for v in node.value.tolist()], max_tokens)
    lines.append(f"slots={slots}")
    lines.append(f"lock_ref={node.lock_ref}  t={node.last_access_time}")
    return lines


def draw_tree(tree: RadixTree | RadixCache, *, highlight: Iterable[Any] = (), split: Iterable[Any] | Any = (),
              caption: str = "", max_tokens: int = 8, fmt: Callable[[list], str] | None = None) -> TreeDrawing:
    """Draw ``tree``; ``highlight`` marks a path (e.g. what a match walked), ``split`` the node(s) a split made.

    ``fmt`` turns an edge's tokens into its label (default: the list, abbreviated after ``max_tokens``;
    ``radixlab.tokenizer.text_label`` shows byte tokens as text).
    """
    if isinstance(tree, RadixTree):
        root, label_fn = tree.root, _teaching_label
    elif isinstance(tree, RadixCache):
        root, label_fn = tree.root_node, _cache_label
    else:
        raise TypeError(f"tree must be a RadixTree or a RadixCache, got {type(tree).__name__}")
    hl = {id(n) for n in highlight}
    if isinstance(split, (RadixNode, TreeNode)):
        split = [split]
    sp = {id(n) for n in split}

    root_label = "root" if isinstance(tree, RadixTree) else f"root  (#tokens={tree.total_size()})"
    text_lines = [root_label]
    dot = ["digraph radix {", '  graph [rankdir=TB, nodesep=0.25, ranksep=0.35];',
           '  node [shape=box, style="rounded,filled", fillcolor="#f7f7f7", fontname="Helvetica", fontsize=11];',
           '  edge [color="#777777"];',
           f'  n0 [label="{html.escape(root_label)}", shape=ellipse, fillcolor="#e8e8e8"];']
    if caption:  # shown above the picture too, so a stack of replay steps stays readable
        dot.insert(2, f'  graph [label="{_dot_escape(caption)}", labelloc=t, labeljust=l, '
                      f'fontname="Helvetica", fontsize=12];')
    ids = {id(root): "n0"}
    for i, (depth, node, parent) in enumerate(_walk(root), 1):
        nid = f"n{i}"
        ids[id(node)] = nid
        lines = label_fn(node, max_tokens, fmt)
        marks = []
        if id(node) in hl:
            marks.append("[path]")
        if id(node) in sp:
            marks.append("[created by split]")
        text_lines.append("   " * (depth - 1) + "└─ " + "  ".join(lines + marks))
        fill = SPLIT_FILL if id(node) in sp else (PATH_FILL if id(node) in hl else "#f7f7f7")
        pen = f', color="{PATH_PEN}", penwidth=2' if id(node) in hl else ""
        label = "\\n".join(_dot_escape(l) for l in lines + marks)  # the tags are in the picture too
        dot.append(f'  {nid} [label="{label}", fillcolor="{fill}"{pen}];')
        edge_attr = f' [color="{PATH_PEN}", penwidth=2]' if id(node) in hl else ""
        dot.append(f"  {ids[id(parent)]} -> {nid}{edge_attr};")
    dot.extend(_legend(path=bool(hl & set(ids)), split=bool(sp & set(ids))))
    dot.append("}")
    return TreeDrawing("\n".join(text_lines), "\n".join(dot), caption)


PATH_FILL, PATH_PEN, SPLIT_FILL = "#ffe2b8", "#d9822b", "#cfe8ff"
LEGEND = {"path": "[path]: the nodes walked by this step (match or insert)",
          "split": "[created by split]: the new node a split made"}


def _legend(path: bool, split: bool) -> list[str]:
    """A small key beside the root, for the colours actually used in this drawing (none: no key)."""
    rows = []
    if path:
        rows.append(f'<tr><td bgcolor="{PATH_FILL}" color="{PATH_PEN}" width="18"> </td>'
                    f'<td align="left">{html.escape(LEGEND["path"])}</td></tr>')
    if split:
        rows.append(f'<tr><td bgcolor="{SPLIT_FILL}" width="18"> </td>'
                    f'<td align="left">{html.escape(LEGEND["split"])}</td></tr>')
    if not rows:
        return []
    return [f'  legend [shape=plaintext, style="", fontsize=10, label=<<table border="0" cellborder="1" '
            f'cellspacing="2" cellpadding="3">{"".join(rows)}</table>>];',
            "  { rank=same; n0; legend; }"]


def _dot_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def match_path(tree: RadixTree | RadixCache, tokens: Any) -> list:
    """Nodes a match of ``tokens`` walks through whole (read-only: never splits)."""
    from ..mem_cache import RadixKey
    from ..tree import common_prefix_len

    path = []
    if isinstance(tree, RadixTree):
        node, i, tokens = tree.root, 0, list(tokens)
        while i < len(tokens) and tokens[i] in node.children:
            child = node.children[tokens[i]]
            j = common_prefix_len(child.key, tokens[i:])
            path.append(child)
            if j < len(child.key):
                break
            i += j
            node = child
        return path
    key = tokens if isinstance(tokens, RadixKey) else RadixKey(tokens)
    key = key.page_aligned(tree.page_size)
    node = tree.root_node
    while len(key) and (child := node.children.get(key.child_key(tree.page_size))) is not None:
        n = child.key.match(key, tree.page_size)
        if n == 0:
            break
        path.append(child)
        if n < len(child.key):
            break
        node, key = child, key[n:]
    return path

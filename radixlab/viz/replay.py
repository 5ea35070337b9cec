"""Step-through replays: apply a list of operations to a tree and draw it after each one.

``replay`` is the pure, tested part: it returns one ``Step`` (caption, result and drawing) per
operation. ``step_through`` is the thin ipywidgets wrapper with a slider (notebooks 01, 02, 05).
Operations are tuples: ``("insert", tokens[, value])``, ``("match", tokens)`` and
``("split", where, idx)`` where ``where`` is a token path (RadixTree) or a node id (RadixCache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..mem_cache import RadixCache, RadixKey
from ..tree import RadixTree
from .widgets import frame_slider
from .trees import TreeDrawing, draw_tree, match_path

OPS = ("insert", "match", "split")


@dataclass
class Step:
    index: int
    op: tuple
    result: str
    drawing: TreeDrawing

    def __repr__(self) -> str:
        return repr(self.drawing)

    def _repr_svg_(self) -> str | None:
        return self.drawing._repr_svg_()


def _describe(op: tuple) -> str:
    name, arg = op[0], op[1]
    shown = list(arg.token_ids) if isinstance(arg, RadixKey) else arg
    extra = f", extra_key={arg.extra_key!r}" if isinstance(arg, RadixKey) and arg.extra_key is not None else ""
    if name == "split":
        return f"split({shown!r}, idx={op[2]})"
    return f"{name}({shown!r}{extra})"


def replay(tree: RadixTree | RadixCache, ops: Sequence[tuple], max_tokens: int = 8,
           fmt: Callable[[list], str] | None = None) -> list[Step]:
    """Apply ``ops`` to ``tree`` in order (mutating it); return the drawing after each step.

    Step 0 is the tree before any operation. Nodes created by a split are marked, and the path of a match or an
    insert is highlighted (for both trees).
    """
    if not isinstance(tree, (RadixTree, RadixCache)):
        raise TypeError(f"tree must be a RadixTree or a RadixCache, got {type(tree).__name__}")
    for i, op in enumerate(ops):  # validate all ops before changing anything
        if not isinstance(op, tuple) or not op or op[0] not in OPS:
            raise ValueError(f"ops[{i}] must be a tuple starting with one of {OPS}, got {op!r}")
        arity = {"insert": (2, 3), "match": (2,), "split": (3,)}[op[0]]
        if len(op) not in arity:
            shape = {"insert": "('insert', tokens[, value])", "match": "('match', tokens)",
                     "split": "('split', where, idx)"}[op[0]]
            raise ValueError(f"ops[{i}]: a {op[0]} is {shape}, got {op!r}")
    steps = [Step(0, ("start",), "", draw_tree(tree, caption="step 0: empty tree" if _empty(tree) else "step 0: start",
                                               max_tokens=max_tokens, fmt=fmt))]
    split_name = "_split" if isinstance(tree, RadixTree) else "_split_node"
    for i, op in enumerate(ops, 1):
        created: list = []
        original: Callable = getattr(tree, split_name)

        def spy(*args: Any, **kwargs: Any) -> Any:
            node = original(*args, **kwargs)
            created.append(node)
            return node

        setattr(tree, split_name, spy)
        try:
            result, highlight = _apply(tree, op)
        finally:
            delattr(tree, split_name)
        caption = f"step {i}: {_describe(op)}" + (f" → {result}" if result else "")
        steps.append(Step(i, op, result, draw_tree(tree, highlight=highlight, split=created,
                                                   caption=caption, max_tokens=max_tokens, fmt=fmt)))
    return steps


def _empty(tree: RadixTree | RadixCache) -> bool:
    root = tree.root if isinstance(tree, RadixTree) else tree.root_node
    return not root.children


def _apply(tree: RadixTree | RadixCache, op: tuple) -> tuple[str, list]:
    name = op[0]
    if name == "insert":
        if isinstance(tree, RadixTree):
            tree.insert(op[1], op[2] if len(op) > 2 else f"KV{list(op[1])}")
            return "", match_path(tree, op[1])
        prefix_len = tree.insert(op[1], op[2] if len(op) > 2 else None)
        return f"prefix_len={prefix_len}", match_path(tree, op[1])  # read-only: access times stay as insert left them
    if name == "match":
        if isinstance(tree, RadixTree):
            hit_len, _ = tree.match_prefix(op[1])
            return f"hit_len={hit_len}", match_path(tree, op[1])
        result = tree.match_prefix(op[1])
        path, node = [], result.last_node
        while node is not tree.root_node:
            path.append(node)
            node = node.parent
        return f"{len(result.device_indices)} tokens cached", path[::-1]
    # split
    if isinstance(tree, RadixTree):
        node = tree.find(op[1])
        tree._split(node, op[2])
        return "", []
    node = next((n for n in tree.nodes() if n.id == op[1]), None)
    if node is None:
        raise ValueError(f"no node with id {op[1]!r} in the cache")
    tree._split_node(node.key, node, op[2])
    return "", []


def step_through(tree: RadixTree | RadixCache, ops: Sequence[tuple], max_tokens: int = 8,
                 fmt: Callable[[list], str] | None = None) -> None:
    """A slider over ``replay(tree, ops)``: move it to see the tree after each operation."""
    frame_slider(replay(tree, ops, max_tokens, fmt))

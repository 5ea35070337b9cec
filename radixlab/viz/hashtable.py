"""The hash cache drawn as what it is: a flat table, one row per block (notebook 03_hash_vs_radix).

Set it beside ``draw_tree`` of a radix cache holding the same prompts: the tree shows where prompts
branch and how many share each part; the table only lists blocks.
"""

from __future__ import annotations

import html

from ..mem_cache import HashPrefixCache
from ..mem_cache.utils import abbreviate
from .trees import TreeDrawing, _dot_escape


def draw_hash_table(cache: HashPrefixCache, caption: str = "", max_tokens: int = 6) -> TreeDrawing:
    """A ``TreeDrawing`` of ``cache.table``: text rows for nbval, an HTML-like table for people.

    Both show the same columns, ``parent`` included: the pointer each block keeps to the block it
    extends (for the collision guard). It points up only; nothing points from a block to its children.
    """
    if not isinstance(cache, HashPrefixCache):
        raise TypeError(f"cache must be a HashPrefixCache, got {type(cache).__name__}")
    rows = ['<tr><td><b>#</b></td><td><b>chain hash</b></td><td><b>parent</b></td><td><b>block tokens</b></td>'
            '<td><b>ref</b></td></tr>']
    index = {id(b): i for i, b in enumerate(cache.table.values())}
    for i, b in enumerate(cache.table.values()):
        ns = f"  ns={b.extra_key!r}" if b.extra_key is not None else ""
        toks = html.escape(abbreviate(b.tokens, max_tokens) + ns)
        parent = "-" if b.parent is None else f"#{index[id(b.parent)]}"  # the same column as the text form
        rows.append(f'<tr><td>{i}</td><td>{b.hash & 0xFFFFFFFF:08x}…</td><td>{parent}</td>'
                    f'<td align="left">{toks}</td><td>{b.ref}</td></tr>')
    title = html.escape(f"prefix_cache: dict (hash → block), {len(cache.table)} entries")
    dot = ["digraph hashtable {", '  node [shape=plaintext, fontname="Helvetica", fontsize=11];',
           f'  t [label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="4">'
           f'<tr><td colspan="5" bgcolor="#e8e8e8">{title}</td></tr>{"".join(rows)}</table>>];', "}"]
    if caption:  # above the picture too, as draw_tree does, so the table and the tree set side by side read alike
        dot.insert(1, f'  graph [label="{_dot_escape(caption)}", labelloc=t, labeljust=l, '
                      f'fontname="Helvetica", fontsize=12];')
    return TreeDrawing(cache.format(max_tokens), "\n".join(dot), caption)

"""Page pictures for notebook 04_pages_and_namespaces: why a match is rounded down to whole pages.

* ``page_table_view`` lays two requests out in a paged KV pool: A is cached, B matched part of it.
  If B shared a half-used page, B's next write would land in a slot that holds A's KV.
* ``page_size_view`` is the pure rendering behind the page-size slider: the reusable tokens and the
  page-aligned radix tree for one ``page_size``. ``page_size_slider`` is the thin widget around it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from ..mem_cache import RadixCache, RadixKey
from ..mem_cache.radix_key import common_prefix_len
from .widgets import frame_slider
from .trees import TreeDrawing, draw_tree, has_dot


@dataclass
class PageTableView:
    """Pages of a KV pool after B reuses ``reused`` tokens of A; ``overwrites`` lists the damage."""

    page_size: int
    matched: int
    reused: int
    pages: list[dict]  # {"page": n, "slots": [(owner, token) | None, ...], "users": "A" | "A,B" | "B"}
    overwrites: list[tuple[int, int, int, int]] = field(default_factory=list)  # (page, slot, A's tok, B's tok)

    @property
    def text(self) -> str:
        mode = "whole pages only" if self.reused % self.page_size == 0 else "partial page shared!"
        lines = [f"page_size={self.page_size}: matched {self.matched}, B reuses {self.reused} ({mode})"]
        for p in self.pages:
            cells = " | ".join("  .  " if s is None else f"{s[0]}:{s[1]:<3}" for s in p["slots"])
            lines.append(f"page {p['page']}: | {cells} |  used by {p['users']}")
        for page, slot, old, new in self.overwrites:
            lines.append(f"✗ B writes token {new} into page {page} slot {slot}: A's KV for token {old} is overwritten")
        if not self.overwrites:
            lines.append("✓ no slot of A is written by B")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text

    def _repr_svg_(self) -> str | None:
        if not has_dot():
            return None
        import graphviz

        return graphviz.Source(self.dot_source).pipe(format="svg", encoding="utf-8")

    @property
    def dot_source(self) -> str:
        """Graphviz source: one table row per page, A's slots orange, shared blue, B's green, clobbered red."""
        bad = {(p, s): old for p, s, old, _ in self.overwrites}
        rows = []
        for p in self.pages:
            cells = []
            for s, slot in enumerate(p["slots"]):
                color = "#ffffff" if slot is None else ("#ffb3b3" if (p["page"], s) in bad else
                                                        "#cfe8ff" if "," in p["users"] else
                                                        "#ffe2b8" if p["users"] == "A" else "#d6f5d6")
                label = "" if slot is None else f"{slot[0]}:{slot[1]}"
                if (p["page"], s) in bad:
                    label += f" (A:{bad[(p['page'], s)]} lost)"
                cells.append(f'<td bgcolor="{color}" width="40">{html.escape(label)}</td>')
            rows.append(f'<tr><td align="left">page {p["page"]} ({html.escape(p["users"])})</td>{"".join(cells)}</tr>')
        verdict = self.text.splitlines()[len(self.pages) + 1:]  # the ✗/✓ lines of the text form
        color = "#ffb3b3" if self.overwrites else "#d6f5d6"
        rows += [f'<tr><td align="left" colspan="{self.page_size + 1}" bgcolor="{color}">{html.escape(v)}</td></tr>'
                 for v in verdict]
        return ('digraph pages { node [shape=plaintext, fontname="Helvetica", fontsize=11]; '
                f't [label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="4">{"".join(rows)}'
                '</table>>]; }')


def page_table_view(cached: Sequence[int], query: Sequence[int], page_size: int, align: bool = True) -> PageTableView:
    """Lay out request A (``cached``) and request B (``query``) in a paged pool.

    A owns pages 0, 1, ... B matches the common prefix; it reuses ⌊matched/P⌋·P tokens when
    ``align`` (the page-alignment rule) or all ``matched`` tokens when not. B's pages are A's shared pages,
    then fresh ones. A fresh write of B into a shared page clobbers A's slot: that is the bug.
    """
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise TypeError(f"page_size must be an int, got {type(page_size).__name__}")
    if page_size <= 0:
        raise ValueError(f"page_size must be positive, got {page_size}")
    a, b = list(cached), list(query)
    matched = common_prefix_len(tuple(a), tuple(b))
    reused = matched // page_size * page_size if align else matched
    shared = -(-reused // page_size)  # pages B points at that A also uses
    n_a = -(-len(a) // page_size)
    slots: dict[int, list] = {p: [None] * page_size for p in range(n_a)}
    for i, tok in enumerate(a):
        slots[i // page_size][i % page_size] = ("A", tok)
    users = {p: ("A,B" if p < shared else "A") for p in range(n_a)}
    overwrites = []
    next_page = n_a
    page_of_b = {p: p for p in range(shared)}
    for i in range(reused, len(b)):
        logical = i // page_size
        if logical not in page_of_b:  # B needs a page of its own
            page_of_b[logical] = next_page
            slots[next_page] = [None] * page_size
            users[next_page] = "B"
            next_page += 1
        page, slot = page_of_b[logical], i % page_size
        old = slots[page][slot]
        if old is not None and old[0] == "A":  # past the match B's KV differs even for an equal token:
            overwrites.append((page, slot, old[1], b[i]))  # it depends on the whole prefix
        slots[page][slot] = ("B", b[i])
    pages = [{"page": p, "slots": slots[p], "users": users[p]} for p in sorted(slots)]
    return PageTableView(page_size, matched, reused, pages, overwrites)


@dataclass
class PageSizeView:
    """What the slider shows for one page size: the numbers and the page-aligned tree."""

    page_size: int
    raw_match: int
    reusable: int
    drawing: TreeDrawing

    @property
    def summary(self) -> str:
        resume = f"prefill resumes at token {self.reusable + 1}"
        return (f"page_size={self.page_size}: raw match {self.raw_match} tokens → reusable "
                f"⌊{self.raw_match}/{self.page_size}⌋·{self.page_size} = {self.reusable}; {resume}")

    def __repr__(self) -> str:
        return self.summary + "\n" + self.drawing.text

    def _repr_svg_(self) -> str | None:
        return self.drawing._repr_svg_()


def page_size_view(cached_paths: Sequence[tuple[Sequence[int], Hashable]], query: Sequence[int],
                   namespace: Hashable, page_size: int) -> PageSizeView:
    """Build a ``RadixCache(page_size)`` from ``cached_paths``, match ``query``, draw the result.

    Path ``k`` gets its own KV slots ``100·(k+1) + i`` (slots are not token ids, and each slot lives
    in one node: the part a path shares with an earlier one keeps the earlier path's slots).
    """
    cache = RadixCache(page_size=page_size)  # validates page_size before anything is built
    raw = 0
    for k, (tokens, ns) in enumerate(cached_paths):
        cache.insert(RadixKey(tokens, ns), [100 * (k + 1) + i for i in range(len(tokens))])
        if ns == namespace:
            raw = max(raw, common_prefix_len(tuple(tokens), tuple(query)))
    result = cache.match_prefix(RadixKey(query, namespace))  # may split an edge: the path ends there
    path, node = [], result.last_node
    while node is not cache.root_node:
        path.append(node)
        node = node.parent
    reusable = len(result)
    drawing = draw_tree(cache, highlight=path, max_tokens=10,
                        caption=f"page_size={page_size}: only whole pages are stored and matched")
    return PageSizeView(page_size, raw, reusable, drawing)


def page_size_slider(cached_paths: Sequence[tuple[Sequence[int], Hashable]], query: Sequence[int],
                     namespace: Hashable, sizes: Sequence[int] = (1, 2, 4, 8, 16), value: int = 4) -> Any:
    """A slider over ``sizes``: the thin ipywidgets wrapper around ``page_size_view``."""
    views = {p: page_size_view(cached_paths, query, namespace, p) for p in sizes}
    frame_slider(views, "page_size", value)

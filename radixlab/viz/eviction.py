"""Lesson 4's figure 4-1, live: the tree, its evictable-leaf heap, and what each ``evict`` frees.

``draw_eviction_state`` renders one state of a ``RadixCache``: locked nodes (blue, with lock_ref),
evictable leaves (orange, numbered in heap order: 1 is the heap top, the policy's first victim),
nodes just evicted (red, dashed). ``evict_frames`` and ``lifecycle_frames`` are pure functions that
return one ``TreeDrawing`` per step (tested; their text form is what notebooks compare);
``viz.frame_slider`` is the thin ipywidgets wrapper over them (notebooks 05_request_lifecycle_and_locks and 06_eviction).
"""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from ..mem_cache import RadixCache, TreeNode
from ..mem_cache.utils import abbreviate
from .trees import TreeDrawing, _dot_escape, _walk

Labels = Mapping[int, str] | None

def _units(node: TreeNode, labels: Labels, max_tokens: int) -> str:
    units = list(node.key.token_ids)
    if labels:
        return "[" + " ".join(labels.get(t, str(t)) for t in units) + "]"
    return abbreviate(units, max_tokens)

def heap_order(cache: RadixCache) -> list[TreeNode]:
    """Evictable leaves in the order the heap pops them now (smallest policy key first)."""
    return [node for _, node in sorted(cache._evictable_heap())]

def format_heap(cache: RadixCache, labels: Labels = None, max_tokens: int = 8) -> str:
    """The evictable-leaf heap as text, top first."""
    order = heap_order(cache)
    if not order:
        why = "the tree is empty" if not cache.root_node.children else "every leaf is locked"
        return f"evictable-leaf heap: empty ({why})"
    policy = cache.eviction_policy if isinstance(cache.eviction_policy, str) else "custom key"
    rows = [f"evictable-leaf heap ({policy}: last_access_time, oldest on top):" if policy == "lru"
            else f"evictable-leaf heap ({policy}):"]
    for rank, node in enumerate(order, 1):
        rows.append(f"  {rank}. #{node.id} {_units(node, labels, max_tokens)} t={node.last_access_time} "
                    f"({len(node.key)} tok)")
    return "\n".join(rows)

def draw_eviction_state(cache: RadixCache, *, evicted: Sequence[TreeNode] = (), caption: str = "",
                        labels: Labels = None, max_tokens: int = 8, extra: str = "",
                        show_heap: bool = True) -> TreeDrawing:
    """The tree with locks, heap ranks and just-evicted nodes; the heap listed beside it.

    ``show_heap=False`` marks the unlocked leaves without their heap ranks and leaves the heap
    out, for a picture whose question is "which leaf goes first?".
    """
    order = heap_order(cache)
    rank = {id(n): i for i, n in enumerate(order, 1)}
    head = (f"root  (evictable={cache.evictable_size()}, protected={cache.protected_size()}, "
            f"total={cache.total_size()})")
    text = [head]
    dot = ["digraph evict {", '  graph [rankdir=TB, nodesep=0.25, ranksep=0.35];',
           '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];',
           '  edge [color="#777777"];', f'  n0 [label="{html.escape(head)}", shape=ellipse, fillcolor="#e8e8e8"];']
    if caption:
        dot.insert(2, f'  graph [label="{_dot_escape(caption)}", labelloc=t, labeljust=l, fontname="Helvetica", fontsize=12];')
    ids = {id(cache.root_node): "n0"}
    for i, (depth, node, parent) in enumerate(_walk(cache.root_node), 1):
        ids[id(node)] = f"n{i}"
        label = f"#{node.id} {_units(node, labels, max_tokens)}"
        state = f"lock_ref={node.lock_ref} t={node.last_access_time}"
        if node.lock_ref > 0:
            mark, fill = "[locked]", "#cfe0ff"
        elif id(node) in rank:
            mark, fill = (f"[heap #{rank[id(node)]}]" if show_heap else "[unlocked leaf]"), "#ffd9a8"
        else:
            mark, fill = "", "#f7f7f7"
        text.append("   " * (depth - 1) + "└─ " + "  ".join(x for x in (label, state, mark) if x))
        dot.append(f'  n{i} [label="{_dot_escape(label)}\\n{_dot_escape(state)}'
                   f'{chr(92) + "n" + _dot_escape(mark) if mark else ""}", fillcolor="{fill}"];')
        dot.append(f"  {ids[id(parent)]} -> n{i};")
    ids.update({id(node): f"x{j}" for j, node in enumerate(evicted)})  # a parent may be evicted too
    for j, node in enumerate(evicted):
        label = f"#{node.id} {_units(node, labels, max_tokens)}"
        dot.append(f'  x{j} [label="{_dot_escape(label)}\\nevicted", fillcolor="#ffc9c9", style="rounded,filled,dashed"];')
        parent = ids.get(id(node.parent))
        if parent is not None:
            dot.append(f'  {parent} -> x{j} [style=dashed, color="#cc3333"];')
    if evicted:
        text.append("evicted: " + ", ".join(f"#{n.id} {_units(n, labels, max_tokens)} ({len(n.key)} tok)" for n in evicted))
    heap_text = format_heap(cache, labels, max_tokens) if show_heap else ""
    side_lines = [*heap_text.splitlines()] + (extra.splitlines() if extra else [])
    text.extend(side_lines)
    if side_lines:
        side = "\\l".join(_dot_escape(line) for line in side_lines) + "\\l"
        dot.append(f'  heap [shape=note, fillcolor="#fffbe6", fontname="Courier", label="{side}"];')
    dot.append("}")
    return TreeDrawing("\n".join(text), "\n".join(dot), caption)

def traced_evict(cache: RadixCache, num_tokens: int) -> tuple[int, list[TreeNode]]:
    """``cache.evict(num_tokens)``, also returning the nodes it deleted, in pop order."""
    popped: list[TreeNode] = []
    real = cache._delete_leaf

    def spy(node: TreeNode) -> None:
        popped.append(node)
        real(node)

    cache._delete_leaf = spy  # type: ignore[method-assign]
    try:
        freed = cache.evict(num_tokens)
    finally:
        del cache._delete_leaf
    return freed, popped

def evict_frames(cache: RadixCache, requests: Sequence[int], labels: Labels = None,
                 max_tokens: int = 8) -> list[TreeDrawing]:
    """Frame 0: the cache now; then one frame per ``evict(n)`` for n in ``requests`` (mutates ``cache``)."""
    frames = [draw_eviction_state(cache, caption="before any evict", labels=labels, max_tokens=max_tokens)]
    for k, n in enumerate(requests, 1):
        freed, popped = traced_evict(cache, n)
        free = cache.token_to_kv_pool_allocator.available_size() if cache.token_to_kv_pool_allocator else None
        names = ", ".join(f"#{x.id}" for x in popped) or "nothing"
        caption = f"evict #{k}: evict({n}) → freed {freed} tokens ({names})" + (
            f"; allocator has {free} free slots" if free is not None else "")
        frames.append(draw_eviction_state(cache, evicted=popped, caption=caption, labels=labels, max_tokens=max_tokens))
    return frames

def lifecycle_frames(cache: RadixCache, req: Any, labels: Labels = None, max_tokens: int = 8,
                     decode: Sequence[int] = ()) -> list[TreeDrawing]:
    """One request's life, one frame per step: match → lock → alloc → prefill (→ decode) → insert → unlock.

    ``decode``: the tokens the model samples, in order; each one but the last is fed back in a decode step
    (a slot, its K/V written), the last has no K/V when the request finishes (as ``kv_committed_len``).
    Drives the real objects (``radixlab.mem_cache.common``); ``cache`` needs both pools. Mutates both.
    """
    from ..mem_cache import admit, extend, release

    pool, alloc = cache.req_to_token_pool, cache.token_to_kv_pool_allocator
    frames: list[TreeDrawing] = []

    def snap(caption: str, extra: str = "") -> None:
        row = pool.row(req.req_pool_idx, req.seq_len).tolist() if req.req_pool_idx is not None else None
        info = [f"free KV slots: {alloc.available_size()}"]
        if row is not None:
            info.append(f"req_to_token[{req.req_pool_idx}] = {abbreviate(row, 12)}")
        frames.append(draw_eviction_state(cache, caption=caption, labels=labels, max_tokens=max_tokens,
                                          extra="\n".join(info + ([extra] if extra else []))))

    snap(f"0. request {req.rid!r} arrives ({len(req.origin_input_ids)} prompt tokens)")

    def matched(result: Any) -> None:
        snap(f"1. match_prefix → {len(result.device_indices)} tokens cached, last_node=#{result.last_node.id}")

    admit(req, cache, on_match=matched)
    snap(f"2. inc_lock_ref(#{req.last_node.id}) and a row in req_to_token_pool: the prefix is protected")
    n_new = len(req.all_ids) - req.seq_len
    if not extend(req, cache, n_new):
        raise RuntimeError("not enough KV slots for this request even after evicting")
    snap(f"3. alloc {n_new} slots for the new tokens (evicting if short), written into the row")
    word = (lambda t: str(labels.get(t, t))) if labels else str
    if not decode:
        snap("4. prefill: the model writes K/V into those slots (no tree change; no decode steps here)")
    else:
        req.output_ids.append(decode[0])
        snap(f"4. prefill: the model writes K/V into those slots; the last prompt token's logits give the "
             f"first output token, {word(decode[0])!r} (no tree change)")
        for token in decode[1:]:
            if not extend(req, cache, 1):  # the slot of the token this step reads
                raise RuntimeError("not enough KV slots for a decode step even after evicting")
            req.output_ids.append(token)
        fed = ", ".join(repr(word(t)) for t in decode[:-1])
        snap(f"5. decode, {len(decode) - 1} step(s): each writes the K/V of the token it reads ({fed or 'none'}) "
             f"and samples the next; the last one, {word(decode[-1])!r}, has no K/V when the request stops")
    n = 5 + bool(decode)
    before = cache.total_size()
    key_len = req.seq_len // cache.page_size * cache.page_size  # the tokens with K/V, whole pages
    release(req, cache, on_cached=lambda: snap(
        f"{n}. cache_finished_req: insert (origin_input_ids + output_ids)[:seq_len], the {key_len} tokens with K/V, "
        f"{cache.total_size() - before} of them new to the tree; duplicates and tail freed, "
        "dec_lock_ref: the path is evictable again"))
    snap(f"{n + 1}. the row goes back to req_to_token_pool: nothing of the request is left but the cache's copy")
    return frames

# (color, marker, line style, line width): LRU drawn wide underneath, FIFO thin and dotted on top, so that
# where the two coincide (chat: a leaf is touched only when it is made) both stay visible.
POLICY_STYLE = {"lru": ("#1f77b4", "o", "-", 4.0), "lfu": ("#2ca02c", "s", "-", 1.6),
                "fifo": ("#9467bd", "^", ":", 1.6), "belady": ("#d62728", "*", "--", 1.6)}


def plot_hit_rates(results: Mapping[str, Mapping[str, Sequence[Any]]], fractions: Sequence[float],
                   ceilings: Mapping[str, float] | None = None, columns: int = 4):
    """One panel per workload, ``columns`` to a row: hit rate vs cache capacity (as a fraction of the
    working set), per policy, with one legend for all panels below the grid.

    ``results[workload][policy]`` is a list of ``SimResult`` (one per fraction), as ``eviction_sim.sweep``
    returns; ``ceilings[workload]`` (optional) draws the unbounded-cache hit rate. Returns the figure.
    """
    import matplotlib.pyplot as plt

    n = len(results)
    cols = max(1, min(columns, n))
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 2.9 * rows + 0.6), sharey=True, squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (name, by_policy) in zip(flat, results.items()):
        for policy, curve in by_policy.items():
            color, marker, style, width = POLICY_STYLE.get(policy, ("#555555", ".", "-", 1.6))
            label = "Belady (offline)" if policy == "belady" else policy.upper()
            ax.plot([100 * f for f in fractions], [100 * r.hit_rate for r in curve], style, color=color,
                    marker=marker, markersize=4, lw=width, alpha=0.55 if policy == "lru" else 1.0, label=label,
                    zorder=1 if policy == "lru" else 2)
        if ceilings and name in ceilings:
            ax.axhline(100 * ceilings[name], color="#999999", lw=1, ls=":", label="unbounded cache")
        ax.set_title(name.replace("_", " "), fontsize=10)
        ax.grid(alpha=0.3)
    for ax in flat[n:]:
        ax.set_visible(False)
    for ax in flat[:n]:
        if ax in [row[0] for row in axes]:
            ax.set_ylabel("prompt tokens hit (%)", fontsize=9)
        ax.set_xlabel("capacity (% of working set)", fontsize=9)
    handles, labels = flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.6 / (2.9 * rows + 0.6), 1, 1))
    return fig

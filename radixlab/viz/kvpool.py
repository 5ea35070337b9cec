"""Pictures for notebook 07_kv_memory_pool: the index flow and the page-size trade-off.

``index_flow`` follows the index chain for live requests, from the engine's own objects:
``RadixCache`` node (``value`` = slots) → ``ReqToTokenPool`` row (position → slot) → slot →
``MHATokenToKVPool`` K/V row. It returns a ``TreeDrawing``: text (compared by nbval) and a
Graphviz picture. ``plot_page_tradeoff`` plots ``radixlab.engine.studies.page_size_tradeoff``.
"""

from __future__ import annotations

import html
from typing import Any

from ..mem_cache.utils import abbreviate
from .trees import TreeDrawing


def _path(cache: Any, node: Any) -> list:
    nodes = []
    while node is not None and node is not cache.root_node:
        nodes.append(node)
        node = node.parent
    return nodes[::-1]


def _span(slots: list[int]) -> str:
    if len(slots) > 2 and slots == list(range(slots[0], slots[-1] + 1)):
        return f"{slots[0]}‥{slots[-1]}"
    return ", ".join(map(str, slots))


def index_flow(engine: Any, reqs: dict[str, Any], layer_id: int = 0, decode: Any = None) -> TreeDrawing:
    """Node → row → slot → K/V row for the live requests ``reqs`` (name → ``Req`` with a row).

    ``decode(token_ids)`` labels tree nodes (default: the model's tokenizer).
    """
    cache, pool, kv = engine.tree_cache, engine.req_to_token_pool, engine.token_to_kv_pool
    decode = decode or engine.tokenizer.decode
    lines = [f"index flow, layer {layer_id}: RadixCache node → ReqToTokenPool row → slot → K/V row"]
    dot = ["digraph G {", "rankdir=LR; ranksep=1.2; node [shape=plaintext, fontname=Helvetica, fontsize=10];"]
    nodes, used = {}, set()
    for name, req in reqs.items():
        if req.req_pool_idx is None:
            raise ValueError(f"request {name!r} has no row (not admitted yet, or finished)")
        row = pool.req_to_token[req.req_pool_idx, :req.seq_len].tolist()
        used.update(row)
        start, segs = 0, []
        for node in _path(cache, req.last_node):
            nodes[node.id] = node
            segs.append(f"positions {start}‥{start + len(node.key) - 1} → slots [{_span(row[start:start + len(node.key)])}] "
                        f"(tree node #{node.id})")
            dot.append(f'n{node.id} -> r{req.req_pool_idx}:p{start}:w [style=dashed];')
            start += len(node.key)
        if start < len(row):
            segs.append(f"positions {start}‥{len(row) - 1} → slots [{_span(row[start:])}] (its own)")
        lines.append(f"request {name}, row {req.req_pool_idx}: " + "; ".join(segs))
        cells = "".join(f'<tr><td port="p{p}" bgcolor="{"#dbe8f6" if p < start else "#fbe3cf"}">'
                        f'pos {p} → {s}</td></tr>' for p, s in enumerate(row))
        dot.append(f'r{req.req_pool_idx} [label=<<table border="0" cellborder="1" cellspacing="0">'
                   f'<tr><td bgcolor="#eeeeee">{html.escape(name)} · row {req.req_pool_idx}</td></tr>{cells}</table>>];')
        dot.extend(f'r{req.req_pool_idx}:p{p}:e -> kv:s{s}:w [color="{"#3b75af" if p < start else "#e07b39"}", '
                   f'arrowsize=0.5];' for p, s in enumerate(row))
    dot.append('root [shape=box, style=rounded, label="root"];')
    for node in sorted(nodes.values(), key=lambda n: n.id):  # the tree's own edges, parent → child
        parent = "root" if node.parent is cache.root_node else f"n{node.parent.id}"
        dot.append(f"{parent} -> n{node.id};")
    for node in sorted(nodes.values(), key=lambda n: n.id):
        text = decode(list(node.key.token_ids))
        lines.append(f"node #{node.id} {text!r}: {len(node.key)} tokens → slots "
                     f"{abbreviate(node.value.tolist(), 6)}, lock_ref={node.lock_ref}")
        dot.append(f'n{node.id} [shape=box, style=rounded, label="#{node.id} {html.escape(repr(text))[:40]}\\n'
                   f'slots {_span(node.value.tolist())} · lock_ref={node.lock_ref}"];')
    k = kv.get_key_buffer(layer_id)
    first = min(used)
    lines.append(f"K/V rows: {len(used)} distinct slots hold the {sum(r.seq_len for r in reqs.values())} "
                 f"row entries; k_buffer[{layer_id}][{first}, 0, :3] = "
                 f"[{', '.join(f'{v:+.3f}' for v in k[first, 0, :3].tolist())}]")
    kv_cells = "".join(f'<tr><td port="s{s}">slot {s}</td></tr>' for s in sorted(used))
    dot.append(f'kv [label=<<table border="0" cellborder="1" cellspacing="0"><tr><td bgcolor="#eeeeee">'
               f'K/V rows (layer {layer_id})</td></tr>{kv_cells}</table>>];')
    dot.append('legend [label="blue: slots held by a tree node (reusable; lock_ref = how many live rows read them); '
               'orange: the request\'s own slots"];')
    dot.append("}")
    return TreeDrawing("\n".join(lines), "\n".join(dot))


def plot_page_tradeoff(rows: list[dict]):
    """Three panels against page size: fragmentation, page-table entries, reusable prefix tokens."""
    import matplotlib.pyplot as plt

    xs = [r["page_size"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    panels = [("fragmentation", "slots allocated but unused (peak)"),
              ("page_table_entries", "page-table entries (peak)"),
              ("reusable_prefix_tokens", "prompt tokens reused from the tree")]
    for ax, (key, title) in zip(axes, panels):
        ax.plot(xs, [r[key] for r in rows], marker="o")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("page_size")
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig

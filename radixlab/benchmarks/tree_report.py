"""``bench tree``, reporting: ratios, the fast tree against its floors and SGLang's C++ tree, floor
ladders, the C++ lane, and the printed record.

Reads a record made by ``tree.run`` (or one built by hand, as the tests do); measures nothing.
Issue 11's targets (full hit and insert <= 0.3x SGLang's Python tree, a full hit <= 20x ``bytes ==``)
are retired (issue 21: the floors show the Python tree is at them): the report reads the fast tree
against its floors and SGLang's trees (``standing``), never against a target.
"""

from __future__ import annotations

from .tree_timing import CPP
from .tree_ops import (FLOOR_BARE_INSERT, FLOOR_BARE_MATCH, FLOOR_BARE_WALK, FLOOR_CAT, FLOOR_INSERT, FLOOR_MATCH,
                       FLOOR_PACK, SKIPPED_COPY, pack_floor)


def ratio_rows(rec: dict, base: str = "sglang") -> list[tuple[str, dict]]:
    """(op, {side: median / base median}) for every op of the reference table."""
    out = []
    for op, by in rec["reference"]["ops"].items():
        if base in by:
            out.append((op, {s: by[s]["median_us"] / by[base]["median_us"] for s in by}))
    return out


def format_record(rec: dict) -> str:
    sides = rec["env"]["sides"]
    lines = [f"## Reference workload: {rec['env']['prompts']} prompts x {rec['env']['turns']} turns "
             f"({rec['reference']['nodes']} nodes), median / p90 per op (build and evict in ms)",
             "| op | " + " | ".join(sides) + " | " + " | ".join(f"{s}/{b}" for s, b in _pairs(sides)) + " |",
             "|---" * (1 + len(sides) + len(_pairs(sides))) + "|"]
    for op, by in rec["reference"]["ops"].items():
        scale, unit = (1e-3, "ms") if op.startswith(("build", "evict")) else (1, "us")
        cells = [f"{by[s]['median_us'] * scale:.1f} / {by[s]['p90_us'] * scale:.1f} {unit}" if s in by else "-" for s in sides]
        ratios = [f"{by[a]['median_us'] / by[b]['median_us']:.2f}x" if a in by and b in by else "-" for a, b in _pairs(sides)]
        lines.append(f"| {op} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    y = rec["yardstick"]
    full = rec["reference"]["ops"].get("full-hit match (key)", {}).get("fast")
    lines.append(f"\nyardstick: bytes == of {y['tokens']} tokens {y['bytes_eq_ns']:.0f} ns"
                 + (f"; fast full-hit match = {full['median_us'] * 1e3 / y['bytes_eq_ns']:.0f}x that" if full else ""))
    if full:
        lines.append(f"tokens compared per second (fast full hit): {y['tokens'] / full['median_us'] * 1e6 / 1e6:.0f} M")
    if "torch_cat_path_ns" in y:
        lines.append(f"floors: torch.cat of a full hit's two index tensors {y['torch_cat_path_ns'] / 1e3:.1f} us "
                     f"(= {y['torch_cat_path_ns'] / y['bytes_eq_ns']:.0f}x bytes ==); packing the {y['tokens']}-token list "
                     f"{y['pack_list_ns'] / 1e3:.1f} us")
    lines += _floor_lines(rec)
    if "fast" in sides and ("sglang" in sides or CPP in sides):
        lines += ["", "## The fast tree against its floors and SGLang's trees (this run)"] + format_standing(standing(rec))
    lines += format_native(rec)
    lines.append(f"results agree across sides: {rec['reference']['agree']}")
    lines.append("\n## Compare n equal tokens / find a mismatch in the middle (ns)")
    cols = list(rec["compare_ns"][0])[1:]
    lines.append("| tokens | " + " | ".join(cols) + " |")
    for r in rec["compare_ns"]:
        lines.append(f"| {r['tokens']} | " + " | ".join(f"{r[c]:.0f}" for c in cols) + " |")
    lines.append("\n## Converting a list of n Python ints (ns)")
    cols = list(rec["conversion_ns"][0])[1:]
    lines.append("| tokens | " + " | ".join(cols) + " |")
    for r in rec["conversion_ns"]:
        lines.append(f"| {r['tokens']} | " + " | ".join(f"{r[c]:.0f}" for c in cols) + " |")
    lines.append("\n## Memory: bytes per cached token")
    for m in rec["memory"]:
        share = ", ".join(f"{k.split(' ')[0]} {v:.3%}" for k, v in m["tree_share_of_kv"].items())
        lines.append(f"  {m['matcher']:8s} tree ({m['nodes']} nodes, {m['tokens']} tokens): {m['tree_bytes_per_token']:.1f} B/token "
                     f"(Python objects {m['python_bytes_per_token']:.1f}, index tensors {m['tensor_bytes_per_token']:.1f}); "
                     f"of the KV bytes: {share}")
    if rec["growth"]:
        lines.append("\n## Growing trees (key built): median us per op")
        ops = list(rec["growth"][0]["median_us"])
        lines.append("| nodes | " + " | ".join(f"{op}: " + " / ".join(sides) for op in ops) + " |")
        for g in rec["growth"]:
            lines.append(f"| {g['nodes']} | " + " | ".join(
                " / ".join(f"{g['median_us'][op][s]:.1f}" if s in g["median_us"][op] else "-" for s in sides) for op in ops) + " |")
    lines.append(f"\nload average {rec['env']['loadavg_start']} -> {rec['env']['loadavg_end']}, wall {rec['env']['wall_s']:.0f} s")
    return "\n".join(lines)


# (label, op, floor lane, what the lane does): each floor lane read against base's whole call for op
FLOOR_OPS = [
    ("full-hit match (key)", "full-hit match (key)", FLOOR_CAT, "torch.cat of the result (the copy alone)"),
    ("full-hit match (key), C-level", "full-hit match (key)", FLOOR_MATCH, "compare each edge + torch.cat of the result"),
    ("full-hit match (key), bare Python", "full-hit match (key)", FLOOR_BARE_MATCH,
     "a bare Python walk: nodes, compares, torch.cat"),
    ("full-hit match (key), no copy", "full-hit match (key)", FLOOR_BARE_WALK,
     "the bare walk handing back a tensor it holds (no torch.cat)"),
    ("insert (key), C-level", "insert (key)", FLOOR_INSERT, "compare the cached edge, slice the new key, copy the indices"),
    ("insert (key), bare Python", "insert (key)", FLOOR_BARE_INSERT, "a bare Python insert: walk, compare, make the leaf"),
] + [(f"{op} (list)", f"{op} (list)", pack_floor(op), "packing the list")
     for op in ("full-hit match", "system-prompt hit", "miss", "insert")]


FLOOR_TEXT = {label: text for label, _, _, text in FLOOR_OPS}


def floor_ratios(rec: dict, base: str = "sglang") -> dict[str, tuple[float, float]]:
    """{label: (us, us / base's median for that op)} for the work every tree of its kind must do.

    With the key built: for the full hit, ``torch.cat`` of the hit's indices, then that plus the
    compares (C-level work), then a bare Python walk doing both; for the insert, its C-level work
    and a bare Python insert (see ``FLOOR_OPS``). Packing the token list for every op fed a list
    (radixlab converts it; SGLang's ``Req`` already holds ``array('q')``). Timed as separate calls in the same run: the
    parts of one call do not add up exactly (each part's cost depends on what ran just before it:
    caches, the allocator), so read these as estimates of a floor, next to the hot ``timeit``
    figures of ``yardstick``.
    """
    fl, ops = rec["reference"].get("floors", {}), rec["reference"]["ops"]
    return {label: (fl[f]["median_us"], fl[f]["median_us"] / ops[op][base]["median_us"])
            for label, op, f, _ in FLOOR_OPS if f in fl and base in ops.get(op, {})}


# (op, its floor lanes from the least work up, another design's floor): notebook 11's ladders
LADDERS = [("full-hit match (key)", ("full-hit match (key)", "full-hit match (key), C-level",
                                     "full-hit match (key), bare Python"), "full-hit match (key), no copy"),
           ("insert (key)", ("insert (key), C-level", "insert (key), bare Python"), None)]


def format_ladders(rec: dict, side: str = "fast", base: str = "sglang") -> list[str]:
    """Per op of ``LADDERS``: each floor lane, then ``side``'s whole call and what of it lies beyond
    the bare walk (the last rung), then the other design's floor; all as µs and x ``base``."""
    fr, ops, lines = floor_ratios(rec, base), rec["reference"]["ops"], []
    for op, labels, other in LADDERS:
        by = ops.get(op, {})
        if side not in by or base not in by or any(label not in fr for label in labels):
            continue
        sg, ours = by[base]["median_us"], by[side]["median_us"]
        lines.append(f"{op}: SGLang {sg:.1f} µs")
        for label in labels:
            kind = label.split(", ")[1] if ", " in label else "copy only"
            lines.append(f"   {kind + ':':12s} {FLOOR_TEXT[label]:62s} {fr[label][0]:5.1f} µs = {fr[label][1]:.2f}x SGLang")
        bare = fr[labels[-1]][0]
        lines.append(f"   {'radixlab:':12s} {'the whole call':62s} {ours:5.1f} µs = {ours / sg:.2f}x SGLang"
                     f"  ({ours - bare:.1f} µs = {(ours - bare) / ours:.0%} of it beyond the bare walk)")
        if other in fr:
            lines.append(f"   {'no copy:':12s} {FLOOR_TEXT[other]:62s} {fr[other][0]:5.1f} µs = {fr[other][1]:.2f}x SGLang"
                         "  (the path memo's floor)")
        lines.append("")
    return lines


def skipped_copy(rec: dict, base: str = "sglang") -> tuple[float, float, float] | None:
    """(µs, radixlab's ratio as measured, its ratio had it copied too) for the system-prompt hit:
    SGLang's Python tree copies a one-edge hit's indices, radixlab hands back the node's own tensor."""
    fl, ops = rec["reference"].get("floors", {}), rec["reference"]["ops"].get("system-prompt hit (key)", {})
    if SKIPPED_COPY not in fl or base not in ops or "fast" not in ops:
        return None
    us, fast, sg = fl[SKIPPED_COPY]["median_us"], ops["fast"]["median_us"], ops[base]["median_us"]
    return us, fast / sg, (fast + us) / sg


def _floor_lines(rec: dict) -> list[str]:
    fl = rec["reference"].get("floors", {})
    lines = [f"same run: {name} {st['median_us']:.1f} / {st['p90_us']:.1f} us" for name, st in fl.items()]
    y, ops = rec.get("yardstick", {}), rec["reference"]["ops"]
    hot = {FLOOR_CAT: y.get("torch_cat_path_ns"), FLOOR_PACK: y.get("pack_list_ns")}
    ratios = floor_ratios(rec)
    for label, op, floor, _ in FLOOR_OPS:
        if label not in ratios:
            continue
        ns = hot.get(FLOOR_PACK if floor.startswith(FLOOR_PACK) else floor)
        low = f"{ns / 1e3 / ops[op]['sglang']['median_us']:.2f}x (hot, timeit) to " if ns else ""
        lines.append(f"  {label}: that work alone is {low}{ratios[label][1]:.2f}x (in the run) SGLang's whole call")
    sk = skipped_copy(rec)
    if sk:
        lines.append(f"  system-prompt hit (key): SGLang's Python tree copies the edge's indices ({sk[0]:.1f} us), radixlab "
                     f"returns the node's own tensor (as SGLang's C++ tree does): {sk[1]:.2f}x as measured, "
                     f"{sk[2]:.2f}x had it copied too")
    return lines


def _pairs(sides: list[str]) -> list[tuple[str, str]]:
    pairs = [("fast", "readable")] if "readable" in sides else []
    if "sglang" in sides:
        pairs += [("fast", "sglang"), ("readable", "sglang")]
    if CPP in sides:
        pairs += [("fast", CPP)] + ([("sglang", CPP)] if "sglang" in sides else [])
    return pairs


# (op, the floor that bounds it, or None): what ``standing`` reads the fast tree's call against
STANDING = [("full-hit match (key)", "full-hit match (key), bare Python"), ("system-prompt hit (key)", None),
            ("miss (key)", None), ("insert (key)", "insert (key), bare Python"),
            ("full-hit match (list)", "full-hit match (list)"), ("system-prompt hit (list)", "system-prompt hit (list)"),
            ("insert (list)", "insert (list)"), ("build (key)", None)]


def standing(rec: dict, side: str = "fast") -> list[dict]:
    """Per op of ``STANDING``: {op, us (side's median), vs: {sglang, sglang-cpp: side / that, same run},
    floor, floor_us, over_floor (side's call / the floor's work alone)}. No targets: figures to read."""
    ops, fl, rows = rec["reference"]["ops"], rec["reference"].get("floors", {}), []
    lane = {label: f for label, _, f, _ in FLOOR_OPS}
    for op, floor in STANDING:
        by = ops.get(op, {})
        if side not in by:
            continue
        us = by[side]["median_us"]
        row = {"op": op, "us": us, "vs": {b: us / by[b]["median_us"] for b in ("sglang", CPP) if b in by},
               "floor": None, "floor_us": None, "over_floor": None}
        if floor is not None and lane[floor] in fl:
            f = fl[lane[floor]]["median_us"]
            row.update(floor=floor, floor_us=f, over_floor=us / f)
        rows.append(row)
    return rows


def format_standing(rows: list[dict]) -> list[str]:
    lines = [f"{'op':26s} {'fast':>9s} {'/ SGLang py':>12s} {'/ SGLang C++':>13s}   the floor under it (same run)"]
    for r in rows:
        vs = [f"{r['vs'][b]:.2f}x" if b in r["vs"] else "-" for b in ("sglang", CPP)]
        floor = (f"{FLOOR_TEXT[r['floor']]}: {r['floor_us']:.1f} us, the call {r['over_floor']:.2f}x that"
                 if r["floor"] else "")
        lines.append(f"{r['op']:26s} {r['us']:7.1f}us {vs[0]:>12s} {vs[1]:>13s}   {floor}")
    return lines


def format_native(rec: dict) -> list[str]:
    """The C++ lane's section: input forms (us and x the fast tree on a built key) and thread scaling,
    or why the lane was skipped."""
    skipped = rec["env"].get("cpp_skipped")
    if skipped:
        return ["", f"## SGLang's C++ tree: skipped. {skipped}"]
    nat = rec.get("native")
    if not nat:
        return []
    lines = ["", "## SGLang's C++ tree by input form (median / p90, x radixlab's fast tree on a built key, same loop)"]
    for op, by in nat["ops"].items():
        base = by["fast: key built"]["median_us"]
        lines.append(f"{op}:")
        for lane, st in by.items():
            lines.append(f"   {lane:48s} {st['median_us']:6.1f} / {st['p90_us']:6.1f} us  {st['median_us'] / base:5.2f}x")
    th = nat["threads"]
    lines.append(f"\n## Threads: matches per second with n threads / with {th['threads'][0]} "
                 f"({th['calls_per_thread']} calls per thread, best of 3; does the call release the GIL?)")
    lines.append(f"| {'subject':50s} | " + " | ".join(f"n={n}" for n in th["threads"]) + f" | n={th['threads'][0]}, calls/s |")
    for subject, sc in th["scaling"].items():
        lines.append(f"| {subject:50s} | " + " | ".join(f"{x:.2f}x" for x in sc) + f" | {th['rate_per_s'][subject][0]:,.0f} |")
    if nat.get("gil_probe"):
        lines.append("\n## Another thread's clock stamps during one long call (none: the call held the GIL throughout)")
        for subject, pr in nat["gil_probe"].items():
            lines.append(f"   {subject:48s} {pr['call_ms']:7.1f} ms, {pr['ticks_inside']:9,d} stamps")
    lines.append(f"results agree across lanes: {nat['agree']}")
    return lines


def packing_us(table: dict) -> float:
    """Median µs to pack a request's token list, timed in ``op_table``'s full-hit loop beside the trees
    (what notebook 11 sets against a whole fast lookup)."""
    return table["floors"][FLOOR_PACK]["median_us"]

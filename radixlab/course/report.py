"""The grader's reports as text: one block per submission (``format_report``) and the batch's
gradebook lines (``summary``)."""

from __future__ import annotations

import re
from pathlib import Path


def _short(s: str, n: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _question_text(q: dict) -> str:
    """The question without markdown emphasis and without its own label ("**Q1** Why ..." -> "Why ...")."""
    text = re.sub(r"\*\*|__|[*#`>]", "", q["question"]).strip()
    return re.sub(rf"^{re.escape(q['label'])}[\s.:：]*", "", text).strip() or text


def summary(reports: list[dict]) -> str:
    """One line per submission: the gradebook view of a batch."""
    rows = [("submission", "lesson", "auto", "manual", "notes")]
    for r in reports:
        notes = [f"{e['exercise']} {e['status']}" for e in r["exercises"] if e["status"] != "passed"]
        notes += [f"cell {e['cell']} {e['ename']}" for e in r["execution"].get("errors", [])]
        notes = r["execution"].get("stopped", "") or ", ".join(r.get("warnings", [])[:1] + notes)
        rows.append((Path(r["submission"]).name, r["lesson"], f"{r['auto_points']:g}/{r['auto_max']:g}",
                     f"_/{r['manual_max']:g}", _short(notes, 60)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows)


def format_report(rep: dict) -> str:
    ex = rep["execution"]
    box = rep.get("sandbox", "")
    lines = [f"== {rep['submission']}  (lesson {rep['lesson']}: {rep['title']})",
             "   student code ran in bubblewrap on a copy of radixlab without the exercises' references"
             if box == "bubblewrap" else f"   ⚠ NO SANDBOX: {box.removeprefix('none ')}; student code ran unconfined "
             "(it could read the repository and change this machine; the grader checked the environment for changes)",
             f"   graded {len(rep['exercises'])} exercise(s) in {ex.get('seconds', 0):g} s (grader seed {rep.get('grader_seed', 0)})"
             + (f"; {len(ex.get('errors', []))} statement(s) raised" if ex.get("errors") else "")
             + (f"; stopped: {ex['stopped']}" if ex.get("stopped") else "")]
    lines += [f"   ⚠ {w}" for w in rep.get("warnings", [])]
    for e in ex.get("errors", [])[:5]:
        lines.append(f"   cell {e['cell']}: {e['ename']}: {_short(e['evalue'], 80)}")
    rows = [("item", "kind", "points", "notes")]
    for r in rep["exercises"]:
        mark = {"passed": "✅", "failed": "❌", "not done": "⏳"}.get(r["status"], "⛔")
        rows.append((f"Exercise {r['exercise']} {r['title']}", "optional" if r.get("optional") else "code", f"{r['points']:g}/{r['max_points']:g}",
                     f"{mark} {r['status']}" + (f": {_short(r['reason'], 90)}" if r["reason"] else "")))
        if r["status"] in ("passed", "failed"):
            rows.append(("  main path (seed asserts)", "", f"{r['main_path']:g}", ""))
            rows.append(("  boundary cases (hidden)", "", f"{r['boundary']:g}", ""))
            for c in r["cases"]:
                if not c["passed"]:
                    rows.append((f"    ✗ {_short(c['name'], 50)}", "", f"0/{c['points']:g}", _short(c["message"], 90)))
        for note in r.get("notes", []):
            rows.append(("  note", "", "", note))
        if r.get("optional"):
            rows.append(("  (optional: counted in no total)", "", "", ""))
        else:
            rows.append(("  mapping to source objects", "manual", f"_/{r['manual_points_max']:g}", "mark by hand"))
    for q in rep["questions"]:
        rows.append((f"{q['label']} {_short(_question_text(q), 40)}", "written", f"_/{q['max_points']:g}",
                     q["status"] if q["status"] != "answered" else f"answered ({len(q['answer'].split())} words)"))
    if len(rows) == 1:
        rows.append(("(nothing to grade in this lesson)", "", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        lines.append("   " + "  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    lines.append(f"   automatic {rep['auto_points']:g}/{rep['auto_max']:g}, manual _/{rep['manual_max']:g}, "
                 f"total _/{rep['total_max']:g} (pass at {rep['pass_mark']:g})")
    for q in rep["questions"]:
        lines.append(f"   --- {q['label']} ({q['max_points']:g} pt): {_short(_question_text(q), 100)}")
        lines.extend("       " + l for l in (q["answer"].splitlines() or [""]))
    return "\n".join(lines)

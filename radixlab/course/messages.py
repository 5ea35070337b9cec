"""The executor's answer channel, read as untrusted data: every message is checked before it is used.

A line that is not one of the messages below (a forged one, a truncated one, an object of the wrong
shape) raises ``Malformed``; the runner then fails that submission's run, never the grader.
"""

from __future__ import annotations

import math

MESSAGE_KEYS = {"answer", "not_done", "raised", "line", "timeout", "seconds", "case"}


class Malformed(ValueError):
    """A line on the answer channel that is not one of the executor's messages."""


def validate(msg: object, n_cases: int) -> dict:
    """One executor message, checked as untrusted data; raises ``Malformed``."""
    if not isinstance(msg, dict):
        raise Malformed(f"not an object: {type(msg).__name__}")
    if "def_error" in msg:
        e = msg["def_error"]
        if not isinstance(e, dict) or not (e.get("cell") is None or type(e.get("cell")) is int) \
                or not isinstance(e.get("ename"), str) or not isinstance(e.get("evalue"), str):
            raise Malformed("def_error without cell, ename and evalue")
        return {"def_error": {"cell": e["cell"], "ename": e["ename"][:100], "evalue": e["evalue"][:300]}}
    if "ask" in msg:  # a question of an oracle spec's run (``runs.py``): any JSON, answered by the oracle
        return {"ask": msg["ask"]}
    if "defined" in msg:
        return {"defined": msg["defined"] is True}
    if "done" in msg:
        return {"done": True}
    if "case" not in msg:
        raise Malformed(f"unknown message with keys {sorted(map(str, msg))[:5]}")
    k = msg["case"]
    if type(k) is not int or not 0 <= k < n_cases or set(msg) - MESSAGE_KEYS:
        raise Malformed("a case message with a bad case number or unknown keys")
    kinds = [key for key in ("answer", "not_done", "raised", "timeout") if key in msg]
    if len(kinds) != 1:
        raise Malformed("a case message must carry exactly one outcome")
    out: dict = {"case": k}
    seconds = msg.get("seconds", 0.0)
    out["seconds"] = float(seconds) if type(seconds) in (int, float) and math.isfinite(seconds) else 0.0
    kind = kinds[0]
    if kind == "answer":
        out["answer"] = msg["answer"]
    elif kind == "not_done":
        out["not_done"] = True
    elif kind == "raised":
        if not isinstance(msg["raised"], str):
            raise Malformed("raised must be text")
        out["raised"] = msg["raised"][:500]
        line = msg.get("line")
        out["line"] = line if type(line) is int else None
    else:
        if type(msg["timeout"]) not in (int, float) or not math.isfinite(msg["timeout"]):
            raise Malformed("timeout must be a finite number")
        out["timeout"] = float(msg["timeout"])
    return out

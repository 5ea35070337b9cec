"""Exercises 09.1 and 10.1 in the grader: honest answers score 3, the blank 0, wrong answers less than 3."""

from __future__ import annotations

import pytest

from grade_helpers import assert_grader_score
from radixlab.course import sandbox as sb

boxed = pytest.mark.skipif(not sb.sandboxed(), reason=f"no bubblewrap here: {sb.sandbox_works()}")

LPM = """from radixlab.mem_cache import RadixCache, RadixKey

def lpm_order(waiting, tree):
    scratch, cached, held = RadixCache(), {{}}, set()
    for rid, ids in waiting:
        key = RadixKey(list(ids))
        cached[rid] = len(tree.match_prefix(key))
        if cached[rid] {check} 32:
            if len(scratch.match_prefix(key)) {held} 32:
                held.add(rid)
            else:
                scratch.insert(key)
    return [r for r, _ in sorted(waiting, key=lambda w: {key})], held
"""
KEY = "float('inf') if w[0] in held else -cached[w[0]]"
SALT = "import json\n\ndef tenant_extra_key(tenant, client_salt):\n    return {}\n"

CASES = {
    "09.1 honest": ("09.1", LPM.format(check="<=", held=">=", key=KEY), 3),
    "09.1 blank": ("09.1", "def lpm_order(waiting, tree):\n    raise NotImplementedError()\n", 0),
    "09.1 no in-batch check": ("09.1", LPM.format(check="<", held="<", key=KEY).replace("< 32:", "< 0:", 1), None),
    "09.1 shared > 32": ("09.1", LPM.format(check="<=", held=">", key=KEY), None),
    "09.1 ties by name": ("09.1", LPM.format(check="<=", held=">=", key="(w[0] in held, -cached[w[0]], w[0])"), None),
    "10.1 honest": ("10.1", SALT.format("json.dumps([tenant, client_salt or ''])"), 3),
    "10.1 blank": ("10.1", "def tenant_extra_key(tenant, client_salt):\n    raise NotImplementedError()\n", 0),
    "10.1 trusts the client": ("10.1", SALT.format("client_salt or ''"), None),
    "10.1 concatenation": ("10.1", SALT.format("tenant + (client_salt or '')"), None),
    "10.1 str(hash(...))": ("10.1", SALT.format("str(hash((tenant, client_salt or '')))"), None),
}


@boxed
@pytest.mark.parametrize("name", sorted(CASES))
def test_grader_scores(name):
    assert_grader_score(*CASES[name])

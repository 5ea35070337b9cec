"""``python -m radixlab demo``: the tree lesson's ``run.py`` walkthrough, replayed live.

Requests A and B share the prefix ``['sys', 'prompt']``. Each is matched against the teaching tree,
its missing tokens get (simulated) KV, and it is inserted; then the tree lesson's three assertions are
checked on the real tree. Notebook 01_radix_tree runs the same steps cell by cell.
"""

from __future__ import annotations

from .tree import RadixTree

RULE = "=" * 60


def serve(tree: RadixTree, tokens: list[str]) -> tuple[int, dict[int, str]]:
    """Match ``tokens``, reuse the hit's KV, 'compute' KV for the miss, insert; returns (hit_len, kv)."""
    hit_len, hit_kv = tree.match_prefix(tokens)
    kv = {i: hit_kv[i] for i in range(hit_len)} if hit_kv else {}
    for i in range(hit_len, len(tokens)):
        kv[i] = tokens[i]  # the simulated KV of token i is the token itself
    tree.insert(tokens, kv)
    return hit_len, kv


def run(out=print) -> RadixTree:
    """Replay the walkthrough, printing as the tree lesson does; raises AssertionError if a check fails."""
    tree = RadixTree()
    out(RULE)
    out("The tree lesson's walkthrough — radix attention + copy-on-write check")
    out(RULE)
    requests = {"A": ["sys", "prompt", "A"], "B": ["sys", "prompt", "B"]}
    for name, tokens in requests.items():
        hit_len, kv = serve(tree, tokens)
        out("")
        out(f"Request {name} {tokens}:")
        out(f"  hit length={hit_len}  miss length={len(tokens) - hit_len}")
        out(f"  KV={kv}")

    out("")
    hit_len, _ = tree.match_prefix(requests["A"])
    out(f"[check ①] match_prefix(['sys','prompt','A']) → hit_len={hit_len}")
    assert hit_len == 3, f"expected hit_len=3, got {hit_len}"
    out(f"  ✓ hit length is right ({hit_len})")

    out("")
    shared = tree.find(["sys", "prompt"])
    out(f"[check ②] shared prefix node ref={shared.ref}")
    assert shared.ref == 2 and shared.value is None, f"expected ref=2, value=None, got {shared!r}"
    out(f"  ✓ shared prefix node ref={shared.ref} (both requests pass through it)")

    out("")
    keys = sorted(shared.children)
    out(f"[check ③] forked children keys={{{', '.join(repr(k) for k in keys)}}}")
    assert keys == ["A", "B"], f"expected children A and B, got {keys}"
    for k in keys:
        child = shared.children[k]
        last = child.value[max(child.value)]
        assert child.key == [k] and last == k
        out(f"  ✓ suffix node {k!r} is separate: key={child.key}, last KV token={last!r}")

    out("")
    hit_b, _ = tree.match_prefix(requests["B"])
    assert hit_b == 3
    out(f"[extra]    match_prefix(['sys','prompt','B']) → hit_len={hit_b} ✓")

    out("")
    out("Tree overview:")
    out(tree.format())
    out("")
    out("✅ the tree lesson's walkthrough passed")
    return tree

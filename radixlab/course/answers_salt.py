"""Instructor answer of exercise 10.1 (never imported by a notebook: the student edition cannot see it).

The grader computes 10.1's expected values from it, in its own process.
"""

from __future__ import annotations


def reference_tenant_extra_key(tenant: str, client_salt: str | None) -> str:
    """The namespace a trusted gateway sets: the authenticated tenant, narrowed by the client's salt.

    Length-prefixed, so no pair of strings can be mistaken for another pair: ("ab", "c") and
    ("a", "bc") give "2:ab|1:c" and "1:a|2:bc". No salt and an empty salt are the tenant's own namespace."""
    salt = client_salt or ""
    return f"{len(tenant)}:{tenant}|{len(salt)}:{salt}"

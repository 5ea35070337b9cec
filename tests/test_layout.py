"""The package layout: mem_cache/ never imports engine/, no module of the package over 400 lines,
and no probing of a cache's interface with getattr/hasattr where the interface is written down."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import radixlab

PKG = Path(radixlab.__file__).parent


def test_mem_cache_does_not_import_the_engine():
    code = ("import sys, radixlab.mem_cache, radixlab.sim.workloads; "
            "print(sorted(m for m in sys.modules if m.startswith('radixlab.engine')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_no_module_of_the_package_is_over_400_lines():
    long = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, long


def test_no_probing_of_the_prefix_cache_interface():
    probes = re.compile(r"(getattr|hasattr)\((self\.)?(tree_cache|cache)\b|hasattr\(req, |block_hashes\", None")
    for path in list((PKG / "mem_cache").glob("*.py")) + list((PKG / "engine").glob("*.py")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not probes.search(line), f"{path.relative_to(PKG)}:{i}: {line.strip()}"

"""The package layout: mem_cache/ never imports engine/, no module of mem_cache/ or sim/ over 400 lines,
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


def test_every_mem_cache_and_sim_module_is_under_400_lines():
    for folder in ("mem_cache", "sim"):
        for path in (PKG / folder).glob("*.py"):
            n = len(path.read_text(encoding="utf-8").splitlines())
            assert n <= 400, f"{path.relative_to(PKG)} has {n} lines"


def test_no_probing_of_the_prefix_cache_interface():
    probes = re.compile(r"(getattr|hasattr)\((self\.)?(tree_cache|cache)\b|hasattr\(req, |block_hashes\", None")
    for path in list((PKG / "mem_cache").glob("*.py")) + list((PKG / "engine").glob("*.py")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not probes.search(line), f"{path.relative_to(PKG)}:{i}: {line.strip()}"

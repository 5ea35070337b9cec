"""The wheel holds every module: build it from the tracked files and import each module from it.

An editable install hides a subpackage missing from the packaging list; a wheel does not. Packages
are found by setuptools (``radixlab*`` in pyproject.toml), and this test keeps it that way.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tracked_files() -> list[str]:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if (ROOT / f).is_file()]


def modern_setuptools() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


def test_wheel_contains_and_imports_every_module(tmp_path):
    src = tmp_path / "src"
    for f in tracked_files():  # a clean clone: only what git tracks
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    # Offline when the running setuptools can build it; else pip fetches setuptools>=77 from PyPI.
    isolation = ["--no-build-isolation"] if modern_setuptools() else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *isolation, "-w", str(tmp_path / "dist"),
                    str(src)], check=True, capture_output=True, timeout=600)
    wheel = next((tmp_path / "dist").glob("radixlab-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    source_modules = sorted(str(p.relative_to(src)) for p in (src / "radixlab").rglob("*.py"))
    missing = [m for m in source_modules if m not in names]
    assert not missing, f"modules missing from the wheel: {missing}"
    assert "radixlab/model/llama.py" in names and "radixlab/mem_cache/memory_pool.py" in names

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    modules = [m[:-3].replace("/", ".").removesuffix(".__init__") for m in source_modules]
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    mod = importlib.import_module(name)\n"
            f"    assert mod.__file__.startswith({str(site)!r}), (name, mod.__file__)\n"
            "print(len(sys.modules))\n")
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin",
                   "RADIXLAB_DEVICE": "cpu", "HOME": str(tmp_path)}, check=True, capture_output=True, timeout=300)

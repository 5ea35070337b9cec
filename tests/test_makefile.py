"""The Makefile refuses an old Python before it downloads anything."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_refuses_python_older_than_311_before_any_download(tmp_path):
    fake = tmp_path / "python3.10"
    fake.write_text('#!/bin/sh\ncase "$2" in *platform*) echo 3.10.12;; *) exit 1;; esac\n')
    fake.chmod(0o755)
    venv = tmp_path / "venv"
    proc = subprocess.run(["make", "-C", str(ROOT), f"{venv}/.radixlab-installed", f"VENV={venv}",
                           f"PYTHON={fake}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "needs Python 3.11 or newer" in proc.stdout + proc.stderr
    assert "3.10.12" in proc.stdout + proc.stderr
    assert not venv.exists(), "no virtual environment (and no torch download) for an old Python"

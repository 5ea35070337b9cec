"""``python -m radixlab doctor``: what a student pastes into a help request.

Versions are read from the installed packages' metadata, not by importing them: importing
JupyterLab alone takes seconds. Only torch is imported, to ask whether CUDA works (notebook 00
needs torch right after anyway).
"""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
import sys


def _version(dist: str) -> str:
    """The installed version of distribution ``dist``, without importing it."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def report(paths: bool = True) -> list[tuple[str, str]]:
    """(item, finding) pairs: Python, torch, device, Graphviz, Jupyter and widgets.

    ``paths=False`` leaves out where things are installed and the exact OS build (what a notebook
    that is stored and shared should show); the command line keeps them for help requests.
    """
    import torch

    from . import __version__
    from .device import default_device

    rows = [("radixlab", __version__),
            ("python", platform.python_version() + (f" ({sys.executable})" if paths else "")),
            ("platform", platform.platform() if paths else f"{platform.system()} {platform.machine()}"),
            ("torch", torch.__version__)]
    if torch.cuda.is_available():
        rows.append(("cuda", f"{torch.version.cuda}, {torch.cuda.get_device_name(0)}"))
    else:
        rows.append(("cuda", "not available (the course runs on the CPU)"))
    try:
        rows.append(("default device", str(default_device())))
    except ValueError as exc:
        rows.append(("default device", f"error: {exc}"))
    dot = shutil.which("dot")
    if dot:
        try:
            out = subprocess.run([dot, "-V"], capture_output=True, text=True, timeout=10)
            rows.append(("graphviz dot", (out.stderr or out.stdout).strip() + (f" ({dot})" if paths else "")))
        except Exception as exc:  # pragma: no cover - broken install
            rows.append(("graphviz dot", f"found at {dot} but failed: {exc}"))
    else:
        rows.append(("graphviz dot", "missing: trees are drawn as text (apt-get install graphviz)"))
    rows.append(("graphviz (python)", _version("graphviz")))
    for name in ("jupyterlab", "ipywidgets", "jupyterlab_widgets", "ipykernel", "nbval", "matplotlib"):
        rows.append((name, _version(name)))
    return rows


def show(paths: bool = True) -> None:
    """Print the report; notebook 00 calls ``show(paths=False)``."""
    # The header goes out first: the report takes a few seconds (importing PyTorch to ask about CUDA),
    # and a silent cell looks stuck (notebook 00).
    print("radixlab doctor", flush=True)
    rows = report(paths)
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")


def main() -> int:
    show()
    return 0

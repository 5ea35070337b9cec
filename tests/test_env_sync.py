"""environment.yml (conda, Binder) and pyproject.toml (pip) must list the same packages."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_TO_PIP = {"pytorch": "torch", "python-graphviz": "graphviz", "python-xxhash": "xxhash"}
CONDA_ONLY = {"python", "pip", "graphviz"}  # graphviz here is the binary, not the Python package


def _name_and_spec(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req.split("#")[0])
    return m.group(1).lower(), m.group(2).replace(" ", "")


def pip_requirements() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = list(data["project"]["dependencies"])
    for extra in data["project"]["optional-dependencies"].values():
        reqs += extra
    return dict(_name_and_spec(r) for r in reqs)


def conda_requirements() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    out = {}
    seen_binary = False
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            assert dep.get("pip") == ["-e ."], "the pip section should only install radixlab itself"
            continue
        name, spec = _name_and_spec(dep.replace("=", "==", 1) if re.match(r"^[\w\-]+=[^=]", dep) else dep)
        if name in CONDA_ONLY:
            seen_binary |= name == "graphviz"
            continue
        out[CONDA_TO_PIP.get(name, name)] = spec
    assert seen_binary, "environment.yml must install the Graphviz binary"
    return out


def test_same_packages_and_versions():
    assert pip_requirements() == conda_requirements()


def test_torch_install_path_is_pinned_in_makefile():
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH_SPEC  ?= torch==2.13.0\n" in makefile  # macOS, Windows: PyPI's torch is the CPU build
    # Linux: PyPI's torch is the CUDA build; the CPU build comes from PyTorch's CPU index
    assert "TORCH_SPEC  ?= torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu" in makefile

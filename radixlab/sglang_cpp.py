"""SGLang v0.5.17's experimental C++ radix tree, built once from the cached wheel, and its real caller.

The wheel ships the tree as source (``srt/mem_cache/cpp_radix_tree/``: ``tree_v2*.cpp/h``,
``common.h``; its ``radix_tree.py`` compiles them with ``torch.utils.cpp_extension.load`` on
import). Nothing of it is copied here: ``source_dir`` unpacks those files from the cached wheel
(``python -m radixlab fetch-sglang``) into the course cache, ``load`` compiles them there once
(g++ and ninja; ~2 minutes on 2 cores) with the flags ``radix_tree.py`` uses, and imports the
built library directly on every later call (as the model is converted once). ``load_cache``
imports the tree's real caller, ``radix_cache_cpp.py`` (``RadixCacheCpp``), unmodified, with its
``cpp_radix_tree.radix_tree`` module replaced by the library built here. ``bench tree`` times it;
notebook 11 reads the figures.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

from . import sglang_ref

PACKAGE = "sglang/srt/mem_cache/cpp_radix_tree/"
SOURCES = ("tree_v2_binding.cpp", "tree_v2_debug.cpp", "tree_v2.cpp")  # what radix_tree.py compiles
CFLAGS = ("-O3", "-std=c++20")  # and how
MODULE = "radix_tree_cpp"
HOW_TO_ENABLE = ("it needs SGLang's wheel (`python -m radixlab fetch-sglang`), a C++20 compiler (g++ >= 10: "
                 "`apt install g++`, or Xcode's command line tools) and ninja (`pip install ninja`, in radixlab's "
                 "`test` extra); then `python -m radixlab fetch-sglang --cpp` builds it once (~2 min) into the course cache")


class CppTreeUnavailable(RuntimeError):
    """SGLang's C++ tree cannot be loaded here; the message says why and how to enable it."""


def source_dir() -> Path:
    """``<cache>/sglang/sglang-0.5.17/sglang/srt/mem_cache/cpp_radix_tree/``, unpacked on first use."""
    root = sglang_ref.unpacked_dir()  # raises FileNotFoundError when the wheel is not cached
    marker = root / ".cpp_unpacked"
    if not marker.exists():
        with zipfile.ZipFile(sglang_ref.wheel_path()) as zf:
            for name in zf.namelist():
                if name.startswith(PACKAGE) and not name.endswith("/"):
                    zf.extract(name, root)
        marker.write_text("cpp_radix_tree")
    return root / PACKAGE


def build_dir() -> Path:
    """Where the library is built: one folder per torch version and Python (the library links both)."""
    import torch

    tag = f"torch{torch.__version__}-{sys.implementation.cache_tag}".replace("+", "_")
    return sglang_ref.cache_dir() / "sglang" / f"cpp_radix_tree-{tag}"


def _stamp(src: Path) -> str:
    """The sources, the flags and torch's version: a build is reused only while all three are unchanged."""
    import torch

    h = hashlib.sha256(f"{torch.__version__} {CFLAGS}".encode())
    for f in sorted(src.iterdir()):
        if f.suffix in (".cpp", ".h"):
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def _library() -> Path:
    return build_dir() / f"{MODULE}{'.pyd' if os.name == 'nt' else '.so'}"


def _ninja_dir() -> str | None:
    """The folder holding a ``ninja`` binary: the PATH's, or the ``ninja`` wheel's (unactivated venvs)."""
    found = shutil.which("ninja")
    if found:
        return str(Path(found).parent)
    try:
        import ninja  # the PyPI wheel
    except ImportError:
        return None
    return ninja.BIN_DIR if Path(ninja.BIN_DIR, "ninja").exists() else None


def toolchain_problem() -> str | None:
    """Why a build cannot start here (no compiler, no ninja), or None."""
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"no C++ compiler found (`{cxx}` is not on PATH)"
    if _ninja_dir() is None:
        return "no ninja found (neither on PATH nor the `ninja` wheel)"
    return None


_LOADED: types.ModuleType | None = None


def load(build: bool = True, verbose: bool = False) -> types.ModuleType:
    """The compiled ``radix_tree_cpp`` module (its ``RadixTree`` class), built on first use when ``build``.

    Raises ``CppTreeUnavailable`` naming what is missing and how to enable it."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    import torch  # the library links libtorch: torch's libraries must be loaded first

    try:
        src = source_dir()
    except FileNotFoundError as exc:
        raise CppTreeUnavailable(f"SGLang's C++ tree is unavailable: {exc}; {HOW_TO_ENABLE}") from None
    stamp, lib, out = _stamp(src), _library(), build_dir()
    if not (lib.exists() and (out / "stamp").exists() and (out / "stamp").read_text() == stamp):
        if not build:
            raise CppTreeUnavailable(f"SGLang's C++ tree is not built in {out}; {HOW_TO_ENABLE}")
        problem = toolchain_problem()
        if problem:
            raise CppTreeUnavailable(f"SGLang's C++ tree cannot be built: {problem}; {HOW_TO_ENABLE}")
        from torch.utils.cpp_extension import load as cpp_load

        out.mkdir(parents=True, exist_ok=True)
        path = os.environ.get("PATH", "")
        os.environ["PATH"] = _ninja_dir() + os.pathsep + path  # torch runs `ninja` from PATH
        try:
            cpp_load(name=MODULE, sources=[str(src / s) for s in SOURCES], extra_cflags=list(CFLAGS),
                     build_directory=str(out), verbose=verbose)
        except Exception as exc:  # a compiler error, a missing header: say so, the lane is skipped
            raise CppTreeUnavailable(f"building SGLang's C++ tree in {out} failed ({type(exc).__name__}: "
                                     f"{str(exc)[-500:]}); {HOW_TO_ENABLE}") from None
        finally:
            os.environ["PATH"] = path
        (out / "stamp").write_text(stamp)
    spec = importlib.util.spec_from_file_location(MODULE, lib)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _LOADED = mod
    return mod


def unavailable_reason(build: bool = False) -> str | None:
    """None when the tree loads (building it only if ``build``), else why not and how to enable it."""
    try:
        load(build=build)
    except CppTreeUnavailable as exc:
        return str(exc)
    return None


class _Allocator:
    """What ``RadixCacheCpp`` reads from its allocator: the device, the KV cache (unused) and ``free``."""

    device = "cpu"

    def __init__(self) -> None:
        self.freed = 0

    def get_kvcache(self) -> None:
        return None

    def free(self, indices: Any) -> None:
        self.freed += len(indices)


_CALLER: types.ModuleType | None = None


def load_cache(build: bool = True) -> types.ModuleType:
    """SGLang's ``radix_cache_cpp`` module (``RadixCacheCpp``), unmodified, driving the library built here.

    Its imports of the tree module resolve to ``load()``'s library; ``radix_cache``'s ``RadixKey``
    and ``base_prefix_cache``'s params come from the wheel (a copy separate from ``sglang_ref.load``'s)."""
    global _CALLER
    if _CALLER is None:
        lib = load(build=build)
        stub = {"sglang.srt.mem_cache.cpp_radix_tree": {},
                "sglang.srt.mem_cache.cpp_radix_tree.radix_tree": {"RadixTreeCpp": lib.RadixTree,
                                                                   "TreeNodeCpp": object, "IOHandle": object}}
        with sglang_ref.stubbed_sglang(sglang_ref.unpacked_dir(), stub) as modules:
            _CALLER = importlib.import_module("sglang.srt.mem_cache.radix_cache_cpp")
            _CALLER.MatchPrefixParams = modules["sglang.srt.mem_cache.base_prefix_cache"].MatchPrefixParams
            _CALLER.EvictParams = modules["sglang.srt.mem_cache.base_prefix_cache"].EvictParams
    return _CALLER


def new_cache(page_size: int = 1) -> Any:
    """A standalone ``RadixCacheCpp`` as SGLang's server builds it without hierarchical cache."""
    mod = load_cache()
    params = types.SimpleNamespace(disable=False, enable_kv_cache_events=False, token_to_kv_pool_allocator=_Allocator(),
                                   req_to_token_pool=None, page_size=page_size, tp_cache_group=None,
                                   enable_metrics=False)
    server_args = types.SimpleNamespace(hicache_write_policy="write_through_selective", enable_hierarchical_cache=False)
    return mod.RadixCacheCpp(params, server_args)


def main(argv: list[str] | None = None) -> int:
    """``python -m radixlab fetch-sglang --cpp``: build (or find) the C++ tree and say where it is."""
    try:
        load(build=True, verbose="--verbose" in (argv or []))
    except CppTreeUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"SGLang's C++ radix tree: {_library()}")
    return 0

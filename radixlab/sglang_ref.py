"""SGLang v0.5.17's own Python ``RadixCache``, imported from its PyPI wheel, as a reference.

Used by the differential test (tests/test_sglang_differential.py), ``python -m radixlab bench
tree --sglang`` and notebook 11_performance_boundaries. Nothing from SGLang is copied here: the
wheel (``pip download sglang==0.5.17 --no-deps``, ~22 MB) is fetched once into the model cache
folder (``RADIXLAB_CACHE``, default ``~/.cache/radixlab``) by ``python -m radixlab fetch-sglang``
(``make setup`` runs it), its ``srt/mem_cache/*.py`` files are unpacked next to it, and
``load()`` imports ``radix_cache.py`` and the five modules it needs (``base_prefix_cache``,
``cache_init_params``, ``events``, ``utils``, ``evict_policy``) unmodified. Only what those
files import for GPU kernels, metrics, server state and KV events is replaced by small stub
modules defined below (none of it runs on the paths we call: metrics and KV events are off).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import subprocess
import sys
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

SGLANG_VERSION = "0.5.17"
REAL_MODULES = ("radix_cache", "base_prefix_cache", "cache_init_params", "events", "utils", "evict_policy")


def cache_dir() -> Path:
    """The model cache folder (``$RADIXLAB_CACHE`` or ``~/.cache/radixlab``), shared with the SmolLM2 files."""
    from .model.smollm2 import cache_dir as model_cache_dir

    return model_cache_dir()


def wheel_path() -> Path | None:
    """The cached sglang wheel, or None when it has not been fetched."""
    found = sorted((cache_dir() / "sglang").glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    return found[0] if found else None


def fetch(quiet: bool = False) -> Path:
    """Download the wheel into the cache folder (no-op when present) and unpack mem_cache/."""
    wheel = wheel_path()
    if wheel is None:
        dest = cache_dir() / "sglang"
        dest.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", f"sglang=={SGLANG_VERSION}", "--no-deps",
               "--only-binary=:all:", "-d", str(dest)] + (["--quiet"] if quiet else [])
        subprocess.run(cmd, check=True)
        wheel = wheel_path()
        if wheel is None:
            raise FileNotFoundError(f"pip download left no sglang-{SGLANG_VERSION} wheel in {dest}")
    unpacked_dir(wheel)
    return wheel


def unpacked_dir(wheel: Path | None = None) -> Path:
    """``<cache>/sglang/sglang-0.5.17/`` holding ``sglang/srt/mem_cache/*.py`` (unpacked on first use)."""
    wheel = wheel or wheel_path()
    if wheel is None:
        raise FileNotFoundError(missing_reason())
    root = wheel.parent / f"sglang-{SGLANG_VERSION}"
    marker = root / ".unpacked"
    if not marker.exists():
        prefix = "sglang/srt/mem_cache/"
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                rest = name[len(prefix):] if name.startswith(prefix) else None
                if (rest and rest.endswith(".py") and "/" not in rest) or name.endswith(".dist-info/METADATA"):
                    zf.extract(name, root)
        marker.write_text(wheel.name)
    return root


def missing_reason() -> str:
    return (f"SGLang {SGLANG_VERSION}'s wheel is not in {cache_dir() / 'sglang'}: run `make setup` or "
            f"`python -m radixlab fetch-sglang` once (needs PyPI; RADIXLAB_CACHE moves the folder)")


# ---------------------------------------------------------------------------------------------
# Stubs: the modules radix_cache.py's imports reach that would pull in the server
# ---------------------------------------------------------------------------------------------


def _raiser(what: str):
    def f(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"radixlab stub: {what}")
    return f


def _stub_modules() -> dict[str, dict[str, Any]]:
    import enum

    class StorageMedium(enum.Enum):
        GPU = "GPU"
        CPU = "CPU"

    class _Event:
        def __init__(self, **kwargs: Any) -> None:
            self.__dict__.update(kwargs)

    kernels = ("get_mla_kv_buffer_kernel", "get_mla_kv_buffer_triton", "set_mla_kv_buffer_fp8_quant_kernel",
               "set_mla_kv_buffer_kernel", "set_mla_kv_buffer_triton", "set_mla_kv_buffer_triton_fp8_quant",
               "set_mla_kv_scale_buffer_kernel", "set_mla_kv_scale_buffer_triton")
    return {
        # type annotations only (base_prefix_cache.py)
        "sglang.srt.mem_cache.allocator": {"BaseTokenToKVPoolAllocator": type("BaseTokenToKVPoolAllocator", (), {})},
        "sglang.srt.mem_cache.memory_pool": {"ReqToTokenPool": type("ReqToTokenPool", (), {})},
        # metrics (enable_metrics=False: never called)
        "sglang.srt.observability": {},
        "sglang.srt.observability.metrics_collector": {
            "STAT_LOGGER_ROLE_RADIX_CACHE": "radix_cache",
            "RadixCacheMetricsCollector": type("RadixCacheMetricsCollector", (), {}),
            "resolve_collector_class": _raiser("metrics are off")},
        "sglang.srt.runtime_context": {"get_observability": _raiser("metrics are off"),
                                       "get_server_args": _raiser("no server")},
        # KV events (enable_kv_cache_events=False: never constructed)
        "sglang.srt.disaggregation": {},
        "sglang.srt.disaggregation.kv_events": {
            "StorageMedium": StorageMedium, "AllBlocksCleared": type("AllBlocksCleared", (_Event,), {}),
            "BlockRemoved": type("BlockRemoved", (_Event,), {}), "BlockStored": type("BlockStored", (_Event,), {})},
        # mem_cache/utils.py's imports: env registry, native hash, GPU kernels (unused on our paths)
        "sglang.srt.environ": {"envs": types.SimpleNamespace()},
        "sglang.srt.mem_cache.cpp_utils": {},
        "sglang.srt.mem_cache.cpp_utils.native_hash": {"get_native_hash": _raiser("kv events are off")},
        "sglang.kernels": {},
        "sglang.kernels.ops": {},
        "sglang.kernels.ops.kvcache": {},
        "sglang.kernels.ops.kvcache.mla_buffer": {k: _raiser("no GPU kernels") for k in kernels},
    }


@dataclass
class SGLangRadix:
    """What ``load`` returns: SGLang's modules and the classes a caller needs."""

    radix_cache: types.ModuleType  # sglang.srt.mem_cache.radix_cache
    RadixCache: type
    RadixKey: type
    CacheInitParams: type
    MatchPrefixParams: type
    InsertParams: type
    EvictParams: type
    version: str
    radix_cache_sha256: str
    real_files: dict[str, str]

    def new_cache(self, page_size: int = 1, eviction_policy: str = "lru", allocator: Any = None) -> Any:
        """A standalone SGLang RadixCache (no pools; ``allocator`` receives freed slots)."""
        return self.RadixCache(self.CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator or RecordingAllocator(),
            page_size=page_size, eviction_policy=eviction_policy))


class RecordingAllocator:
    """Stands in for SGLang's token-to-KV allocator: records the slots the cache frees."""

    device = "cpu"

    def __init__(self) -> None:
        self.freed: list[int] = []

    def free(self, indices: Any) -> None:
        self.freed.extend(int(i) for i in indices)

    def free_segment(self, indices: Any, start_pos: int = 0) -> None:
        self.free(indices)

    def free_segments(self, segments: Any) -> None:
        for indices, _ in segments:
            self.free(indices)


@contextlib.contextmanager
def stubbed_sglang(root: Path, extra: dict[str, dict[str, Any]] | None = None) -> Iterator[dict]:
    """Make ``sglang.*`` importable from the unpacked wheel at ``root`` for the ``with`` body, with
    the stub modules (and ``extra`` ones); yields ``sys.modules``. Afterwards every ``sglang``
    module leaves ``sys.modules`` again (the imported module objects stay alive)."""
    real = root / "sglang"
    if any(m == "sglang" or m.startswith("sglang.") for m in sys.modules):
        raise RuntimeError("an sglang module is already imported in this process: cannot load the reference")
    try:
        # Packages whose __init__ must not run (they import the server): empty modules whose
        # __path__ points into the unpacked wheel, so the real files below them import normally.
        for name, path in (("sglang", real), ("sglang.srt", real / "srt"),
                           ("sglang.srt.mem_cache", real / "srt" / "mem_cache")):
            mod = types.ModuleType(name)
            mod.__path__ = [str(path)]
            sys.modules[name] = mod
        for name, attrs in {**_stub_modules(), **(extra or {})}.items():
            mod = types.ModuleType(name)
            mod.__dict__.update(attrs)
            mod.__path__ = []  # importable as a package too
            sys.modules[name] = mod
        yield sys.modules
    finally:
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]  # keep the process clean; our module objects stay alive


_LOADED: SGLangRadix | None = None


def load() -> SGLangRadix:
    """Import SGLang's RadixCache from the cached wheel (once per process)."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    root = unpacked_dir()
    real = root / "sglang"
    with stubbed_sglang(root) as modules:
        rc = importlib.import_module("sglang.srt.mem_cache.radix_cache")
        bpc = importlib.import_module("sglang.srt.mem_cache.base_prefix_cache")
        cip = importlib.import_module("sglang.srt.mem_cache.cache_init_params")
        real_files = {}
        for m in REAL_MODULES:
            f = Path(modules[f"sglang.srt.mem_cache.{m}"].__file__).resolve()
            if not f.is_relative_to(real.resolve()):
                raise RuntimeError(f"sglang.srt.mem_cache.{m} did not come from the wheel ({f})")
            real_files[m] = str(f)
    version = "?"
    for meta in root.glob("sglang-*.dist-info/METADATA"):
        for line in meta.read_text().splitlines():
            if line.startswith("Version:"):
                version = line.split(":", 1)[1].strip()
    sha = hashlib.sha256(Path(real_files["radix_cache"]).read_bytes()).hexdigest()[:16]
    _LOADED = SGLangRadix(rc, rc.RadixCache, rc.RadixKey, cip.CacheInitParams, bpc.MatchPrefixParams,
                          bpc.InsertParams, bpc.EvictParams, version, sha, real_files)
    return _LOADED


class CounterClock:
    """Replaces ``time`` inside SGLang's radix_cache module: ``monotonic()`` counts calls.

    SGLang stamps ``last_access_time``/``creation_time`` with ``time.monotonic()`` (once per
    match/insert walk, once per node it creates); radixlab uses one logical tick per walk and breaks
    ties by node id. A counter keeps SGLang's order of events and makes it reproducible.
    """

    def __init__(self) -> None:
        import time as _time

        self.now = 0
        self.perf_counter = _time.perf_counter

    def monotonic(self) -> float:
        self.now += 1
        return float(self.now)


def use_counter_clock(sg: SGLangRadix) -> CounterClock:
    clock = CounterClock()
    sg.radix_cache.time = clock  # the module's global ``time``: TreeNode() and the helpers read it
    return clock


def main(argv: list[str] | None = None) -> int:
    """``python -m radixlab fetch-sglang``: fetch the reference wheel into the cache folder."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m radixlab fetch-sglang", description=fetch.__doc__)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--check", action="store_true", help="load it and print what was imported")
    args = ap.parse_args(argv)
    try:
        wheel = fetch(quiet=args.quiet)
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"could not fetch sglang=={SGLANG_VERSION}: {exc}\n"
              "the differential test will be skipped until it is fetched", file=sys.stderr)
        return 1
    print(f"sglang wheel: {wheel}")
    if args.check:
        sg = load()
        print(f"loaded SGLang {sg.version} radix_cache.py sha256[:16]={sg.radix_cache_sha256}")
    return 0

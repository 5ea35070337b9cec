"""What a submission may not leave behind in radixlab's own files: forged bytecode that would run in
place of its source, any change to the package (``package_fingerprint``) and, where no sandbox runs,
to the whole environment (``environment_fingerprint``, ``unowned_startup_files``)."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from . import sandbox


# Files that are data, not code: a concurrent ``bench tree --save`` may rewrite a record while grading.
_DATA_SUFFIXES = (".json", ".png", ".svg", ".txt", ".md", ".csv")


def forged_bytecode(root: Path | None = None) -> list[str]:
    """The ``.pyc`` files under ``root`` that Python would load in place of their source (right
    magic number, header matching the source) but that do not hold what the source compiles to."""
    root = root or Path(__file__).resolve().parents[1]
    return sorted(str(p.relative_to(root)) for p in root.rglob("__pycache__/*.pyc") if _forged_pyc(p))


def _forged_pyc(pyc: Path) -> bool:
    import importlib.util
    import marshal

    try:
        source = Path(importlib.util.source_from_cache(str(pyc)))
        data, src = pyc.read_bytes(), source.read_bytes()
        stat = source.stat()
    except (ValueError, NotImplementedError, OSError):  # not a name Python reads, or no source: never loaded
        return False
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return False  # another Python's bytecode: this one recompiles
    flags = int.from_bytes(data[4:8], "little")
    if flags == 0 and data[8:16] != ((int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                                     + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")):
        return False  # stale (the source changed since): Python recompiles instead of loading it
    if flags & 0b10 and data[8:16] != importlib.util.source_hash(src):
        return False  # a checked hash-based .pyc of other source: Python recompiles
    optimize = int(pyc.name.split(".opt-")[1].split(".")[0]) if ".opt-" in pyc.name else 0
    try:
        return marshal.loads(data[16:]) != compile(src, str(source), "exec", dont_inherit=True, optimize=optimize)
    except Exception:  # unreadable bytecode, or source that no longer compiles: not what it should be
        return True


def package_fingerprint(root: Path | None = None) -> str:
    """A hash of radixlab's installed package: the grader checks that no submission changed it.

    Every code file counts (a new, changed or removed ``.py``, a sourceless ``.pyc``, a native
    module), every symbolic link (by its target: a linked folder is not walked into, and would
    hide what it points to), and every ``.pyc`` that Python would load but that is not what its
    source compiles to (``forged_bytecode``: it would run in place of the source in the next
    process). Honest bytecode written meanwhile (a notebook kernel importing radixlab) does not
    count; neither do data files (``_DATA_SUFFIXES``). Executors write no bytecode
    (``runner.executor_argv``), nor does the grader once grading starts (``main``).
    """
    import hashlib

    root = root or Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False
        dirnames.sort()
        here = Path(dirpath)
        for name in sorted(dirnames + filenames):
            path = here / name
            try:
                if path.is_symlink():
                    entry = "link to " + os.readlink(path)
                elif name in dirnames or path.suffix in _DATA_SUFFIXES:
                    continue
                elif here.name == "__pycache__":
                    if not _forged_pyc(path):
                        continue
                    entry = "forged bytecode"
                else:
                    entry = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError as exc:  # vanished or unreadable meanwhile: a change
                entry = f"unreadable ({type(exc).__name__})"
            h.update(f"{path.relative_to(root)}\0{entry}\0".encode())
    return h.hexdigest()


# -- 3. without a sandbox: watch the whole environment ------------------------------------------------

STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")


def environment_fingerprint() -> str:
    """A hash of everything an unsandboxed executor could change for the next run: every file under
    the interpreter's ``sys.path`` folders and site-packages, by name, size, inode and change time
    (which no process can set back), and the content of every ``.pth`` and ``sitecustomize`` file,
    the user site folder included."""
    import site

    h = hashlib.sha256()
    prefixes = (sys.base_prefix, sys.prefix)  # the interpreter's and the environment's own folders, not the cwd
    dirs = {p for p in sys.path if p and os.path.isdir(p) and p.startswith(prefixes)} | set(sandbox.site_packages())
    try:
        dirs.add(site.getusersitepackages())
    except Exception:  # noqa: BLE001 - no user site in this build
        pass
    for d in sorted(dirs):
        h.update(f"dir {d}\0".encode())
        for dirpath, dirnames, filenames in os.walk(d):
            dirnames.sort()
            for name in sorted(filenames + dirnames):
                p = os.path.join(dirpath, name)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if "__pycache__" in dirpath and name.endswith(".pyc") and dirpath.startswith(str(sandbox.ROOT)):
                    continue  # honest bytecode of radixlab (package_fingerprint checks it for forgery)
                h.update(f"{p}\0{st.st_size}\0{st.st_ino}\0{st.st_ctime_ns}\0".encode())
                if name.endswith(".pth") or name in STARTUP_FILES:
                    try:
                        h.update(Path(p).read_bytes())
                    except OSError:
                        h.update(b"unreadable")
    return h.hexdigest()


def unowned_startup_files() -> list[str]:
    """``.pth``, ``sitecustomize`` and ``usercustomize`` files that Python runs at startup (in
    site-packages, the user site or the standard library) and that no installed distribution's
    RECORD lists: one a submission planted in an earlier, unsandboxed run would be among them."""
    import importlib.metadata as md
    import site

    dirs = list(sandbox.site_packages())
    try:
        dirs.append(site.getusersitepackages())
    except Exception:  # noqa: BLE001
        pass
    dirs += [p for p in sys.path if p and p.startswith(sys.base_prefix) and os.path.isdir(p)]
    found = [os.path.normpath(os.path.join(d, f)) for d in dict.fromkeys(dirs) if os.path.isdir(d)
             for f in os.listdir(d) if f.endswith(".pth") or f in STARTUP_FILES]
    if not found:
        return []
    owned = set()
    for dist in md.distributions():
        for f in dist.files or ():
            if str(f).endswith(".pth") or os.path.basename(str(f)) in STARTUP_FILES:
                owned.add(os.path.normpath(str(dist.locate_file(f))))
    return sorted(p for p in found if p not in owned)

"""Where graded code runs: a stripped copy of radixlab, inside an OS sandbox where one exists.

``build_copy`` writes, for one exercise, a copy of radixlab that holds only the modules the exercise's
``drive`` imports (its import closure), with the spec's ``strip`` targets deleted from the source
(modules left out, functions, classes and methods removed from the copied modules' syntax trees)
and every import of what is gone removed with them. The grader's own modules (``answers_*``,
``exercises``, ``grade``, ``runner``, this module) never exist in a copy. The executor imports that
copy and nothing else of the repository, so the reference behaviour is not forbidden there but absent.

``executor_command`` starts the executor under bubblewrap (``bwrap``) where it works: read-only
binds of the interpreter and the environment's site-packages (not the repository around them), the
copy read-only, a fresh ``/tmp``, no network, its own PID namespace (it cannot signal the grader),
nothing it writes outliving the run. Python starts with ``-I -S`` and an explicit ``sys.path``, so
no ``.pth`` file or ``sitecustomize`` runs. Without bubblewrap (macOS, Windows, a container without
user namespaces, or ``RADIXLAB_GRADE_SANDBOX=off``) the executor runs unsandboxed on the same copy;
the grader says so in every report and checks the whole environment for changes between submissions
(``tamper.environment_fingerprint``).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Iterable

PACKAGE = "radixlab"
ROOT = Path(__file__).resolve().parents[1]  # radixlab/
NEVER = ("radixlab.course.answers", "radixlab.course.exercises", "radixlab.course.grade",
         "radixlab.course.runner", "radixlab.course.sandbox", "radixlab.course.lesson", "radixlab.course.tamper",
         "radixlab.course.report", "radixlab.course.messages",
         "radixlab.course.procs")
"""Module name prefixes that no copy holds: the answers, the exercise registry and the grader."""
COURSE = "radixlab.course"  # the course's own checks and answers: told apart by the check itself
COPY_MOUNT = "/radixlab-copy"  # where the copy appears inside the sandbox


# -- 1. the copy --------------------------------------------------------------------------------------


def _file_of(module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    base = ROOT.parent.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def _is_package(module: str) -> bool:
    f = _file_of(module)
    return f is not None and f.name == "__init__.py"


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, tree: ast.AST) -> set[str]:
    """The radixlab modules ``module`` may import (nested imports included: they run when called)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names if _file_of(f"{target}.{a.name}")}
            found |= {_origin(target, a.name) for a in node.names if a.name != "*"}
    return {m for m in found if m.split(".")[0] == PACKAGE and _file_of(m)}


def _absent(module: str, strip: Iterable[str]) -> bool:
    gone = [s for s in strip if ":" not in s]
    return module.startswith(NEVER) or any(module == g or module.startswith(g + ".") for g in gone)


def closure(roots: Iterable[str], strip: Iterable[str] = ()) -> set[str]:
    """The radixlab modules importing ``roots`` can reach (package ``__init__`` files are reduced,
    not followed), without the absent ones."""
    strip = tuple(strip)
    seen: set[str] = set()
    todo = [r for r in roots if not _absent(r, strip)]
    while todo:
        m = todo.pop()
        if m in seen or _absent(m, strip) or _file_of(m) is None:
            continue
        seen.add(m)
        if not _is_package(m):
            tree = ast.parse(_file_of(m).read_text(encoding="utf-8"))
            for path in _targets(strip).get(m, ()):  # what a stripped function imports is not needed
                _remove(tree.body, path)
            todo += _imports(m, tree)
    parents = {".".join(m.split(".")[:k]) for m in seen for k in range(1, m.count(".") + 1)}
    return seen | parents


def _targets(strip: Iterable[str]) -> dict[str, set[tuple[str, ...]]]:
    """{module: {qualname parts}} for the ``module:qualname`` targets."""
    out: dict[str, set[tuple[str, ...]]] = {}
    for s in strip:
        if ":" in s:
            module, _, qual = s.partition(":")
            out.setdefault(module, set()).add(tuple(qual.split(".")))
    return out


def _binds(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _remove(body: list[ast.stmt], path: tuple[str, ...]) -> bool:
    """Remove the definition ``path`` (a qualname's parts) from ``body``; True when found."""
    found = False
    for node in list(body):
        if path[0] in _binds(node):
            if len(path) == 1:
                body.remove(node)
                found = True
            elif isinstance(node, ast.ClassDef):
                found = _remove(node.body, path[1:]) or found
                node.body = node.body or [ast.Pass()]
    return found


@lru_cache(maxsize=256)
def _reexport(package: str, name: str) -> tuple[str, str] | None:
    """(module, name) that ``package``'s ``__init__`` imports ``name`` from, None if it defines it."""
    tree = ast.parse(_file_of(package).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if (a.asname or a.name) == name and a.name != "*":
                    return _absolute(package, node), a.name
    return None


def _origin(module: str, name: str) -> str:
    """The module that defines ``name`` imported from ``module``, following package re-exports
    (``from ..mem_cache import RadixCache`` needs ``radixlab.mem_cache.radix_cache``)."""
    seen = set()
    while _is_package(module) and not _file_of(f"{module}.{name}") and (module, name) not in seen:
        seen.add((module, name))
        source = _reexport(module, name)
        if source is None:
            break
        module, name = source
    return module


class _DropImports(ast.NodeTransformer):
    """Remove imports of absent modules and of names stripped from present ones."""

    def __init__(self, module: str, present: set[str], stripped: dict[str, set[tuple[str, ...]]]):
        self.module, self.present, self.stripped = module, present, stripped

    def _gone(self, module: str, name: str | None = None) -> bool:
        if module.split(".")[0] != PACKAGE:
            return False
        if name is None:
            return module not in self.present
        sub = f"{module}.{name}"
        if _file_of(sub):
            return sub not in self.present
        if module not in self.present or (name,) in self.stripped.get(module, set()):
            return True
        if _is_package(module):  # a name a package's __init__ re-exports is gone when its source is
            source = _reexport(module, name)
            return source is not None and self._gone(*source)
        return False

    def visit_Import(self, node: ast.Import) -> ast.AST | None:
        node.names = [a for a in node.names if not self._gone(a.name)]
        return node if node.names else ast.Pass()

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        target = _absolute(self.module, node)
        node.names = [a for a in node.names if a.name == "*" and not self._gone(target)
                      or a.name != "*" and not self._gone(target, a.name)]
        return node if node.names else ast.Pass()


def stripped_source(module: str, present: set[str], strip: Iterable[str]) -> str:
    """``module``'s source with the strip targets and the imports of absent things removed."""
    tree = ast.parse(_file_of(module).read_text(encoding="utf-8"))
    targets = _targets(strip)
    for path in targets.get(module, ()):
        if not _remove(tree.body, path):
            raise LookupError(f"strip target {module}:{'.'.join(path)} not found")
    tree = _DropImports(module, present, targets).visit(tree)
    gone = {p[0] for p in targets.get(module, ()) if len(p) == 1}
    for node in tree.body:  # __all__ may not name what is gone
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets) \
                and isinstance(node.value, (ast.List, ast.Tuple)):
            node.value.elts = [e for e in node.value.elts if not (isinstance(e, ast.Constant) and e.value in gone)]
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"


def build_copy(roots: Iterable[str], strip: Iterable[str], dest: Path) -> Path:
    """Write the stripped copy of radixlab for ``roots`` (the drive's module) under ``dest``; returns
    ``dest`` (the folder to put on ``sys.path``)."""
    strip = tuple(strip)
    for s in strip:
        if ":" not in s and _file_of(s) is None:
            raise LookupError(f"strip target {s} is not a radixlab module")
    present = closure(roots, strip)
    for module in sorted(present):
        f = _file_of(module)
        out = dest.joinpath(*module.split(".")) / "__init__.py" if f.name == "__init__.py" else \
            dest.joinpath(*module.split(".")).with_suffix(".py")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(stripped_source(module, present, strip), encoding="utf-8")
    for path in sorted(dest.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)
    return dest


def remove_copy(dest: Path) -> None:
    for path in dest.rglob("*"):
        if path.is_dir():
            path.chmod(0o755)
    if dest.exists():
        dest.chmod(0o755)
    shutil.rmtree(dest, ignore_errors=True)


# -- 2. the sandbox -----------------------------------------------------------------------------------


def _python() -> str:
    return os.path.realpath(sys.executable)


def python_path(copy: str) -> list[str]:
    """The executor's whole ``sys.path``: the copy, the standard library, the site-packages folders."""
    stdlib = [p for p in sys.path if p and (p.endswith(".zip") or p.startswith(sys.base_prefix))
              and "site-packages" not in p]
    return [copy] + stdlib + site_packages()


def site_packages() -> list[str]:
    """The environment's site-packages (radixlab's own checkout excluded: it is never bound)."""
    found = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    found += [p for p in sys.path if p.endswith("site-packages")]
    out = []
    for p in found:
        if os.path.isdir(p) and p not in out:
            out.append(p)
    return out


def _bwrap() -> str | None:
    if os.environ.get("RADIXLAB_GRADE_SANDBOX", "").lower() in ("off", "0", "no", "none"):
        return None
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("bwrap")


def _mounts() -> list[str]:
    """Read-only binds: system libraries, the interpreter's prefix, site-packages (only those folders)."""
    args: list[str] = []
    for d in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/passwd", "/etc/nsswitch.conf"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    for d in [sys.base_prefix, os.path.dirname(_python())] + site_packages():
        if os.path.isdir(d) and not any(d == p or d.startswith(p.rstrip("/") + "/") for p in ("/usr", "/lib", "/bin")):
            args += ["--ro-bind", d, d]
    return args


def sandbox_command(copy: Path, argv: list[str]) -> list[str]:
    """``argv`` under bubblewrap, with ``copy`` read-only at ``COPY_MOUNT``."""
    return [_bwrap() or "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
            *_mounts(), "--ro-bind", str(copy), COPY_MOUNT, "--tmpfs", "/tmp", "--proc", "/proc",
            "--dev", "/dev", "--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--", *argv]


def executor_argv(program: str) -> list[str]:
    """The executor's interpreter command: isolated (``-I``), no ``site`` (``-S``: no ``.pth`` runs),
    no bytecode written (``-B``)."""
    return [_python(), "-I", "-S", "-B", "-c", program]


@lru_cache(maxsize=1)
def sandbox_works() -> str:
    """'' when bubblewrap runs here, else why not (the reports say so)."""
    if not _bwrap():
        if os.environ.get("RADIXLAB_GRADE_SANDBOX", "").lower() in ("off", "0", "no", "none"):
            return "turned off (RADIXLAB_GRADE_SANDBOX=off)"
        return "bubblewrap (bwrap) is not installed" if sys.platform.startswith("linux") else \
            f"no sandbox on {sys.platform}"
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"radixlab-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        cmd = sandbox_command(probe, executor_argv("import sys; print('ok')"))
        r = subprocess.run(cmd, capture_output=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
        if r.returncode == 0 and r.stdout.strip() == b"ok":
            return ""
        return f"bubblewrap failed here ({r.stderr.decode(errors='replace').strip()[:200] or r.returncode})"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap failed here ({type(exc).__name__}: {exc})"
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def sandboxed() -> bool:
    return sandbox_works() == ""


# -- 4. what the check cell tells the student before they hand in -----------------------------------


@lru_cache(maxsize=32)
def _copy_modules(roots: tuple[str, ...], strip: tuple[str, ...]) -> frozenset[str]:
    return frozenset(closure(roots, strip))


def outside_copy(roots: tuple[str, ...], strip: tuple[str, ...], fn: object) -> str:
    """What ``fn`` uses from radixlab that the grader's copy lacks ('' when nothing): the names its
    code reads from its module's globals (helpers' too) that are radixlab modules or objects of a
    module absent from the copy, or a stripped function itself; and, for a student's function (one
    defined in a notebook, ``__main__``), anything of ``radixlab.course`` (the course's checks and answers) and a stripped method read
    as an attribute of its own class (``RadixTree()._split``)."""
    present = _copy_modules(tuple(roots), tuple(strip))
    stripped = {s.replace(":", ".") for s in strip if ":" in s}
    methods = set()  # (module, class, method) of each stripped method
    for target in strip:
        module, _, qual = target.partition(":")
        if "." in qual:
            methods.add((module, *qual.rsplit(".", 1)))
    root = getattr(fn, "__func__", fn)
    students = getattr(root, "__module__", None) == "__main__"  # defined in a notebook's kernel
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        f = getattr(f, "__func__", f)
        code, env = getattr(f, "__code__", None), getattr(f, "__globals__", None)
        if code is None or env is None or id(code) in seen:
            continue
        seen.add(id(code))
        names, stack = set(), [code]
        while stack:
            c = stack.pop()
            names |= set(c.co_names)
            stack += [k for k in c.co_consts if hasattr(k, "co_names")]
        for name in sorted(names):
            value = env.get(name)
            if value is None:
                continue
            module = value.__name__ if isinstance(value, type(os)) else getattr(value, "__module__", None)
            if students and isinstance(module, str) and (module == COURSE or module.startswith(COURSE + ".")):
                return (f"{module} (your code uses it as {name}: the course's checks and answers are not part of "
                        "an answer, and the grader's copy of radixlab does not hold them)")
            if students and isinstance(value, type):
                for mod, cls, attr in methods:
                    if attr in names and value.__module__ == mod and value.__qualname__ == cls:
                        return (f"{mod}.{cls}.{attr} (your code calls it on {name}, and the grader's copy of "
                                "radixlab for this exercise does not hold it)")
            if not isinstance(module, str) or module.split(".")[0] != PACKAGE or module.startswith(COURSE):
                todo.append(value) if callable(value) else None
                continue
            qual = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
            if module not in present or qual in stripped:
                return (f"{qual.strip('.') if qual in stripped else module} (your code uses it as {name}, and the "
                        "grader's copy of radixlab for this exercise does not hold it)")
    return ""

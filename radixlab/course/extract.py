"""What the grader runs of a submission: the exercise function and only what it depends on.

``extract`` reads a submission (in the grader's process, never executing it) and picks the top-level
statements the exercise's function needs: its ``def``, and transitively the imports, helper
functions, classes and assignments whose names it uses (the last binding of each name in the
notebook, as after "Run All"). Nothing else runs: an exploration cell that patches radixlab, appends
to a results list or prints a fake verdict is simply not part of the graded program.

``review`` then applies the "write your own" rule to the student-written statements of that program
(statements that are not course text): no name from the exercise's ``forbidden`` list (radixlab's
own implementation of the answer), no import from ``radixlab.course``, no patching of modules or
classes the student did not define, no reflection or dynamic code (``exec``, ``getattr`` with a
computed name, ``__dict__``, ``sys.modules`` …). Both run before any student code does.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Iterable

DYNAMIC_CALLS = {"exec", "eval", "compile", "__import__", "globals", "vars", "locals", "setattr", "delattr",
                 "breakpoint", "open"}
DYNAMIC_MODULES = {"importlib", "inspect", "ctypes", "gc", "builtins", "sys", "os", "subprocess", "types",
                   "runpy", "pickle", "marshal", "signal", "threading", "_thread", "multiprocessing", "atexit",
                   "IPython", "pathlib", "shutil", "tempfile", "io", "socket", "asyncio", "concurrent",
                   "site", "sysconfig", "code", "codeop", "posix", "nt", "pty", "resource", "faulthandler",
                   "traceback", "copyreg", "weakref", "pdb", "bdb", "dis", "trace", "cProfile",
                   "profile", "tracemalloc", "pkgutil", "pydoc", "timeit", "doctest", "annotationlib"}
"""Modules a graded answer may not import: reflection, process control, files (the grader's files included)."""
SUSPICIOUS_ATTRS = {"modules", "_getframe", "f_globals", "f_locals", "f_back", "f_builtins", "tb_frame", "gi_frame",
                    "cr_frame", "ag_frame", "tb_next", "f_code", "f_trace", "gi_code", "cr_code", "ag_code",
                    "walk_stack", "walk_tb", "extract_stack", "format_stack", "print_stack", "currentframe",
                    "getouterframes", "getinnerframes", "attrgetter", "methodcaller", "write_text", "write_bytes",
                    "unlink", "rmtree", "system", "popen", "spawn", "fork", "kill", "setrecursionlimit", "settrace",
                    "setprofile", "course", "get_field", "get_value", "vformat", "Formatter", "getmembers",
                    "getmembers_static", "getattr_static", "get_type_hints", "ForwardRef", "_eval_type",
                    "evaluate_forward_ref"}
REFLECTION = {"getattr", "hasattr", "setattr", "delattr", "vars", "globals", "locals", "dir"}
"""Builtins that reach attributes or namespaces by name: only ``getattr``/``hasattr`` called directly with a
constant, ordinary attribute name pass (``getattr(x, "key", None)``); as a value (``g = getattr``,
``partial(getattr, t)``, ``map(getattr, ...)``) or with a computed, dunder or suspicious name they are rejected."""
SAFE_CLASS_USERS = {"isinstance", "issubclass", "print", "repr", "str", "id", "hash", "format"}
ALLOWED_DUNDERS = {"__init__", "__name__", "__doc__", "__qualname__", "__len__", "__class__"}


PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture", "%%prun")


def python_source(cell_source: str) -> str:
    """A code cell as plain Python (IPython magics and shell escapes become function calls).

    A cell under a magic that runs its body as Python (``%%time`` …) is read as that body.
    """
    first, _, body = cell_source.lstrip().partition("\n")
    if first.split(" ")[0] in PYTHON_CELL_MAGICS:
        cell_source = body
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        return cell_source
    return TransformerManager().transform_cell(cell_source)


@dataclass
class Statement:
    cell: int
    index: int  # position in the cell's top-level body
    node: ast.stmt
    course: bool  # identical to a statement of the instructor edition (course text, trusted)

    @property
    def where(self) -> str:
        return f"cell {self.cell}"


@dataclass
class Extraction:
    function: str
    statements: list[Statement] = field(default_factory=list)  # the graded program, in notebook order
    cells: dict[int, str] = field(default_factory=dict)  # python source of every cell it draws on
    problem: str = ""  # why nothing can be graded (function not defined, syntax error)
    syntax_errors: list[dict] = field(default_factory=list)


def _bound_names(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement binds (nested function bodies excluded)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name.split(".")[0]) for a in stmt.names}
    return _names_bound_in([stmt])


def _names_bound_in(nodes: list[ast.AST]) -> set[str]:
    """Names these nodes bind in their own scope: a nested function or class binds its name there,
    and what its body binds stays in its own scope; an annotation without a value binds nothing."""
    names: set[str] = set()
    stack: list[ast.AST] = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            stack.extend(node.decorator_list)  # evaluated here, unlike the body
            continue
        elif isinstance(node, ast.Lambda):
            continue
        elif isinstance(node, COMPREHENSIONS):  # only a walrus inside binds out here
            names |= {n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name)}
            continue
        elif isinstance(node, ast.AnnAssign) and node.value is None:
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name.split(".")[0]) for a in node.names}
        stack.extend(ast.iter_child_nodes(node))
    return names


COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _comprehension_scopes(node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp,
                          local: set[str]) -> list[tuple[ast.AST, set[str]]]:
    """(part, names local to it) for a comprehension: its first iterable runs in the enclosing scope,
    everything else in its own, where its loop variables are bound (they do not leak out)."""
    gens = node.generators
    inner = local | {n.id for g in gens for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    parts: list[tuple[ast.AST, set[str]]] = [(gens[0].iter, local)]
    for k, g in enumerate(gens):
        parts.append((g.target, inner))
        if k:
            parts.append((g.iter, inner))
        parts += [(cond, inner) for cond in g.ifs]
    parts += [(p, inner) for p in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,))]
    return parts


def _function_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = fn.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a}
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    declared_global: set[str] = set()
    for node in body:  # ``global`` anywhere in its body, nested functions included (the safe side)
        for n in ast.walk(node):
            if isinstance(n, ast.Global):
                declared_global |= set(n.names)
    return (names | _names_bound_in(body)) - declared_global


def free_names(stmt: ast.stmt) -> set[str]:
    """Global names a statement may read, now or when its functions are called."""
    used: set[str] = set()

    def visit(node: ast.AST, local: set[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            outer = list(getattr(node, "decorator_list", [])) + node.args.defaults + \
                [d for d in node.args.kw_defaults if d is not None]
            outer += [a.annotation for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs if a.annotation]
            if getattr(node, "returns", None) is not None:
                outer.append(node.returns)
            for n in outer:
                visit(n, local)
            inner = local | _function_locals(node)
            for n in (node.body if isinstance(node.body, list) else [node.body]):
                visit(n, inner)
            return
        if isinstance(node, COMPREHENSIONS):
            for part, scope in _comprehension_scopes(node, local):
                visit(part, scope)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            used.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    visit(stmt, set())
    return used


def _normal(node: ast.stmt) -> str:
    return ast.dump(node, annotate_fields=False)


def course_statements(instructor_cells: Iterable[str]) -> set[str]:
    """Every top-level statement of the instructor edition (normalised): course text, trusted."""
    out: set[str] = set()
    for source in instructor_cells:
        try:
            out |= {_normal(s) for s in ast.parse(python_source(source)).body}
        except SyntaxError:
            continue
    return out


def extract(code_cells: list[tuple[int, str]], function: str, course: set[str] | None = None) -> Extraction:
    """The statements ``function`` needs, from ``(cell index, source)`` pairs in notebook order."""
    ex = Extraction(function)
    course = course or set()
    stmts: list[Statement] = []
    for cell, source in code_cells:
        text = python_source(source)
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            ex.syntax_errors.append({"cell": cell, "ename": "SyntaxError", "evalue": f"{exc.msg} (line {exc.lineno})"})
            continue
        except (RecursionError, MemoryError, ValueError) as exc:  # absurdly nested or NUL bytes
            ex.syntax_errors.append({"cell": cell, "ename": type(exc).__name__, "evalue": "cannot be parsed"})
            continue
        ex.cells[cell] = text
        stmts += [Statement(cell, i, s, _normal(s) in course) for i, s in enumerate(tree.body)]
    last: dict[str, int] = {}
    for k, s in enumerate(stmts):
        for name in _bound_names(s.node):
            last[name] = k
    if function not in last:
        ex.problem = (f"the notebook defines no `{function}` (the exercise cell was deleted or renamed"
                      + (", or has a syntax error" if ex.syntax_errors else "") + ")")
        return ex
    stars = [k for k, s in enumerate(stmts) if isinstance(s.node, ast.ImportFrom) and any(a.name == "*" for a in s.node.names)]
    chosen, todo = set(), [last[function]]
    while todo:
        k = todo.pop()
        if k in chosen:
            continue
        chosen.add(k)
        for name in free_names(stmts[k].node):
            if name in last and last[name] != k:
                todo.append(last[name])
            elif name not in last and not hasattr(builtins, name):
                todo.extend(stars)
    ex.statements = [stmts[k] for k in sorted(chosen)]
    ex.cells = {c: t for c, t in ex.cells.items() if any(s.cell == c for s in ex.statements)}
    return ex


# -- the "write your own" rule ----------------------------------------------------------------------


def review(ex: Extraction, forbidden: Iterable[str]) -> list[str]:
    """Findings (empty: fine) on the student-written statements of the graded program."""
    forbidden = set(forbidden)
    prefixes = tuple(f[:-2] for f in forbidden if f.endswith(".*"))
    blocked = {(a.asname or a.name.split(".")[0]) for s in ex.statements
                       if isinstance(s.node, (ast.Import, ast.ImportFrom))
                       for a in s.node.names
                       if (getattr(s.node, "module", None) or a.name).startswith(prefixes)} if prefixes else set()
    imported = {n for s in ex.statements if isinstance(s.node, (ast.Import, ast.ImportFrom)) for n in _bound_names(s.node)}
    # names a reflection module's import binds, the course's own imports included (``import inspect`` in a
    # course cell): the student's statements may not use them
    dynamic = {a.asname or a.name.split(".")[0] for s in ex.statements if isinstance(s.node, (ast.Import, ast.ImportFrom))
               for a in s.node.names
               if (getattr(s.node, "module", None) or a.name).split(".")[0] in DYNAMIC_MODULES}
    own = {n for s in ex.statements if not isinstance(s.node, (ast.Import, ast.ImportFrom)) for n in _bound_names(s.node)}
    own_defs = {s.node.name for s in ex.statements if isinstance(s.node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    findings: list[str] = []
    for s in ex.statements:
        if s.course:
            continue
        findings += [f"{s.where}: {f}" for f in _review_statement(s.node, forbidden, imported, own, blocked, own_defs,
                                                                  dynamic)]
    return sorted(set(findings), key=findings.index)


def _review_statement(stmt: ast.stmt, forbidden: set[str], imported: set[str], own: set[str],
                      blocked: set[str], own_defs: set[str] = frozenset(), dynamic: set[str] = frozenset()) -> list[str]:
    """``forbidden`` holds names, and module prefixes ending in ``.*`` (no import from there at all);
    ``blocked``: names the program imports from such a module (the course's imports included);
    ``dynamic``: names the program imports from a reflection or process module (``DYNAMIC_MODULES``)."""
    found: list[str] = []
    prefixes = tuple(f[:-2] for f in forbidden if f.endswith(".*"))

    def at(node: ast.AST, text: str) -> None:
        found.append(f"{text} (line {getattr(node, 'lineno', '?')})")

    def root(node: ast.AST) -> ast.AST:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node

    def review_attr(node: ast.AST, attr: str) -> None:
        if attr in forbidden:
            at(node, f"uses .{attr}, radixlab's own implementation: write your own")
        elif attr.startswith("__") and attr.endswith("__") and attr not in ALLOWED_DUNDERS:
            at(node, f"uses .{attr} (reflection is not allowed in a graded answer)")
        elif attr in SUSPICIOUS_ATTRS:
            at(node, f"uses .{attr} (reflection, files and processes are not allowed in a graded answer)")

    direct: set[int] = set()  # ids of Name nodes that are the callee of a reviewed direct call
    # names bound to a class taken from an object (``T = type(x)``, ``T = x.__class__``): never patchable
    parents = {id(c): n for n in ast.walk(stmt) for c in ast.iter_child_nodes(n)}

    def class_of_object(n: ast.AST) -> bool:
        return (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "type"
                and len(n.args) == 1) or (isinstance(n, ast.Attribute) and n.attr == "__class__")

    def takes_class(expr: ast.AST | None) -> bool:
        """``expr`` evaluates to (or holds) such a class: not merely calls it or reads its ``__name__``."""
        for v in ast.walk(expr) if expr is not None else ():
            parent = parents.get(id(v))
            if class_of_object(v) and not (isinstance(parent, ast.Call) and parent.func is v) \
                    and not (isinstance(parent, ast.Attribute) and parent.attr != "__class__") \
                    and not isinstance(parent, ast.Compare):
                return True
        return False

    bindings: list[tuple[ast.AST, ast.AST | None]] = []  # (target, the expression it is bound from)
    for n in ast.walk(stmt):
        if isinstance(n, ast.Assign):
            bindings += [(t, n.value) for t in n.targets]
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            bindings.append((n.target, n.value))
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            bindings.append((n.target, n.iter))
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            bindings.append((n.optional_vars, n.context_expr))
    class_aliases = {t.id for target, value in bindings if takes_class(value)
                     for t in ast.walk(target) if isinstance(t, ast.Name)}
    # a class taken from an object and handed on (to a helper, into a container) could be patched there
    handed: list[ast.AST] = []
    for n in ast.walk(stmt):
        is_class = class_of_object(n)
        parent = parents.get(id(n))
        if not is_class or parent is None:
            continue
        if isinstance(parent, ast.keyword):
            parent = parents.get(id(parent))
        if isinstance(parent, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Starred)) or (
                isinstance(parent, ast.Call) and n is not parent.func and not (
                    isinstance(parent.func, ast.Name) and parent.func.id in SAFE_CLASS_USERS)):
            handed.append(n)

    # names an answer may not bind (assign, def, import as, delete, capture): a binding of its own would
    # exempt every later use from the checks below (``getattr = getattr``). A parameter may carry such a
    # name: nothing can hand it the builtin without a load the checks below see (``e=exec`` as a default)
    # (``dir`` and ``open`` excepted: honest names for a direction or a flag, and harmless as builtins here)
    no_rebind = (REFLECTION | DYNAMIC_CALLS | dynamic) - {"dir", "open"}

    def self_rebinding(node: ast.AST, targets: list[ast.AST], value: ast.AST, local: set[str]) -> None:
        """``RadixCache = RadixCache``: the value reads radixlab's name before the binding makes it the student's."""
        bound = {t.id for tt in targets for t in ast.walk(tt) if isinstance(t, ast.Name)}
        for n in ast.walk(value):
            if isinstance(n, ast.Name) and n.id in bound & forbidden and n.id not in local:
                at(node, f"rebinds {n.id} from radixlab's own {n.id}: write your own")

    def visit(node: ast.AST, local: set[str]) -> None:
        if isinstance(node, COMPREHENSIONS):
            for g in node.generators:
                self_rebinding(g, [g.target], g.iter, local)
            for part, scope in _comprehension_scopes(node, local):
                visit(part, scope)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in no_rebind:
            at(node, f"binds {node.name} (a reflection name: choose another name)")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            params = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
            # decorators, defaults and annotations are evaluated where the function is defined: outside it
            outside = list(getattr(node, "decorator_list", [])) + args.defaults + [d for d in args.kw_defaults if d]
            outside += [a.annotation for a in params if a.annotation] + [getattr(node, "returns", None)]
            for child in (c for c in outside if c is not None):
                visit(child, local)
            inner = local | _function_locals(node)
            for child in (node.body if isinstance(node.body, list) else [node.body]):
                visit(child, inner)
            return
        bound_here = node.id if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) else \
            getattr(node, "rest", None) if isinstance(node, ast.MatchMapping) else \
            getattr(node, "name", None) if isinstance(node, (ast.MatchAs, ast.MatchStar, ast.ExceptHandler,
                                                             ast.ClassDef)) else None
        if bound_here in no_rebind:
            at(node, f"binds {bound_here} (a reflection name: choose another name)")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            for alias in node.names:
                full = f"{module}.{alias.name}" if module else alias.name
                if alias.name == "*":
                    at(node, f"imports * from {module} (name what you import: a star import hides it from this review)")
                if full.startswith("radixlab.course") or (module or "").startswith("radixlab.course"):
                    at(node, f"imports {full} (the grader's package: write your own)")
                elif prefixes and (full.startswith(prefixes) or (module or "").startswith(prefixes)):
                    at(node, f"imports {full}: this exercise is written without radixlab (write your own)")
                elif alias.name in forbidden:
                    at(node, f"imports {alias.name}, radixlab's own answer: write your own")
                elif full.split(".")[0] in DYNAMIC_MODULES or alias.name in SUSPICIOUS_ATTRS:
                    at(node, f"imports {full} (reflection and process control are not allowed in a graded answer)")
                elif (alias.asname or alias.name.split(".")[0]) in no_rebind:
                    at(node, f"imports {full} as {alias.asname or alias.name} (a reflection name: choose another name)")
        elif isinstance(node, ast.Name) and node.id in forbidden and node.id not in local and node.id not in own:
            at(node, f"uses {node.id}, radixlab's own answer: write your own")
        elif isinstance(node, ast.Name) and prefixes and node.id in blocked and node.id not in local:
            at(node, f"uses {node.id} from radixlab: this exercise is written without radixlab (write your own)")
        elif isinstance(node, ast.Name) and node.id in dynamic and node.id not in local | own:
            at(node, f"uses {node.id}, imported from a reflection or process module "
                     "(not allowed in a graded answer)")
        elif isinstance(node, ast.Name) and node.id.startswith("__") and node.id.endswith("__") \
                and node.id not in ALLOWED_DUNDERS:
            at(node, f"uses {node.id} (reflection is not allowed in a graded answer)")
        elif isinstance(node, ast.Attribute):
            review_attr(node, node.attr)
        elif isinstance(node, ast.MatchClass):  # ``case C(attr=x)`` reads C's attribute attr, as ``.attr`` does
            for attr in node.kwd_attrs:
                review_attr(node, attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in forbidden:
            at(node, f"names {node.value!r}, radixlab's own answer: write your own")
        elif isinstance(node, ast.Name) and node.id in REFLECTION and node.id not in local | own \
                and id(node) not in direct:
            at(node, f"uses {node.id} as a value (reflection is not allowed in a graded answer: "
                     f"call getattr(obj, \"name\") directly with a constant name)")
        elif isinstance(node, ast.Name) and node.id in DYNAMIC_CALLS and node.id not in local | own \
                and id(node) not in direct:
            at(node, f"uses {node.id} as a value (dynamic code is not allowed in a graded answer)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in local | own:
            name = node.func.id
            if name in DYNAMIC_CALLS:
                at(node, f"calls {name}() (dynamic code is not allowed in a graded answer)")
                direct.add(id(node.func))
            elif name in ("getattr", "hasattr"):
                direct.add(id(node.func))
                attr = node.args[1].value if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) else None
                if not isinstance(attr, str) or node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                    at(node, f"calls {name}() with a computed name (reflection is not allowed in a graded answer)")
                elif attr.startswith("__") or attr in SUSPICIOUS_ATTRS:
                    at(node, f"calls {name}() on {attr!r} (reflection is not allowed in a graded answer)")
                elif attr in forbidden:
                    at(node, f"names {attr!r}, radixlab's own answer: write your own")
            elif name in REFLECTION:
                direct.add(id(node.func))
                at(node, f"calls {name}() (reflection is not allowed in a graded answer)")
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor)) \
                and getattr(node, "value", getattr(node, "iter", None)) is not None:
            value = node.iter if isinstance(node, (ast.For, ast.AsyncFor)) else node.value
            self_rebinding(node, node.targets if isinstance(node, ast.Assign) else [node.target], value, local)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in (t for tt in targets for t in (tt.elts if isinstance(tt, (ast.Tuple, ast.List)) else [tt])):
                base = root(target)
                if target is base:
                    continue
                chain = [n for n in ast.walk(target) if isinstance(n, ast.Attribute)]
                if not isinstance(base, ast.Name) or any(n.attr == "__class__" for n in chain) \
                        or base.id in class_aliases:
                    at(node, f"changes {ast.unparse(target)}, an attribute of a class or of a call's result "
                             "(patching classes is not allowed in a graded answer)")
                    continue
                if base.id in local or (base.id in own_defs and base.id not in imported):
                    continue  # the function's own objects, or a class the student wrote
                at(node, f"changes {ast.unparse(target)}, which belongs to {base.id} "
                         "(patching modules or classes is not allowed in a graded answer)")
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    visit(stmt, set())
    for n in handed:
        at(n, f"hands {ast.unparse(n)} on (a class taken from an object may not leave the expression that "
              "uses it: patching classes is not allowed in a graded answer)")
    return found

"""What the grader runs of a submission: the exercise function and only what it depends on.

``extract`` reads a submission (in the grader's process, never executing it) and picks the top-level
statements the exercise's function needs, *as the check cell saw them*: the binding of each name in
force at the first cell that calls the exercise's check (run top to bottom), not the notebook's last
one. A name the function reads when it is called (a helper, a global table) resolves to its last
binding before the check cell; a name read when a statement runs (an annotation, a default, a
decorator, a base class) to its last binding before that statement. Imports are cut to the names the
program uses. Nothing else runs: an exploration cell that patches radixlab, appends to a results list
or prints a fake verdict is simply not part of the graded program.

There is no "write your own" review here: the executor imports a copy of radixlab from which the
exercise's reference is absent (``sandbox.py``), so no name or trick in the answer can reach it.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Iterable

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
    course: bool  # identical to a statement of the instructor edition (course text)
    keep: list[str] | None = None  # an import cut to these names (None: the whole statement)

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
    note: str = ""  # how the check cell was found (or that it was not)


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
    now, later = free_names_split(stmt)
    return now | later


def free_names_split(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """(names read when the statement runs, names read only when a function it defines is called)."""
    now: set[str] = set()
    later: set[str] = set()

    def visit(node: ast.AST, local: set[str], deferred: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            outer = list(getattr(node, "decorator_list", [])) + node.args.defaults + \
                [d for d in node.args.kw_defaults if d is not None]
            outer += [a.annotation for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs if a.annotation]
            outer += [a.annotation for a in (node.args.vararg, node.args.kwarg) if a is not None and a.annotation]
            if getattr(node, "returns", None) is not None:
                outer.append(node.returns)
            for n in outer:
                visit(n, local, deferred)
            inner = local | _function_locals(node)
            for n in (node.body if isinstance(node.body, list) else [node.body]):
                visit(n, inner, True)
            return
        if isinstance(node, COMPREHENSIONS):
            for part, scope in _comprehension_scopes(node, local):
                visit(part, scope, deferred)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            (later if deferred else now).add(node.id)
        elif isinstance(node, ast.Global):  # ``global n; n += 1`` reads the module's n
            (later if deferred else now).update(node.names)
        for child in ast.iter_child_nodes(node):
            visit(child, local, deferred)

    visit(stmt, set(), False)
    return now, later - now


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


def _calls(stmt: ast.stmt, name: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name for n in ast.walk(stmt))


def extract(code_cells: list[tuple[int, str]], function: str, course: set[str] | None = None,
            check: str | None = None) -> Extraction:
    """The statements ``function`` needs, from ``(cell index, source)`` pairs in notebook order, as
    the first statement calling ``check`` saw them (the whole notebook when there is none)."""
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
    binders: dict[str, list[int]] = {}
    for k, s in enumerate(stmts):
        for name in _bound_names(s.node):
            binders.setdefault(name, []).append(k)
    cutoff = next((k for k, s in enumerate(stmts) if check and _calls(s.node, check)), None)
    if cutoff is not None and not any(k < cutoff for k in binders.get(function, [])):
        ex.note = f"`{function}` is defined only after the check cell (cell {stmts[cutoff].cell}): graded as run in order"
        cutoff = None
    elif cutoff is not None:
        ex.note = f"graded as the check cell (cell {stmts[cutoff].cell}) saw it"
    cutoff = len(stmts) if cutoff is None else cutoff

    def before(name: str, k: int) -> int | None:
        ks = [j for j in binders.get(name, []) if j < k]
        return ks[-1] if ks else None

    start = before(function, cutoff)
    if start is None:
        ex.problem = (f"the notebook defines no `{function}` (the exercise cell was deleted or renamed"
                      + (", or has a syntax error" if ex.syntax_errors else "") + ")")
        return ex
    stars = [k for k, s in enumerate(stmts) if isinstance(s.node, ast.ImportFrom) and any(a.name == "*" for a in s.node.names)]
    chosen: set[int] = set()
    needs: dict[int, set[str] | None] = {start: None}
    todo = [start]
    while todo:
        k = todo.pop()
        if k in chosen:
            continue
        chosen.add(k)
        now, later = free_names_split(stmts[k].node)
        for names, at in ((now, k), (later, cutoff)):
            for name in names:
                j = before(name, at)
                if j is not None:
                    if needs.get(j, set()) is not None:
                        needs.setdefault(j, set()).add(name)
                    todo.append(j)
                elif name not in binders and not hasattr(builtins, name):
                    for j in (j for j in stars if j < at):
                        needs[j] = None
                        todo.append(j)
    for k in sorted(chosen):
        s = stmts[k]
        if isinstance(s.node, (ast.Import, ast.ImportFrom)) and needs.get(k) is not None \
                and not any(a.name == "*" for a in s.node.names):
            s.keep = sorted(needs[k])
        ex.statements.append(s)
    ex.cells = {c: t for c, t in ex.cells.items() if any(s.cell == c for s in ex.statements)}
    return ex



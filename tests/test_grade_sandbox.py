"""The grader's design after issue 19: a stripped copy of radixlab, bubblewrap, no static review.

Forgeries that scored full marks against the deny-list review now reach nothing (the reference is not
in the executor's copy, the repository is not in its sandbox); honest styles that the review rejected
score full marks; the check cell and the grader agree on honest answers (parity); one submission's
malformed messages, signals or writes hurt only itself.
"""

from __future__ import annotations

import json
import os
import pickletools  # noqa: F401  (documents the opcodes of the STACK_GLOBAL forgery below)
import subprocess
import textwrap
from pathlib import Path

import nbformat
import pytest

from grade_helpers import assert_full_marks_and_parity, grade_cells, in_kernel
from radixlab.course import grade
from radixlab.course import sandbox as sb
from radixlab.course.edition import student_notebook, strip_markers
from radixlab.course.exercises import all_specs

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
REPO_PATHS = [str(ROOT / "radixlab"), str(ROOT / "notebooks"), str(ROOT / ".git")] + [
    str(Path(p).parents[3] / name) for p in sb.site_packages() if ".venv" in p for name in ("radixlab", "notebooks")]
"""The repository (and the one holding the venv): never bound into the sandbox."""
boxed = pytest.mark.skipif(not sb.sandboxed(), reason=f"no bubblewrap here: {sb.sandbox_works()}")


def solution(function: str) -> tuple[Path, str]:
    """(instructor notebook, its exercise cell without the markers) of the exercise defining ``function``."""
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for c in nbformat.read(path, as_version=4).cells:
            if c.cell_type == "code" and f"def {function}(" in c.source and "BEGIN SOLUTION" in c.source:
                return path, strip_markers(c.source)
    raise LookupError(function)


_, SPLIT = solution("split")
IMPORTS_02 = "from radixlab import RadixCache, RadixKey, RadixNode, RadixTree"


# -- 1. the copy: what each exercise's executor imports -----------------------------------------------


@pytest.mark.parametrize("exercise", sorted(all_specs()))
def test_the_copy_lacks_the_reference_and_the_grader(tmp_path, exercise):
    spec = all_specs()[exercise]
    copy = sb.build_copy(spec.copy_roots(), spec.all_stripped(), tmp_path / "copy")
    names = {str(p.relative_to(copy)) for p in copy.rglob("*.py")}
    course = {n.split("/")[-1] for n in names if n.startswith("radixlab/course/")}
    assert not {n for n in course if n.startswith("answers_")}, names
    assert not course & {"exercises.py", "grade.py", "runner.py", "sandbox.py", "edition.py"}, course
    source = "\n".join(p.read_text() for p in copy.rglob("*.py"))
    for target in spec.all_stripped():
        module, _, qual = target.partition(":")
        if not qual:
            assert f"{module.replace('.', '/')}.py" not in names
            continue
        # absent from the syntax tree of its module: no def and no assignment of that name there
        mod = copy.joinpath(*module.split(".")).with_suffix(".py")
        if mod.exists():
            tree = __import__("ast").parse(mod.read_text())
            path = qual.split(".")
            body = tree.body
            for part in path[:-1]:
                body = next((n.body for n in body if getattr(n, "name", None) == part), [])
            assert not [n for n in body if getattr(n, "name", None) == path[-1]], target
    import ast
    imported = {getattr(n, "module", None) or a.name for n in ast.walk(ast.parse(source))
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert not [m for m in imported if m and "answers_" in m], imported


def _probe_program(spec) -> str:
    """A program that tries every strip target (import the module, walk to the attribute)."""
    return textwrap.dedent(f"""
        import importlib, sys
        sys.path[:] = {sb.python_path(sb.COPY_MOUNT)!r}
        importlib.import_module({spec.drive.__module__!r})
        found = []
        for target in {list(spec.all_stripped())!r}:
            module, _, qual = target.partition(":")
            try:
                obj = importlib.import_module(module)
            except ImportError:
                continue
            try:
                for part in qual.split(".") if qual else []:
                    obj = getattr(obj, part)
                found.append(target)
            except AttributeError:
                pass
        for name in ("radixlab.course.answers_tree", "radixlab.course.exercises", "radixlab.course.grade"):
            try:
                importlib.import_module(name); found.append(name)
            except ImportError:
                pass
        import os
        found += [p for p in {REPO_PATHS!r} if os.path.exists(p)]
        print("FOUND", found)
    """)


@boxed
@pytest.mark.parametrize("exercise", sorted(all_specs()))
def test_in_the_sandbox_no_strip_target_answers_file_or_repository_is_reachable(tmp_path, exercise):
    spec = all_specs()[exercise]
    copy = sb.build_copy(spec.copy_roots(), spec.all_stripped(), tmp_path / "copy")
    r = subprocess.run(sb.sandbox_command(copy, sb.executor_argv(_probe_program(spec))), capture_output=True,
                       text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "FOUND []" in r.stdout, r.stdout


# -- 2. forgeries against the new design: none reaches the reference ---------------------------------

FORGERIES = {
    "reprlib.builtins.eval": "import reprlib\n"
        "def split(node, idx):\n"
        "    return reprlib.builtins.eval(\"__import__('radixlab.tree').tree.RadixTree._split\")(None, node, idx)\n",
    "getattr chain posixpath -> os -> sys": "import posixpath\n"
        "def split(node, idx):\n"
        "    mods = getattr(getattr(posixpath, 'os'), 'sys').modules\n"
        "    return mods['radixlab.tree'].RadixTree._split(None, node, idx)\n",
    "logging.config resolve": "import logging.config\n"
        "def split(node, idx):\n"
        "    c = logging.config.BaseConfigurator({})\n"
        "    return c.resolve('radixlab.course.answers_tree.reference_split')(node, idx)\n",
    "logging.config importer": "import logging.config\n"
        "def split(node, idx):\n"
        "    m = logging.config.BaseConfigurator({}).importer('radixlab.course.answers_tree')\n"
        "    return m.reference_split(node, idx)\n",
    "xmlrpc resolve_dotted_attribute": "import xmlrpc.server, radixlab.tree as t\n"
        "def split(node, idx):\n"
        "    f = xmlrpc.server.resolve_dotted_attribute(t, 'RadixTree._split', True)\n"
        "    return f(None, node, idx)\n",
    "traitlets import_item": "from traitlets import import_item\n"
        "def split(node, idx):\n"
        "    return import_item('radixlab.course.answers_tree.reference_split')(node, idx)\n",
    "_pickle STACK_GLOBAL": "import _pickle\n"
        "def split(node, idx):\n"
        "    blob = b'\\x80\\x04\\x8c\\rradixlab.tree\\x8c\\x10RadixTree._split\\x93.'\n"
        "    return _pickle.loads(blob)(None, node, idx)\n",
    "meta_path removed, then the answers imported": "import sys\n"
        "def split(node, idx):\n"
        "    sys.meta_path[:] = [f for f in sys.meta_path if 'Refuse' not in type(f).__name__]\n"
        "    from radixlab.course.answers_tree import reference_split\n"
        "    return reference_split(node, idx)\n",
    "the answers file read from the repository": "import runpy\n"
        f"def split(node, idx, _p={str(ROOT / 'radixlab/course/answers_tree.py')!r}):\n"
        "    ns = runpy.run_path(_p, run_name='radixlab.course.answers_tree')\n"
        "    return ns['reference_split'](node, idx)\n",
    "broken = RadixTree(): radixlab's insert splits the student's node": IMPORTS_02 + "\n"
        "broken = RadixTree()\n"
        "def split(node, idx):\n"
        "    ref, tok = node.ref, node.key[idx]\n"
        "    broken.root.children = {node.key[0]: node}\n"
        "    broken.insert(list(node.key[:idx]) + [('fork',)], None)\n"
        "    node.ref, suffix = ref, node.children[tok]\n"
        "    node.children = {tok: suffix}\n"
        "    return suffix\n",
}


def test_the_broken_tree_forgery_is_a_real_one_in_the_students_kernel():
    """With radixlab's own RadixTree._split present (the student's kernel), the forgery passes: it is the
    stripped copy, not a review, that makes it harmless in the grader."""
    assert in_kernel("02.1", [FORGERIES["broken = RadixTree(): radixlab's insert splits the student's node"]]).passed


@boxed
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forgery_scores_nothing_in_the_sandbox(name):
    result, run = grade_cells("02.1", [FORGERIES[name]])
    assert run.sandbox == "bubblewrap"
    assert result is None or result.score == 0, repr(result)


OTHER_FORGERIES = {
    "01.1 RadixTree.find walks the path": ("01.1", "from radixlab.tree import RadixTree\n"
        "def match_prefix(root, tokens):\n    t = RadixTree(); t.root = root\n    best = (0, None)\n"
        "    for n in range(1, len(tokens) + 1):\n        try:\n            node = t.find(tokens[:n])\n"
        "        except KeyError:\n            continue\n"
        "        if node.value is not None:\n            best = (n, node.value)\n    return best\n"),
    "04.1 RadixCache.match_prefix": ("04.1", "from radixlab.mem_cache.radix_cache import RadixCache, RadixKey\n"
        "def longest_cached_prefix(q, ns, paths, p):\n    c = RadixCache(page_size=p)\n"
        "    for t, n in paths:\n        c.insert(RadixKey(list(t), n))\n"
        "    return len(c.match_prefix(RadixKey(list(q), ns)))\n"),
    "04.1 the course's own RadixCache answer": ("04.1", "from radixlab.course.ex_prefix import "
        "radix_longest_cached_prefix as longest_cached_prefix\n"),
    "06.1 cache.evict": ("06.1", "def evict_loop(cache, heap, num_tokens):\n    return cache.evict(num_tokens)\n"),
    "06.1 the wrong-answer helper with the right rule": ("06.1", "from radixlab.course import ex_evict\n"
        "def evict_loop(cache, heap, n):\n"
        "    return ex_evict.loop_with_parent_rule(lambda p: not p.children and p.lock_ref == 0)(cache, heap, n)\n"),
    "07.1 radixlab's gather_kv": ("07.1", "from radixlab.model import layers\n"
        "def gather_kv(r, k, v, i, n):\n    return layers.gather_kv(r, k, v, i, n)\n"),
    "07.2 the engine's alloc_at": ("07.2", "import torch\n"
        "from radixlab.mem_cache import RadixCache, alloc_at\n"
        "def write_new_kv(rows, alloc, pool, batch, new_kv):\n"
        "    cache = RadixCache(alloc.page_size, token_to_kv_pool_allocator=alloc, req_to_token_pool=rows)\n"
        "    loc = torch.cat([alloc_at(cache, r, p, n) for r, p, n in batch])\n"
        "    for layer, (k, v) in enumerate(new_kv):\n"
        "        pool.set_kv_buffer(layer, loc, k, v)\n"
        "    return loc\n"),
    "08.1 the instructor's answer": ("08.1", "from radixlab.course import answers_overlap\n"
        "def run_batch(device, batch, in_flight):\n    return answers_overlap.reference_run_batch(device, batch, in_flight)\n"),
    "09.1 the engine's LPM sort": ("09.1", "from radixlab.engine import schedule_policy as policies\n"
        "def lpm_order(waiting, tree):\n"
        "    q = [policies.SimRequest(w[0], tuple(w[1])) for w in waiting]\n"
        "    prefix, _, held = policies.compute_prefix_matches(q, tree)\n"
        "    return [r.rid for r in policies.sort_by_longest_prefix(q, prefix, held)], held\n"),
}


@pytest.mark.parametrize("name", ["01.1 RadixTree.find walks the path", "06.1 the wrong-answer helper with the right rule",
                                  "07.1 radixlab's gather_kv", "07.2 the engine's alloc_at", "08.1 the instructor's answer",
                                  "09.1 the engine's LPM sort"])
def test_these_forgeries_are_real_ones_in_the_students_kernel(name):
    """With the whole of radixlab at hand they pass: only the stripped copy stops them in the grader. (The
    check cell's notice of code the copy lacks is bypassed here: it is a courtesy, tested on its own.)"""
    from radixlab.course import spec as spec_module

    exercise, source = OTHER_FORGERIES[name]
    real = spec_module._imported_reference
    spec_module._imported_reference = lambda s, f: ""
    try:
        assert in_kernel(exercise, [source]).passed
    finally:
        spec_module._imported_reference = real


@boxed
@pytest.mark.parametrize("name", sorted(OTHER_FORGERIES))
def test_radixlabs_own_answer_is_absent_for_every_exercise(name):
    exercise, source = OTHER_FORGERIES[name]
    result, run = grade_cells(exercise, [source])
    assert result is None or result.score == 0, repr(result)


@boxed
def test_a_pth_file_written_into_site_packages_never_lands(tmp_path):
    site = sb.site_packages()[0]
    target = os.path.join(site, "zz_radixlab_forgery.pth")
    answer = (f"def split(node, idx, _t={target!r}):\n"
              "    try:\n        open(_t, 'w').write('import os\\n')\n    except OSError as e:\n"
              "        raise RuntimeError('read-only: ' + type(e).__name__)\n    raise NotImplementedError()\n")
    result, _ = grade_cells("02.1", [answer])
    assert not os.path.exists(target)
    assert result.score == 0 and "read-only" in repr(result), repr(result)


@boxed
def test_signalling_the_parent_from_the_sandbox_hurts_no_one():
    """In its own PID namespace the executor's parent is bubblewrap's, not the grader: this process lives on."""
    answer = IMPORTS_02 + "\nimport os, signal\n" + SPLIT.replace(
        "def split(node: RadixNode, idx: int) -> RadixNode:\n",
        "def split(node: RadixNode, idx: int) -> RadixNode:\n    os.kill(os.getppid(), signal.SIGTERM)\n", 1)
    assert "os.kill" in answer
    result, run = grade_cells("02.1", [answer])
    assert run.sandbox == "bubblewrap"  # and we are still here to look
    assert result.passed  # the namespace's init ignores the signal: a correct answer keeps its marks


# -- 3. honest styles the old review rejected: full marks, in the check cell and the grader -----------

_, EVICT = solution("evict_loop")
_, PREFIX = solution("longest_cached_prefix")
_, MATCH = solution("match_prefix")

HONEST = {
    "02.1 own class with __slots__": ("02.1", [IMPORTS_02, textwrap.dedent("""
        class Cut:
            __slots__ = ("node", "idx")

            def __init__(self, node, idx):
                self.node, self.idx = node, idx

            def run(self):
                node, idx = self.node, self.idx
                tok = node.key[idx]
                child = RadixNode(node.key[idx:], node.value)
                child.children, child.ref = node.children, node.ref
                node.key, node.value, node.children = node.key[:idx], None, {tok: child}
                return child

        def split(node: RadixNode, idx: int) -> RadixNode:
            return Cut(node, idx).run()
        """)]),
    "02.1 a helper an instructor cell rebinds after the check": ("02.1", [IMPORTS_02, textwrap.dedent("""
        def agree(node, idx):
            return node.key[idx]
        """), SPLIT.replace("split_tok = node.key[idx]", "split_tok = agree(node, idx)"),
        "check_split(split)", "agree = None  # a later instructor cell"]),
    "02.1 a type-hint name a later cell re-imports": ("02.1", [IMPORTS_02, "from typing import Optional",
        SPLIT.replace(") -> RadixNode:", ") -> Optional[RadixNode]:"), "check_split(split)",
        "from typing import Optional"]),
    "02.1 recursion-free copy via a memo dict": ("02.1", [IMPORTS_02, "SEEN = {}", SPLIT.replace(
        "    return suffix_child", "    SEEN[id(node)] = SEEN.get(id(node), 0) + 1\n    return suffix_child")]),
    "06.1 own class with a method named evict, a dict key 'evict', a module counter": ("06.1", [textwrap.dedent("""
        import heapq

        STATS = {"evict": 0}
        CALLS = 0

        class Evictor:
            __slots__ = ("cache",)

            def __init__(self, cache):
                self.cache = cache

            def evict(self, heap, num_tokens):
                cache, freed = self.cache, 0
                while freed < num_tokens and heap:
                    _, node = heapq.heappop(heap)
                    cache.token_to_kv_pool_allocator.free(node.value)
                    freed += len(node.key)
                    cache._delete_leaf(node)
                    parent = node.parent
                    if parent is not cache.root_node and not parent.children and parent.lock_ref == 0:
                        heapq.heappush(heap, (cache._priority_fn(parent), parent))
                return freed

        def evict_loop(cache, heap, num_tokens):
            global CALLS
            CALLS += 1
            freed = Evictor(cache).evict(heap, num_tokens)
            STATS["evict"] += freed
            return freed
        """)]),
    "04.1 import os, import sys, str.find, lesson 01's common_prefix_len": ("04.1", [textwrap.dedent("""
        import os
        import sys
        from radixlab.tree import common_prefix_len

        LABEL = "page-aligned"

        def longest_cached_prefix(query_tokens, query_namespace, cached_paths, page_size):
            if page_size <= 0:
                raise ValueError("page_size must be positive")
            assert LABEL.find("-") > 0
            best = -sys.maxsize
            for tokens, namespace in cached_paths:
                if namespace != query_namespace:
                    continue
                n = len(os.path.commonprefix([list(query_tokens), list(tokens)]))
                assert n == common_prefix_len(list(query_tokens), list(tokens))
                best = max(best, n // page_size * page_size)
            return max(best, 0)
        """)]),
    "04.1 recursion and functools": ("04.1", [textwrap.dedent("""
        from functools import reduce

        def common(a, b):
            return 0 if not a or not b or a[0] != b[0] else 1 + common(a[1:], b[1:])

        def longest_cached_prefix(query_tokens, query_namespace, cached_paths, page_size):
            if page_size <= 0:
                raise ValueError("page_size must be positive")
            hits = [common(list(query_tokens), list(t)) // page_size * page_size
                    for t, ns in cached_paths if ns == query_namespace]
            return reduce(max, hits, 0)
        """)]),
    "01.1 the notebook's own answer with lesson 01's helper": ("01.1", [
        "from radixlab.tree import common_prefix_len", MATCH]),
    "09.1 a stable sort with a key function": ("09.1", [textwrap.dedent("""
        from typing import Sequence

        from radixlab.mem_cache import RadixCache, RadixKey

        def lpm_order(waiting: Sequence, tree) -> tuple:
            scratch, cached, held = RadixCache(), {}, set()
            for rid, ids in waiting:
                k = RadixKey(list(ids))
                cached[rid] = len(tree.match_prefix(k))
                if cached[rid] <= 32:
                    if len(scratch.match_prefix(k)) >= 32:
                        held.add(rid)
                    else:
                        scratch.insert(k)
            def key(w):
                return float("inf") if w[0] in held else -cached[w[0]]
            return [w[0] for w in sorted(waiting, key=key)], held
        """)]),
    "10.1 json of the pair": ("10.1", [textwrap.dedent("""
        import json

        def tenant_extra_key(tenant: str, client_salt) -> str:
            return json.dumps([tenant, client_salt or ""])
        """)]),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_styles_score_full_marks_and_the_check_cell_agrees(name):
    """Parity (issue 19, items 2 and 4): the grader's verdict equals the check cell's, case by case."""
    exercise, cells = HONEST[name]
    assert_full_marks_and_parity(exercise, cells)


def test_a_wrong_answer_gets_the_same_verdict_in_both():
    from radixlab.course import ex_evict
    import inspect

    wrong = "import heapq\nfrom radixlab.mem_cache.radix_cache import RadixCache\n" + inspect.getsource(ex_evict.fifo_parent_loop).replace("fifo_parent_loop", "evict_loop")
    result, _ = grade_cells("06.1", [wrong])
    kernel = in_kernel("06.1", [wrong])
    assert not result.passed and [o.passed for o in kernel.outcomes] == [o.passed for o in result.outcomes]
    assert [o.message for o in kernel.outcomes] == [o.message for o in result.outcomes]


# -- 4. one submission can only hurt itself ------------------------------------------------------------

FRAME_WALK = ("import sys\n"
              "def _emit():\n"
              "    f = sys._getframe()\n"
              "    while f is not None and 'emit' not in f.f_locals:\n"
              "        f = f.f_back\n"
              "    return f.f_locals['emit']\n")


@pytest.mark.parametrize("message, where", [
    ("{'def_error': {'ename': 'x'}}", "define"),  # no 'cell': the KeyError of issue 19
    ("{'case': 'zero', 'answer': 1}", "case"),
    ("{'case': 0, 'answer': 1, 'raised': 'both'}", "case"),
    ("[1, 2, 3]", "case"),
])
def test_a_malformed_message_fails_that_submission_only(message, where):
    if where == "define":
        cells = [IMPORTS_02, FRAME_WALK + f"_X = _emit()({message})\n",  # runs while the answer is defined
                 SPLIT.replace("    return suffix_child", "    _X\n    return suffix_child")]
    else:
        cells = [IMPORTS_02, FRAME_WALK, SPLIT.replace("    return suffix_child",
                                                       f"    _emit()({message})\n    return suffix_child")]
    result, run = grade_cells("02.1", cells)
    assert "malformed" in run.stopped, (run.stopped, run.outcomes, run.errors)
    assert result is None or result.score < 3
    assert all(set(e) == {"cell", "ename", "evalue"} for e in run.errors)


def test_reports_are_written_as_each_submission_is_graded(tmp_path, monkeypatch):
    """A crash of the grader after the first submission keeps the first one's grades on disk."""
    path, _ = solution("split")
    subs = []
    for k in range(2):
        subs.append(tmp_path / f"s{k}_{path.name}")
        nbformat.write(student_notebook(nbformat.read(path, as_version=4)), subs[-1])
    real, calls = grade.grade_submission, []

    def dies_on_the_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # not an Exception: nothing in the grader catches it
        return real(*a, **k)
    monkeypatch.setattr(grade, "grade_submission", dies_on_the_second)
    out = tmp_path / "g.json"
    with pytest.raises(KeyboardInterrupt):
        grade.main([str(s) for s in subs] + ["--notebooks", str(NOTEBOOKS), "--lesson", path.stem[:2],
                                             "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and len(doc["reports"]) == 1
    assert doc["reports"][0]["exercises"][0]["status"] == "not done"


# -- 5. without a sandbox: still graded, said in the header, the whole environment watched ------------


def test_without_a_sandbox_the_grader_still_grades_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RADIXLAB_GRADE_SANDBOX", "off")
    sb.sandbox_works.cache_clear()
    try:
        path, _ = solution("split")
        good = tmp_path / path.name
        nbformat.write(nbformat.read(path, as_version=4), good)
        assert grade.main([str(good), "--notebooks", str(NOTEBOOKS), "--seed", "3"]) == 0
        text = capsys.readouterr().out
        assert "NO SANDBOX" in text and "3/3" in text
        result, run = grade_cells("02.1", [FORGERIES["reprlib.builtins.eval"]])
        assert run.sandbox.startswith("turned off") and result.score == 0  # the copy still lacks _split
    finally:
        monkeypatch.delenv("RADIXLAB_GRADE_SANDBOX")
        sb.sandbox_works.cache_clear()


def test_without_a_sandbox_a_pth_file_voids_the_batch_and_the_next_run(tmp_path, monkeypatch, capsys):
    """The tamper check covers the environment's site-packages (.pth files too), not only radixlab."""
    fake_site = tmp_path / "site-packages"
    fake_site.mkdir()
    real = sb.site_packages
    monkeypatch.setattr(sb, "site_packages", lambda: real() + [str(fake_site)])
    path, _ = solution("split")
    nb = student_notebook(nbformat.read(path, as_version=4))
    cell = next(c for c in nb.cells if c.cell_type == "code" and "def split(" in c.source)
    cell.source = (f"def split(node, idx, _t={str(fake_site / 'evil.pth')!r}):\n"
                   "    open(_t, 'w').write('import os\\n')\n    raise NotImplementedError()\n")
    subs = [tmp_path / f"a_{path.name}", tmp_path / f"b_{path.name}"]
    nbformat.write(nb, subs[0])
    nbformat.write(nbformat.read(path, as_version=4), subs[1])
    out = tmp_path / "g.json"
    grade.main([str(s) for s in subs] + ["--notebooks", str(NOTEBOOKS), "--no-sandbox", "--json", str(out)])
    first, second = json.loads(out.read_text())["reports"]
    assert (fake_site / "evil.pth").exists()
    assert first["status"] == "tampered" and "site-packages" in first["warnings"][-1]
    assert second["auto_points"] == 0 and "changed while grading" in second["execution"]["stopped"]
    # and the next grading run refuses to start over the planted file (it would run in the grader itself)
    assert grade.main([str(subs[1]), "--notebooks", str(NOTEBOOKS), "--no-sandbox"]) == 2
    assert "evil.pth" in capsys.readouterr().err


def test_the_check_cell_tells_a_student_who_hands_in_radixlab_code_the_copy_lacks():
    from radixlab.course.ex_tree import check_split
    ns: dict = {}
    exec("from radixlab.mem_cache.radix_cache import RadixCache\n"
         "def split(node, idx):\n    RadixCache\n    raise NotImplementedError()\n", ns)
    result = check_split(ns["split"], record=False)
    assert result.score == 0 and "radixlab.mem_cache.radix_cache" in repr(result) and "does not hold it" in repr(result)


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


@boxed
def test_processes_started_in_the_sandbox_die_with_it():
    """A child, and a grandchild in its own session, both started inside bubblewrap, are gone after the run."""
    import time

    answer = (IMPORTS_02 + "\nimport os, subprocess\n" + SPLIT.replace(
        "def split(node: RadixNode, idx: int) -> RadixNode:\n",
        "def split(node: RadixNode, idx: int) -> RadixNode:\n"
        "    subprocess.Popen(['sleep', '41.5'])\n"
        "    subprocess.Popen(['setsid', 'sleep', '41.5'], start_new_session=True)\n", 1))
    result, run = grade_cells("02.1", [answer])
    assert run.sandbox == "bubblewrap" and result.passed
    time.sleep(0.5)
    assert _processes_with("sleep\x0041.5") == []


def test_extract_resolves_names_as_the_check_cell_saw_them():
    """A default is read when the def runs, a helper when the function is called at the check cell:
    each resolves to its binding in force then; later cells do not count."""
    from radixlab.course.extract import extract

    cells = ["K = 1", "def f(x, k=K):\n    return H(x) + k", "K = 2", "def H(x):\n    return x",
             "check(f)", "def H(x):\n    return -x", "def f(x):\n    return 0"]
    ex = extract(list(enumerate(cells)), "f", check="check")
    assert [s.cell for s in ex.statements] == [0, 1, 3] and "check cell (cell 4)" in ex.note
    ex = extract(list(enumerate(cells)), "f")  # no check cell: the notebook as run to its end
    assert [s.cell for s in ex.statements] == [6]
    narrowed = extract([(0, "from os import path, sep, getcwd"), (1, "def f():\n    return sep")], "f")
    assert narrowed.statements[0].keep == ["sep"]

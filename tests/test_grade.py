"""The grader (``python -m radixlab grade``) against students who make mistakes and students who cheat.

Every submission is built from the course's own instructor notebooks: the solution, the blank
student edition, wrong answers, and every trick that fooled the old grader (forged results, a fake
check module, patched check helpers, a patched reference) plus the variants we could think of. All
are graded in one grader call; each trick must score 0 on a blank or wrong answer, and a correct
answer keeps its marks whatever else the notebook does.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import nbformat
import pytest

from radixlab.course import grade
from radixlab.course.edition import student_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def lesson_with(function: str) -> Path:
    """The instructor notebook whose exercise defines ``function`` (robust to renumbering)."""
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        if any(f"def {function}(" in c.source for c in nbformat.read(path, as_version=4).cells):
            return path
    raise LookupError(function)


SPLIT, PREFIX, EVICT = lesson_with("split"), lesson_with("longest_cached_prefix"), lesson_with("evict_loop")


def at(nb, text: str) -> int:
    """Index of the first code cell containing ``text``."""
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and text in c.source)


def solved(path: Path):
    return nbformat.read(path, as_version=4)


def blank(path: Path):
    return student_notebook(nbformat.read(path, as_version=4))


def with_cell(nb, after: str, source: str):
    """``nb`` with a new code cell inserted after the first cell containing ``after``."""
    nb.cells.insert(at(nb, after) + 1, nbformat.v4.new_code_cell(source))
    return nb


def with_answer(nb, function: str, source: str):
    nb.cells[at(nb, f"def {function}(")].source = source
    return nb


FAKE_RESULT = '''from radixlab.course import spec
fake = {"exercise": "02.1", "title": "the copy-on-write split", "passed": True, "not_done": False,
        "score": 3, "max_score": 3, "cases": []}
spec.RESULTS.append(type("R", (), {"to_dict": lambda self: fake})())
print("✅ Exercise 02.1 (the copy-on-write split): passed.\\n   All 6 checks passed. Score 3/3.")'''

FAKE_MODULE = '''import sys, types
fake = types.ModuleType("radixlab.course.ex_tree")
fake.check_split = lambda fn: print("✅ Exercise 02.1 (the copy-on-write split): passed. Score 3/3")
sys.modules["radixlab.course.ex_tree"] = fake
sys.modules["radixlab.course.spec"] = fake'''

PATCH_HELPERS = '''from radixlab.course import spec
spec.CaseOutcome = lambda *a, **k: type("O", (), {"passed": True, "earned": 1, "points": 1})()
spec.judge = lambda *a, **k: (True, "")
spec.CheckResult.passed = property(lambda self: True)'''

PATCH_REFERENCE_SPLIT = "RadixTree._split = lambda self, node, idx: split(node, idx)"
PATCH_REFERENCE_EVICT = ("from radixlab.mem_cache.radix_cache import RadixCache\n"
                         "RadixCache._evict_from_heap = lambda self, heap, n: evict_loop(self, heap, n)")

SPLIT_HEAD = "def split(node: RadixNode, idx: int) -> RadixNode:\n"
GOOD_SPLIT_BODY = '''    split_tok = node.key[idx]
    suffix_child = RadixNode(node.key[idx:], node.value)
    suffix_child.children = node.children
    suffix_child.ref = node.ref
    node.key = node.key[:idx]
    node.value = None
    node.children = {split_tok: suffix_child}
    return suffix_child
'''
LOOPS_ON_IDX_1 = SPLIT_HEAD + "    while idx == 1:\n        pass\n" + GOOD_SPLIT_BODY
NIE_WITH_CHILDREN = SPLIT_HEAD + "    if node.children:\n        raise NotImplementedError()\n" + GOOD_SPLIT_BODY


def submissions() -> dict[str, tuple]:
    """name -> (notebook or raw text, expected lesson file)."""
    s: dict[str, object] = {}
    s["good"] = solved(SPLIT)
    s["blank"] = blank(SPLIT)
    s["wrong"] = with_answer(solved(SPLIT), "split", SPLIT_HEAD + GOOD_SPLIT_BODY.replace("suffix_child.ref = node.ref", "suffix_child.ref = 1"))
    # -- tricks on a blank answer: none of them may earn a point
    s["fake_results"] = with_cell(blank(SPLIT), "check_split(", FAKE_RESULT)
    s["fake_check_module"] = with_cell(blank(SPLIT), "def split(", FAKE_MODULE)
    s["patched_check_helpers"] = with_cell(blank(SPLIT), "def split(", PATCH_HELPERS)
    s["patched_reference_split"] = with_cell(blank(SPLIT), "def split(", PATCH_REFERENCE_SPLIT)
    s["fake_verdict_printed"] = with_answer(blank(SPLIT), "split", SPLIT_HEAD +
        "    print('✅ Exercise 02.1 (the copy-on-write split): passed. Score 3/3')\n    raise NotImplementedError()\n")
    s["exits_early"] = with_cell(blank(SPLIT), "from radixlab import", "import os\nos._exit(0)")
    s["exit_in_answer"] = with_answer(blank(SPLIT), "split", SPLIT_HEAD + "    exit(0)\n")
    s["patched_builtins"] = with_answer(blank(SPLIT), "split", SPLIT_HEAD +
        "    __builtins__['isinstance'] = lambda *a: True\n    raise NotImplementedError()\n")
    s["writes_grader_files"] = with_cell(blank(SPLIT), "def split(",
        f"import pathlib\nfor p in pathlib.Path({str(NOTEBOOKS)!r}).glob('*.ipynb'):\n    p.with_suffix('.hacked').write_text('x')")
    # -- "write your own": shortcuts through radixlab's answer
    s["wraps_split_through_class"] = with_answer(solved(SPLIT), "split", SPLIT_HEAD + "    return RadixTree._split(RadixTree(), node, idx)\n")
    s["wraps_split_via_helper_cell"] = with_cell(with_answer(solved(SPLIT), "split", SPLIT_HEAD + "    return _cut(None, node, idx)\n"),
                                                 "from radixlab import", "_cut = RadixTree._split")
    s["wraps_split_via_getattr"] = with_answer(solved(SPLIT), "split", SPLIT_HEAD +
        "    return getattr(RadixTree, '_sp' + 'lit')(None, node, idx)\n")
    # -- partial credit and time limits
    s["loops_on_one_case"] = with_answer(solved(SPLIT), "split", LOOPS_ON_IDX_1)
    s["nie_in_one_branch"] = with_answer(solved(SPLIT), "split", NIE_WITH_CHILDREN)
    deleted = solved(SPLIT)
    del deleted.cells[at(deleted, "check_split(")]
    s["check_cell_deleted"] = deleted
    s["well_meaning_patch"] = with_cell(solved(SPLIT), "def split(", PATCH_REFERENCE_SPLIT)
    s["patch_then_exit"] = with_cell(with_cell(solved(SPLIT), "def split(", PATCH_HELPERS), "check_split(", "import os\nos._exit(1)")
    # -- 06.1 and 04.1
    s["evict_blank_patched_reference"] = with_cell(blank(EVICT), "def evict_loop(", PATCH_REFERENCE_EVICT)
    s["evict_through_class"] = with_answer(solved(EVICT), "evict_loop",
        "def evict_loop(cache, heap, num_tokens):\n    return type(cache)._evict_from_heap(cache, heap, num_tokens)\n")
    s["evict_parent_rule_helper"] = with_answer(solved(EVICT), "evict_loop",
        "from radixlab.course.ex_evict import loop_with_parent_rule\n"
        "def evict_loop(cache, heap, num_tokens):\n"
        "    return loop_with_parent_rule(lambda p: not p.children and p.lock_ref == 0)(cache, heap, num_tokens)\n")
    s["prefix_good"] = solved(PREFIX)
    s["prefix_blank"] = blank(PREFIX)
    s["prefix_wraps_reference"] = with_answer(solved(PREFIX), "longest_cached_prefix",
        "def longest_cached_prefix(query_tokens, query_namespace, cached_paths, page_size):\n"
        "    from radixlab.course.answers_prefix import reference_longest_cached_prefix as mine\n"
        "    return mine(query_tokens, query_namespace, cached_paths, page_size)\n")
    s["prefix_first_match"] = with_answer(solved(PREFIX), "longest_cached_prefix",
        "def longest_cached_prefix(query_tokens, query_namespace, cached_paths, page_size):\n"
        "    if page_size <= 0:\n        raise ValueError('page_size must be positive')\n"
        "    for cached_tokens, ns in cached_paths:\n        if ns == query_namespace:\n"
        "            common = 0\n            for a, b in zip(query_tokens, cached_tokens):\n"
        "                if a != b:\n                    break\n                common += 1\n"
        "            return common // page_size * page_size\n    return 0\n")
    wrong_lesson = nbformat.read(lesson_with("split"), as_version=4)
    s[PREFIX.name] = wrong_lesson  # lesson 02's notebook handed in under 04's file name
    return s


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("grade")
    subs = root / "subs"
    subs.mkdir()
    paths = {}
    for name, nb in submissions().items():
        paths[name] = subs / (name if name.endswith(".ipynb") else f"{name}.ipynb")
        nbformat.write(nb, paths[name])
    paths["broken"] = subs / "broken.ipynb"
    paths["broken"].write_text("{ not json", encoding="utf-8")
    paths["missing"] = subs / "missing.ipynb"
    paths["stranger"] = subs / "stranger.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# something else")]), paths["stranger"])
    out = root / "grades.json"
    rc = grade.main([str(p) for p in paths.values()]
                    + ["--notebooks", str(NOTEBOOKS), "--case-timeout", "3", "--seed", "7", "--json", str(out)])
    assert rc == 0
    reports = json.loads(out.read_text())["reports"]
    return {name: rep for name, rep in zip(paths, reports)}


def row(report, exercise=None):
    rows = report["exercises"]
    return rows[0] if exercise is None else next(r for r in rows if r["exercise"] == exercise)


def test_the_solution_gets_full_marks_on_fresh_hidden_cases(graded):
    r = row(graded["good"])
    assert (r["exercise"], r["status"], r["points"], r["max_points"]) == ("02.1", "passed", 3, 3)
    assert (r["main_path"], r["boundary"]) == (2, 1) and graded["good"]["grader_seed"] == 7
    assert any(c["hidden"] for c in r["cases"]) and all(c["outcome"] == "answer" for c in r["cases"])
    assert row(graded["prefix_good"])["points"] == 3


def test_blank_scores_zero_not_done(graded):
    for name in ("blank", "prefix_blank"):
        r = row(graded[name])
        assert r["status"] == "not done" and r["points"] == 0, (name, r)


def test_wrong_answer_loses_the_failing_cases(graded):
    r = row(graded["wrong"])
    assert r["status"] == "failed" and r["points"] < 3
    assert "ref is 1, expected 2" in r["reason"]


@pytest.mark.parametrize("name", ["fake_results", "fake_check_module", "patched_check_helpers",
                                  "patched_reference_split", "fake_verdict_printed", "exits_early",
                                  "evict_blank_patched_reference"])
def test_tricks_on_a_blank_answer_score_zero(graded, name):
    r = row(graded[name])
    assert r["points"] == 0 and r["status"] in ("not done", "failed", "error"), r


@pytest.mark.parametrize("name", ["exit_in_answer", "patched_builtins"])
def test_tricks_inside_the_answer_score_zero(graded, name):
    r = row(graded[name])
    assert r["points"] == 0, r


def test_cells_outside_the_answer_never_run(graded):
    assert not list(NOTEBOOKS.glob("*.hacked")), "a submission's cell wrote into the instructor folder"
    assert row(graded["writes_grader_files"])["points"] == 0


@pytest.mark.parametrize("name, evidence", [
    ("wraps_split_through_class", "no attribute '_split'"), ("wraps_split_via_helper_cell", "_cut"),
    ("wraps_split_via_getattr", "no attribute '_split'"), ("evict_through_class", "no attribute '_evict_from_heap'"),
    ("evict_parent_rule_helper", "loop_with_parent_rule"), ("prefix_wraps_reference", "answers_prefix"),
])
def test_shortcuts_through_radixlab_reach_nothing_in_the_grader(graded, name, evidence):
    """No static review any more: the executor's copy of radixlab simply lacks the reference."""
    r = row(graded[name])
    assert r["points"] == 0 and r["status"] in ("failed", "error"), r
    assert evidence in r["reason"] + json.dumps(graded[name]["execution"]["errors"]), r


def test_a_correct_answer_keeps_its_marks_whatever_else_the_notebook_does(graded):
    for name in ("well_meaning_patch", "patch_then_exit"):
        r = row(graded[name])
        assert r["status"] == "passed" and r["points"] == 3, (name, r)


def test_a_hanging_case_is_named_and_the_others_score(graded):
    r = row(graded["loops_on_one_case"])
    timed = [c for c in r["cases"] if c["outcome"] == "timeout"]
    assert [c["name"] for c in timed] == ["split at idx=1 of a long edge",  # both split an edge at idx=1
                                          "three-way fork and a prefix that ends on a boundary"]
    assert "'split at idx=1 of a long edge': timed out after 3 s" in r["reason"]
    assert r["main_path"] == 2 and 2 < r["points"] < 3


def test_not_implemented_in_one_branch_gets_partial_credit(graded):
    r = row(graded["nie_in_one_branch"])
    assert r["status"] == "failed" and 0 < r["points"] < 3
    assert any(c["outcome"] == "not_done" for c in r["cases"]) and any(c["passed"] for c in r["cases"])


def test_a_deleted_check_cell_is_still_graded(graded):
    r = row(graded["check_cell_deleted"])
    assert r["points"] == 3 and any("check cell missing" in n for n in r["notes"])


def test_first_match_in_the_namespace_loses_boundary_points(graded):
    r = row(graded["prefix_first_match"])
    assert r["status"] == "failed" and r["boundary"] < 1
    assert any("several paths" in c["name"] and not c["passed"] for c in r["cases"])


def test_every_bad_file_gets_its_own_row(graded):
    assert graded["broken"]["status"] == "unreadable" and "not a readable notebook" in graded["broken"]["execution"]["stopped"]
    assert graded["missing"]["status"] == "not graded" and "submission not found" in graded["missing"]["execution"]["stopped"]
    assert graded["stranger"]["status"] == "not graded" and "pass --lesson" in graded["stranger"]["execution"]["stopped"]
    table = grade.summary(list(graded.values()))
    assert len(table.splitlines()) == 1 + len(graded)


def test_another_lesson_under_this_name_is_reported(graded):
    rep = graded[PREFIX.name]
    assert rep["status"] == "wrong lesson" and SPLIT.stem in rep["warnings"][0]
    assert row(rep)["status"] == "missing"


def test_json_document_keeps_its_fields(graded):
    rep = graded["good"]
    for key in ("submission", "lesson", "title", "status", "rubric", "execution", "exercises", "questions",
                "auto_points", "auto_max", "manual_max", "total_max", "pass_mark"):
        assert key in rep
    for key in ("exercise", "title", "check", "points", "max_points", "manual_points_max", "main_path",
                "boundary", "status", "reason", "check_score", "check_max_score", "cases"):
        assert key in row(rep)
    for key in ("name", "passed", "points", "earned", "hidden", "message", "part"):
        assert key in row(rep)["cases"][0]
    assert set(rep["execution"]) >= {"seconds", "cells_run", "errors", "stopped"}


def test_report_text_names_every_item(graded):
    text = grade.format_report(graded["loops_on_one_case"])
    assert "Exercise 02.1 the copy-on-write split" in text and "split at idx=1 of a long edge" in text
    assert "mapping to source objects" in text and "pass at" in text


def test_misuse_exits_2_with_a_message(tmp_path, capsys):
    assert grade.main([str(tmp_path / "x.ipynb"), "--notebooks", str(tmp_path)]) == 2
    assert "no notebooks" in capsys.readouterr().err
    assert grade.main([str(tmp_path / "x.ipynb"), "--notebooks", str(NOTEBOOKS), "--lesson", "77"]) == 2
    assert "matches none" in capsys.readouterr().err


def test_every_course_notebook_is_gradable():
    """Each instructor notebook's check cells map to exercise specs, and its questions are found."""
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        lesson = grade.load_lesson(path)
        nb = nbformat.read(path, as_version=4)
        calls = {m for c in nb.cells if c.cell_type == "code" for m in grade.CHECK_CALL.findall(c.source)}
        assert {e.check for e in lesson.exercises} >= calls
        manual = {e.check for e in lesson.exercises if e.spec is None}
        assert not manual, f"{path.name}: a check without an ExerciseSpec (graded by hand only): {manual}"
        solutions = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
        assert len(lesson.questions) == len(solutions)
        assert all(q.prompt for q in lesson.questions), f"{path.name}: a reference answer without a question before it"
        assert grade.find_lesson(path, [lesson]) is lesson


def test_ci_workflow_for_course_repositories():
    """The ready-made workflow parses, runs strict nbval on notebooks/ and builds and grades the student edition."""
    yaml = pytest.importorskip("yaml")
    path = ROOT / ".github" / "workflows" / "notebooks.yml"
    flow = yaml.safe_load(path.read_text())
    runs = "\n".join(step.get("run", "") for job in flow["jobs"].values() for step in job["steps"])
    assert "--nbval " in runs and "--nbval-lax" not in runs and "tests/nbval_sanitize.cfg" in runs
    assert "radixlab student notebooks -o build/student" in runs
    assert "radixlab grade build/student/" in runs
    assert "metadata" in runs and "widgets" in runs  # notebook-level widget state is checked too
    assert "make test-browser" in runs and "playwright install" not in runs


def test_every_spec_agrees_with_itself_on_fresh_seeds():
    """The grader draws hidden cases from a fresh seed: the reference must pass every one of them."""
    from radixlab.course.exercises import all_specs
    from radixlab.course.spec import expected, outcomes_for, run_case

    for spec in all_specs().values():
        for seed in (0, 1, 2, 12345):
            cases = spec.cases(seed)
            wants = [expected(spec, c.args) for c in cases]
            got = [run_case(spec, spec.reference, c.args) for c in cases]
            result = outcomes_for(spec, cases, got, wants)
            assert result.passed and result.max_score == 3, (spec.id, seed, repr(result))
            assert all(c.part == "main" for c in cases if not c.hidden), spec.id


def test_a_submission_that_changes_radixlab_voids_the_batch(tmp_path, monkeypatch):
    """If radixlab's files change while a submission runs, its grades and every later one are void."""
    prints = iter(["before", "after", "after", "after"])
    monkeypatch.setattr(grade, "package_fingerprint", lambda: next(prints))
    paths = []
    for name in ("first", "second"):
        paths.append(tmp_path / f"{name}.ipynb")
        nbformat.write(blank(SPLIT), paths[-1])
    out = tmp_path / "g.json"
    assert grade.main([str(p) for p in paths] + ["--notebooks", str(NOTEBOOKS), "--lesson", "02", "--json", str(out)]) == 0
    first, second = json.loads(out.read_text())["reports"]
    assert first["status"] == "tampered" and "void" in first["warnings"][-1]
    assert second["status"] == "not graded" and "changed while grading" in second["execution"]["stopped"]


def test_the_fingerprint_sees_code_links_and_forged_bytecode_not_honest_bytecode(tmp_path, monkeypatch):
    """A forged .pyc runs instead of its source in the next process: it voids the batch like a changed
    .py. Honest bytecode (a notebook kernel importing radixlab meanwhile) and data files do not."""
    import importlib.util
    import py_compile
    import sys
    from importlib._bootstrap_external import _code_to_timestamp_pyc

    from radixlab.course import runner

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    source = pkg / "mod.py"
    source.write_text("x = 1\n")
    base = grade.package_fingerprint(tmp_path)
    # honest bytecode, and a data file rewritten: no change
    py_compile.compile(str(source), doraise=True)
    pyc = Path(importlib.util.cache_from_source(str(source)))
    assert pyc.exists() and grade.package_fingerprint(tmp_path) == base and grade.forged_bytecode(tmp_path) == []
    (pkg / "record.json").write_text("{}")
    assert grade.package_fingerprint(tmp_path) == base
    # forged bytecode: the header Python checks (magic, source mtime and size), other code
    st = source.stat()
    pyc.write_bytes(_code_to_timestamp_pyc(compile("x = 2\n", str(source), "exec"), st.st_mtime, st.st_size))
    assert grade.forged_bytecode(tmp_path) == [str(pyc.relative_to(tmp_path))]
    assert grade.package_fingerprint(tmp_path) != base
    pyc.write_bytes(_code_to_timestamp_pyc(compile("x = 2\n", str(source), "exec"), st.st_mtime + 5, st.st_size))
    assert grade.package_fingerprint(tmp_path) == base  # stale: Python recompiles instead of loading it
    pyc.unlink()
    # a new code file, a sourceless .pyc beside the sources, a symlinked folder
    for make, undo in ((lambda: (pkg / "extra.py").write_text(""), lambda: (pkg / "extra.py").unlink()),
                       (lambda: (pkg / "ghost.pyc").write_bytes(b"x"), lambda: (pkg / "ghost.pyc").unlink()),
                       (lambda: (pkg / "sub").symlink_to(tmp_path), lambda: (pkg / "sub").unlink())):
        make()
        assert grade.package_fingerprint(tmp_path) != base
        undo()
    assert grade.package_fingerprint(tmp_path) == base
    # a file that vanishes while it is read is a change, not a crash
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: (_ for _ in ()).throw(FileNotFoundError(self))
                        if self.name == "mod.py" else real(self))
    assert grade.package_fingerprint(tmp_path) != base
    monkeypatch.undo()
    argv = runner.executor_argv()
    assert argv[:4] == [os.path.realpath(sys.executable), "-I", "-S", "-B"]  # isolated, and writes no bytecode into radixlab
    seen, before = [], sys.dont_write_bytecode
    real_grade = grade._grade
    monkeypatch.setattr(grade, "_grade", lambda argv: seen.append(sys.dont_write_bytecode) or real_grade(argv))
    assert grade.main(["--notebooks", str(tmp_path), "x.ipynb"]) == 2  # (no lessons there: a usage error)
    assert seen == [True] and sys.dont_write_bytecode == before  # set while grading, restored for the caller


def test_the_grader_refuses_to_start_over_forged_bytecode(tmp_path, monkeypatch, capsys):
    sub = tmp_path / "s.ipynb"
    nbformat.write(blank(SPLIT), sub)
    calls = []
    monkeypatch.setattr(grade, "forged_bytecode",
                        lambda root=None: calls.append("check") or ["course/__pycache__/answers_tree.cpython-311.pyc"])
    monkeypatch.setattr(grade, "_load_answers", lambda: calls.append("import"))
    monkeypatch.setattr(grade, "all_specs", lambda: calls.append("specs"))
    assert grade.main([str(sub), "--notebooks", str(NOTEBOOKS), "--lesson", "02"]) == 2
    assert "delete radixlab's __pycache__" in capsys.readouterr().err
    assert calls == ["check"]  # before anything is imported: a forged answers_*.pyc never runs


def test_the_grader_on_each_exercise_notebook_and_its_student_edition(tmp_path):
    """Instructor edition: full automatic marks for every exercise; student edition: every one "not done"."""
    paths = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        lesson = grade.load_lesson(path)
        if any(e.spec for e in lesson.exercises):
            (tmp_path / "student").mkdir(exist_ok=True)
            nbformat.write(blank(path), tmp_path / "student" / path.name)
            paths += [path, tmp_path / "student" / path.name]
    out = tmp_path / "g.json"
    assert grade.main([str(p) for p in paths] + ["--notebooks", str(NOTEBOOKS), "--json", str(out)]) == 0
    for rep in json.loads(out.read_text())["reports"]:
        student = "/student/" in rep["submission"]
        for r in rep["exercises"]:
            assert (r["status"], r["points"]) == (("not done", 0) if student else ("passed", 3)), (rep["submission"], r)


@pytest.mark.parametrize("exercise", ["01.1", "02.1", "04.1", "06.1", "07.2", "09.1", "10.1"])
def test_grader_seeds_redraw_the_visible_cases(exercise):
    """A table of the check cell's visible answers keeps no main-path points: every grader seed renames
    the visible cases' tokens (seed 0, the check cell's, stays as the notebook shows it)."""
    from radixlab.course.exercises import all_specs

    spec = all_specs()[exercise]
    seed0 = [c.args for c in spec.cases(0) if c.part == "main" and "sim" not in c.args]
    assert seed0
    for seed in (1, 7, 12345):
        drawn = [c.args for c in spec.cases(seed) if c.part == "main" and "sim" not in c.args]
        assert len(drawn) == len(seed0)
        for a, b in zip(seed0, drawn):
            assert a != b, (exercise, seed, a)


def test_a_check_without_a_spec_is_listed_for_marking_by_hand(tmp_path):
    """An instructor's new notebook may call a check that has no ExerciseSpec yet: nothing of the
    student's kernel is trusted for it, the grader lists it as manual."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 99 · A new lesson"),
                nbformat.v4.new_code_cell("def answer(x):\n    return x"),
                nbformat.v4.new_code_cell("check_answer(answer)")]
    lessons = tmp_path / "notebooks"
    lessons.mkdir()
    nbformat.write(nb, lessons / "99_new_lesson.ipynb")
    out = tmp_path / "g.json"
    grade.main([str(lessons / "99_new_lesson.ipynb"), "--notebooks", str(lessons), "--json", str(out)])
    (rep,) = json.loads(out.read_text())["reports"]
    (row,) = rep["exercises"]
    assert row["check"] == "check_answer" and row["status"] == "manual" and "mark by hand" in row["reason"]


def _run_first_case_once(first_case: str, mark: str):
    """Run 01.1 (two cases) on a match_prefix that runs ``first_case`` (indented 8 spaces, may use
    ``os``, ``time`` and ``mark``) in its first case only, then answers (0, 'x')."""
    from radixlab.course.ex_match import cases
    from radixlab.course.runner import run_exercise

    probe = (
        "import os, time\n"
        "def match_prefix(root, tokens):\n"
        f"    mark = {mark!r}\n"
        "    if not os.path.exists(mark + '.spawned'):\n"
        "        open(mark + '.spawned', 'w').close()\n"
        + first_case +
        "    return (0, 'x')\n")
    args = [c.args for c in cases(7)][:2]
    return run_exercise("01.1", "match_prefix", {0: probe}, [(0, 0), (0, 1)], args, 20, 60, 120, sandbox=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks and a child subreaper: Linux")
def test_processes_a_submission_forks_do_not_outlive_the_run(tmp_path):
    """A child left in the executor's process group, and a grandchild that escaped it (a double fork
    with setsid), are both killed when the run ends: neither writes its file a moment later."""
    mark = str(tmp_path / "mark")
    run = _run_first_case_once(
        "        if os.fork() == 0:\n"
        "            time.sleep(2); open(mark + '.group', 'w').close(); os._exit(0)\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"
        "            if os.fork() == 0:\n"
        "                time.sleep(2); open(mark + '.session', 'w').close(); os._exit(0)\n"
        "            os._exit(0)\n", mark)
    assert run.defined, run.errors
    assert os.path.exists(mark + ".spawned")
    time.sleep(3)
    assert not os.path.exists(mark + ".group"), "a child in the executor's process group outlived the run"
    assert not os.path.exists(mark + ".session"), "a grandchild in its own session outlived the run"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks and a child subreaper: Linux")
def test_a_deep_chain_of_escaped_processes_dies_and_an_exit_is_seen_while_they_hold_the_pipe(tmp_path):
    """60 processes, each in its own session and each the parent of the next, all holding the answer
    pipe; then the executor exits mid-case. The exit is seen at once (not at the case's time limit)
    and the whole chain is killed, however deep."""
    t0 = time.monotonic()
    run = _run_first_case_once(
        "        if os.fork() == 0:\n"
        "            for _ in range(60):\n"
        "                if os.fork():\n"
        "                    break\n"
        "                os.setsid()\n"
        "            time.sleep(3); open(mark + '.chain.%d' % os.getpid(), 'w').close(); time.sleep(30); os._exit(0)\n"
        "        time.sleep(0.5)\n"
        "        os._exit(3)\n", str(tmp_path / "mark"))
    assert run.defined, run.errors
    assert "exited" in run.outcomes[0].get("raised", ""), run.outcomes[0]  # not a timeout
    assert "answer" in run.outcomes[1], run.outcomes[1]
    assert time.monotonic() - t0 < 15
    time.sleep(4)
    assert not list(tmp_path.glob("mark.chain.*")), "part of the chain outlived the run"


def test_what_the_executor_wrote_just_before_it_exited_is_read(monkeypatch):
    """The executor answers case 0, then exits in case 1. Even when the grader looks at the process only
    after it has exited (here: every poll() is late), the lines it wrote first are read, not lost."""
    import subprocess

    from radixlab.course.ex_match import cases
    from radixlab.course.runner import run_exercise

    probe = ("import os\n"
             "def match_prefix(root, tokens, _roots=[]):\n"
             "    if not any(r is root for r in _roots):\n        _roots.append(root)\n"
             "    if len(_roots) == 2:\n        os._exit(0)\n"
             "    return (0, 'x')\n")
    real = subprocess.Popen.poll

    def late_poll(self):
        time.sleep(0.3)
        return real(self)
    monkeypatch.setattr(subprocess.Popen, "poll", late_poll)
    run = run_exercise("01.1", "match_prefix", {0: probe}, [(0, 0), (0, 1)], [c.args for c in cases(7)][:2], 20, 60, 120)
    assert run.defined, (run.errors, run.stopped)
    assert "answer" in run.outcomes[0] and "exited" in run.outcomes[1].get("raised", ""), run.outcomes


def test_a_comprehension_variable_stays_in_the_comprehension():
    """Python 3 comprehensions have their own scope: a loop variable does not hide the statement that
    defines a helper of the same name."""
    from radixlab.course.exercises import all_specs
    from radixlab.course.extract import course_statements, extract

    spec = all_specs()["01.1"]
    nb = nbformat.read(lesson_with(spec.function), as_version=4)
    base = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    cells = ["def node_len(n):\n    return 1", "def match_prefix(root, tokens):\n    return (node_len(root), None)",
             "print([node_len for node_len in range(3)])"]
    ex = extract(base + [(100 + k, src) for k, src in enumerate(cells)], spec.function,
                 course_statements([s for _, s in base]))
    assert [s.cell for s in ex.statements if not s.course] == [100, 101]  # the def, not the print


def test_grade_on_a_system_without_posix_process_control_says_so(monkeypatch, capsys):
    """Windows has no process groups to kill: the grader refuses with a clear message, not a traceback."""
    monkeypatch.delattr(os, "killpg")
    assert grade.main(["nothing.ipynb"]) == 2
    assert "needs a POSIX system" in capsys.readouterr().err


def test_an_optional_exercise_is_graded_but_counts_in_no_total(tmp_path):
    """01.2 is for students who finish early: skipping it costs nothing; its row still says what it scored."""
    path = lesson_with("match_prefix")
    report = grade.grade_submission(path, grade.load_lesson(path), seed=1)
    rows = {r["exercise"]: r for r in report["exercises"]}
    assert rows["01.2"]["optional"] and not rows["01.1"]["optional"]
    assert report["auto_max"] == sum(r["max_points"] for r in report["exercises"] if r["exercise"] != "01.2")
    assert "counted in no total" in grade.format_report(report)

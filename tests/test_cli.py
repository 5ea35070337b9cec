"""``python -m radixlab``: demo, doctor, student, bench dispatch."""

import subprocess
import sys
from pathlib import Path

import pytest

from radixlab.__main__ import main
from radixlab.demo import run

ROOT = Path(__file__).resolve().parents[1]


def test_demo_replays_the_seed_walkthrough(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for line in ["Request A ['sys', 'prompt', 'A']:", "  hit length=0  miss length=3",
                 "  KV={0: 'sys', 1: 'prompt', 2: 'A'}", "Request B ['sys', 'prompt', 'B']:",
                 "  KV={0: 'sys', 1: 'prompt', 2: 'B'}",
                 "[check ①] match_prefix(['sys','prompt','A']) → hit_len=3",
                 "[check ②] shared prefix node ref=2", "[check ③] forked children keys={'A', 'B'}",
                 "  ✓ suffix node 'A' is separate: key=['A'], last KV token='A'",
                 "  ✓ suffix node 'B' is separate: key=['B'], last KV token='B'",
                 "[extra]    match_prefix(['sys','prompt','B']) → hit_len=3 ✓",
                 "└─ key=['sys', 'prompt']  ref=2  value=None", "   └─ key=['A']  ref=1  value=<kv>",
                 "   └─ key=['B']  ref=1  value=<kv>", "✅ the tree lesson's walkthrough passed"]:
        assert line in out.splitlines(), line


def test_demo_fails_loudly_when_the_tree_is_wrong(monkeypatch, capsys):
    from radixlab import tree as tree_mod

    monkeypatch.setattr(tree_mod.RadixTree, "_split", lambda self, node, idx: None)  # a broken split
    with pytest.raises(Exception):
        run(out=lambda *a: None)


def test_doctor_reports_the_basics(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for item in ("python", "torch", "cuda", "default device", "graphviz dot", "ipywidgets", "jupyterlab"):
        assert f"  {item}" in out


def test_student_refuses_the_instructor_folder(capsys):
    assert main(["student", str(ROOT / "notebooks"), "-o", str(ROOT / "notebooks")]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err


def test_unknown_benchmark_is_a_clear_error(capsys):
    assert main(["bench", "nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err


def test_module_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "radixlab", "demo"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "passed" in proc.stdout


def test_doctor_without_paths_shows_no_machine_paths(capsys):
    import sys as _sys

    from radixlab import doctor

    doctor.show(paths=False)
    out = capsys.readouterr().out
    assert "  python" in out and "  graphviz dot" in out and "  torch" in out
    assert _sys.executable not in out and "/usr/bin/dot" not in out and "/work" not in out


def test_doctor_prints_its_header_before_the_slow_report(capsys, monkeypatch):
    """A student sees output at once, not after the seconds the report takes (notebook 00)."""
    from radixlab import doctor

    seen = []
    monkeypatch.setattr(doctor, "report", lambda paths: seen.append(capsys.readouterr().out) or [("python", "3")])
    doctor.show(paths=False)
    assert seen == ["radixlab doctor\n"] and capsys.readouterr().out == "  python  3\n"


@pytest.mark.parametrize("args", [["-h"], ["demo", "-h"], ["doctor", "-h"], ["student", "-h"], ["bench", "-h"],
                                  ["bench", "lookup", "-h"], ["bench", "evict", "--help"], ["grade", "-h"],
                                  ["grade", "--help"]], ids=" ".join)
def test_every_subcommand_has_working_help(args, capsys):
    """The main help says "see grade --help": every such help must print usage and exit 0."""
    try:
        rc = main(args)
    except SystemExit as exc:  # the top-level parser's own -h
        rc = exc.code
    out = capsys.readouterr().out
    assert rc == 0 and "usage: python -m radixlab" in out, out
    if args[0] == "grade":
        assert "--case-timeout" in out and "--seed" in out and "unrecognized" not in out


def test_grade_help_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "radixlab", "grade", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "usage: python -m radixlab grade" in proc.stdout, proc.stderr


def test_grade_without_submissions_is_a_usage_error(capsys):
    assert main(["grade"]) == 2
    assert "required: submissions" in capsys.readouterr().err


def test_doctor_reads_versions_without_importing_the_packages():
    """Importing JupyterLab alone takes seconds (notebook 00's doctor cell was ~12 s): read metadata."""
    code = ("import sys; from radixlab import doctor; rows = dict(doctor.report(paths=False)); "
            "heavy = [m for m in ('jupyterlab', 'matplotlib', 'ipywidgets', 'nbval', 'ipykernel') if m in sys.modules]; "
            "print(heavy, rows['jupyterlab'] != 'not installed')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[] True"


def test_doctor_names_a_missing_package():
    from radixlab import doctor

    assert doctor._version("no-such-distribution-radixlab") == "not installed"

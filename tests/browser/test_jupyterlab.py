"""The course in a real browser: JupyterLab + Chromium (Playwright), every notebook, both editions.

For each notebook: open it in JupyterLab, clear the outputs and run all cells through the menus
(Edit → Clear Outputs of All Cells, Run → Run All Cells), wait for the kernel to go idle, then assert

* instructor edition: no error output anywhere; a rendered tree drawing (an SVG image that decoded)
  where the notebook draws trees; live widgets where it has sliders (a real ipywidgets slider, not
  "Loading widget...", and pressing → on it changes the widget output next to it);
* student edition: no error output up to the first exercise check, whose output is the friendly
  "not done yet" verdict; no check cell shows a traceback. (Run All stops at the first error later
  on, where a cell uses the student's unfinished function: that is expected.)

A screenshot of each run goes to build/screenshots/{instructor,student}/NN_topic.png. One server and
one browser serve all notebooks; each notebook's kernel is shut down before the next one opens.
Run with ``make test-browser`` (sets RADIXLAB_BROWSER=1).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from lab_server import LabServer

from radixlab.course.grade import CHECK_CALL

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SHOTS = REPO / "build" / "screenshots"
CHROMIUM = os.environ.get("RADIXLAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
HAS_SLIDER = re.compile(r"\b(step_through|\w*_slider|IntSlider|FloatSlider|SelectionSlider|interact)\s*\(")
RUN_TIMEOUT_MS = 240_000  # one notebook, run all, on a slow 2-core machine

# -- JavaScript run in the page (window.jupyterapp is exposed by the server flag) -----------------

JS_READY = """path => {
  const app = window.jupyterapp; const p = app && app.shell.currentWidget;
  if (!p || !p.sessionContext || !p.content || !p.context.isReady || p.context.path !== path) return false;
  const k = p.sessionContext.session && p.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && p.content.widgets.length > 0;
}"""

JS_STATE = """() => {
  const p = window.jupyterapp.shell.currentWidget;
  const k = p.sessionContext.session && p.sessionContext.session.kernel;
  const busy = p.content.widgets.some(w => w.model.type === 'code' &&
      ((w.node.querySelector('.jp-InputPrompt') || {}).textContent || '').includes('*'));
  return {status: k ? k.status : 'dead', busy};
}"""

JS_CELLS = """() => window.jupyterapp.shell.currentWidget.content.widgets.map((w, i) => {
  if (w.model.type !== 'code') return {index: i, type: w.model.type};
  const outputs = w.model.outputs.toJSON().map(o => ({
      output_type: o.output_type, name: o.name || '', ename: o.ename || '', evalue: o.evalue || '',
      text: [].concat(o.text || (o.data && o.data['text/plain']) || []).join(''),
      mimes: Object.keys(o.data || {})}));
  const shownErr = [...w.node.querySelectorAll(
      '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')].map(e => e.textContent)
      .filter(t => /Traceback|Error\\b/.test(t));
  const svgs = [...w.node.querySelectorAll('.jp-RenderedSVG img, .jp-OutputArea-output svg')].filter(img =>
      img.tagName.toLowerCase() === 'svg' || (img.complete && img.naturalWidth > 0));
  return {index: i, type: 'code', count: w.model.executionCount, outputs, shownErr, svgs: svgs.length,
          text: outputs.map(o => o.text + ' ' + o.ename + ' ' + o.evalue).join('\\n')};
})"""

JS_SCROLL_HEIGHT = """() => {
  const el = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
  return el ? el.scrollHeight : 0;
}"""


# -- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def workspace():
    """A temp root with ``instructor/`` (a copy of notebooks/) and ``student/`` (the student edition)."""
    root = Path(tempfile.mkdtemp(prefix="radixlab-browser-"))
    shutil.copytree(REPO / "notebooks", root / "instructor", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    subprocess.run([sys.executable, "-m", "radixlab", "student", str(REPO / "notebooks"), "-o", str(root / "student")],
                   check=True, capture_output=True, cwd=REPO)
    (root / "selftest").mkdir()
    planted = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# harness self-test"),
                                              nbformat.v4.new_code_cell("print('before')"),
                                              nbformat.v4.new_code_cell("raise ValueError('planted error')"),
                                              nbformat.v4.new_code_cell("print('after')")])
    planted.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(planted, root / "selftest" / "planted_error.ipynb")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def lab(workspace):
    server = LabServer(workspace)
    try:
        server.start()
        yield server
    finally:
        server.stop()  # by its PID, pass or fail


@pytest.fixture(scope="session")
def browser():
    # Asked for (RADIXLAB_BROWSER=1) but impossible is a failure, not a skip: CI must not go green silently.
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail("Playwright's Python package is missing: pip install -e '.[browser]' (make test-browser does it)")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: apt-get install chromium (make test-browser does it) "
                    "or set RADIXLAB_CHROMIUM")
    profile = tempfile.mkdtemp(prefix="radixlab-chromium-")
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


# -- driving one notebook ----------------------------------------------------------------------------


def menu(page, top: str, item: str) -> None:
    """Click a main-menu entry the way a student does: the top label, then the item's label."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{top}$")).first.click()
    page.locator(".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel",
                 has_text=re.compile(rf"^{re.escape(item)}$")).first.click()


def wait_idle(page, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    """Until the kernel is idle and no cell shows [*] for three polls in a row."""
    deadline, calm = time.monotonic() + timeout_ms / 1000, 0
    while time.monotonic() < deadline:
        state = page.evaluate(JS_STATE)
        calm = calm + 1 if state["status"] == "idle" and not state["busy"] else 0
        if calm >= 3:
            return
        if state["status"] == "dead":
            raise AssertionError("the kernel died")
        time.sleep(0.5)
    raise AssertionError(f"notebook still running after {timeout_ms / 1000:.0f} s")


def open_and_run(page, lab: LabServer, rel: str) -> list[dict]:
    page.goto(lab.url(rel), wait_until="domcontentloaded")
    page.wait_for_function(JS_READY, arg=rel, timeout=120_000, polling=500)
    assert page.locator(".jp-NotebookPanel").count() == 1, "other notebooks were restored into this page"
    page.evaluate("() => { window.jupyterapp.shell.collapseLeft(); window.jupyterapp.shell.collapseRight(); }")
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first.click(position={"x": 5, "y": 5})
    menu(page, "Edit", "Clear Outputs of All Cells")
    menu(page, "Run", "Run All Cells")
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.content.widgets.some("
                           "w => w.model.type === 'code' && w.model.executionCount !== null)",
                           timeout=RUN_TIMEOUT_MS, polling=500)
    wait_idle(page)
    return page.evaluate(JS_CELLS)


def screenshot(page, path: Path) -> None:
    """The whole notebook in one picture: make the window as tall as the notebook, then shoot."""
    path.parent.mkdir(parents=True, exist_ok=True)
    page.keyboard.press("Escape")
    height = page.evaluate(JS_SCROLL_HEIGHT)
    page.set_viewport_size({"width": 1280, "height": max(900, min(height + 160, 16000))})
    page.evaluate("""() => document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer')
                            .forEach(el => { el.scrollTop = 0; })""")
    page.wait_for_timeout(1500)  # let the newly visible outputs paint
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def errors(cells: list[dict], upto: int | None = None) -> list[str]:
    found = []
    for c in cells:
        if c["type"] != "code" or (upto is not None and c["index"] > upto):
            continue
        for o in c["outputs"]:
            if o["output_type"] == "error":
                found.append(f"cell {c['index']}: {o['ename']}: {o['evalue'][:200]}")
            elif o["name"] == "stderr" and "Traceback" in o["text"]:
                found.append(f"cell {c['index']} stderr: {o['text'][-200:]}")
        found += [f"cell {c['index']} shows: {t[:200]}" for t in c["shownErr"]]
    return found


def move_slider(page, slider) -> None:
    """Press → on ``slider``; the widget output beside it must change."""
    slider.wait_for(state="attached", timeout=60_000)
    output_of = """s => { const box = s.closest('.widget-box') || s.closest('.jp-OutputArea');
                          return [...box.querySelectorAll('.widget-output')].map(o => o.innerHTML).join('|'); }"""
    readout = slider.locator(".widget-readout")
    before, before_value = slider.evaluate(output_of), readout.inner_text()
    assert before.strip(), "the widget output next to the slider is empty before moving it"
    handle = slider.locator(".noUi-handle").first
    handle.scroll_into_view_if_needed()
    handle.focus()
    page.keyboard.press("ArrowRight")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and slider.evaluate(output_of) == before:
        time.sleep(0.25)
    assert readout.inner_text() != before_value, "the slider did not move"
    assert slider.evaluate(output_of) != before, "moving the slider did not change its output"


def sources(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells]


def stored_svg_cells(path: Path) -> list[int]:
    """Cells whose stored (instructor) outputs hold an SVG picture (Graphviz trees): the browser must render one.

    Judged from the stored outputs, not from function names: timelines and plots are PNG, trees are SVG."""
    cells = nbformat.read(path, as_version=4).cells
    return [i for i, c in enumerate(cells) if c.cell_type == "code"
            and any("image/svg+xml" in o.get("data", {}) for o in c.get("outputs", []))]


@pytest.fixture
def page(browser, lab):
    page = browser.new_page()
    yield page
    page.close()
    lab.shutdown_kernels()


# -- the tests ---------------------------------------------------------------------------------------

if not NOTEBOOKS:
    pytest.skip("no notebooks yet", allow_module_level=True)


def test_harness_sees_a_planted_error(page, lab):
    """The detector itself can fail: an error output is found, and Run All stops after it."""
    cells = open_and_run(page, lab, "selftest/planted_error.ipynb")
    assert any("ValueError: planted error" in e for e in errors(cells)), errors(cells)
    assert [c["count"] is not None for c in cells if c["type"] == "code"] == [True, True, False]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_instructor_edition(page, lab, nb: Path):
    src = sources(nb)
    try:
        cells = open_and_run(page, lab, f"instructor/{nb.name}")
        assert errors(cells) == [], "error output in the instructor edition"
        unrun = [c["index"] for c in cells if c["type"] == "code" and src[c["index"]].strip() and c["count"] is None]
        assert not unrun, f"cells never ran: {unrun}"
        if stored_svg_cells(nb):
            assert sum(c.get("svgs", 0) for c in cells) >= 1, "the notebook draws trees but no SVG rendered"
        if any(HAS_SLIDER.search(s) for s in src):
            body = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").text_content()
            assert "Loading widget" not in body and "Error displaying widget" not in body, "widgets did not render"
            sliders = page.locator(".jp-OutputArea-output .widget-slider")
            assert sliders.count() >= 1, "the notebook has sliders but none rendered"
            for k in range(sliders.count()):
                move_slider(page, sliders.nth(k))
    finally:
        screenshot(page, SHOTS / "instructor" / f"{nb.stem}.png")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_student_edition(page, lab, workspace, nb: Path):
    src = sources(workspace / "student" / nb.name)
    checks = [i for i, s in enumerate(src) if CHECK_CALL.search(s)]
    try:
        cells = open_and_run(page, lab, f"student/{nb.name}")
        if not checks:  # nothing to fill in: the student edition runs as cleanly as the instructor's
            assert errors(cells) == []
            return
        first = checks[0]
        assert errors(cells, upto=first) == [], "error output before the first exercise check"
        verdict = next(c for c in cells if c["index"] == first)
        assert verdict["count"] is not None, "the first check cell never ran"
        assert "not done yet" in verdict["text"], f"first check shows: {verdict['text'][:300]!r}"
        for c in cells:
            if c["index"] in checks and c["count"] is not None:
                assert "Traceback" not in c["text"] and not c["shownErr"], f"check cell {c['index']} shows a traceback"
                assert not any(o["output_type"] == "error" for o in c["outputs"]), f"check cell {c['index']} raised"
                assert "not done yet" in c["text"], f"check cell {c['index']} shows: {c['text'][:300]!r}"
        instructor_src = sources(nb)
        first_in_instructor = next(i for i, s in enumerate(instructor_src) if CHECK_CALL.search(s))
        if any(i < first_in_instructor for i in stored_svg_cells(nb)):
            assert sum(c.get("svgs", 0) for c in cells if c["index"] < first) >= 1, "no tree SVG before the first check"
    finally:
        screenshot(page, SHOTS / "student" / f"{nb.stem}.png")

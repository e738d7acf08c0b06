"""The learner's path in a real browser: JupyterLab from .venv on the CPU, driven by Playwright and
Debian's headless Chromium.

A temporary workspace holds notebooks/01_vector_add.ipynb, made from release/ (what the learner gets)
with source/'s solutions typed into its solution cells (what a learner who solved it has), and JupyterLab
is set up as docker/Dockerfile sets it up for learners (nbgrader's instructor tools off). The test opens
the notebook, runs all cells, moves the BLOCK_SIZE widget and sees the picture change, presses nbgrader's
Validate button, and saves a screenshot of each step to tests/artifacts/browser/. It fails on any
JavaScript error, on a traceback or stderr output in a cell, on a test cell that does not pass, and on a
missing widget.

Needs Debian's ``chromium`` and PyPI's ``playwright`` (requirements/test.txt); ``tools/install-ci-deps.sh``
installs both. Playwright never downloads a browser here. TRITONCOURSE_SKIP_BROWSER=1 skips the test.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from servers import free_port, wait_until_answers

ROOT = Path(__file__).resolve().parent.parent
RELEASE = ROOT / "release"
SOURCE = ROOT / "source"
ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"
PHASE = "01_vector_add"
CHROMIUM = os.environ.get("TRITONCOURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# Only for the test: every cell stays in the page (JupyterLab's default leaves cells off screen unrendered).
TEST_SETTINGS = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}
RUN_ALL_TIMEOUT_S = 300
VALIDATE_TIMEOUT_S = 300

pytestmark = pytest.mark.slow


def _requirements_or_fail():
    """Skip when asked to; otherwise fail, saying how to install what is missing."""
    if os.environ.get("TRITONCOURSE_SKIP_BROWSER") == "1":
        pytest.skip("TRITONCOURSE_SKIP_BROWSER=1")
    missing = []
    if not (Path(CHROMIUM).exists() and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install -r requirements/test.txt)")
    if missing:
        pytest.fail("The browser test needs " + " and ".join(missing) + ". `bash tools/install-ci-deps.sh` "
                    "installs what is missing; set TRITONCOURSE_SKIP_BROWSER=1 to skip this test.", pytrace=False)


def _strip_solution_markers(source: str) -> str:
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def learner_notebook(phase: str, release: Path | None = None, source: Path | None = None) -> nbformat.NotebookNode:
    """The released notebook as a learner who solved it has it: every solution cell (kernels and
    written answers) holds the source's solution."""
    release, source = release or RELEASE, source or SOURCE
    nb = nbformat.read(release / phase / f"{phase}.ipynb", as_version=4)
    ref = nbformat.read(source / phase / f"{phase}.ipynb", as_version=4)
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source for c in ref.cells
                 if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    replaced = 0
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in solutions:
            cell.source = _strip_solution_markers(solutions[meta["grade_id"]])
            replaced += 1
    assert replaced == len(solutions), f"release/{phase} lacks solution cells of source/{phase}"
    return nb


def learner_jupyter_settings() -> tuple[list[str], list[str], dict]:
    """The learner's JupyterLab as docker/Dockerfile sets it up: the nbgrader lab plugins and server
    extensions it turns off, and its settings overrides (docker/jupyter-overrides.json)."""
    text = (ROOT / "docker" / "Dockerfile").read_text()

    def arg(name: str) -> list[str]:
        m = re.search(rf'^ARG {name}="([^"]*)"', text, re.M)
        assert m, f"docker/Dockerfile has no ARG {name}"
        return m.group(1).split()

    overrides = json.loads((ROOT / "docker" / "jupyter-overrides.json").read_text())
    return arg("NBGRADER_LAB_OFF"), arg("NBGRADER_SERVER_OFF"), overrides


def _learner_jupyter_config(config: Path) -> None:
    """The learner's JupyterLab settings, at user level in a Jupyter config folder of the test's own."""
    lab_off, server_off, overrides = learner_jupyter_settings()
    (config / "labconfig").mkdir(parents=True)
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {name: True for name in lab_off}, "lockedExtensions": {name: True for name in lab_off}}))
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {name: False for name in server_off}}}))
    for plugin, settings in {**overrides, **TEST_SETTINGS}.items():
        package, _, name = plugin.partition(":")
        path = config / "lab" / "user-settings" / package / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))


def _make_course(tmp: Path, notebooks: dict[str, nbformat.NotebookNode] | None = None) -> Path:
    """A throw-away learner's workspace, as `make lab` and the container serve it: notebooks/ with the
    learner's notebook (or ``notebooks``, by phase) and the workspace's nbgrader_config.py (Validate reads it
    from the server's working directory); and Jupyter settings of its own."""
    course = tmp / "course"
    (course / "notebooks").mkdir(parents=True)
    workspace_config = ROOT / "notebooks" / "nbgrader_config.py"
    if workspace_config.exists():
        shutil.copy2(workspace_config, course / "notebooks" / "nbgrader_config.py")
    for phase, nb in (notebooks or {PHASE: learner_notebook(PHASE)}).items():
        nbformat.write(nb, course / "notebooks" / f"{phase}.ipynb")
    _learner_jupyter_config(tmp / "jupyter-config")
    return course


class KernelWaits:
    """For a JupyterLab server with ``api(path)`` and ``log()``: here, or in the container (test_container.py)."""

    def wait_kernel_idle(self, timeout: float = 120) -> None:
        """Until the notebook's kernel has started and is idle."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = [s["kernel"]["execution_state"] for s in self.api("/api/sessions") if s.get("kernel")]
            if states and all(state == "idle" for state in states):
                return
            time.sleep(0.5)
        raise AssertionError(f"the kernel was not idle within {timeout:.0f} s:\n{self.log()}")


class JupyterLab(KernelWaits):
    """``jupyter lab`` from this interpreter's environment, on 127.0.0.1, a free port and a token."""

    def __init__(self, course: Path, tmp: Path):
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.log_path = tmp / "jupyterlab.log"
        bin_dir = Path(sys.executable).parent
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                   JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
                   JUPYTER_DATA_DIR=str(tmp / "jupyter-data"), IPYTHONDIR=str(tmp / "ipython"),
                   MPLCONFIGDIR=str(tmp / "matplotlib"), TRITON_INTERPRET="1")
        env.pop("TRITONCOURSE_SEED", None)
        env.pop("NBGRADER_EXECUTION", None)
        env.pop("TRITONCOURSE_HEADLESS", None)  # a person at the browser: real widgets
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
               "--port-retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={course / 'notebooks'}",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if os.geteuid() == 0:  # CI runs as root
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=course / "notebooks", env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str):
        req = urllib.request.Request(f"{self.base}{path}", headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def wait_ready(self, timeout: float = 90) -> None:
        wait_until_answers(lambda: self.api("/api/status"), self.proc, timeout, "jupyter lab", self.log)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


@pytest.fixture
def lab(tmp_path, request):
    _requirements_or_fail()
    phase = getattr(request, "param", PHASE)
    course = _make_course(tmp_path, {phase: learner_notebook(phase)})
    server = JupyterLab(course, tmp_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


PANEL = ".jp-NotebookPanel:visible"


def run_all_cells(page, n_code: int, timeout_s: float = RUN_ALL_TIMEOUT_S) -> None:
    """Run > Run All Cells, as a learner does, then wait until every code cell has run and the kernel is idle
    (or Run All stopped at a cell that raised: idle for 10 s with cells left); then no cell may have written
    to stderr, and every code cell must have run."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    prompts = page.locator(f"{PANEL} .jp-CodeCell .jp-InputArea-prompt")
    idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    deadline = time.monotonic() + timeout_s
    idle_since, ran, texts = None, 0, []
    while time.monotonic() < deadline:
        texts = prompts.all_inner_texts()
        ran = sum(bool(re.search(r"\[\d+\]", t)) for t in texts)
        busy = any("[*]" in t for t in texts)
        if ran == n_code and not busy and idle.count() == 1:
            break
        if ran and not busy and idle.count() == 1:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 10:
                break
        else:
            idle_since = None
        page.wait_for_timeout(1000)
    errors = page.locator(f"{PANEL} .jp-OutputArea-output[data-mime-type="
                          "'application/vnd.jupyter.stderr']").all_inner_texts()
    assert not errors, "cells raised errors or wrote to stderr:\n" + "\n---\n".join(t[-3000:] for t in errors)
    assert ran == n_code, f"Run All ran {ran} of {n_code} code cells in {timeout_s:.0f} s; prompts {texts}"


def kernel_test_outputs(page) -> list[str]:
    """The text of every %%kernel_test cell's output; each must say PASSED (or HIDDEN: all its cases hidden)."""
    test_cells = page.locator(f"{PANEL} .jp-CodeCell", has=page.locator(".cm-content", has_text="%%kernel_test"))
    outputs = [test_cells.nth(i).locator(".jp-OutputArea").inner_text().strip() for i in range(test_cells.count())]
    for text in outputs:
        assert text.startswith(("PASSED:", "HIDDEN:")) and "FAILED" not in text, f"a test cell did not pass:\n{text}"
    return outputs



def test_learner_runs_notebook_moves_widget_and_validates(lab):
    """Does a learner who solved phase 1 see it run, the picture follow the widget, and Validate pass?"""
    from playwright.sync_api import expect, sync_playwright

    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    js_errors: list[str] = []
    console_log: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("pageerror", lambda err: js_errors.append(str(err)))
            page.on("console", lambda msg: console_log.append(f"{msg.type}: {msg.text}"))
            page.set_default_timeout(60_000)

            def shot(name: str) -> None:
                page.screenshot(path=str(ARTIFACTS / f"{name}.png"))

            try:
                _drive(page, lab, shot, expect)
            except BaseException:
                shot("failure")
                raise
            finally:
                (ARTIFACTS / "console.log").write_text("\n".join(console_log) + "\n")
                (ARTIFACTS / "jupyterlab.log").write_text(lab.log())
        finally:
            browser.close()
    assert not js_errors, "JavaScript errors in the page:\n" + "\n".join(js_errors)


def _drive(page, lab: JupyterLab, shot, expect) -> None:
    # 1. Open the notebook; the kernel starts.
    page.goto(f"{lab.base}/lab/tree/{PHASE}.ipynb?token={lab.token}")
    code_cells = page.locator(f"{PANEL} .jp-CodeCell")
    expect(code_cells.nth(9)).to_be_attached(timeout=120_000)
    n_code = code_cells.count()
    lab.wait_kernel_idle()
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=60_000)
    # The learner's JupyterLab: nbgrader's Validate button; no Nbgrader menu (formgrader, courses).
    expect(page.locator(f"{PANEL} .validate-button")).to_have_count(1)
    menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
    assert "Run" in menus and "Nbgrader" not in menus, f"the menu bar shows {menus}"
    shot("01-opened")

    # 2. Run > Run All Cells, and wait until every code cell has run and the kernel is idle.
    run_all_cells(page, n_code)

    # Every %%kernel_test cell shows a PASSED line (or HIDDEN, when all its cases are hidden tests).
    test_cells = page.locator(f"{PANEL} .jp-CodeCell", has=page.locator(".cm-content", has_text="%%kernel_test"))
    outputs = kernel_test_outputs(page)
    assert len(outputs) >= 2, f"found {len(outputs)} %%kernel_test cells"
    assert sum(text.startswith("PASSED:") for text in outputs) >= 2, outputs
    code_cells.first.evaluate("el => el.scrollIntoView({block: 'start'})")
    shot("02-ran-top")
    test_cells.first.evaluate("el => el.scrollIntoView({block: 'start'})")
    shot("03-tests-passed")

    # 3. The widget: a BLOCK_SIZE dropdown whose picture changes when it moves.
    widget_cell = page.locator(f"{PANEL} .jp-CodeCell",
                               has=page.locator(".widget-dropdown", has_text="BLOCK_SIZE"))
    expect(widget_cell).to_have_count(1, timeout=30_000)
    dropdown = widget_cell.locator(".widget-dropdown", has_text="BLOCK_SIZE")
    picture = widget_cell.locator(".jp-OutputArea-output img")
    expect(picture).to_have_count(1, timeout=30_000)
    widget_cell.evaluate("el => el.scrollIntoView({block: 'start'})")
    before = picture.get_attribute("src")
    assert before and before.startswith("data:image/png"), f"the widget's picture is not a PNG: {before!r:.80}"
    shot("04-widget-block-size-8")
    select = dropdown.locator("select")
    assert select.input_value() == "8", f"BLOCK_SIZE starts at {select.input_value()}, expected 8"
    select.select_option("16")
    deadline = time.monotonic() + 60
    while (after := picture.get_attribute("src") if picture.count() == 1 else None) in (None, before):
        assert time.monotonic() < deadline, "the picture did not change after BLOCK_SIZE moved to 16"
        page.wait_for_timeout(250)
    assert after.startswith("data:image/png")
    page.wait_for_timeout(500)
    shot("05-widget-block-size-16")

    # 4. nbgrader's Validate button: it saves, runs the notebook in a fresh kernel and reports.
    page.locator(f"{PANEL} .validate-button").click()
    message = page.locator("#validation-message")
    expect(message).to_have_count(1, timeout=VALIDATE_TIMEOUT_S * 1000)
    text = message.inner_text()
    shot("06-validate")
    assert "Success! Your notebook passes all the tests." in text, f"Validate said:\n{text}"
    page.get_by_role("button", name=re.compile("OK", re.I)).first.click()


# ---- every phase's plots and widgets -------------------------------------------------------------------
PHASES = sorted(p.name for p in SOURCE.iterdir() if p.is_dir())
PLOT_CALLS = ("plot_recorded(", "plot_recorded_attention(", "show_recorded_roofline(")  # the CPU's pictures of a recorded GPU run
WIDGET_CALL = re.compile(r"^\w+_widget\(", re.M)  # a cell that ends by returning a widget factory's widget
PICTURES = ARTIFACTS.parent / "browser-phases"
# The capstone's plot and widget render in its own browser test (test_capstone_runs_and_its_tile_widget_follows,
# which runs the whole notebook, tests included); without its test cells its Run All stopped after one cell here.
RENDERED_PHASES = [p for p in PHASES if p != "06_fused_attention"]


def pictures_notebook(phase: str) -> nbformat.NotebookNode:
    """The solved notebook without its %%kernel_test cells (the phase-1 test above runs tests and Validate):
    what is left is the learner's path through the text, the plots and the widgets."""
    nb = learner_notebook(phase)
    nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and c.source.lstrip().startswith("%%kernel_test"))]
    return nb


def expected_pictures(nb: nbformat.NotebookNode) -> tuple[int, int]:
    """(cells that draw a recorded GPU plot, cells that show a widget)."""
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    return sum(any(call in s for call in PLOT_CALLS) for s in code), sum(bool(WIDGET_CALL.search(s)) for s in code)


def test_every_phase_has_a_plot_and_the_widget_phases_have_widgets():
    """Does every phase draw its GPU plot on a CPU, and do phases 1 to 5 have a widget (phase 4 included)?"""
    for phase in PHASES:
        plots, widgets = expected_pictures(pictures_notebook(phase))
        assert plots >= 1, f"{phase} has no recorded-plot cell"
        assert widgets >= 1, f"{phase} has no widget cell"


@pytest.fixture
def lab_all_phases(tmp_path):
    _requirements_or_fail()
    course = _make_course(tmp_path, {phase: pictures_notebook(phase) for phase in RENDERED_PHASES})
    server = JupyterLab(course, tmp_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_every_phase_plots_and_widgets_render(lab_all_phases):
    """In each phase, does Run All draw every plot (the recorded GPU run on this CPU) and every widget, with no
    error? A screenshot of each lies in tests/artifacts/browser-phases/."""
    from playwright.sync_api import expect, sync_playwright

    lab = lab_all_phases
    if PICTURES.exists():
        shutil.rmtree(PICTURES)
    PICTURES.mkdir(parents=True)
    js_errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for phase in RENDERED_PHASES:
                # A page of its own, as a learner opening one notebook: nothing left from the phase before.
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.on("pageerror", lambda err: js_errors.append(str(err)))
                page.set_default_timeout(60_000)
                try:
                    _run_phase_pictures(page, lab, phase, expect)
                except BaseException:
                    page.screenshot(path=str(PICTURES / f"{phase}-failure.png"))
                    raise
                page.close()
                # One kernel at a time on 2 cores: shut this phase's down before the next.
                for session in lab.api("/api/sessions"):
                    req = urllib.request.Request(f"{lab.base}/api/sessions/{session['id']}", method="DELETE",
                                                 headers={"Authorization": f"token {lab.token}"})
                    urllib.request.urlopen(req, timeout=10).close()
            (PICTURES / "jupyterlab.log").write_text(lab.log())
        finally:
            browser.close()
    assert not js_errors, "JavaScript errors in the page:\n" + "\n".join(js_errors)


def _run_phase_pictures(page, lab: JupyterLab, phase: str, expect) -> None:
    plots, widgets = expected_pictures(pictures_notebook(phase))
    # A workspace of its own, reset: only this notebook is open (the layout of the phase before is not restored).
    page.goto(f"{lab.base}/lab/workspaces/{phase}/tree/{phase}.ipynb?reset&token={lab.token}")
    code_cells = page.locator(f"{PANEL} .jp-CodeCell")
    # JupyterLab attaches a long notebook's cells a few at a time: wait for the last one the file holds.
    n_code = sum(c.cell_type == "code" for c in pictures_notebook(phase).cells)
    expect(code_cells.nth(n_code - 1)).to_be_attached(timeout=120_000)
    lab.wait_kernel_idle()
    # Put the focus on this notebook, as a learner clicking its tab, or Run All may apply to nothing. (Not a
    # cell: the first one may be scrolled away or not yet attached.)
    page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text=f"{phase}.ipynb").click()
    run_all_cells(page, n_code)
    for k, call in enumerate(PLOT_CALLS):
        cells = page.locator(f"{PANEL} .jp-CodeCell", has=page.locator(".cm-content", has_text=call))
        for i in range(cells.count()):
            cell = cells.nth(i)
            expect(cell.locator(".jp-OutputArea-output img").first).to_be_attached(timeout=30_000)  # a cell may draw two
            assert "not measured on this machine" in cell.locator(".jp-Cell-outputArea").inner_text() or \
                not call.startswith("plot_recorded"), f"{phase}: a recorded plot does not say where it comes from"
            cell.evaluate("el => el.scrollIntoView({block: 'start'})")
            page.screenshot(path=str(PICTURES / f"{phase}-plot-{k}{i}.png"))
    found_plots = sum(page.locator(f"{PANEL} .jp-CodeCell", has=page.locator(".cm-content", has_text=call)).count()
                      for call in PLOT_CALLS)
    assert found_plots == plots, f"{phase}: {found_plots} plot cells on the page, {plots} in the notebook"
    # Every widget cell shows a live control with its picture (an interact box, or a box of its own).
    boxes = page.locator(f"{PANEL} .jp-CodeCell .jp-OutputArea-output .widget-box", has=page.locator("img"))
    expect(boxes.first).to_be_attached(timeout=60_000)
    assert boxes.count() >= widgets, f"{phase}: {boxes.count()} widgets with a picture, {widgets} widget cells"
    for i in range(boxes.count()):
        box = boxes.nth(i)
        expect(box.locator("img").first).to_be_attached(timeout=60_000)
        box.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(PICTURES / f"{phase}-widget-{i}.png"))


# ---- the capstone ------------------------------------------------------------------------------------
CAPSTONE = "06_fused_attention"


@pytest.mark.parametrize("lab", [CAPSTONE], indirect=True)
def test_capstone_runs_and_its_tile_widget_follows(lab):
    """Does a learner who solved phase 6 see every cell run without an error, every test cell pass, and the
    key-tile picture change when BLOCK_M moves? (Validate is phase 1's test: it is the same button.)"""
    from playwright.sync_api import expect, sync_playwright

    out = ARTIFACTS.parent / "browser-capstone"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    js_errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("pageerror", lambda err: js_errors.append(str(err)))
            page.set_default_timeout(60_000)
            try:
                page.goto(f"{lab.base}/lab/tree/{CAPSTONE}.ipynb?token={lab.token}")
                code_cells = page.locator(f"{PANEL} .jp-CodeCell")
                expect(code_cells.nth(20)).to_be_attached(timeout=120_000)
                n_code = code_cells.count()
                lab.wait_kernel_idle()
                run_all_cells(page, n_code, 2 * RUN_ALL_TIMEOUT_S)
                outputs = kernel_test_outputs(page)
                assert len(outputs) == 17, f"found {len(outputs)} %%kernel_test cells"  # 16 graded, 1 step check
                widget_cell = page.locator(f"{PANEL} .jp-CodeCell",
                                           has=page.locator(".widget-dropdown", has_text="BLOCK_M"))
                expect(widget_cell).to_have_count(1, timeout=30_000)
                picture = widget_cell.locator(".jp-OutputArea-output img")
                expect(picture).to_have_count(1, timeout=30_000)
                widget_cell.evaluate("el => el.scrollIntoView({block: 'start'})")
                before = picture.get_attribute("src")
                page.screenshot(path=str(out / "01-tiles-block-m-32.png"))
                select = widget_cell.locator(".widget-dropdown", has_text="BLOCK_M").locator("select")
                assert select.input_value() == "32", select.input_value()
                select.select_option("64")
                deadline = time.monotonic() + 60
                while (after := picture.get_attribute("src") if picture.count() == 1 else None) in (None, before):
                    assert time.monotonic() < deadline, "the picture did not change after BLOCK_M moved to 64"
                    page.wait_for_timeout(250)
                page.screenshot(path=str(out / "02-tiles-block-m-64.png"))
            except BaseException:
                page.screenshot(path=str(out / "failure.png"))
                raise
        finally:
            browser.close()
    assert not js_errors, "JavaScript errors in the page:\n" + "\n".join(js_errors)

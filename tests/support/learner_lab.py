"""The learner's JupyterLab in a real browser, for every test that drives one: Debian's headless Chromium
(``CHROMIUM``, ``CHROMIUM_ARGS``; ``_requirements_or_fail`` says how to install what is missing), the solved
notebook a learner has (``learner_notebook``), JupyterLab from .venv set up as docker/Dockerfile sets it up for
learners (``JupyterLab``, ``_make_course``), Run All and the test cells' outputs in the page, and phase 1's steps
(``_drive``: open, Run All, the widget, Validate). Used by tests/system/test_browser.py,
tests/system/test_browser_phases.py, tests/system/test_container.py's lab-cpu (``KernelWaits``, ``_drive``), and the
inert pages' and the hub's tests (Chromium).
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

ROOT = Path(__file__).resolve().parents[2]
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

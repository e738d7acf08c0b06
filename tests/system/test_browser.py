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

Every phase's plots and widgets render in tests/system/test_browser_phases.py; the browser, JupyterLab and phase 1's
steps are tests/support/learner_lab.py's.
"""
from __future__ import annotations

import shutil
import time

import pytest

from learner_lab import (ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, PANEL, PHASE, RUN_ALL_TIMEOUT_S, JupyterLab, _drive,
                         _make_course, _requirements_or_fail, kernel_test_outputs, learner_notebook, run_all_cells)

pytestmark = pytest.mark.slow


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

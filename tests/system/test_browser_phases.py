"""The phases' plots and widgets in a real browser, each kind of picture (RENDERED_PHASES): JupyterLab from .venv
on the CPU with each phase's solved notebook without its test cells (tests/support/learner_lab.py), Run All in
Debian's headless Chromium, every recorded GPU plot and every widget drawn with no error; a screenshot of each in
tests/artifacts/browser-phases/. The capstone's plot and widget, and phase 1's whole path with Validate, are
tests/system/test_browser.py's.
"""
from __future__ import annotations

import os
import re
import shutil
import urllib.request

import nbformat
import pytest

from learner_lab import (ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, PANEL, SOURCE, JupyterLab, _make_course,
                         _requirements_or_fail, learner_notebook, run_all_cells)

pytestmark = pytest.mark.slow


# ---- every phase's plots and widgets -------------------------------------------------------------------
PHASES = sorted(p.name for p in SOURCE.iterdir() if p.is_dir())
PLOT_CALLS = ("plot_recorded(", "plot_recorded_attention(", "show_recorded_roofline(")  # the CPU's pictures of a recorded GPU run
WIDGET_CALL = re.compile(r"^\w+_widget\(", re.M)  # a cell that ends by returning a widget factory's widget
PICTURES = ARTIFACTS.parent / "browser-phases"
# The capstone's plot and widget render in its own browser test (test_capstone_runs_and_its_tile_widget_follows,
# which runs the whole notebook, tests included); without its test cells its Run All stopped after one cell here.
# Phase 7's recorded plot draws only once results/gpu-results.json holds its section (attention_backward, from
# `tools/gpu_check.py --bench --sections attention_backward` on a GPU): until then it prints that nothing is recorded.
NOT_RECORDED: set[str] = set()
# In the browser (2026-11-29, for CI's time): phase 3's widget (a checkbox, a dropdown and sliders: every control the
# course's widgets use) and recorded plot, phase 7's attention plots and widget; phase 1's (its widget moved,
# Validate) and the capstone's are test_browser.py's. The other phases draw with the same controls, and every plot
# reaches the page as the same kind of output (a PNG of matplotlib's): what differs between them is Python (their
# figures, phase 4's roofline, their widget factories), drawn headless in tests/units/test_widgets.py, every factory
# and recorded plot. About 15 s of a 2-core CI run a phase. TRITONCOURSE_BROWSER_PHASES=all renders every phase.
IN_BROWSER = ("03_matmul_relu", "07_attention_backward")
RENDERED_PHASES = [p for p in PHASES if p != "06_fused_attention" and p not in NOT_RECORDED
                   and (p in IN_BROWSER or os.environ.get("TRITONCOURSE_BROWSER_PHASES") == "all")]


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
                failed: list[str] = []  # requests that failed, to say what an error's "Failed to fetch" fetched

                def on_error(err, phase=phase, failed=failed):
                    js_errors.append(f"{phase}: {err}" + (f" (failed requests: {failed[-5:]})" if failed else ""))

                page.on("pageerror", on_error)
                page.on("requestfailed", lambda req, failed=failed: failed.append(f"{req.url} {req.failure}"))
                page.set_default_timeout(60_000)
                try:
                    _run_phase_pictures(page, lab, phase, expect)
                except BaseException:
                    page.screenshot(path=str(PICTURES / f"{phase}-failure.png"))
                    raise
                # Checked: what the page does while it is closed (its fetches cut off) is not the learner's page.
                page.remove_listener("pageerror", on_error)
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

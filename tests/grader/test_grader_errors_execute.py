"""ResilientExecute, the notebook's own run: any failure of it keeps the notebook, the kernel tests are still
graded, and their cells never reach the learner's kernel."""
from __future__ import annotations

import pytest
from nbclient.exceptions import DeadKernelError
from nbgrader.preprocessors import Execute

from grader_faults import _notebook, _passing, _test_cell
from tritoncourse.grading.processes import isolated
from tritoncourse.grading.autograde.nbgrader_plugin import IsolatedKernelTests, ResilientExecute


# ---- ResilientExecute: the notebook's own run ----------------------------------------------------------

def _fake_run(fail_at: int, error: BaseException):
    """Stands in for nbclient's run of the whole notebook: calls preprocess_cell on each cell in turn."""
    def preprocess(self, nb, resources=None, km=None):
        for index, cell in enumerate(nb.cells):
            nb.cells[index], resources = self.preprocess_cell(cell, resources, index)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if index == fail_at:
            raise error
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade_id") == "plain":
            cell.outputs = []  # ran, and passed
        return cell, resources
    return preprocess, preprocess_cell


@pytest.mark.parametrize("error", [DeadKernelError("kernel died"), RuntimeError("kernel_info timed out"),
                                   TimeoutError("no reply")], ids=["dead-kernel", "other-error", "timeout"])
def test_a_failed_notebook_run_keeps_the_notebook(monkeypatch, tmp_path, error):
    """Any error of the notebook's run: the cell gets an error output, later grade cells that are not
    kernel tests fail as not run, and the kernel tests are still graded. (The run fails in the solution cell:
    kernel test cells are never sent to the learner's kernel.)"""
    preprocess, preprocess_cell = _fake_run(1, error)
    monkeypatch.setattr(Execute, "preprocess", preprocess)
    monkeypatch.setattr(Execute, "preprocess_cell", preprocess_cell)
    monkeypatch.setattr(isolated, "run_test", _passing)
    nb = _notebook(_test_cell("test_a"), _test_cell("test_b"))
    nb, resources = ResilientExecute().preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert resources["tritoncourse"]["kernel_died_at"] == 1
    assert nb.cells[1].outputs[-1]["output_type"] == "error"
    nb, resources = IsolatedKernelTests(workers=1).preprocess(nb, resources)
    plain = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "plain")
    assert plain.outputs[0]["ename"] == "NotRun"
    assert all(v["ok"] for v in resources["tritoncourse"]["verdicts"].values())


def test_a_kernel_that_never_starts_keeps_the_notebook(monkeypatch, tmp_path):
    """The run fails before any cell: every grade cell that is not a kernel test fails as not run."""
    def preprocess(self, nb, resources=None, km=None):
        raise RuntimeError("Kernel didn't respond in 60 seconds")

    monkeypatch.setattr(Execute, "preprocess", preprocess)
    monkeypatch.setattr(isolated, "run_test", _passing)
    nb, resources = ResilientExecute().preprocess(_notebook(_test_cell("test_a")), {})
    assert resources["tritoncourse"]["kernel_died_at"] == -1
    nb, resources = IsolatedKernelTests(workers=1).preprocess(nb, resources)
    plain = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "plain")
    assert plain.outputs[0]["ename"] == "NotRun" and "stopped" in plain.outputs[0]["traceback"][0]
    assert resources["tritoncourse"]["verdicts"]["test_a"]["ok"]


def test_kernel_test_cells_never_reach_the_learners_kernel(monkeypatch, tmp_path):
    """Their source (the hidden tests, once restored) is never sent to the notebook's kernel: each gets the
    "graded outside" line, and only the other cells run."""
    sent = []

    def preprocess(self, nb, resources=None, km=None):
        for index, cell in enumerate(nb.cells):
            nb.cells[index], resources = self.preprocess_cell(cell, resources, index)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        sent.append(cell.source)
        return cell, resources

    monkeypatch.setattr(Execute, "preprocess", preprocess)
    monkeypatch.setattr(Execute, "preprocess_cell", preprocess_cell)
    hidden = _test_cell("test_a")
    hidden.source += "\n### BEGIN HIDDEN TESTS\nsecret_case = 12345\n### END HIDDEN TESTS\n"
    nb, _ = ResilientExecute().preprocess(_notebook(hidden), {"metadata": {"path": str(tmp_path)}})
    assert not any("%%kernel_test" in s or "secret_case" in s for s in sent), sent
    assert any("assert True" in s for s in sent)  # the plain grade cell still runs
    assert "Graded in a fresh process outside this notebook" in nb.cells[2].outputs[0]["text"]

"""Does a failure of the grader itself cost only the tests it touches, never the learner's notebook?

nbgrader deletes a learner's autograded notebook when an exception escapes a preprocessor. Failures are
injected here by monkeypatching the grader's own functions in this process: each must become a failed
verdict that says it is a grader error, with the seed and how to reproduce, while the other tests are
still graded.
"""
from __future__ import annotations

import json

import pytest

from grader_faults import _notebook, _passing, _test_cell
from tritoncourse.grading.processes import isolated
from tritoncourse.grading.autograde import nbgrader_plugin
from tritoncourse.grading.autograde.nbgrader_plugin import IsolatedKernelTests

# The grading processes' own faults (the zygotes, the judge, the runner, compute-sanitizer):
# tests/grader/test_grader_errors_processes.py; the notebook's own run (ResilientExecute):
# test_grader_errors_execute.py.


def _grade(nb, tmp_path):
    resources = {"metadata": {"path": str(tmp_path)}, "unique_key": "phase",
                 "nbgrader": {"student": "alice", "assignment": "phase", "notebook": "phase"}}
    nb, resources = IsolatedKernelTests(workers=2).preprocess(nb, resources)
    outputs = {c.metadata["nbgrader"]["grade_id"]: c.outputs for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade")}
    return outputs, resources["tritoncourse"]["verdicts"], json.loads((tmp_path / "phase.verdicts.json").read_text())


def _text(outputs) -> str:
    return "\n".join(o.get("text", "") + "\n".join(o.get("traceback", [])) for o in outputs)


def _assert_grader_error(outputs, verdict):
    text = _text(outputs)
    assert outputs[0]["output_type"] == "error", text
    assert "GRADER ERROR" in text and "not a verdict on your kernel" in text
    assert f"TRITONCOURSE_SEED={verdict['seed']}" in text
    assert "python -m tritoncourse check autograded/alice/phase/phase.ipynb" in text
    assert verdict["ok"] is False and verdict["kind"] == "grader-error"


def test_a_test_whose_grading_raises_fails_alone(monkeypatch, tmp_path):
    """A bug of ours while running one test: that test fails as a grader error, the others pass."""
    real = nbgrader_plugin.run_cell

    def run_cell(source, *args, **kwargs):
        if "test_b" in source:
            raise RuntimeError("injected bug")
        return real(source, *args, **kwargs)

    monkeypatch.setattr(isolated, "run_test", _passing)
    monkeypatch.setattr(nbgrader_plugin, "run_cell", run_cell)
    outputs, verdicts, logged = _grade(_notebook(_test_cell("test_a"), _test_cell("test_b"), _test_cell("test_c")),
                                       tmp_path)
    _assert_grader_error(outputs["test_b"], verdicts["test_b"])
    assert "RuntimeError: injected bug" in _text(outputs["test_b"])
    assert "FAILED: Checks test_b." in _text(outputs["test_b"])  # the test's title, as for any verdict
    assert verdicts["test_a"]["ok"] and verdicts["test_c"]["ok"]
    assert "PASSED" in _text(outputs["test_a"]) and "PASSED" in _text(outputs["test_c"])
    assert logged == verdicts


def test_a_test_cell_that_does_not_parse_fails_alone(monkeypatch, tmp_path):
    """A %%kernel_test line the grader cannot read (a bad --timeout, an open quote) fails only its cell."""
    monkeypatch.setattr(isolated, "run_test", _passing)
    nb = _notebook(_test_cell("test_a"), _test_cell("test_b", magic="%%kernel_test --timeout soon"),
                   _test_cell("test_c", magic='%%kernel_test "'))
    outputs, verdicts, _ = _grade(nb, tmp_path)
    assert verdicts["test_a"]["ok"]
    for gid in ("test_b", "test_c"):
        _assert_grader_error(outputs[gid], verdicts[gid])
    assert "ValueError" in verdicts["test_b"]["message"]


def test_unreadable_notebook_fails_every_kernel_test_but_keeps_the_notebook(monkeypatch, tmp_path):
    """Taking the learner's kernels raises: every kernel test fails as a grader error, nothing escapes."""
    def broken(nb):
        raise RecursionError("injected: the notebook could not be parsed")

    monkeypatch.setattr(nbgrader_plugin, "kernels_from_notebook", broken)
    outputs, verdicts, _ = _grade(_notebook(_test_cell("test_a"), _test_cell("test_b")), tmp_path)
    assert set(verdicts) == {"test_a", "test_b"}
    for gid in verdicts:
        _assert_grader_error(outputs[gid], verdicts[gid])
        assert "reading the kernels from your notebook" in verdicts[gid]["message"]
    assert outputs["plain"] == []  # not a kernel test: left to nbgrader


def test_a_bug_outside_any_test_fails_the_kernel_tests_only(monkeypatch, tmp_path):
    """A bug of ours after the tests ran (writing outputs): the kernel tests fail, the notebook is kept,
    and no test keeps the magic's 'graded outside' output, which would score as a pass."""
    def broken(text):
        raise TypeError("injected bug while writing outputs")

    monkeypatch.setattr(isolated, "run_test", _passing)
    monkeypatch.setattr(nbgrader_plugin, "_stdout", broken)
    outputs, verdicts, _ = _grade(_notebook(_test_cell("test_a"), _test_cell("test_b")), tmp_path)
    for gid in ("test_a", "test_b"):
        _assert_grader_error(outputs[gid], verdicts[gid])
        assert "grading this notebook" in verdicts[gid]["message"]


def test_an_unwritable_verdict_log_costs_nothing(monkeypatch, tmp_path):
    """The verdicts log is best effort: the verdicts are in the notebook's outputs already."""
    monkeypatch.setattr(isolated, "run_test", _passing)
    nb = _notebook(_test_cell("test_a"))
    resources = {"output_files_dir": str(tmp_path)}
    (tmp_path / "notebook.verdicts.json").mkdir()  # open(..., "w") raises IsADirectoryError
    nb, resources = IsolatedKernelTests(workers=1).preprocess(nb, resources)
    assert resources["tritoncourse"]["verdicts"]["test_a"]["ok"]


# ---- Real nbgrader: the same failures injected through the course's nbgrader_config.py ------------------

INJECTION = '''
# Test-only faults (tests/grader/test_grader_errors.py): a bug in one test's grading, and a notebook whose kernels
# cannot be taken.
import tritoncourse.grading.autograde.nbgrader_plugin as _plugin

_real_run_cell, _real_kernels = _plugin.run_cell, _plugin.kernels_from_notebook


def _faulty_run_cell(source, *args, **kwargs):
    if "fp16 inputs" in source:
        raise RuntimeError("injected grader bug")
    return _real_run_cell(source, *args, **kwargs)


def _faulty_kernels(nb):
    if any("INJECT-GRADER-FAULT" in cell.source for cell in nb.cells):
        raise RuntimeError("injected notebook fault")
    return _real_kernels(nb)


_plugin.run_cell, _plugin.kernels_from_notebook = _faulty_run_cell, _faulty_kernels
'''


@pytest.mark.slow
def test_real_autograde_keeps_every_notebook_when_the_grader_fails(tmp_path):
    """Does plain `nbgrader autograde` keep both notebooks, fail only the tests the faults touch, and say
    that the grader failed?"""
    from nbformat.v4 import new_code_cell as code

    from course import Course

    assignment = "01_vector_add"
    course = Course(tmp_path, [assignment], scaled_down=True)
    with open(tmp_path / "nbgrader_config.py", "a") as f:
        f.write(INJECTION)
    source = course.source_notebook(assignment)
    course.submit("one_test_fault", assignment, source)
    marked = course.source_notebook(assignment)
    marked.cells.append(code("# INJECT-GRADER-FAULT"))
    marked.cells[-1]["id"] = "inject-fault"
    course.submit("notebook_fault", assignment, marked)
    proc = course.autograde(assignment, "--IsolatedKernelTests.timeout_factor=0.5", "--ResilientExecute.timeout=60")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]

    scores = course.scores(assignment, "one_test_fault")
    feedback = course.feedback_text(assignment, "one_test_fault")
    assert scores["test_vector_add_fp16"] == 0
    assert "GRADER ERROR" in feedback["test_vector_add_fp16"]
    assert "injected grader bug" in feedback["test_vector_add_fp16"]
    assert "TRITONCOURSE_SEED=" in feedback["test_vector_add_fp16"]
    assert all(s > 0 for t, s in scores.items() if t.startswith("test_") and t != "test_vector_add_fp16"), scores
    log = json.loads((tmp_path / "autograded" / "one_test_fault" / assignment
                      / f"{assignment}.verdicts.json").read_text())
    assert log["test_vector_add_fp16"]["kind"] == "grader-error"

    scores = course.scores(assignment, "notebook_fault")
    feedback = course.feedback_text(assignment, "notebook_fault")
    tests = [t for t in scores if t.startswith("test_")]
    assert tests and all(scores[t] == 0 for t in tests), scores
    assert all("GRADER ERROR" in feedback[t] and "injected notebook fault" in feedback[t] for t in tests)

"""RestoreDeletedCells (the sanitizing step that restores test cells from the gradebook and puts back deleted
ones): right where it works, and never fatal where it fails.

nbgrader deletes a learner's autograded notebook when an exception escapes a preprocessor. Failures are
injected here (in this process, then through the course's nbgrader_config.py in a real autograde): each is
logged, the notebook keeps every cell as far as it was restored, a test cell that could not be checked
against the gradebook fails with a GRADER ERROR (an edited test must never pass unchecked), and grading goes on.
"""
from __future__ import annotations

import json

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.preprocessors import OverwriteCells
from nbformat.v4 import new_code_cell

from course import Course
from tritoncourse.grading.processes import isolated
from tritoncourse.grading.autograde import restore
from tritoncourse.grading.processes.isolated import Outcome, is_kernel_test
from tritoncourse.grading.autograde.nbgrader_plugin import IsolatedKernelTests, RestoreDeletedCells

A = "01_vector_add"
KERNEL = "vector_add_kernel"
DELETED, EDITED = "test_vector_add_large", "test_vector_add_fp16"
EDIT = 'raise ValueError("a learner\'s edit of the test")'


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    return Course(tmp_path_factory.mktemp("restore"), [A])


def _ids(nb) -> dict[str, int]:
    return {c["metadata"]["nbgrader"]["grade_id"]: i for i, c in enumerate(nb.cells)
            if "grade_id" in c.get("metadata", {}).get("nbgrader", {})}  # a put-back cell's metadata is a dict


def _cell(nb, gid):
    return nb.cells[_ids(nb)[gid]]


def _learner(course: Course):
    """The reference's kernel, one test deleted and one edited."""
    nb = course.source_notebook(A)
    _cell(nb, EDITED).source = EDIT
    del nb.cells[_ids(nb)[DELETED]]
    return nb


def _restore(course: Course, nb):
    resources = {"nbgrader": {"notebook": A, "assignment": A, "student": "x",
                              "db_url": f"sqlite:///{course.path / 'gradebook.db'}"}}
    return RestoreDeletedCells(add_missing_cells=True).preprocess(nb, resources)


def _reference_tests(course: Course) -> dict[str, str]:
    """Each test cell's source as the gradebook has it (hidden tests included)."""
    return {c.metadata.nbgrader["grade_id"]: c.source for c in course.source_notebook(A).cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade") and c.cell_type == "code"}


def _raises_grader_error(source: str) -> str:
    assert not is_kernel_test(source), source
    with pytest.raises(RuntimeError, match="GRADER ERROR") as err:
        exec(compile(source, "<cell>", "exec"), {})
    return str(err.value)


def test_deleted_and_edited_tests_are_restored(course):
    nb, resources = _restore(course, _learner(course))
    reference = _reference_tests(course)
    assert _cell(nb, EDITED).source == reference[EDITED]
    restored = _cell(nb, DELETED).source
    assert restored.startswith("%%kernel_test") and reference[DELETED].split("\n", 1)[1] in restored
    assert _ids(nb)[DELETED] == _ids(nb)[EDITED] - 1  # back where it was, before the next test
    assert "restore_errors" not in resources.get("tritoncourse", {})


def test_a_failure_adding_missing_cells_keeps_the_notebook(course, monkeypatch):
    """Putting back deleted cells raises: logged, the rest of the restoring is kept, nothing escapes."""
    def broken(self, *args, **kwargs):
        raise RuntimeError("injected: cannot put the cell back")

    monkeypatch.setattr(RestoreDeletedCells, "missing_cell_transform", broken)
    learner = _learner(course)
    kernel = _cell(learner, KERNEL).source
    nb, resources = _restore(course, learner)
    assert _cell(nb, KERNEL).source == kernel
    assert DELETED not in _ids(nb)  # could not be put back: ungraded, so 0 points
    reference = _reference_tests(course)
    for gid, source in reference.items():  # every other test was checked: the reference's
        if gid != DELETED:
            assert _cell(nb, gid).source == source, gid
    errors = resources["tritoncourse"]["restore_errors"]
    assert len(errors) == 1 and "add_missing_grade_cells" in errors[0] and "injected" in errors[0]


def test_a_test_cell_that_cannot_be_checked_fails_alone(course, monkeypatch):
    """One cell's check raises: that test fails with a GRADER ERROR (its edit is not trusted), every other cell
    is restored as usual."""
    real = OverwriteCells.preprocess_cell

    def preprocess_cell(self, cell, resources, index):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == EDITED:
            raise RuntimeError("injected: gradebook query failed")
        return real(self, cell, resources, index)

    monkeypatch.setattr(OverwriteCells, "preprocess_cell", preprocess_cell)
    nb, resources = _restore(course, _learner(course))
    message = _raises_grader_error(_cell(nb, EDITED).source)
    assert "injected: gradebook query failed" in message and "regrade" in message
    assert _cell(nb, EDITED)["metadata"]["nbgrader"]["grade"] is True  # still graded: it scores 0
    reference = _reference_tests(course)
    for gid in set(reference) - {EDITED, DELETED}:
        assert _cell(nb, gid).source == reference[gid], gid
    assert _cell(nb, DELETED).source.startswith("%%kernel_test")
    assert len(resources["tritoncourse"]["restore_errors"]) == 1


def test_an_unreadable_gradebook_keeps_the_notebook_and_grades_it(course, monkeypatch, tmp_path):
    """The gradebook cannot be opened at all: the learner's cells stay, every test cell fails with a GRADER
    ERROR, nothing escapes, and the next steps still grade the notebook."""
    def no_gradebook(*args, **kwargs):
        raise OSError("injected: database is locked")

    monkeypatch.setattr(restore, "Gradebook", no_gradebook)
    learner = _learner(course)
    before = nbformat.from_dict(json.loads(json.dumps(learner)))
    nb, resources = _restore(course, learner)
    tests = set(_reference_tests(course)) - {DELETED}
    assert set(_ids(nb)) == set(_ids(before))
    for i, (cell, old) in enumerate(zip(nb.cells, before.cells)):
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in tests:
            assert "injected: database is locked" in _raises_grader_error(cell.source), gid
        else:
            assert cell.source == old.source, (i, gid)
    assert "database is locked" in resources["tritoncourse"]["restore_errors"][0]

    # The next step still grades the notebook: no kernel test is left to run, and it says so (no verdicts).
    monkeypatch.setattr(isolated, "run_test", lambda *a, **k: Outcome(True, "pass", "", 1, 0.1, ""))
    nb, resources = IsolatedKernelTests(workers=1).preprocess(nb, dict(resources, metadata={"path": str(tmp_path)}))
    assert resources["tritoncourse"]["verdicts"] == {}


def test_a_grader_bug_anywhere_never_escapes(course, monkeypatch):
    """Even resources without nbgrader's keys (a bug of ours): logged, notebook returned."""
    learner = _learner(course)
    nb, resources = RestoreDeletedCells(add_missing_cells=True).preprocess(learner, {})
    assert _cell(nb, KERNEL).source == _cell(_learner(course), KERNEL).source
    assert "KeyError" in resources["tritoncourse"]["restore_errors"][0]


# ---- Real nbgrader: the faults injected through the course's nbgrader_config.py -------------------------

INJECTION = '''
# Test-only faults (tests/grader/test_restore_deleted_cells.py): RestoreDeletedCells raises while putting back deleted
# cells, or while checking one test cell.
import tritoncourse.grading.autograde.nbgrader_plugin as _plugin
from nbgrader.preprocessors import OverwriteCells as _Overwrite

_real_add, _real_check = _plugin.RestoreDeletedCells.add_missing_grade_cells, _Overwrite.preprocess_cell


def _marked(nb, marker):
    return any(marker in cell.source for cell in nb.cells)


def _faulty_add(self, nb, resources):
    if _marked(nb, "INJECT-RESTORE-FAULT"):
        raise RuntimeError("injected restore fault")
    return _real_add(self, nb, resources)


def _faulty_check(self, cell, resources, index):
    if resources["nbgrader"]["student"] == "cell_fault" and \\
            cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "test_vector_add_fp16":
        raise RuntimeError("injected check fault")
    return _real_check(self, cell, resources, index)


_plugin.RestoreDeletedCells.add_missing_grade_cells = _faulty_add
_Overwrite.preprocess_cell = _faulty_check
'''


@pytest.mark.slow
def test_real_autograde_keeps_and_grades_the_notebook_when_restoring_fails(tmp_path):
    """Plain `nbgrader autograde` with RestoreDeletedCells raising: both notebooks are autograded, the other
    tests score, and only the test the fault touches fails (with a GRADER ERROR where it was not checked)."""
    course = Course(tmp_path, [A], scaled_down=True)
    with open(tmp_path / "nbgrader_config.py", "a") as f:
        f.write(INJECTION)
    add_fault = _learner(course)
    add_fault.cells.append(new_code_cell("# INJECT-RESTORE-FAULT"))
    add_fault.cells[-1]["id"] = "inject-fault"
    course.submit("add_fault", A, add_fault)
    cell_fault = course.source_notebook(A)
    _cell(cell_fault, EDITED).source = EDIT
    course.submit("cell_fault", A, cell_fault)
    proc = course.autograde(A, "--IsolatedKernelTests.timeout_factor=0.5", "--ResilientExecute.timeout=60")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "injected restore fault" in proc.stderr and "injected check fault" in proc.stderr

    tests = [t for t in _reference_tests(course) if t.startswith("test_")]
    scores = course.scores(A, "add_fault")
    assert (tmp_path / "autograded" / "add_fault" / A / f"{A}.ipynb").exists()
    assert scores.get(DELETED, 0) == 0, scores  # could not be put back
    assert all(scores[t] > 0 for t in tests if t != DELETED), scores  # the edited test was restored, and passes

    scores = course.scores(A, "cell_fault")
    feedback = course.feedback_text(A, "cell_fault")
    assert scores[EDITED] == 0 and "GRADER ERROR" in feedback[EDITED] and "injected check fault" in feedback[EDITED]
    assert all(scores[t] > 0 for t in tests if t != EDITED), scores

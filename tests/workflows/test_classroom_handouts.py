"""What learners get, no course generated, no grading (docs/INSTRUCTORS.md): feedback with the hidden test lines
blanked in its outputs, a handout without solutions, hidden tests or gradebook (and the check that refuses a leaky
one), each phase's release/ holding one notebook and nothing of source/. The instructor's commands:
tests/workflows/test_classroom_commands.py; the class graded: tests/workflows/test_classroom.py."""
from __future__ import annotations

import copy
import json
import re
import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from baseline import A, ids
from course import ROOT


def test_hidden_lines_are_blanked_in_feedback_outputs():
    from tritoncourse.classroom.feedback import REDACTED, hide_hidden_tests

    src = nbformat.read(ROOT / "source" / A / f"{A}.ipynb", as_version=4)
    rel = nbformat.read(ROOT / "release" / A / f"{A}.ipynb", as_version=4)
    nb = copy.deepcopy(src)
    ragged = nb.cells[ids(nb)["test_vector_add_ragged_sizes"]]
    hidden_line = "    check_vector_add(triton_vector_add_kernel, n=n, block_size=128)"
    assert hidden_line in ragged.source
    ragged.outputs = [nbformat.v4.new_output("error", ename="KernelTestFailed", evalue="boom", traceback=[
        "KernelTestFailed: FAILED: Ragged sizes\n  File \"test_cell.py\", line 7, in <module>\n"
        f"{hidden_line}\nValueError: boom\nLikely cause: a mask"])]
    released = {c.metadata.nbgrader["grade_id"]: c.source for c in rel.cells
                if "grade_id" in c.get("metadata", {}).get("nbgrader", {})}
    hide_hidden_tests(nb, released)
    assert ragged.source == released["test_vector_add_ragged_sizes"]
    text = "\n".join(ragged.outputs[0]["traceback"])
    assert hidden_line.strip() not in text and REDACTED in text and "Likely cause: a mask" in text
    assert "HIDDEN" not in json.dumps(nb)


def test_handout_has_no_solutions_hidden_tests_or_gradebook(tmp_path):
    from tritoncourse.classroom.workflow import Course as Classroom, handout_problems, make_handout

    assert make_handout(Classroom(ROOT), tmp_path / "handout") == 0
    files = [p for p in (tmp_path / "handout").rglob("*") if p.is_file()]
    names = {str(p.relative_to(tmp_path / "handout")) for p in files}
    assert f"release/{A}/{A}.ipynb" in names and "tritoncourse/grading/processes/isolated.py" in names
    assert not any(n.startswith(("source/", "tests/")) or n.endswith(".db") for n in names)
    # The check itself: a release notebook with a hidden test line or a solution is refused.
    leaky = tmp_path / "leaky" / f"{A}.ipynb"
    leaky.parent.mkdir()
    shutil.copy2(ROOT / "source" / A / f"{A}.ipynb", leaky)
    problems = handout_problems(Classroom(ROOT), [leaky])
    assert problems and "BEGIN SOLUTION" in problems[0]
    hinted = nbformat.read(ROOT / "release" / A / f"{A}.ipynb", as_version=4)
    hinted.cells.append(new_code_cell("for n in (1, 127, 129, 9973, 100_003):\n    pass"))
    nbformat.write(hinted, leaky)
    problems = handout_problems(Classroom(ROOT), [leaky])
    assert problems and "1 hidden test line(s), e.g. 'for n in (1, 127, 129, 9973, 100_003):'" in problems[0], \
        problems


@pytest.mark.parametrize("assignment", sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir()))
def test_release_holds_no_solutions_hidden_tests_or_gradebook(assignment, tmp_path):
    """release/<assignment>/ (what learners get) holds one notebook and nothing else: no gradebook, no file of
    source/, no solution line and no hidden test line (judged from source/, so a leak cannot hide itself);
    the same check finds both in the source notebook even with nbgrader's markers taken out."""
    from tritoncourse.classroom.workflow import Course as Classroom, handout_problems

    classroom = Classroom(ROOT)
    files = sorted(p for p in (ROOT / "release" / assignment).rglob("*") if p.is_file())
    assert [p.relative_to(ROOT / "release").as_posix() for p in files] == [f"{assignment}/{assignment}.ipynb"]
    assert not list((ROOT / "release").rglob("*.db")) and not list((ROOT / "release").rglob("gradebook*"))
    assert handout_problems(classroom, files) == []
    unmarked = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    for cell in unmarked.cells:
        cell.source = "\n".join(line for line in cell.source.split("\n")
                                 if not re.search(r"(BEGIN|END) (SOLUTION|HIDDEN TESTS)", line))
    leaky = tmp_path / f"{assignment}.ipynb"
    nbformat.write(unmarked, leaky)
    problems = " ".join(handout_problems(classroom, [leaky]))
    assert "solution line" in problems, problems
    if "BEGIN HIDDEN TESTS" in (ROOT / "source" / assignment / f"{assignment}.ipynb").read_text():
        assert "hidden test line" in problems, problems

"""Destructive steps act only on folders the grader verified (issue 31, item 2).

ResilientExecute deletes whatever nbgrader copied beside the graded notebook (a learner's link to source/ or to
the gradebook becomes a real copy there). It used to delete every entry of whatever folder it was given: pointed at
a shared folder by mistake, it wiped it. Now it acts only on ``<course root>/autograded/<student>/<assignment>`` of
the configured course, reached without links and holding the graded notebook; anywhere else it deletes nothing.
No kernel is started here: these tests take well under a second.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from traitlets.config import Config

from tritoncourse.grading.autograde.nbgrader_plugin import ResilientExecute

A = "01_vector_add"


def _executor(course: Path) -> ResilientExecute:
    config = Config()
    config.CourseDirectory.root = str(course)
    return ResilientExecute(config=config)


def _resources(folder: Path, student: str = "alice") -> dict:
    return {"metadata": {"path": str(folder)}, "unique_key": A,
            "nbgrader": {"student": student, "assignment": A, "notebook": A}}


def _fill(folder: Path) -> set[str]:
    """A folder that looks like a grading folder to the old code: the notebook and files beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{A}.ipynb").write_text("{}")
    (folder / "notes.txt").write_text("the instructor's notes")
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "keep.csv").write_text("1,2\n")
    return _listing(folder)


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _wipe(course: Path, folder: Path, student: str = "alice") -> None:
    ex = _executor(course)
    ex.resources = _resources(folder, student)
    ex._copy_notebook_folder(course / "sandbox-work")


@pytest.mark.parametrize("where", ["shared_folder", "other_learners_folder", "course_root", "linked_folder",
                                   "no_notebook", "other_course"])
def test_a_folder_the_grader_did_not_make_loses_nothing(tmp_path, where):
    """Pointed anywhere but this notebook's own autograded folder, the clean-up deletes nothing."""
    course = tmp_path / "course"
    (course / "autograded" / "alice").mkdir(parents=True)
    student = "alice"
    if where == "shared_folder":
        folder = tmp_path / "shared"
    elif where == "other_learners_folder":  # autograded/bob/<assignment> while grading alice
        folder = course / "autograded" / "bob" / A
    elif where == "course_root":
        folder = course
    elif where == "linked_folder":  # autograded/alice/<assignment> is a link to a shared folder
        folder = tmp_path / "shared"
        (course / "autograded" / "alice" / A).symlink_to(folder, target_is_directory=True)
    elif where == "other_course":  # the right shape, but not under the configured course
        folder = tmp_path / "elsewhere" / "autograded" / "alice" / A
    else:  # the right folder, without the graded notebook in it
        folder = course / "autograded" / "alice" / A
    before = _fill(folder)
    if where == "no_notebook":
        (folder / f"{A}.ipynb").unlink()
        before = _listing(folder)
    _wipe(course, course / "autograded" / "alice" / A if where == "linked_folder" else folder, student)
    assert _listing(folder) == before


def test_the_verified_grading_folder_is_cleaned(tmp_path):
    """The notebook's own autograded folder keeps its notebooks, verdicts and timestamp; the rest goes (a link
    goes as a link: its target stays)."""
    course = tmp_path / "course"
    folder = course / "autograded" / "alice" / A
    _fill(folder)
    (folder / "timestamp.txt").write_text("2026-11-26 10:00:00")
    (folder / f"{A}.verdicts.json").write_text("{}")
    target = tmp_path / "target.txt"
    target.write_text("not the learner's")
    (folder / "link.txt").symlink_to(target)
    _wipe(course, folder)
    assert _listing(folder) == {f"{A}.ipynb", "timestamp.txt", f"{A}.verdicts.json"}
    assert target.read_text() == "not the learner's"


def test_linked_copies_are_dropped_only_in_the_verified_folder(tmp_path):
    """_drop_linked_copies removes the copy nbgrader made of a learner's symlink, in the verified folder only."""
    course = tmp_path / "course"
    submitted = course / "submitted" / "alice" / A
    submitted.mkdir(parents=True)
    (submitted / f"{A}.ipynb").write_text("{}")
    (course / "source" / A).mkdir(parents=True)
    (course / "source" / A / "secret.txt").write_text("hidden")
    (submitted / "secret.txt").symlink_to(course / "source" / A / "secret.txt")
    shared = tmp_path / "shared"
    _fill(shared)
    (shared / "secret.txt").write_text("a shared file of that name")
    ex = _executor(course)
    ex._drop_linked_copies(_resources(shared))
    assert (shared / "secret.txt").exists()
    folder = course / "autograded" / "alice" / A
    _fill(folder)
    (folder / "secret.txt").write_text("hidden")  # nbgrader's copy through the link
    ex._drop_linked_copies(_resources(folder))
    assert not (folder / "secret.txt").exists() and (course / "source" / A / "secret.txt").exists()
    assert os.path.exists(folder / f"{A}.ipynb")

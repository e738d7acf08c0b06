"""Links refused at every entry of grading, by both graders (issue 31, item 1; tritoncourse/grading/autograde/links.py).

A submitted notebook that is a symbolic link (to source/'s notebook, to a classmate's), whose student or assignment
folder is a link to a classmate's, or that is a second hard link to source/'s notebook, was graded as its target by
plain ``nbgrader autograde``: full marks, the model solution in the feedback, or the classmate's grade. Here one class
holds a correct classmate and one learner of each kind, graded by plain ``nbgrader autograde`` and by
``python -m tritoncourse grade`` (each in a course copy of its own, at once). Each linked learner scores 0 with a
message saying why; nothing of the target (the model solution, the classmate's cells or files) reaches their
autograded folder or their feedback; the course is unchanged.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from course import BIN, ROOT, Course

A = "01_vector_add"
CLASSMATE = "aaa_classmate"
NOTE = "private note of aaa_classmate: 7c1f0e9d"
# learner -> what the test makes of their submission, and the words the refusal must say
LINKED = {
    "link_to_source": "symbolic link",
    "link_to_classmate": "symbolic link",
    "linked_student_folder": "symbolic link",
    "linked_assignment_folder": "symbolic link",
    "hard_link_to_source": "hard links",
}


def _env(course: Path) -> dict:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(course),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("TRITONCOURSE_SEED", None)
    return env


def _plant(course: Path) -> None:
    sub = course / "submitted"
    source_nb = course / "source" / A / f"{A}.ipynb"
    classmate = sub / CLASSMATE / A
    for name in LINKED:
        folder = sub / name / A
        if name == "linked_student_folder":
            (sub / name).symlink_to(sub / CLASSMATE, target_is_directory=True)
            continue
        if name == "linked_assignment_folder":
            (sub / name).mkdir(parents=True)
            folder.symlink_to(classmate, target_is_directory=True)
            continue
        folder.mkdir(parents=True)
        if name == "link_to_source":
            (folder / f"{A}.ipynb").symlink_to(source_nb)
        elif name == "link_to_classmate":
            (folder / f"{A}.ipynb").symlink_to(classmate / f"{A}.ipynb")
        else:
            os.link(source_nb, folder / f"{A}.ipynb")


def _digest(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in ("autograded", "feedback", "tritoncourse") or rel.name in ("gradebook.db", ".nbgrader.log"):
            continue
        out[str(rel)] = ("-> " + os.readlink(path)) if path.is_symlink() else (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir")
    return out


class LinkedClass:
    def __init__(self, tmp: Path):
        template = Course(tmp / "template", [A], scaled_down=True)
        shutil.copytree(ROOT / "tritoncourse", template.path / "tritoncourse",
                        ignore=shutil.ignore_patterns("__pycache__"))  # one version of the code, whatever changes here
        nb = template.source_notebook(A)
        nb.cells.append(new_code_cell(f"# {NOTE}"))
        template.submit(CLASSMATE, A, nb)
        (template.path / "submitted" / CLASSMATE / A / "classmate_notes.txt").write_text(NOTE)
        self.courses = {}
        for kind in ("nbgrader", "course_grade"):
            shutil.copytree(template.path, tmp / kind, symlinks=True)
            _plant(tmp / kind)
            self.courses[kind] = tmp / kind
        self.before = {k: _digest(c) for k, c in self.courses.items()}
        with ThreadPoolExecutor(2) as pool:
            self.procs = dict(zip(self.courses, pool.map(self.grade, self.courses)))
        self.feedback = {k: subprocess.run([sys.executable, "-m", "tritoncourse", "feedback", A, "--course", str(c)],
                                           cwd=c, env=_env(c), capture_output=True, text=True, timeout=600)
                         for k, c in self.courses.items()}

    def grade(self, kind: str) -> subprocess.CompletedProcess:
        course = self.courses[kind]
        # The classmate is not graded (the hostile suite shows that classmates keep their marks): only the links.
        if kind == "nbgrader":
            cmd = [sys.executable, "-m", "nbgrader", "autograde", A, "--force", "--log-level=INFO",
                   f"--CourseDirectory.student_id_exclude={CLASSMATE}"]
        else:
            cmd = [sys.executable, "-m", "tritoncourse", "grade", A, "--course", str(course), "--jobs", "2",
                   "--students", *sorted(LINKED)]
        return subprocess.run(cmd, cwd=course, env=_env(course), capture_output=True, text=True, timeout=900)

    def scores(self, kind: str, student: str) -> dict[str, float]:
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.courses[kind] / 'gradebook.db'}") as gb:
            sub = gb.find_submission_notebook(A, A, student)
            return {g.name: g.score for g in sub.grades if g.cell_type == "code"}


@pytest.fixture(scope="module")
def linked(tmp_path_factory) -> LinkedClass:
    return LinkedClass(tmp_path_factory.mktemp("links"))


GRADERS = ["nbgrader", "course_grade"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
@pytest.mark.parametrize("student", sorted(LINKED))
def test_a_linked_submission_scores_0_and_says_why(linked, kind, student):
    proc = linked.procs[kind]
    scores = linked.scores(kind, student)
    assert scores and not any(scores.values()), (scores, proc.stdout[-3000:], proc.stderr[-3000:])
    folder = linked.courses[kind] / "autograded" / student / A
    nb = nbformat.read(folder / f"{A}.ipynb", as_version=4)
    text = json.dumps(nb)
    assert "This notebook was not graded" in text and LINKED[student] in text, text[:3000]
    # nothing of the target: not the model solution, not the classmate's cells, not the classmate's files
    assert "BEGIN SOLUTION" not in text and "tl.store(" not in text and NOTE not in text
    assert sorted(p.name for p in folder.iterdir()) in ([f"{A}.ipynb", f"{A}.verdicts.json"],
                                                        [f"{A}.ipynb", f"{A}.verdicts.json", "timestamp.txt"])
    feedback = linked.courses[kind] / "feedback" / student / A
    assert feedback.is_dir(), linked.feedback[kind].stdout[-2000:] + linked.feedback[kind].stderr[-2000:]
    for path in feedback.rglob("*"):
        assert not path.is_symlink()
        if path.is_file():
            data = path.read_text(errors="replace")
            assert NOTE not in data and "tl.store(" not in data, path
    if kind == "course_grade":
        state = json.loads((linked.courses[kind] / "autograded" / ".classroom" / "state.json").read_text())
        entry = state["entries"][f"{A}/{student}"]
        assert entry["status"] == "graded" and entry["score"] == 0, entry
        assert any("refused" in note for note in entry["notes"]), entry


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
def test_grading_ends_well_and_the_course_is_unchanged(linked, kind):
    """Both graders exit 0; no file of the course changed (source/, the classmate's submission reached through the
    links, the configuration)."""
    proc = linked.procs[kind]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _digest(linked.courses[kind]) == linked.before[kind]
    assert linked.feedback[kind].returncode == 0, linked.feedback[kind].stdout[-2000:]

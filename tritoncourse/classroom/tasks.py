"""What is graded for one learner: the submitted files of one assignment (a :class:`Task`), and how its grading
ended (a :class:`RunResult`). :func:`prepare` makes the task, refusing links without reading them."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..notebooks import CourseError, read_notebook
from .course import Course, files_hash, regular_files


@dataclass
class Task:
    assignment: str
    student: str
    files: dict[str, Path]  # name in the private submission -> the real file
    submission_hash: str
    assignment_hash: str
    notes: list[str] = field(default_factory=list)
    attempt: int = 0
    # notebook file name -> why it is refused (grading/autograde/links.py: a link, a second hard link): graded as a placeholder
    # that fails every test with that reason, its target never read
    refused: dict[str, str] = field(default_factory=dict)

    def submission(self) -> dict[str, Path | bytes]:
        """What the private copy's submitted/<student>/<assignment>/ holds: the files, and the placeholders."""
        from ..grading.autograde.links import refused_notebook

        return {**self.files, **{name: refused_notebook(reason) for name, reason in self.refused.items()}}

    @property
    def key(self) -> str:
        return f"{self.assignment}/{self.student}"


@dataclass
class RunResult:
    ok: bool
    seconds: float
    reason: str = ""
    work: Path | None = None
    log: Path | None = None
    worker: str = ""  # where it was graded, when not on this machine (a Dask worker)


def prepare(course: Course, assignment: str, student: str, notebooks: list[str]) -> Task:
    """What to grade for one learner: the submitted files, a renamed notebook put under its expected name.
    CourseError when nothing gradable is there (empty folder, empty file, not a notebook)."""
    from ..grading.autograde.links import refusal

    folder = course.submitted / student / assignment
    notes = []
    refused: dict[str, str] = {}
    # Links refused at the entry (grading/autograde/links.py): a linked student or assignment folder is refused whole, without
    # reading what it points to; a notebook that is a link or has a second hard link is refused alone.
    whole = refusal(course.submitted, student, assignment, folder=True)
    if whole:
        refused = {f"{nb}.ipynb": whole for nb in notebooks}
        files = {}
    else:
        files = {str(p.relative_to(folder)): p for p in regular_files(folder) if not p.name.endswith(".verdicts.json")}
        for nb in notebooks:
            why = refusal(course.submitted, student, assignment, f"{nb}.ipynb")
            if why and os.path.lexists(folder / f"{nb}.ipynb"):
                refused[f"{nb}.ipynb"] = why
                files.pop(f"{nb}.ipynb", None)
        for name in [n for n in files if n.endswith(".ipynb") and "/" not in n and n not in refused]:
            if refusal(folder, name):  # another notebook with a second hard link: not a candidate for renaming
                files.pop(name)
    for name, why in refused.items():
        notes.append(f"{name} refused: {why} (graded 0, its target not read)")
    present = {Path(n).stem: n for n in list(files) + list(refused) if n.endswith(".ipynb") and "/" not in n}
    missing = [nb for nb in notebooks if nb not in present]
    others = [stem for stem in present if stem not in notebooks]
    if missing and len(missing) == 1 and len(others) == 1:
        stray = present[others[0]]
        files[f"{missing[0]}.ipynb"] = files.pop(stray)
        notes.append(f"renamed notebook {stray} graded as {missing[0]}.ipynb")
    elif others:
        notes.append(f"ignored notebooks with unknown names: {', '.join(present[o] for o in others)}")
        for o in others:
            files.pop(present[o])
    graded = [n for n in notebooks if f"{n}.ipynb" in files or f"{n}.ipynb" in refused]
    if not graded:
        raise CourseError(f"submitted/{student}/{assignment}/: empty submission: no notebook "
                          f"(expected {', '.join(n + '.ipynb' for n in notebooks)})")
    for n in graded:
        if f"{n}.ipynb" in refused:
            continue
        try:
            nb = read_notebook(files[f"{n}.ipynb"])
        except CourseError as err:
            raise CourseError(str(err).replace(str(course.root) + "/", "")) from None
        if not nb.cells:
            notes.append(f"{n}.ipynb has no cells: every test is restored and graded")
    digest = files_hash(list(files.values()), folder)
    if refused:  # a link made into a file (or removed) is a new submission
        digest = hashlib.sha256((digest + json.dumps(refused, sort_keys=True)).encode()).hexdigest()
    return Task(assignment, student, files, digest, course.assignment_hash(assignment), notes, refused=refused)

"""Collecting hand-ins without JupyterHub: ``python -m tritoncourse collect ASSIGNMENT DIR``.

Each ``<student>__<assignment>.ipynb`` of DIR (as ``python -m tritoncourse submit`` names it; what browsers and
LMSs append to a name is accepted) goes to ``submitted/<student>/<assignment>/``. The assignment is told by the
notebook's nbgrader cell ids as well as by its name; nothing is ever lost (an earlier submission is kept aside).
"""
from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..notebooks import STUDENT_RE, CourseError, nbgrader_ids, read_notebook
from .course import Course

# "<student>__<assignment>.ipynb", with what browsers and LMSs append to a name ("(1)", "-2", "-Copy1").
FILENAME_RE = re.compile(rf"^(?P<student>{STUDENT_RE})__(?P<rest>.+?)\.ipynb$")
SUFFIX_RE = re.compile(r"^(?:\s*\(\d+\)|-\d+|-Copy\d+|_\d+)$")


@dataclass
class Collected:
    source: Path
    student: str = ""
    status: str = ""  # collected | replaced | unchanged | other-assignment | error
    message: str = ""


def released_ids(course: Course) -> dict[str, set[str]]:
    """assignment -> the nbgrader cell ids of its released notebooks."""
    out: dict[str, set[str]] = {}
    for assignment, notebooks in course.released_assignments().items():
        for name in notebooks:
            release = course.release_notebook(assignment, name)
            if release is not None:
                out.setdefault(assignment, set()).update(nbgrader_ids(release))
    return out


def identify(nb, known: dict[str, set[str]]) -> str | None:
    """The assignment a notebook belongs to, by its nbgrader cell ids (None when it has none)."""
    ids = nbgrader_ids(nb)
    best, best_n = None, 0
    for assignment, theirs in known.items():
        if len(ids & theirs) > best_n:
            best, best_n = assignment, len(ids & theirs)
    return best


def collect(course: Course, assignment: str, folder: Path, *, add_students: bool = False,
            timestamps: str = "none", dry_run: bool = False) -> list[Collected]:
    """Copy each ``<student>__<assignment>.ipynb`` of ``folder`` (any depth; ``backups/`` and hidden folders
    are skipped) to ``submitted/<student>/<assignment>/<notebook>.ipynb``. Nothing is ever lost: a different earlier
    submission is moved to ``submitted/.replaced/`` first, bad files are reported and left where they are."""
    notebooks = course.check_assignment(assignment)
    if len(notebooks) != 1:
        raise CourseError(f"{assignment} has {len(notebooks)} notebooks; collect handles one-notebook "
                          "assignments (use nbgrader zip_collect for others).")
    notebook = notebooks[0]
    folder = Path(folder)
    if not folder.is_dir():
        raise CourseError(f"{folder}: no such folder.")
    roster = set(course.roster())
    known = released_ids(course)
    results: list[Collected] = []
    by_student: dict[str, list[tuple[Collected, nbformat.NotebookNode]]] = {}
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not any(part.startswith(".") or part == "backups" for part in p.relative_to(folder).parts))
    for path in files:
        item = Collected(path)
        results.append(item)
        if path.suffix != ".ipynb":
            item.status, item.message = "skipped", "not a notebook file (.ipynb)"
            continue
        m = FILENAME_RE.match(path.name)
        if not m:
            item.status = "error"
            item.message = (f"cannot tell whose notebook this is: name it <student>__{assignment}.ipynb "
                            f"(`python -m tritoncourse submit {assignment} --student NAME` does)")
            continue
        item.student, rest = m.group("student"), m.group("rest")
        try:
            nb = read_notebook(path)
        except CourseError as err:
            item.status, item.message = "error", str(err).replace(f"{path}: ", "")
            continue
        if not nb.cells:
            item.status, item.message = "error", "empty submission: the notebook has no cells"
            continue
        named = rest.startswith(assignment) and (rest == assignment or SUFFIX_RE.match(rest[len(assignment):]))
        content = identify(nb, known)
        if content not in (None, assignment):
            item.status = "other-assignment"
            item.message = f"holds {content}" + ("" if not named else f" although its name says {assignment}")
            continue
        if content is None and not named:
            item.status = "other-assignment"
            item.message = "neither its name nor its cells say it is " + assignment
            continue
        if content is None:
            item.message = "warning: none of the assignment's cells is left (graded as it is)"
        elif not named:
            item.message = f"renamed file ({path.name}): its cells say it is {assignment}"
        elif rest != assignment:
            item.message = f"renamed file ({path.name})"
        if roster and item.student not in roster and not add_students:
            item.status = "error"
            item.message = (f"unknown learner '{item.student}' (not in the gradebook's students; "
                            "fix the name, or pass --add-students)")
            continue
        by_student.setdefault(item.student, []).append((item, nb))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for student, items in sorted(by_student.items()):
        if len(items) > 1:
            names = ", ".join(str(i.source.relative_to(folder)) for i, _ in items)
            for item, _ in items:
                item.status = "error"
                item.message = f"{len(items)} notebooks from {student} ({names}): keep one, collect again"
            continue
        item, _ = items[0]
        dest_dir = course.submitted / student / assignment
        dest = dest_dir / f"{notebook}.ipynb"
        data = item.source.read_bytes()
        if dest.exists() and dest.read_bytes() == data:
            item.status = "unchanged"
            continue
        item.status = "replaced" if dest.exists() else "collected"
        if dry_run:
            continue
        if dest.exists():
            keep = course.submitted / ".replaced" / student / assignment / stamp
            keep.mkdir(parents=True, exist_ok=True)
            for old in dest_dir.iterdir():
                if old.is_file():
                    shutil.copy2(old, keep / old.name)
            item.message = (item.message + "; " if item.message else "") + \
                f"earlier submission kept in {keep.relative_to(course.root)}"
        dest_dir.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.incoming")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
        if timestamps == "mtime":
            when = dt.datetime.fromtimestamp(item.source.stat().st_mtime, dt.timezone.utc)
            (dest_dir / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
    return results


def print_collected(results: list[Collected], assignment: str, folder: Path) -> int:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
        if r.status in ("error", "other-assignment", "replaced") or r.message:
            rel = r.source.relative_to(folder) if r.source.is_relative_to(folder) else r.source
            print(f"  {r.status:16} {rel}: {r.message}")
    print(f"{assignment}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) if counts
          else f"{folder}: no files")
    return 1 if counts.get("error") else 0

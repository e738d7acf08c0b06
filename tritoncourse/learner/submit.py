"""The learner's hand-in without JupyterHub: check the notebook, then write the file the instructor collects.

    python -m tritoncourse submit 01_vector_add --student NAME
        -> checks notebooks/01_vector_add.ipynb (readable, the right assignment, every test run in a fresh
           process as the grader will), then writes submissions/NAME__01_vector_add.ipynb

Hand that file in as it is (LMS upload, e-mail, shared folder): the instructor's
``python -m tritoncourse collect`` (or ``nbgrader zip_collect``) reads the learner and the assignment from
its name. A failing test does not stop a submission: the grade counts each test that passes. Nothing is
lost: the notebook is copied byte for byte, and an earlier file of the same name is kept in
``submissions/backups/``.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from ..notebooks import STUDENT_RE, CourseError, graded_ids, nbgrader_ids, read_notebook, valid_student

ROOT = Path(__file__).resolve().parent.parent.parent


def _released(root: Path) -> dict[str, Path]:
    release = root / "release"
    if not release.is_dir():
        return {}
    return {p.name: p / f"{p.name}.ipynb" for p in sorted(release.iterdir()) if (p / f"{p.name}.ipynb").exists()}


def check_submission(assignment: str, student: str, notebook: Path, root: Path = ROOT) -> tuple:
    """(notebook, release notebook, warnings) or CourseError with what to do."""
    if not valid_student(student):
        raise CourseError(f"'{student}' is not a valid learner id: use letters, digits, '.', '@', '-' and "
                          f"single underscores (pattern {STUDENT_RE}), as your instructor gave it.")
    released = _released(root)
    if assignment not in released:
        raise CourseError(f"Unknown assignment '{assignment}'. Assignments: {', '.join(released) or 'none'}.")
    if not notebook.exists():
        raise CourseError(f"{notebook}: no such notebook. Your work for {assignment} is "
                          f"notebooks/{assignment}.ipynb (or pass --notebook PATH).")
    nb = read_notebook(notebook)
    if not nb.cells:
        raise CourseError(f"{notebook}: empty notebook (no cells): nothing to submit. "
                          f"`make reset PHASE={assignment}` restores the released version (yours is backed up).")
    release = read_notebook(released[assignment])
    mine, theirs = nbgrader_ids(nb), nbgrader_ids(release)
    if not graded_ids(nb) & graded_ids(release):
        others = [a for a, p in released.items() if a != assignment and graded_ids(nb) & graded_ids(read_notebook(p))]
        hint = f" It looks like {others[0]}." if others else ""
        raise CourseError(f"{notebook} is not the {assignment} notebook: none of its graded cells is there.{hint}")
    warnings = []
    if nb == release or [c.source for c in nb.cells] == [c.source for c in release.cells]:
        warnings.append("your notebook is the released version, unchanged: its kernel tests will score 0")
    missing = sorted(theirs - mine)
    if missing:
        warnings.append(f"cells missing from your notebook ({', '.join(missing)}): test cells are put back at "
                        "grading, but any answer that was in a missing cell is lost")
    return nb, release, warnings


def submit(assignment: str, student: str, *, notebook: Path | None = None, out: Path | None = None,
           run_checks: bool = True, root: Path = ROOT) -> int:
    notebook = Path(notebook) if notebook else root / "notebooks" / f"{assignment}.ipynb"
    out = Path(out) if out else root / "submissions"
    try:
        _, _, warnings = check_submission(assignment, student, notebook, root)
    except CourseError as err:
        print(f"Not submitted: {err}")
        return 2
    for w in warnings:
        print(f"Warning: {w}")
    if run_checks:
        from .check import check_notebook

        print(f"Checking {notebook} as the grader will (each test in a fresh process)...", flush=True)
        status = check_notebook(notebook)
        if status != 0:
            print("Some tests fail: you can fix them and submit again, or hand this version in "
                  "(each passing test counts).")
    out.mkdir(parents=True, exist_ok=True)
    dest = out / f"{student}__{assignment}.ipynb"
    data = notebook.read_bytes()
    if dest.exists() and dest.read_bytes() != data:
        backups = out / "backups"
        backups.mkdir(exist_ok=True)
        keep = backups / f"{dest.stem}.{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
        shutil.copy2(dest, keep)
        print(f"Your previous submission file was kept as {keep}")
    tmp = dest.with_name(f".{dest.name}.incoming")
    tmp.write_bytes(data)
    tmp.replace(dest)
    print(f"Wrote {dest}\nHand in this file as it is, without renaming it (your instructor's collect step "
          "reads your name and the assignment from the file name).")
    return 0

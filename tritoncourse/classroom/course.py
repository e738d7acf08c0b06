"""The nbgrader course directory as the instructor's commands see it: its folders, its gradebook's assignments and
learners, and the fingerprints (submission and assignment hashes) that tell a rerun what is already graded."""
from __future__ import annotations

import hashlib
from pathlib import Path

import nbformat

from ..notebooks import CourseError
from .database import db_url_of, query

ROOT = Path(__file__).resolve().parent.parent.parent


def files_hash(paths: list[Path], base: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(base)).encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def regular_files(folder: Path) -> list[Path]:
    """The regular files of a submission. Symbolic links (and whatever lies under a linked folder) are never
    followed nor copied: a link to source/ or to the gradebook must not bring them into the learner's grading."""
    out = []
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if ".ipynb_checkpoints" in rel.parts:
            continue
        if any((folder / Path(*rel.parts[:i])).is_symlink() for i in range(1, len(rel.parts) + 1)):
            continue
        if p.is_file():
            out.append(p)
    return out



class Course:
    """The nbgrader course directory: folders, the gradebook, released assignments."""

    def __init__(self, root: Path = ROOT):
        self.root = Path(root).resolve()
        self.source = self.root / "source"
        self.release = self.root / "release"
        self.submitted = self.root / "submitted"
        self.autograded = self.root / "autograded"
        self.feedback = self.root / "feedback"
        self.db_path = self.root / "gradebook.db"
        self.course_id = "triton-kernels"
        self.state_dir = self.autograded / ".classroom"
        self._db_url: str | None = None

    @property
    def db_url(self) -> str:
        """The gradebook's URL, as nbgrader reads it from this course's configuration (SQLite or PostgreSQL:
        database.py)."""
        if self._db_url is None:
            self._db_url = db_url_of(self.root)
        return self._db_url

    @db_url.setter
    def db_url(self, url: str) -> None:
        self._db_url = url

    # ---- assignments
    def released_assignments(self) -> dict[str, list[str]]:
        """assignment -> its notebooks, as the gradebook knows them (``nbgrader generate_assignment``)."""
        rows = query(self.db_url, "SELECT assignment.name, notebook.name FROM notebook "
                                  "JOIN assignment ON notebook.assignment_id = assignment.id")
        out: dict[str, list[str]] = {}
        for a, nb in rows or []:
            out.setdefault(a, []).append(nb)
        return {a: sorted(nbs) for a, nbs in sorted(out.items())}

    def source_assignments(self) -> list[str]:
        return sorted(p.name for p in self.source.iterdir() if p.is_dir()) if self.source.exists() else []

    def check_assignment(self, assignment: str) -> list[str]:
        """The assignment's notebooks; CourseError if it is unknown or was never released."""
        released = self.released_assignments()
        if assignment in released:
            return released[assignment]
        known = sorted(set(released) | set(self.source_assignments()))
        if assignment in known:
            raise CourseError(f"Assignment '{assignment}' is not in the gradebook yet: run `make release` "
                              f"(nbgrader generate_assignment {assignment}) first.")
        raise CourseError(f"Unknown assignment '{assignment}'. Assignments: {', '.join(known) or 'none'}.")

    def release_notebook(self, assignment: str, notebook: str):
        path = self.release / assignment / f"{notebook}.ipynb"
        return nbformat.read(path, as_version=4) if path.exists() else None

    def assignment_hash(self, assignment: str) -> str:
        folder = self.source / assignment
        return files_hash(regular_files(folder), folder) if folder.exists() else ""

    # ---- learners
    def roster(self) -> list[str]:
        return sorted(r[0] for r in query(self.db_url, "SELECT id FROM student") or [])

    def submitters(self, assignment: str) -> list[str]:
        if not self.submitted.exists():
            return []
        return sorted(p.name for p in self.submitted.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and (p / assignment).is_dir())

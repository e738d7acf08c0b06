"""What the learner's path and the instructor's workflow both need to know about notebooks and learner ids.

Neutral ground: the learner's tools (``tritoncourse.learner``) and the instructor's
(``tritoncourse.classroom``) import this, never each other.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat

# A learner id: letters, digits, . @ - and single underscores ("__" separates it from the assignment).
STUDENT_RE = r"[A-Za-z0-9](?:[A-Za-z0-9.@-]|_(?=[A-Za-z0-9.@-])){0,63}"


class CourseError(Exception):
    """Bad input (unknown assignment or learner, unreadable notebook): a clear message, nothing changed."""


def valid_student(name: str) -> bool:
    return re.fullmatch(STUDENT_RE, name) is not None


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path``, or CourseError saying plainly why it cannot be graded."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CourseError(f"{path}: cannot be read ({err.strerror})") from None
    if not data.strip():
        raise CourseError(f"{path}: empty file (0 bytes of notebook)")
    try:
        json.loads(data)
    except ValueError as err:
        raise CourseError(f"{path}: not a notebook: not JSON ({err})") from None
    try:
        nb = nbformat.reads(data.decode("utf-8", errors="replace"), as_version=4)
    except Exception as err:  # JSON, but not a notebook
        raise CourseError(f"{path}: not a notebook: {type(err).__name__}: {str(err)[:200]}") from None
    return nb


def nbgrader_ids(nb) -> set[str]:
    return {c.metadata.nbgrader["grade_id"] for c in nb.cells
            if "grade_id" in c.get("metadata", {}).get("nbgrader", {})}


def graded_ids(nb) -> set[str]:
    """The ids of a notebook's answer and test cells: a phase's own (locked cells such as ``setup`` or
    ``reference`` carry the same id in several phases, so they cannot tell one phase's notebook from another)."""
    return {c.metadata.nbgrader["grade_id"] for c in nb.cells
            if isinstance(c.get("metadata", {}).get("nbgrader"), dict) and "grade_id" in c.metadata.nbgrader
            and (c.metadata.nbgrader.get("grade") or c.metadata.nbgrader.get("solution"))}

"""Links refused at every entry of grading (issue 31).

A submitted notebook is graded only when it is what it looks like: a regular file with one name, in folders that
are folders. A symbolic link (to ``source/``'s notebook, to a classmate's submission), a folder that is a link
(``submitted/<student>`` or ``submitted/<student>/<assignment>`` pointing at a classmate's), a notebook with a
second hard link (another name for a file that lies elsewhere, maybe in ``source/``) or a file that is not a
regular file would otherwise be graded as its target: full marks, the model solution in the feedback, or a
classmate's grade. Such a notebook is refused: it scores 0, with a message that says why, and nothing of the
target is read into grading.

Both graders use :func:`refusal`: plain ``nbgrader autograde`` through the course's preprocessors
(``restore.RestoreDeletedCells`` and ``execute.ResilientExecute``, through ``submission.submission_refusal``),
``python -m tritoncourse grade`` when it lays out each learner's private copy (``classroom/tasks.py``:
``prepare``), where a refused notebook becomes the placeholder :func:`refused_notebook`, which the private grading
fails with the same message.
"""
from __future__ import annotations

import json
import os
import stat

# Notebook metadata key of a refused notebook (set by the grader; a learner who sets it only refuses their own).
MARKER = "tritoncourse"


def refusal(base: str | os.PathLike, *parts: str, folder: bool = False) -> str | None:
    """Why ``base/parts...`` must not be graded as what it shows, or None when every step below ``base`` is a real
    folder and the last one a regular file with a single hard link (a real folder, with ``folder``). ``base`` (the
    course's ``submitted/``) is the instructor's and is not checked. The reason names the path from ``base`` on,
    never the link's target."""
    path = os.fspath(base)
    for i, part in enumerate(parts):
        path = os.path.join(path, part)
        shown = "/".join(parts[:i + 1])
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None  # nothing there: the caller's "no notebook" case, not a link
        except OSError as err:
            return f"{shown} cannot be read ({err.strerror or type(err).__name__})"
        last = i == len(parts) - 1 and not folder
        if stat.S_ISLNK(st.st_mode):
            return f"{shown} is a symbolic link, not {'a file' if last else 'a folder'}"
        if not last and not stat.S_ISDIR(st.st_mode):
            return f"{shown} is not a folder"
        if last and not stat.S_ISREG(st.st_mode):
            return f"{shown} is not a regular file"
        if last and st.st_nlink > 1:
            return (f"{shown} has {st.st_nlink} hard links (it is also a file elsewhere, maybe in the course's "
                    "source/ or another learner's folder)")
    return None


def link_target(base: str | os.PathLike, *parts: str) -> str:
    """For the instructor's log only: where the first link on the way to ``base/parts...`` points."""
    path = os.fspath(base)
    for part in parts:
        path = os.path.join(path, part)
        try:
            if os.path.islink(path):
                return f"{path} -> {os.readlink(path)}"
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                return f"{path} (inode {st.st_ino}, {st.st_nlink} links)"
        except OSError:
            break
    return path


def learner_message(reason: str) -> str:
    """What the learner reads (feedback, failed tests) for a refused notebook."""
    return (f"This notebook was not graded: {reason}. A submission must be the notebook file itself, handed in "
            "as a file; every test of this notebook scores 0. Hand in your own notebook and ask your instructor "
            "to grade it again.")


def refused_reason(nb) -> str | None:
    """The reason recorded in a notebook's metadata by the grader, or None (bounded, plain text)."""
    try:
        meta = nb.get("metadata", {}).get(MARKER, {})
        reason = meta.get("refused") if isinstance(meta, dict) else None
    except AttributeError:
        return None
    if not reason:
        return None
    text = str(reason) if isinstance(reason, str) else "the submission was refused"
    return "".join(ch for ch in text[:400] if ch.isprintable())


def refused_notebook(reason: str) -> bytes:
    """The placeholder that ``python -m tritoncourse grade`` grades in place of a refused notebook: no cell (every
    test is restored from the gradebook and failed with ``reason``)."""
    nb = {"cells": [], "metadata": {MARKER: {"refused": reason}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1).encode()

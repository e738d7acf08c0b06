"""Feedback for learners that shows every test's verdict (message, likely cause, seed) and never a hidden test.

``nbgrader generate_feedback`` renders the autograded notebook, whose test cells hold the instructor's
full tests (nbgrader restores them from the gradebook, hidden parts included: nbgrader issue #917).
:class:`HideHiddenTests`, registered in ``nbgrader_config.py`` as the first step of GenerateFeedback, puts
back each test cell's released source (what the learner saw) and blanks any hidden test line that a
traceback printed, keeping every verdict. So plain ``nbgrader generate_feedback`` is safe in this course.

``python -m tritoncourse feedback 01_vector_add`` runs it and then reads every HTML file it wrote: a file
in which a hidden test line can still be read is removed, and the command fails, naming it.
"""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
from traitlets import Bool, Unicode

from nbgrader.preprocessors import NbGraderPreprocessor

from .secrets import BEGIN, END, MIN_LINE, REDACTED, normal, secret_lines, split_hidden  # noqa: F401

def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_test(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _redact(text: str, secrets: set[str]) -> str:
    if not secrets or not text:
        return text
    out = []
    for line in text.split("\n"):
        plain = normal(re.sub(r"\x1b\[[0-9;]*m", "", line))
        if any(s in plain for s in secrets):
            indent = line[: len(line) - len(line.lstrip())]
            line = indent + REDACTED
        out.append(line)
    return "\n".join(out)


def _redact_output(output, secrets: set[str]) -> None:
    if "text" in output:
        joined = "".join(output["text"]) if isinstance(output["text"], list) else output["text"]
        output["text"] = _redact(joined, secrets)
    if "traceback" in output:
        output["traceback"] = [_redact(t, secrets) for t in output["traceback"]]
    if "evalue" in output:
        output["evalue"] = _redact(output["evalue"], secrets)
    for key, value in list(output.get("data", {}).items()):
        if key.startswith("text/") and isinstance(value, (str, list)):
            joined = "".join(value) if isinstance(value, list) else value
            output["data"][key] = _redact(joined, secrets)


def release_cells(release_dir: str, assignment: str, notebook: str) -> dict[str, str]:
    """The released source of each cell with a grade_id, or {} when the release is not found."""
    path = os.path.join(release_dir, assignment, f"{notebook}.ipynb")
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return {}
    return {gid: c.source for c in nb.cells if (gid := _grade_id(c))}


def hide_hidden_tests(nb, released: dict[str, str]):
    """Give every test cell its released source and blank hidden lines in all outputs (in place).

    ``released``: grade_id -> released source (may be empty: then hidden regions are cut out instead).
    Returns the set of hidden lines that were looked for.
    """
    secrets: set[str] = set()
    visible = "\n".join(released.values())
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        cut, hidden = split_hidden(cell.source)
        gid = _grade_id(cell)
        if _is_test(cell) or hidden:
            secrets |= secret_lines(hidden, visible + "\n" + cut)
            if gid in released and _is_test(cell):
                extra = [line for line in cut.splitlines() if normal(line)
                         and normal(line) not in {normal(r) for r in released[gid].splitlines()}
                         and not line.lstrip().startswith("#")]
                # Lines of the graded test that the learner never saw count as hidden too.
                secrets |= secret_lines(extra, visible)
                cell.source = released[gid]
            else:
                cell.source = cut
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            _redact_output(output, secrets)
    return secrets


class HideHiddenTests(NbGraderPreprocessor):
    """GenerateFeedback step: released test sources, verdicts kept, hidden test lines blanked."""

    enabled = Bool(True).tag(config=True)
    release_directory = Unicode("", help="The course's release/ folder (absolute); the released test "
                                "cells come from there. Without it, hidden regions are cut out.").tag(config=True)

    def preprocess(self, nb, resources):
        meta = resources.get("nbgrader", {})
        released = {}
        if self.release_directory and meta.get("assignment") and meta.get("notebook"):
            released = release_cells(self.release_directory, meta["assignment"], meta["notebook"])
            if not released:
                self.log.warning("No released notebook for %s/%s: hidden test regions are cut out instead.",
                                 meta.get("assignment"), meta.get("notebook"))
        hide_hidden_tests(nb, released)
        return nb, resources


# ------------------------------------------------------------------ checking what was written

def html_text(path: Path) -> str:
    """The text a reader sees in an HTML file (tags dropped, entities decoded), whitespace normalised."""
    raw = path.read_text(errors="replace")
    raw = re.sub(r"<(script|style)\b.*?</\1>", " ", raw, flags=re.S | re.I)
    return normal(html.unescape(re.sub(r"<[^>]+>", "", raw)))


def hidden_secrets(source_root: Path, release_root: Path, assignment: str) -> dict[str, set[str]]:
    """notebook name -> the hidden test lines of source/<assignment>/<notebook>.ipynb that learners never see."""
    out = {}
    for src in sorted((source_root / assignment).glob("*.ipynb")):
        nb = nbformat.read(src, as_version=4)
        try:
            visible = (release_root / assignment / src.name).read_text()
            visible = "\n".join("".join(c.get("source", "")) for c in json.loads(visible)["cells"])
        except (OSError, ValueError, KeyError):
            visible = ""
        hidden = [line for c in nb.cells for line in split_hidden(c.source)[1]]
        out[src.stem] = secret_lines(hidden, visible) | ({BEGIN} if hidden else set())
    return out


def leaks(feedback_file: Path, secrets: set[str]) -> list[str]:
    text = html_text(feedback_file)
    return sorted(s for s in secrets if s in text)


def generate_feedback(root: Path, assignment: str, students: list[str] | None = None,
                      extra: list[str] | None = None) -> int:
    """``nbgrader generate_feedback`` for one assignment, then a check that no hidden test can be read."""
    from .workflow import Course, CourseError

    course = Course(root)
    try:
        course.check_assignment(assignment)
    except CourseError as err:
        print(err)
        return 2
    graded = sorted(p.parent.name for p in course.autograded.glob(f"*/{assignment}") if p.is_dir())
    if students:
        unknown = [s for s in students if s not in graded]
        if unknown:
            print(f"No autograded {assignment} for {', '.join(unknown)}. Graded learners: "
                  f"{', '.join(graded) or 'none'} (run `python -m tritoncourse grade {assignment}` first).")
            return 2
    if not graded:
        print(f"Nothing to give feedback on: no learner's {assignment} is graded yet "
              f"(run `python -m tritoncourse grade {assignment}`).")
        return 2
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    failed = 0
    for student in students or [None]:
        cmd = [sys.executable, "-m", "nbgrader", "generate_feedback", assignment, "--force", "--log-level=WARN",
               *(["--student", student] if student else []), *(extra or [])]
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            failed += 1
            print(f"nbgrader generate_feedback exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    secrets = hidden_secrets(course.source, course.release, assignment)
    every = set().union(*secrets.values()) if secrets else set()
    written, leaked = 0, []
    for student in students or graded:
        folder = course.root / "feedback" / student / assignment
        for path in sorted(folder.rglob("*")) if folder.exists() else []:
            if not path.is_file():
                continue
            if path.name.endswith(".verdicts.json"):  # the grader's log, not for learners
                path.unlink()
                continue
            found = leaks(path, secrets.get(path.stem, every))
            if found:
                path.unlink()
                leaked.append((path, found))
            elif path.suffix == ".html":
                written += 1
    for path, found in leaked:
        print(f"REMOVED {path.relative_to(course.root)}: it shows hidden test lines, e.g. {found[0]!r}. "
              "Is the HideHiddenTests section of nbgrader_config.py still there?")
    print(f"{written} feedback file(s) under feedback/*/{assignment}/ (hidden tests checked absent)"
          + (f"; {len(leaked)} removed" if leaked else ""))
    return 1 if leaked or failed else 0

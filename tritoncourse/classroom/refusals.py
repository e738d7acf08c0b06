"""Hand-ins the hub's exchange refused to collect, in the instructor's report (``grade``'s summary, ``export``'s
``not_collected`` column).

The hub's collect (hub/course_exchange.py) refuses a bad submission and collects everyone else; each refusal is one
JSON object a line in ``<course>/exchange-refused.jsonl`` (time, student, assignment, folder, reason). Here each
refused learner and assignment is named with the reason in plain words, and with what was graded instead: an earlier
hand-in collected before (``submitted/``), a later one, or nothing. Everything a learner chose (a folder's or file's
name) is shown inert: control and invisible characters escaped, each field bounded; nothing here is HTML.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .course import Course

RECORDS = "exchange-refused.jsonl"  # hub/course_exchange.py's REFUSED_RECORDS
STUDENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")  # hub/course_exchange.py's: a folder of submitted/
READ_AT_MOST = 4 << 20  # bytes of the record read (its end: the newest)
SHOWN = 300
MAX_LINES = 100  # lines of grade's summary; the rest are counted

# What a refusal's reason says, in plain words (the reason itself follows, with the file it names).
KINDS = [("symbolic link", "it holds a link to a file elsewhere"),
         ("names (a hard link", "it holds a second name of a file elsewhere (a hard link)"),
         ("a device", "it holds a special file (a device)"), ("a FIFO", "it holds a special file (a FIFO)"),
         ("a socket", "it holds a special file (a socket)"), (" MB", "it is too large"),
         ("files", "it holds too many files"), ("folders deep", "its folders nest too deep"),
         ("in the future", "it is dated in the future"),
         ("made by uid", "someone else made it in this learner's name"),
         ("names no learner", "its folder's name is not one the hand-in service gives"),
         ("no timestamp", "its folder's name is not one the hand-in service gives"),
         ("not a folder", "it is not a folder")]


def inert(text, limit: int = SHOWN) -> str:
    """hub/course_exchange.py's: control and invisible characters escaped, at most ``limit`` characters."""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))
    return out if len(out) <= limit else out[:limit - 1] + "\u2026"


@dataclass
class Refusal:
    time: str
    student: str
    assignment: str
    folder: str
    reason: str
    times: int = 1

    @property
    def plain(self) -> str:
        return next((words for key, words in KINDS if key in self.reason), "collect could not copy it")

    @property
    def dated(self) -> str:
        """The refused folder's date, from its name (``<learner>+<assignment>+<date>+<random>``), or ''."""
        parts = self.folder.rsplit("+", 3)
        return parts[2] if len(parts) == 4 else ""


def read_refusals(root: Path, assignments: list[str] | None = None) -> dict[tuple[str, str], list[Refusal]]:
    """(assignment, student) -> the distinct folders refused (the latest record of each, counted), newest first."""
    try:
        fd = os.open(Path(root) / RECORDS, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - READ_AT_MOST))
        lines = f.read(READ_AT_MOST).decode("utf-8", "replace").splitlines()[1 if size > READ_AT_MOST else 0:]
    seen: dict[tuple[str, str, str], Refusal] = {}
    for line in lines:
        try:
            rec = json.loads(line)
            fields = [inert(rec[k], 100 if k in ("student", "time") else 2 * SHOWN if k == "reason" else SHOWN)
                      for k in ("time", "student", "assignment", "folder", "reason")]
        except (ValueError, TypeError, KeyError):
            continue
        r = Refusal(*fields)
        if assignments is not None and r.assignment not in assignments:
            continue
        key = (r.assignment, r.student, r.folder)
        if key in seen:
            r.times += seen[key].times
        seen[key] = r
    out: dict[tuple[str, str], list[Refusal]] = {}
    for r in sorted(seen.values(), key=lambda r: r.time, reverse=True):
        out.setdefault((r.assignment, r.student), []).append(r)
    return dict(sorted(out.items()))


def _collected_date(course: Course, assignment: str, student: str) -> str | None:
    """The date of the hand-in in submitted/ (its timestamp.txt), '' without one, None when nothing is there."""
    folder = course.submitted / student / assignment
    if not STUDENT.match(student) or not folder.is_dir() or folder.is_symlink():
        return None
    try:
        with open(folder / "timestamp.txt", "rb") as f:
            return inert(f.read(100).decode("utf-8", "replace").strip(), 60)
    except OSError:
        return ""


def _later(a: str, b: str) -> bool:
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(a) > parse_utc(b)
    except Exception:
        return False


def graded_instead(course: Course, refused: Refusal, entry: dict | None) -> str:
    """What the report says was graded for a learner whose hand-in was refused."""
    assignment, student = refused.assignment, refused.student
    if not STUDENT.match(student):
        return "No learner's grade changed: the folder names no learner."
    collected = _collected_date(course, assignment, student)
    if collected is None:
        return "Nothing of theirs was collected: no grade for this assignment until they hand in again."
    entry = entry or {}
    if entry.get("status") == "graded":
        result = f"graded {entry.get('score', 0):g}/{entry.get('max_score', 0):g}"
    elif entry.get("status") == "failed":
        result = "its grading failed (see above)"
    else:
        result = "not graded yet"
    dated = f" (dated {collected})" if collected else ""
    if collected and refused.dated and _later(collected, refused.dated):
        return f"Superseded: a later hand-in{dated} was collected, and it is what is graded: {result}."
    return f"Graded instead: their hand-in collected earlier{dated}: {result}."


def describe(course: Course, refused: Refusal, entry: dict | None) -> str:
    """One refusal in a sentence or two, without the learner's and assignment's names."""
    again = f", {refused.times} times" if refused.times > 1 else ""
    return (f"refused at collect ({refused.time}{again}): {refused.plain} ({refused.reason}) "
            f"[folder {refused.folder}]. " + graded_instead(course, refused, entry))


def report_lines(course: Course, assignments: list[str] | None, entries: dict) -> list[str]:
    """grade's summary of the refused hand-ins of ``assignments`` (all where None); [] when there are none."""
    found = read_refusals(course.root, assignments)
    if not found:
        return []
    lines = [f"Not collected by the hub's exchange ({sum(map(len, found.values()))} hand-in(s) of {len(found)} "
             f"learner(s) refused, each costing only its learner; {RECORDS}):"]
    for (a, s), refused in found.items():
        lines += [f"  not collected: {a}/{s}: {describe(course, r, entries.get(f'{a}/{s}'))}" for r in refused]
    if len(lines) > MAX_LINES + 1:
        lines = lines[:MAX_LINES + 1] + [f"  ... and {len(lines) - MAX_LINES - 1} more in {RECORDS}"]
    return lines


def csv_cells(course: Course, assignments: list[str], entries: dict) -> dict[tuple[str, str], str]:
    """(assignment, student) -> export's ``not_collected`` cell, for learners whose names can be learners' ids."""
    return {(a, s): " | ".join(describe(course, r, entries.get(f"{a}/{s}")) for r in refused[:5])
            for (a, s), refused in read_refusals(course.root, assignments).items() if STUDENT.match(s)}

"""What learners must never read: hidden test lines and solutions, found in a notebook's text.

Used by the feedback filter (``feedback.HideHiddenTests``), the hand-out and solution checks
(``workflow``) and the grading sandbox's output checks; it imports nothing of the course.
"""
from __future__ import annotations

BEGIN = "BEGIN HIDDEN TESTS"
END = "END HIDDEN TESTS"
REDACTED = "<hidden test line>"
# Hidden lines shorter than this ("else:", ")") say nothing and would match everywhere.
MIN_LINE = 8


def split_hidden(source: str) -> tuple[str, list[str]]:
    """(source without its hidden test regions, the hidden lines), as nbgrader's ClearHiddenTests cuts them."""
    kept, hidden, inside = [], [], False
    for line in source.split("\n"):
        if BEGIN in line:
            inside = True
        elif END in line:
            inside = False
        elif inside:
            hidden.append(line)
        else:
            kept.append(line)
    return "\n".join(kept), hidden


def normal(text: str) -> str:
    return " ".join(text.split())


GENERIC = ("import ", "from ", "#", "return", "pass", "else", "try:", "except", "finally", "break", "continue")


def secret_lines(hidden: list[str], visible_text: str) -> set[str]:
    """Hidden lines worth hiding: long enough to mean something, not generic (imports, comments, bare
    keywords), and not also shown to learners."""
    # A hidden line that learners can read anyway (whole, or as part of a longer visible line: the tail of
    # a call split over lines, `strided=True)`) is no secret, and looking for it would only raise false alarms.
    visible = normal(visible_text)
    return {n for n in (normal(line) for line in hidden)
            if len(n) >= MIN_LINE and not n.startswith(GENERIC) and n not in visible}



SECRET_MARKERS = ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "Model answer", "Rubric")


def split_regions(source: str) -> tuple[list[str], list[str], list[str]]:
    """A cell's lines: (public, inside BEGIN/END SOLUTION, inside BEGIN/END HIDDEN TESTS)."""
    public, solution, hidden, region = [], [], [], None
    for line in source.split("\n"):
        if "BEGIN SOLUTION" in line:
            region = solution
        elif "BEGIN HIDDEN TESTS" in line:
            region = hidden
        elif "END SOLUTION" in line or "END HIDDEN TESTS" in line:
            region = None
        else:
            (public if region is None else region).append(line)
    return public, solution, hidden

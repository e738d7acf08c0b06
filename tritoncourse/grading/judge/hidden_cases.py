"""Which of a test's cases are hidden, as the judge runs them, so that nothing a learner is told about a hidden case
quotes the learner's own output or error text (a kernel that prints what it was given, or puts its inputs' sizes in
an exception, and then crashes or fails would otherwise show the hidden cases in its own feedback).

At grading the judge runs the whole test cell, hidden cases included, between nbgrader's ``### BEGIN HIDDEN TESTS``
and ``### END HIDDEN TESTS`` lines, from ``test_cell.py`` beside the judge's stage file. A case is hidden when a frame
of that file on the stack (or in an error's traceback) is on a line between the two markers
(:func:`in_hidden_case`). The judge's stage file says so after each stage (:func:`stage_text`): verdict.py reads it
back (:func:`read_stage`) and quotes the runner's output only where no hidden case has begun (its output is one file:
once a hidden case ran, any of it may be that case's). :func:`scrub` takes the text of the learner's errors out of a
message written on a hidden case. The checks' own messages ask :func:`in_hidden_case` too (checking.py's ``Case``,
``shown`` and ``compare``): on a hidden case they name its kind, never its sizes, strides, seed, indices or values,
nor anything the learner's code returned. In a learner's own notebook the cells hold no hidden region: nothing
changes.

Imports nothing of the course (the judge, the checks and the verdict all use it).
"""
from __future__ import annotations

import builtins
import os
import sys
import traceback

BEGIN, END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
TEST_CELL = "test_cell.py"  # the judge's copy of the test (isolated.py writes it beside stage.txt)
# The stage file's last line when a hidden case runs ("<MARK>now") or has run ("<MARK>ran").
MARK = "\n#hidden-cases: "
NOT_SHOWN = "<not shown: a hidden case>"

_hidden_lines: dict[str, frozenset[int]] = {}
_hidden_began = False  # a hidden case of this judge's test has begun


def _test_cell_path() -> str | None:
    stage_file = os.environ.get("TRITONCOURSE_STAGE_FILE")
    return os.path.join(os.path.dirname(stage_file), TEST_CELL) if stage_file else None


def hidden_lines(source: str) -> frozenset[int]:
    """The 1-based line numbers of ``source`` inside hidden regions (the marker lines included)."""
    out, inside = set(), False
    for number, line in enumerate(source.split("\n"), start=1):
        if BEGIN in line:
            inside = True
        if inside:
            out.add(number)
        if END in line:
            inside = False
    return frozenset(out)


def _lines_of(path: str) -> frozenset[int]:
    if path not in _hidden_lines:
        try:
            with open(path, encoding="utf-8") as f:
                _hidden_lines[path] = hidden_lines(f.read())
        except OSError:
            _hidden_lines[path] = frozenset()
    return _hidden_lines[path]


def in_hidden_case(tb=None) -> bool:
    """Whether the judge is running a hidden case now (``tb`` None: the current stack) or was when the error of
    traceback ``tb`` was raised. Always False outside a judge (no stage file) or for a test without hidden cases."""
    path = _test_cell_path()
    if path is None:
        return False
    lines = _lines_of(path)
    if not lines:
        return False
    frames = traceback.walk_tb(tb) if tb is not None else traceback.walk_stack(sys._getframe(1))
    return any(os.path.basename(f.f_code.co_filename) == TEST_CELL and
               os.path.dirname(os.path.abspath(f.f_code.co_filename)) == os.path.dirname(os.path.abspath(path))
               and number in lines for f, number in frames)


def stage_text(text: str) -> str:
    """``text`` for the stage file, with the hidden-case mark once a hidden case has begun."""
    global _hidden_began
    now = in_hidden_case()
    _hidden_began = _hidden_began or now
    return f"{text}{MARK}{'now' if now else 'ran'}" if _hidden_began else text


def read_stage(raw: str) -> tuple[str, str]:
    """(the stage's text, "now" / "ran" / "": a hidden case running, one run before, none) from the stage file."""
    text, found, mark = raw.partition(MARK)
    if not found:
        return text, ""
    return text, "ran" if mark.strip() == "ran" else "now"


def error_name(err: BaseException) -> str:
    """The error's class name where it is Python's own (a learner's class name could spell anything)."""
    name = type(err).__name__
    return name if isinstance(getattr(builtins, name, None), type) else "an error"


def _chain(err: BaseException | None):
    seen = 0
    while err is not None and seen < 4:
        yield err
        seen += 1
        err = err.__cause__ or err.__context__


def _cut(message: str, text: str) -> str:
    """``message`` with every quotation of ``text`` (whole, or its beginning where the quote was cut short) replaced
    by NOT_SHOWN."""
    text = text.strip()
    if not text:
        return message
    head = text[:40]
    start = message.find(head)
    while start >= 0:
        n = len(head)
        while start + n < len(message) and n < len(text) and message[start + n] == text[n]:
            n += 1
        message = message[:start] + NOT_SHOWN + message[start + n:]
        start = message.find(head, start + len(NOT_SHOWN))
    return message


def scrub(message: str, err: BaseException | None) -> str:
    """``message`` without the text of ``err`` and the errors it came from (their messages, a learner's class names,
    the learner's lines a runner reported): what a message written on a hidden case may not quote."""
    for e in _chain(err):
        text = str(e).strip()
        if text:
            message = message.replace(f"{type(e).__name__}: {text}", f"{type(e).__name__}: {NOT_SHOWN}")
        for part in [text, *str(getattr(e, "where", "")).splitlines()]:
            if len(part.strip()) >= 6:  # shorter ones would match everywhere; quoted whole they went above
                message = _cut(message, part)
        name = type(e).__name__
        if len(name) >= 4 and error_name(e) != name and name not in NOT_SHOWN:
            message = message.replace(name, "an error")
    return message

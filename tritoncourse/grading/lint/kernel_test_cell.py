"""A ``%%kernel_test`` cell as text: whether a cell is one (:func:`is_kernel_test`), its options and test body
(:func:`parse_cell`), its title (the docstring's first line) and whether it checks only hidden cases.
"""
from __future__ import annotations

import shlex

from .source import parse

MAGIC = "%%kernel_test"
DEFAULT_TIMEOUT = 120.0


def _first_line(cell_source: str) -> str:
    """The first line that is not a comment (nbgrader puts a note before the magic of a restored cell)."""
    text = cell_source.lstrip()
    while text.startswith("#"):
        text = text.partition("\n")[2].lstrip()
    return text


def is_kernel_test(cell_source: str) -> bool:
    """Whether a cell is a ``%%kernel_test`` cell; never raises, even where parse_cell would."""
    words = _first_line(cell_source).partition("\n")[0].split()
    return bool(words) and words[0] == MAGIC


def parse_cell(cell_source: str) -> tuple[dict, str] | None:
    """Split a ``%%kernel_test [--timeout S]`` cell into (options, test body); None if it is not one."""
    first, _, body = _first_line(cell_source).partition("\n")
    parts = shlex.split(first)
    if not parts or parts[0] != MAGIC:
        return None
    options = {"timeout": DEFAULT_TIMEOUT}
    args = parts[1:]
    while args:
        flag = args.pop(0)
        if flag == "--timeout" and args:
            options["timeout"] = float(args.pop(0))
    return options, body


def hidden_only(body: str) -> bool:
    """True when the cell checks nothing visible: its cases are hidden tests, run only at grading."""
    import ast

    try:
        tree = parse(body)
    except SyntaxError:
        return False
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            continue
        return False
    return True


def test_title(body: str) -> str:
    """The first line of the test's docstring."""
    import ast

    try:
        doc = ast.get_docstring(parse(body))
    except SyntaxError:
        doc = None
    return (doc or "").strip().splitlines()[0] if doc else ""

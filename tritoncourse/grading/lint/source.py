"""Taking a learner's kernels as source text: from a notebook file or from a live Jupyter namespace.

Only definitions are taken (parsed, never run here): ``@triton.jit`` kernels (autotuned or not), and
from solution cells plain functions and configuration literals. Each is linted (lint.py: a whitelist over
the whole definition, decorators, defaults and annotations included): a Triton kernel can only use ``tl``,
other kernels, constants and a few builtins, a plain function cannot import, touch dunders, assign to
module attributes or reach other modules, so nothing taken can tamper with the checks beside it.
"""
from __future__ import annotations

import ast
import builtins
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from .lint import ALLOWED_BUILTINS, lint_function, lint_jit, lint_value, literal_problems  # noqa: F401
from .whitelist import shadowing

# Names a Triton kernel may start an attribute path from (the runner imports them for the learner's module).
ALLOWED_MODULES = {"tl", "triton", "math"}
# Names the grader's module defines itself: a learner's definition of the same name is never taken into it.
RESERVED = ALLOWED_MODULES | {"torch", "statistics"}


# CPython 3.11 can fail ("AST constructor recursion depth mismatch", gh-106905) when threads parse at
# once, and the grader runs tests in threads: every parse goes through this lock, and so does every traceback the
# grader's threads format (3.11's traceback module parses the failing line for its carets: a grader error logged in one
# thread while another parsed failed that other test, seen in make test, 2026-11-28). Reentrant: a traceback's
# formatting under it may reach a parse of ours.
PARSE_LOCK = threading.RLock()


def parse(text: str) -> ast.Module:
    """ast.parse, one thread at a time."""
    with PARSE_LOCK:
        return ast.parse(text)


@dataclass
class KernelSource:
    name: str
    source: str  # the definition (with its decorators), dedented
    cell: str = ""  # where it came from (grade_id or cell number)
    calls: set[str] = field(default_factory=set)  # global names it uses
    kind: str = "jit"  # jit: a (possibly autotuned) Triton kernel; function: plain Python; value: configs


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _is_kernel_def(node: ast.FunctionDef) -> bool:
    """A function with @triton.jit (or @jit) among its decorators: a kernel, whose lint checks them all."""
    return any(_dotted(d.func if isinstance(d, ast.Call) else d) in ("triton.jit", "jit") for d in node.decorator_list)


def _strip_magics(text: str) -> str:
    """IPython lines (%magic, !shell) are not Python; blank them so the rest parses."""
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip()
        lines.append("" if stripped.startswith(("%", "!")) else line)
    return "\n".join(lines)


def free_names(tree: ast.AST) -> set[str]:
    """Names read in ``tree`` that it does not define itself (arguments, assignments, imports, defs)."""
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            if not isinstance(node, ast.ClassDef):
                for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                    bound.add(a.arg)
                for a in (node.args.vararg, node.args.kwarg):
                    if a is not None:
                        bound.add(a.arg)
        elif isinstance(node, ast.Lambda):
            for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                bound.add(a.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound


def _uses(fn: ast.FunctionDef) -> set[str]:
    """The global names a function uses: in its body, and in its decorators, defaults and annotations, which
    are evaluated outside it (where its own argument names mean nothing)."""
    a = fn.args
    outside = fn.decorator_list + a.defaults + [d for d in a.kw_defaults if d is not None] + [fn.returns] + [
        arg.annotation for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if arg is not None]
    return free_names(fn) | {n.id for e in outside if e is not None for n in ast.walk(e)
                             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _segment(lines: list[str], node: ast.stmt) -> str:
    """The exact text of a top-level statement, decorators included: not the rest of its lines, so that a
    statement after `;` on the same line is never taken with it. (Column offsets count UTF-8 bytes.)"""
    decorated = bool(getattr(node, "decorator_list", None))
    first = min([d.lineno for d in node.decorator_list] + [node.lineno]) if decorated else node.lineno
    chunk = [line.encode() for line in lines[first - 1:node.end_lineno]]
    chunk[-1] = chunk[-1][:node.end_col_offset]
    if not decorated:  # a decorator's `@` starts its line
        chunk[0] = chunk[0][node.col_offset:]
    return "\n".join(c.decode() for c in chunk) + "\n"


def _kernels_in_text(text: str, origin: str, solution: bool = True) -> tuple[dict[str, KernelSource], set[str]]:
    """Definitions at the top level of ``text``: (taken definitions by name, names of plain functions).

    @triton.jit kernels are always taken; plain functions and configuration values only from solution
    cells (``solution``), where the learner writes graded code.
    """
    stripped = _strip_magics(text)
    try:
        tree = parse(stripped)
    except SyntaxError:
        return {}, set()
    found, plain = {}, set()
    lines = stripped.splitlines()
    for node in tree.body:
        src = _segment(lines, node)
        if isinstance(node, ast.FunctionDef) and _is_kernel_def(node):
            found[node.name] = KernelSource(node.name, src, origin, _uses(node), "jit")
        elif isinstance(node, ast.FunctionDef):
            plain.add(node.name)
            if solution:  # decorated too: the lint then says why a decorator is refused
                found[node.name] = KernelSource(node.name, src, origin, _uses(node), "function")
        elif solution and isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and not literal_problems(node.value):
            found[node.targets[0].id] = KernelSource(node.targets[0].id, src, origin, free_names(node.value),
                                                     "value")
    return found, plain


def kernels_from_notebook(nb) -> tuple[dict[str, KernelSource], set[str]]:
    """The learner's definitions in a notebook, solution cells winning over the others.

    Kernels come from every code cell; plain functions and configuration values only from solution
    cells. Within each group a later definition wins, as when the notebook runs top to bottom.
    Returns (definitions by name, names of every plain function defined anywhere).
    """
    found: dict[str, KernelSource] = {}
    plain: set[str] = set()
    cells = [c for c in nb.cells if c.cell_type == "code"]
    is_solution = [bool(c.get("metadata", {}).get("nbgrader", {}).get("solution")) for c in cells]
    for want_solution in (False, True):
        for i, cell in enumerate(cells):
            if is_solution[i] != want_solution:
                continue
            origin = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"code cell {i + 1}"
            kernels, plain_names = _kernels_in_text(cell.source, origin, want_solution)
            found.update(kernels)
            plain |= plain_names
    return found, plain


def kernels_from_history(inputs: list[str]) -> tuple[dict[str, KernelSource], set[str]]:
    """The learner's definitions as last run in a Jupyter session (its input history, oldest first)."""
    found: dict[str, KernelSource] = {}
    plain: set[str] = set()
    for i, text in enumerate(inputs):
        if text.lstrip().startswith("%%"):
            continue  # cell magics (the tests themselves) define nothing of the learner's
        kernels, plain_names = _kernels_in_text(text, f"input [{i}]")
        found.update(kernels)
        plain |= plain_names
    return found, plain


def lint_kernel(k: KernelSource, known: Mapping[str, str] | set[str]) -> list[str]:
    """Problems that stop a definition from being run by the grader (empty when it is fine).

    ``known``: the other definitions taken from the notebook, by name, with their kind (jit, function, value).
    """
    if not isinstance(known, Mapping):
        known = dict.fromkeys(known, "jit")
    body = parse(k.source).body
    expected = ast.Assign if k.kind == "value" else ast.FunctionDef
    if len(body) != 1 or not isinstance(body[0], expected):
        return [f"`{k.name}` could not be taken on its own from your notebook: write it as a definition of its own"]
    if k.kind == "jit":
        return lint_jit(body[0], known)
    if k.kind == "function":
        return lint_function(body[0], known)
    return lint_value(body[0], known)


@dataclass
class Assembly:
    """The learner's definitions a test needs, as one source text, or the reasons they can't be given."""

    source: str
    kernels: list[str]
    problems: list[str]


def expected_kernel(name: str) -> bool:
    """The course names every kernel `triton_<op>_kernel`: such a name must be a @triton.jit function."""
    return name.startswith("triton_") and name.endswith("_kernel")


def assemble(test_source: str, kernels: dict[str, KernelSource], plain: set[str],
             provided: set[str] = frozenset()) -> Assembly:
    """Pick the definitions ``test_source`` refers to, and those they use, in dependency order.

    ``provided`` are names the test runner defines itself (never taken from the learner). A definition of the
    learner's named like a module, a builtin or a name the grader provides (whitelist.shadowing) is a decoy: never
    taken, never known to the lint as the learner's, and a test whose definitions use it is refused, naming it.
    """
    try:
        needed = free_names(parse(_strip_magics(test_source)))
    except SyntaxError as err:
        return Assembly("", [], [f"the test cell does not parse: {err}"])
    needed -= set(dir(builtins)) | set(provided) | ALLOWED_MODULES
    problems: list[str] = []
    order: list[str] = []
    reserved = RESERVED | set(provided)
    decoys = {n: why for n in kernels if (why := shadowing(n, provided))}

    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in order or name in stack:
            return
        k = kernels[name]
        for dep in sorted(k.calls):
            if dep in kernels and dep not in reserved and dep not in decoys:  # the grader's tl, torch, len...
                visit(dep, stack + (name,))
        order.append(name)

    for name in sorted(needed):
        if name in decoys:
            problems.append("the test uses " + _decoy(name, kernels[name], decoys[name]))
        elif name in kernels and not (expected_kernel(name) and kernels[name].kind != "jit"):
            visit(name, ())
        elif name in plain or name in kernels:
            problems.append(f"`{name}` is defined without @triton.jit; the grader only runs Triton kernels. "
                            "Decorate it with @triton.jit.")
        elif expected_kernel(name):
            problems.append(f"no @triton.jit function named `{name}` was found in the notebook "
                            "(did you rename or delete it?)")
        else:
            problems.append(f"`{name}` was not found in the notebook's solution cells (did you rename or "
                            "delete it?)")
    known = {n: k.kind for n, k in kernels.items() if n not in decoys}
    for name in order:
        for dep in sorted(kernels[name].calls & decoys.keys()):
            problems.append(f"`{name}` ({kernels[name].cell}) uses {_decoy(dep, kernels[dep], decoys[dep])}")
        for p in lint_kernel(kernels[name], known):
            problems.append(f"`{name}` ({kernels[name].cell}): {p}")
    source = "\n\n".join(kernels[n].source for n in order)
    return Assembly(source, order, problems)


_KINDS = {"jit": "kernel", "function": "function", "value": "variable"}


def _decoy(name: str, k: KernelSource, why: str) -> str:
    kind = _KINDS.get(k.kind, "definition")
    return f"`{name}`, which your notebook defines as a {kind} ({k.cell}): `{name}` is {why}; rename your {kind}"

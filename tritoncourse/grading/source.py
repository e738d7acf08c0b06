"""Taking a learner's kernels as source text: from a notebook file or from a live Jupyter namespace.

Only definitions are taken (parsed, never run here): ``@triton.jit`` kernels (autotuned or not), and
from solution cells plain functions and configuration literals. Each is linted: a Triton kernel can
only use ``tl``, other kernels, constants and a few builtins, a plain function cannot import, touch
dunders or assign to module attributes, so nothing taken can tamper with the checks beside it.
"""
from __future__ import annotations

import ast
import builtins
import textwrap
import threading
from dataclasses import dataclass, field

# Builtins a Triton kernel may call (the interpreter runs the body as Python; the compiler accepts these).
ALLOWED_BUILTINS = {"range", "min", "max", "int", "float", "bool", "len", "abs", "print", "isinstance",
                    "True", "False", "None", "tuple", "zip", "enumerate"}
ALLOWED_MODULES = {"tl", "triton", "math"}
# tl.<name>.<name> chains allowed below these submodules.
ALLOWED_SUBMODULES = {"math", "extra", "libdevice", "cuda"}
DISALLOWED_NODES = (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ClassDef, ast.Lambda,
                    ast.Try, ast.With, ast.Yield, ast.YieldFrom, ast.Await, ast.AsyncFunctionDef,
                    ast.Delete, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)


# CPython 3.11 can fail ("AST constructor recursion depth mismatch", gh-106905) when threads parse at
# once, and the grader runs tests in threads: every parse goes through this lock.
_PARSE_LOCK = threading.Lock()


def parse(text: str) -> ast.Module:
    """ast.parse, one thread at a time."""
    with _PARSE_LOCK:
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


def _decorator_kind(dec: ast.expr) -> str | None:
    """'jit' for @triton.jit, 'tuner' for @triton.autotune(...) / @triton.heuristics(...), else None."""
    name = _dotted(dec.func if isinstance(dec, ast.Call) else dec)
    if name in ("triton.jit", "jit"):
        return "jit"
    if isinstance(dec, ast.Call) and name in ("triton.autotune", "autotune", "triton.heuristics", "heuristics"):
        return "tuner"
    return None


def _is_kernel_def(node: ast.FunctionDef) -> bool:
    kinds = [_decorator_kind(d) for d in node.decorator_list]
    return bool(kinds) and kinds[-1] == "jit" and all(k in ("jit", "tuner") for k in kinds)


# Values a learner may define for the autotuner (configs, keys): literals, triton.Config(...), range(...),
# comprehensions over them. Nothing else runs in the checking process.
_LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.comprehension,
                  ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.keyword, ast.Load, ast.Store,
                  ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Name, ast.Call, ast.Attribute,
                  ast.Starred)
_LITERAL_CALLS = {"triton.Config", "range", "dict", "list", "tuple", "zip"}


def literal_problems(expr: ast.AST) -> list[str]:
    """Why ``expr`` is not a plain configuration literal (empty when it is one)."""
    problems = []
    for node in ast.walk(expr):
        if not isinstance(node, _LITERAL_NODES):
            problems.append(f"`{type(node).__name__}` is not allowed in a configuration value")
        elif isinstance(node, ast.Call) and _dotted(node.func) not in _LITERAL_CALLS:
            problems.append(f"calling `{_dotted(node.func) or '?'}` is not allowed in a configuration value")
        elif isinstance(node, ast.Attribute) and _dotted(node) != "triton.Config":
            problems.append(f"`{_dotted(node)}` is not allowed in a configuration value")
    return problems


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
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
        src = textwrap.dedent("\n".join(lines[start - 1:node.end_lineno])) + "\n"
        if isinstance(node, ast.FunctionDef) and _is_kernel_def(node):
            found[node.name] = KernelSource(node.name, src, origin, free_names(node), "jit")
        elif isinstance(node, ast.FunctionDef):
            plain.add(node.name)
            if solution and not node.decorator_list:
                found[node.name] = KernelSource(node.name, src, origin, free_names(node), "function")
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


# Plain Python graded functions (phase 4) run in the checking process: they may use these modules and
# any builtin but these, and may not import, touch dunders or assign to module attributes.
FUNCTION_MODULES = {"math", "statistics", "torch", "triton", "tl"}
FORBIDDEN_BUILTINS = {"exec", "eval", "compile", "open", "__import__", "getattr", "setattr", "delattr",
                      "globals", "locals", "vars", "breakpoint", "input", "exit", "quit", "memoryview",
                      "object", "type", "super", "help", "dir"}


def _lint_function(fn: ast.FunctionDef, known: set[str]) -> list[str]:
    problems = []
    for node in ast.walk(fn):
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ClassDef, ast.Delete)):
            problems.append(f"line {node.lineno}: `{type(node).__name__}` is not allowed in a graded function "
                            "(the modules it may use are already imported: math, statistics, torch, triton)")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            problems.append(f"line {node.lineno}: attribute `{node.attr}` is not allowed in a graded function")
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            problems.append(f"line {node.lineno}: assigning to `{_dotted(node)}` is not allowed in a graded "
                            "function")
    for name in sorted(free_names(fn)):
        if name in FUNCTION_MODULES or name in known:
            continue
        if name in FORBIDDEN_BUILTINS or (name.startswith("_") and hasattr(builtins, name)):
            problems.append(f"the builtin `{name}` is not allowed in a graded function")
        elif not hasattr(builtins, name):
            problems.append(f"`{name}` is not defined for the function: define it inside the function, or "
                            "in the same solution cell")
    return problems


def _lint_jit(fn: ast.FunctionDef, known: set[str]) -> list[str]:
    problems = []
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call):
            for arg in list(dec.args) + [k.value for k in dec.keywords]:
                problems += [f"decorator: {p}" for p in literal_problems(arg)]
    names: set[str] = set()
    for stmt in fn.body:
        names |= free_names(stmt)
    bound = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    for stmt in fn.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
    if "NotImplementedError" in names:
        return ["the kernel is not written yet: replace `raise NotImplementedError()` with your code"]
    for stmt in fn.body:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.FunctionDef,) + DISALLOWED_NODES):
                problems.append(f"line {node.lineno}: `{type(node).__name__}` is not allowed inside a Triton kernel")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                problems.append(f"line {node.lineno}: attribute `{node.attr}` is not allowed inside a Triton kernel")
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                inner = node.value
                if isinstance(inner.value, ast.Name) and inner.value.id in ALLOWED_MODULES \
                        and inner.attr not in ALLOWED_SUBMODULES and inner.value.id != "triton":
                    problems.append(f"line {node.lineno}: `{inner.value.id}.{inner.attr}.{node.attr}` "
                                    "is not part of triton.language")
    for name in sorted(names - bound):
        if name in ALLOWED_MODULES or name in known or name in ALLOWED_BUILTINS:
            continue
        if hasattr(builtins, name):
            problems.append(f"the builtin `{name}` is not allowed inside a Triton kernel")
        else:
            problems.append(f"`{name}` is not defined for the kernel: a kernel may only use tl, other "
                            "@triton.jit functions, its arguments and constants")
    return problems


def lint_kernel(k: KernelSource, known: set[str]) -> list[str]:
    """Problems that stop a definition from being run by the grader (empty when it is fine)."""
    node = parse(k.source).body[0]
    if k.kind == "jit":
        return _lint_jit(node, known)
    if k.kind == "function":
        return _lint_function(node, known)
    return literal_problems(node.value)


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

    ``provided`` are names the test runner defines itself (never taken from the learner).
    """
    try:
        needed = free_names(parse(_strip_magics(test_source)))
    except SyntaxError as err:
        return Assembly("", [], [f"the test cell does not parse: {err}"])
    needed -= set(dir(builtins)) | set(provided) | ALLOWED_MODULES
    problems: list[str] = []
    order: list[str] = []

    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in order or name in stack:
            return
        k = kernels[name]
        for dep in sorted(k.calls):
            if dep in kernels:
                visit(dep, stack + (name,))
        order.append(name)

    for name in sorted(needed):
        if name in kernels and not (expected_kernel(name) and kernels[name].kind != "jit"):
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
    known = set(kernels)
    for name in order:
        for p in lint_kernel(kernels[name], known):
            problems.append(f"`{name}` ({kernels[name].cell}): {p}")
    source = "\n\n".join(kernels[n].source for n in order)
    return Assembly(source, order, problems)

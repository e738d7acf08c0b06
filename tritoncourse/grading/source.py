"""Taking a learner's kernels as source text: from a notebook file or from a live Jupyter namespace.

Only ``@triton.jit`` function definitions are taken (parsed, never run here), and each is linted:
a Triton kernel can only use ``tl``, other kernels, constants and a few builtins, so a kernel that
reaches for ``import``, ``__dunder__`` attributes or Python globals cannot tamper with the checks
that run beside it.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
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


@dataclass
class KernelSource:
    name: str
    source: str  # the decorated definition, dedented
    cell: str = ""  # where it came from (grade_id or cell number)
    calls: set[str] = field(default_factory=set)  # global names the body uses


def _is_jit_decorator(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(target, ast.Name):
        return target.id == "jit"
    if isinstance(target, ast.Attribute):
        return target.attr == "jit" and isinstance(target.value, ast.Name) and target.value.id == "triton"
    return False


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
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound


def _kernels_in_text(text: str, origin: str) -> tuple[dict[str, KernelSource], set[str]]:
    """(jit kernels defined at the top level of ``text``, names of plain functions defined there)."""
    try:
        tree = ast.parse(_strip_magics(text))
    except SyntaxError:
        return {}, set()
    kernels, plain = {}, set()
    lines = _strip_magics(text).splitlines()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        if node.decorator_list and all(_is_jit_decorator(d) for d in node.decorator_list):
            start = min(d.lineno for d in node.decorator_list)
            src = textwrap.dedent("\n".join(lines[start - 1:node.end_lineno])) + "\n"
            kernels[node.name] = KernelSource(node.name, src, origin, free_names(node))
        else:
            plain.add(node.name)
    return kernels, plain


def kernels_from_notebook(nb) -> tuple[dict[str, KernelSource], set[str]]:
    """All @triton.jit kernels of a notebook's code cells, solution cells winning over the others.

    Within each group a later definition wins, as it would when the notebook runs top to bottom.
    Returns (kernels by name, names of functions defined without @triton.jit).
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
            kernels, plain_names = _kernels_in_text(cell.source, origin)
            found.update(kernels)
            plain |= plain_names
    return found, plain - set(found)


def kernels_from_namespace(ns: dict) -> tuple[dict[str, KernelSource], set[str]]:
    """The @triton.jit kernels living in a Jupyter namespace, with their source from IPython's cells."""
    from ..checks import _kernel_types

    kinds = _kernel_types()
    found, plain = {}, set()
    for name, obj in list(ns.items()):
        if name.startswith("_"):
            continue
        if isinstance(obj, kinds):
            try:
                text = inspect.getsource(obj.fn)
            except (OSError, TypeError):
                continue
            kernels, _ = _kernels_in_text(textwrap.dedent(text), "this notebook")
            if obj.fn.__name__ in kernels:
                k = kernels[obj.fn.__name__]
                found[name] = KernelSource(name, k.source if name == k.name else
                                           k.source + f"{name} = {k.name}\n", k.cell, k.calls)
        elif inspect.isfunction(obj):
            plain.add(name)
    return found, plain


def lint_kernel(k: KernelSource, known: set[str]) -> list[str]:
    """Problems that stop a kernel from being run by the grader (empty when it is fine)."""
    problems = []
    tree = ast.parse(k.source)
    fn = tree.body[0]
    if "NotImplementedError" in free_names(fn):
        return ["the kernel is not written yet: replace `raise NotImplementedError()` with your code"]
    for node in ast.walk(fn):
        if node is not fn and isinstance(node, (ast.FunctionDef,) + DISALLOWED_NODES):
            problems.append(f"line {node.lineno}: `{type(node).__name__}` is not allowed inside a Triton kernel")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            problems.append(f"line {node.lineno}: attribute `{node.attr}` is not allowed inside a Triton kernel")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner = node.value
            if isinstance(inner.value, ast.Name) and inner.value.id in ALLOWED_MODULES \
                    and inner.attr not in ALLOWED_SUBMODULES and inner.value.id != "triton":
                problems.append(f"line {node.lineno}: `{inner.value.id}.{inner.attr}.{node.attr}` "
                                "is not part of triton.language")
    for name in sorted(free_names(fn)):
        if name in ALLOWED_MODULES or name in known or name in ALLOWED_BUILTINS:
            continue
        if hasattr(builtins, name):
            problems.append(f"the builtin `{name}` is not allowed inside a Triton kernel")
        else:
            problems.append(f"`{name}` is not defined for the kernel: a kernel may only use tl, other "
                            "@triton.jit functions, its arguments and constants")
    return problems


@dataclass
class Assembly:
    """The learner's kernels a test needs, as one source text, or the reasons they can't be given."""

    source: str
    kernels: list[str]
    problems: list[str]


def assemble(test_source: str, kernels: dict[str, KernelSource], plain: set[str],
             provided: set[str] = frozenset()) -> Assembly:
    """Pick the kernels ``test_source`` refers to, and the kernels those call, in dependency order.

    ``provided`` are names the test runner defines itself (never taken from the learner).
    """
    try:
        needed = free_names(ast.parse(_strip_magics(test_source)))
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
        if name in kernels:
            visit(name, ())
        elif name in plain:
            problems.append(f"`{name}` is defined without @triton.jit; the grader only runs Triton kernels. "
                            "Decorate it with @triton.jit.")
        else:
            problems.append(f"no @triton.jit function named `{name}` was found in the notebook "
                            "(did you rename or delete it?)")
    known = set(kernels)
    for name in order:
        for p in lint_kernel(kernels[name], known):
            problems.append(f"`{name}` ({kernels[name].cell}): {p}")
    source = "\n\n".join(kernels[n].source for n in order)
    return Assembly(source, order, problems)

"""The whitelist the lint (lint.py) checks against: which modules a learner's definition may reach, through
which paths, which attributes of values, and what a configuration value may be.

Paths are resolved for real: ``tl.x.y`` is looked up in the imported triton.language, so that what a name means
is what the grader's module will find, not what its spelling suggests.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import types
from collections.abc import Mapping
from dataclasses import dataclass

# Builtins a Triton kernel may call (the interpreter runs the body as Python; the compiler accepts these).
ALLOWED_BUILTINS = {"range", "min", "max", "int", "float", "bool", "len", "abs", "print", "isinstance",
                    "True", "False", "None", "tuple", "zip", "enumerate"}
NOT_WRITTEN = "the kernel is not written yet: replace `raise NotImplementedError()` with your code"
KERNEL = "inside a Triton kernel"
FUNCTION = "in a graded function"
LOADS_KERNEL = "it runs when the grader loads your kernel"
LOADS_FUNCTION = "it runs when the grader loads your code"


@dataclass(frozen=True)
class Modules:
    """Where attribute paths rooted at a module name may lead."""

    roots: dict  # name in the learner's code -> module it is
    path: frozenset  # modules a path may go through
    members: dict  # module -> None (any public member from Triton, math or the module) or the names allowed
    denied: frozenset = frozenset()  # dotted member names refused anyway
    words: str = ""  # what the learner may use, for messages


KERNEL_MODULES = Modules(
    roots={"tl": "triton.language", "triton": "triton", "math": "math"},
    path=frozenset({"triton", "triton.language", "triton.language.math", "triton.language.extra",
                    "triton.language.extra.cuda", "triton.language.extra.cuda.libdevice",
                    "triton.language.extra.libdevice", "math"}),
    members={"triton.language": None, "triton.language.math": None, "triton.language.extra.cuda.libdevice": None,
             "triton.language.extra.libdevice": None, "math": None},
    words="tl (triton.language), tl.math, tl.extra.cuda.libdevice and math")
FUNCTION_MODULES = Modules(
    roots={"torch": "torch", "math": "math", "statistics": "statistics", "triton": "triton",
           "tl": "triton.language"},
    path=frozenset({"torch", "torch.cuda", "torch.nn", "torch.nn.functional", "torch.linalg", "torch.special",
                    "torch.fft", "math", "statistics", "triton", "triton.language", "triton.language.math"}),
    members={"torch": None, "torch.cuda": None, "torch.nn.functional": None, "torch.linalg": None,
             "torch.special": None, "torch.fft": None, "math": None, "statistics": None,
             "triton.language": None, "triton.language.math": None,
             "triton": {"cdiv", "next_power_of_2", "Config"}},
    # reading, writing or mapping files, unpickling, compiling code
    denied=frozenset({"torch.load", "torch.save", "torch.from_file", "torch.compile"}),
    words="math, statistics, torch (with torch.cuda, torch.nn.functional, torch.linalg, torch.special, "
          "torch.fft), triton.cdiv, triton.next_power_of_2 and triton.language")
# Attributes a graded function may not use on any value: they read or write files or reach raw memory.
FUNCTION_DENIED_ATTRIBUTES = {"tofile", "fromfile", "from_file", "dump", "dumps", "load", "loads", "save", "ctypes"}
# Builtins a graded function may not use (it may use any other).
FORBIDDEN_BUILTINS = {"exec", "eval", "compile", "open", "__import__", "getattr", "setattr", "delattr",
                      "globals", "locals", "vars", "breakpoint", "input", "exit", "quit", "memoryview",
                      "object", "type", "super", "help", "dir"}
# Names the grader provides to a learner's definitions: the modules of the kernel header (isolated.KERNEL_HEADER)
# and of the judge's namespace (judge.py: the same, and DEVICE). No definition of the learner's, at the top level or
# inside a kernel or function, may take one of them, a builtin's or a dunder name (:func:`shadowing`): were it
# allowed, the lint's reading of a name (a module, a builtin, the learner's own value) and what the grader runs could
# differ, and the whitelist would no longer be what decides.
GRADER_NAMES = {"torch": "the module torch", "triton": "the module triton", "tl": "the module triton.language",
                "math": "the module math", "statistics": "the module statistics",
                "DEVICE": "the device the tests run on"}


def shadowing(name: str, provided=frozenset()) -> str | None:
    """Why a learner's definition cannot be called ``name`` (what the name already is), or None when it can.
    ``provided``: further names the grader defines where the definition runs."""
    if name in GRADER_NAMES:
        return f"a name the grader provides ({GRADER_NAMES[name]})"
    if name in provided:
        return "a name the grader provides"
    if name.startswith("__") and name.endswith("__"):
        return "a name Python itself defines"
    if hasattr(builtins, name):
        return "a builtin the grader forbids" if name in FORBIDDEN_BUILTINS else "a Python builtin"
    return None


# Builtin types an annotation of a graded function may name.
ANNOTATION_BUILTINS = {"int", "float", "complex", "str", "bool", "bytes", "list", "dict", "tuple", "set",
                       "frozenset"}


# Where a module's member may come from (its __module__): not from a module it merely imported.
_ORIGINS = {"triton", "torch", "math", "statistics", "builtins"}


def _module(name: str) -> types.ModuleType:
    return importlib.import_module(name)


_VALUE_ATTRIBUTES: set[str] | None = None


def kernel_value_attributes() -> set[str]:
    """The attributes a kernel may use on a value: the public ones of Triton's tensors, constexprs and dtypes
    (classes and instances), but not their compiler internals."""
    global _VALUE_ATTRIBUTES
    if _VALUE_ATTRIBUTES is None:
        tl = _module("triton.language")
        samples = [tl.tensor, tl.constexpr, tl.dtype, tl.pointer_type, tl.block_type, tl.float32,
                   tl.constexpr(1), tl.pointer_type(tl.float32), tl.block_type(tl.float32, [2]),
                   tl.tensor(None, tl.block_type(tl.float32, [2]))]
        names = {n for s in samples for n in dir(s) if not n.startswith("_")}
        _VALUE_ATTRIBUTES = names - {"handle", "to_ir"}
    return _VALUE_ATTRIBUTES


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def chain(node: ast.Attribute) -> tuple[ast.expr, list[str]]:
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return node, attrs[::-1]


def resolve(root: str, attrs: list[str], modules: Modules, where: str) -> tuple[str | None, int]:
    """Follow ``root.attrs...`` for real through the modules it names.

    Returns (why it is refused or None, how many of ``attrs`` were members of modules); the attributes after
    those are attributes of a value.
    """
    obj, path = _module(modules.roots[root]), root
    for i, attr in enumerate(attrs):
        if not isinstance(obj, types.ModuleType):
            return None, i
        full = f"{path}.{attr}"
        if attr.startswith("_"):
            return f"attribute `{attr}` is not allowed {where}", i
        here = obj.__name__
        found = attr in vars(obj) or here.startswith("triton")  # no lazy imports of torch's submodules
        try:
            nxt = getattr(obj, attr) if found else None
        except AttributeError:
            found = False
        if not found and where == KERNEL and not _submodule(obj, attr):
            return None, i + 1  # no such member: running it raises AttributeError, which the learner sees
        if not found:
            return _not_part(full, modules, where, f"`{full}` does not exist"), i
        if isinstance(nxt, types.ModuleType):
            if nxt.__name__ not in modules.path:
                return _not_part(full, modules, where, f"`{full}` is a module ({nxt.__name__}) that is not allowed"), i
        else:
            allowed = modules.members.get(here, False)  # None: every public member; a set: those
            origin = getattr(nxt, "__module__", None)
            foreign = isinstance(origin, str) and origin.split(".")[0] not in _ORIGINS
            if allowed is False or (allowed is not None and attr not in allowed) or foreign \
                    or f"{here}.{attr}" in modules.denied:
                return _not_part(full, modules, where, f"`{full}` is not allowed"), i
        obj, path = nxt, full
    if isinstance(obj, types.ModuleType):
        return (f"`{path}` is a module: use its members (`{path}.<name>`), never the module itself, so that no "
                f"variable can stand for a module"), len(attrs)
    return None, len(attrs)


def _submodule(module: types.ModuleType, attr: str) -> bool:
    """Whether ``module.attr`` could be a submodule not imported yet (one that appears once imported)."""
    if not hasattr(module, "__path__"):
        return False
    try:
        return importlib.util.find_spec(f"{module.__name__}.{attr}") is not None
    except (ImportError, ValueError):
        return True


def _not_part(full: str, modules: Modules, where: str, detail: str) -> str:
    if where == KERNEL:
        if full.startswith("triton.") and not full.startswith("triton.language"):
            return (f"`{full}` is not part of triton.language: inside a kernel `triton.` may only start "
                    "`triton.language.` (write `tl.`); the rest of `triton` is the host's API")
        if full.startswith("math."):
            return f"`{full}` is not a public function or constant of math"
        return (f"`{full}` is not part of triton.language as a kernel may use it ({detail}): use `tl.<name>`, "
                f"`tl.math.<name>` or `tl.extra.cuda.libdevice.<name>`")
    return f"{detail} {where}: a graded function may use {modules.words}"


def is_constant(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float, complex))
    if isinstance(node, ast.Tuple):
        return all(is_constant(e) for e in node.elts)
    return False


# Configuration values (autotune's configs and keys)
_LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.comprehension,
                  ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.keyword, ast.Load, ast.Store,
                  ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Name, ast.Call, ast.Attribute,
                  ast.Starred)
_LITERAL_CALLS = {"triton.Config", "range", "dict", "list", "tuple", "zip"}
CONFIG_KEYWORDS = {"kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg"}


def literal_problems(expr: ast.AST, values: Mapping[str, str] | set[str] | None = None) -> list[str]:
    """Why ``expr`` is not a plain configuration literal (empty when it is one).

    Names may be bound by a comprehension of ``expr`` or, when ``values`` is given, be one of those
    (configuration values defined in solution cells). With ``values`` None (when definitions are taken from
    a cell) only the shape is checked: names and triton.Config's keywords are checked by the lint.
    """
    problems = []
    # the names called (range, zip..., and `triton` of triton.Config): their calls are checked
    calls = {id(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
    calls |= {id(n.func.value) for n in ast.walk(expr) if isinstance(n, ast.Call) and dotted(n.func) == "triton.Config"}
    bound = {n.id for c in ast.walk(expr) if isinstance(c, ast.comprehension)
             for n in ast.walk(c.target) if isinstance(n, ast.Name)}
    for node in ast.walk(expr):
        line = f"line {node.lineno}: " if hasattr(node, "lineno") else ""
        if not isinstance(node, _LITERAL_NODES):
            problems.append(f"{line}`{type(node).__name__}` is not allowed in a configuration value")
        elif isinstance(node, ast.Call) and dotted(node.func) not in _LITERAL_CALLS:
            called = dotted(node.func) or ast.unparse(node.func)[:40]
            problems.append(f"{line}calling `{called}` is not allowed in a configuration value")
        elif isinstance(node, ast.Call) and dotted(node.func) == "triton.Config" and values is not None:
            for kw in node.keywords:
                if kw.arg not in CONFIG_KEYWORDS:
                    problems.append(f"{line}`triton.Config(..., {kw.arg or '**'}=...)` is not allowed: a "
                                    f"configuration may set only {', '.join(sorted(CONFIG_KEYWORDS - {'kwargs'}))}")
            if len(node.args) > 1:
                problems.append(f"{line}`triton.Config` takes one dict of meta-parameters, then keywords")
        elif isinstance(node, ast.Attribute) and dotted(node) != "triton.Config":
            problems.append(f"{line}`{dotted(node) or node.attr}` is not allowed in a configuration value")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and values is not None \
                and node.id not in bound and id(node) not in calls and not _is_value(node.id, values):
            problems.append(f"{line}`{node.id}` is not a configuration value of your solution cells: a "
                            "configuration may only use literals, triton.Config(...), range, zip and the lists, "
                            "dicts and numbers defined in a solution cell")
    return problems


def _is_value(name: str, values) -> bool:
    return (values.get(name) == "value") if isinstance(values, Mapping) else name in values

"""The lint: what a learner's definition may name before the grader writes it into the module it loads.

A whitelist over the whole definition (issue 31), since the module runs its decorators, defaults and
annotations when it is loaded, and Triton's interpreter runs a kernel's body as Python:

- a ``@triton.jit`` kernel: the decorator is exactly ``@triton.jit`` (literal keyword arguments), under at
  most ``@triton.autotune(...)`` whose arguments are configuration literals; defaults are constants;
  annotations name members of triton.language; the body may use only its arguments and locals, other
  kernels, configuration values, ``tl`` (and the documented ``tl.math`` / libdevice), ``math`` and a few
  builtins, every ``tl.``/``math.`` path resolved for real to a public member that is not a module, and
  on other values only the attributes of Triton's tensors, constexprs and dtypes;
- a graded Python function: no decorator, constant defaults, inert annotations, and a body that cannot
  import, touch dunders, assign to attributes, or reach a module other than math, statistics, torch
  (and a few of its numeric submodules) and triton.language;
- a configuration value: literals, ``triton.Config(...)`` with literal arguments, ``range``/``zip``,
  comprehensions over them, and other configuration values.
"""
from __future__ import annotations

import ast
import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field

from .whitelist import (ALLOWED_BUILTINS, ANNOTATION_BUILTINS, FORBIDDEN_BUILTINS, FUNCTION,  # noqa: F401
                        FUNCTION_DENIED_ATTRIBUTES, FUNCTION_MODULES, KERNEL, KERNEL_MODULES, LOADS_FUNCTION,
                        LOADS_KERNEL, NOT_WRITTEN, chain, dotted, is_constant, kernel_value_attributes,
                        literal_problems, resolve, shadowing)


def _arguments(fn: ast.FunctionDef) -> list[ast.arg]:
    a = fn.args
    return a.posonlyargs + a.args + ([a.vararg] if a.vararg else []) + a.kwonlyargs + ([a.kwarg] if a.kwarg else [])


def _defaults(fn: ast.FunctionDef) -> list[tuple[ast.arg, ast.expr]]:
    a = fn.args
    positional = a.posonlyargs + a.args
    pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
    return pairs + [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]


# ---- Triton kernels ----

@dataclass
class _Lint:
    where: str
    modules: Modules
    known: Mapping[str, str]
    bound: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    _seen: set = field(default_factory=set)

    def add(self, node: ast.AST, text: str, key=None) -> None:
        key = key or text
        if key not in self._seen:
            self._seen.add(key)
            self.problems.append(f"line {node.lineno}: {text}")

    # statements of a kernel's body
    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Expr):
            self.expr(s.value)
        elif isinstance(s, ast.Assign):
            for t in s.targets:
                self.target(t)
            self.expr(s.value)
        elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
            self.target(s.target)
            if isinstance(s, ast.AnnAssign):
                self.annotation(s.annotation, f"the annotation of `{dotted(s.target) or '...'}`")
            if s.value is not None:
                self.expr(s.value)
        elif isinstance(s, ast.Return):
            if s.value is not None:
                self.expr(s.value)
        elif isinstance(s, (ast.If, ast.While)):
            self.expr(s.test)
            self.block(s.body + s.orelse)
        elif isinstance(s, ast.For):
            self.target(s.target)
            self.expr(s.iter)
            self.block(s.body + s.orelse)
        elif isinstance(s, ast.Assert):
            self.expr(s.test)
            if s.msg is not None:
                self.expr(s.msg)
        elif not isinstance(s, (ast.Pass, ast.Break, ast.Continue)):
            self.refuse(s)

    def block(self, body: list[ast.stmt]) -> None:
        for s in body:
            self.stmt(s)

    def refuse(self, node: ast.AST) -> None:
        self.add(node, f"`{type(node).__name__}` is not allowed {self.where}")

    def target(self, t: ast.expr) -> None:
        if isinstance(t, ast.Name):
            why = shadowing(t.id) or ("the name of one of your kernels" if self.known.get(t.id) == "jit" else None)
            if why:
                self.add(t, f"`{t.id}` cannot be assigned {self.where}: it is {why}; rename your variable")
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self.target(e)
        elif isinstance(t, ast.Starred):
            self.target(t.value)
        elif isinstance(t, ast.Attribute):
            self.add(t, f"assigning to `{dotted(t) or t.attr}` is not allowed {self.where}")
        elif isinstance(t, ast.Subscript):
            self.add(t, f"assigning to an element (`{dotted(t.value) or '...'}[...]`) is not allowed {self.where}")
        else:
            self.refuse(t)

    # expressions of a kernel's body
    def expr(self, e: ast.expr) -> None:
        if isinstance(e, ast.Name):
            self.name(e)
        elif isinstance(e, ast.Attribute):
            self.attribute(e)
        elif isinstance(e, ast.Constant):
            pass
        elif isinstance(e, (ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Call, ast.Subscript,
                            ast.Slice, ast.List, ast.Tuple, ast.Starred, ast.JoinedStr, ast.FormattedValue)):
            for child in ast.iter_child_nodes(e):
                if isinstance(child, ast.keyword):
                    self.expr(child.value)
                elif isinstance(child, ast.expr):
                    self.expr(child)
        else:
            self.refuse(e)

    def name(self, e: ast.Name) -> None:
        n = e.id
        if not isinstance(e.ctx, ast.Load):
            self.target(e)
        elif n in self.bound:
            pass
        elif n in self.modules.roots:
            self.add(e, f"`{n}` is a module: use its members (`{n}.<name>`), never the module itself, so that no "
                        "variable can stand for a module", key=("module", n))
        elif self.known.get(n) in ("jit", "value"):
            pass
        elif self.known.get(n) == "function":
            self.add(e, f"`{n}` is a plain Python function: a kernel may only call other @triton.jit functions",
                     key=("name", n))
        elif n in ALLOWED_BUILTINS:
            pass
        elif hasattr(builtins, n):
            self.add(e, f"the builtin `{n}` is not allowed {self.where}", key=("name", n))
        else:
            self.add(e, f"`{n}` is not defined for the kernel: a kernel may only use tl, other @triton.jit "
                        "functions, its arguments and constants", key=("name", n))

    def attribute(self, e: ast.Attribute) -> None:
        if not isinstance(e.ctx, ast.Load):
            self.target(e)
            return
        base, attrs = chain(e)
        if isinstance(base, ast.Name) and base.id in self.modules.roots and base.id not in self.bound:
            problem, used = resolve(base.id, attrs, self.modules, self.where)
            if problem:
                self.add(e, problem)
                return
            attrs = attrs[used:]
        elif isinstance(base, ast.Name) and base.id not in self.bound and self.known.get(base.id) == "value":
            self.add(e, f"`{base.id}.{attrs[0]}`: a kernel may read a configuration value, not use its attributes")
            return
        else:
            before = len(self.problems)
            self.expr(base)
            if len(self.problems) > before:
                return  # the value is refused already: its attributes would only repeat it
        for attr in attrs:
            if attr.startswith("_"):
                self.add(e, f"attribute `{attr}` is not allowed {self.where}")
                return
            if attr not in kernel_value_attributes():
                self.add(e, f"`.{attr}` is not an attribute of a Triton tensor, constexpr or dtype: on a value, a "
                            "kernel may only use those (`x.to(...)`, `x.dtype`, `x.shape`, `c.value`...)")
                return

    def annotation(self, a: ast.expr, what: str) -> None:
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            return
        base, attrs = chain(a) if isinstance(a, ast.Attribute) else (a, [])
        if isinstance(base, ast.Name) and base.id in ("tl", "triton") and attrs:
            problem, used = resolve(base.id, attrs, self.modules, self.where)
            if problem is None and used == len(attrs):
                return
        self.add(a, f"{what} may only be a member of triton.language such as `tl.constexpr` (or a string): "
                    f"{LOADS_KERNEL}")


def _lint_jit_decorators(fn: ast.FunctionDef, lint: _Lint) -> None:
    """Exactly `@triton.jit` (literal keywords) right above `def`, under at most `@triton.autotune(...)`."""
    for i, dec in enumerate(fn.decorator_list):
        name = dotted(dec.func if isinstance(dec, ast.Call) else dec) or ast.unparse(dec)[:40]
        last = i == len(fn.decorator_list) - 1
        if name == "triton.jit" and last:
            if isinstance(dec, ast.Call) and dec.args:
                lint.add(dec, "`@triton.jit(...)` takes only keyword arguments")
            for kw in getattr(dec, "keywords", []):
                _decorator_literal(kw.value, lint, f"`@triton.jit({kw.arg or '**'}=...)`")
        elif name == "triton.jit":
            lint.add(dec, "`@triton.jit` must be the last decorator, right above `def`")
        elif last:
            lint.add(dec, f"write the decorator right above `def` as `@triton.jit` (found `@{name}`)")
        elif name in ("triton.heuristics", "heuristics"):
            lint.add(dec, "`@triton.heuristics` is not supported by the grader (its functions would run when "
                          "the grader loads your kernel): compute the value in the kernel, or autotune it")
        elif name != "triton.autotune" or not isinstance(dec, ast.Call):
            lint.add(dec, f"`@{name}` is not allowed on a kernel: only `@triton.autotune(configs=..., key=[...])` "
                          "may come above `@triton.jit`")
        else:
            for arg in dec.args:
                _decorator_literal(arg, lint, "an argument of `@triton.autotune`")
            for kw in dec.keywords:
                _decorator_literal(kw.value, lint, f"`@triton.autotune({kw.arg or '**'}=...)`")


def _decorator_literal(expr: ast.expr, lint: _Lint, what: str) -> None:
    for p in literal_problems(expr, lint.known):
        lint.problems.append(f"{p} ({what}: {LOADS_KERNEL})")


def _lint_signature(fn: ast.FunctionDef, lint: _Lint, kernel: bool) -> None:
    loads = LOADS_KERNEL if kernel else LOADS_FUNCTION
    for arg in _arguments(fn):
        if kernel and shadowing(arg.arg):
            lint.add(arg, f"an argument cannot be called `{arg.arg}`: it is {shadowing(arg.arg)}; rename it")
        if arg.annotation is not None:
            if kernel:
                lint.annotation(arg.annotation, f"the annotation of `{arg.arg}`")
            elif not _inert_annotation(arg.annotation, lint):
                lint.add(arg, f"the annotation of `{arg.arg}` must be a type (`int`, `float`, `torch.Tensor`...) or a "
                              f"string: {loads}")
    if fn.returns is not None:
        if kernel:
            lint.annotation(fn.returns, "the return annotation")
        elif not _inert_annotation(fn.returns, lint):
            lint.add(fn.returns, f"the return annotation must be a type (`float`, `torch.Tensor`...) or a string: "
                                 f"{loads}")
    for arg, default in _defaults(fn):
        if is_constant(default) or (not kernel and isinstance(default, ast.Name)
                                     and lint.known.get(default.id) == "value"):
            continue
        what = "a constant (a number, a string, True, False or None)" if kernel else \
            "a constant (a number, a string, True, False, None) or a configuration value of a solution cell"
        lint.add(default, f"the default value of `{arg.arg}` must be {what}: {loads}")


def _inert_annotation(a: ast.expr, lint: _Lint) -> bool:
    """A graded function's annotation: a string, None, a builtin type, a member of an allowed module, or
    generics of those (`list[float]`, `float | None`)."""
    if isinstance(a, ast.Constant):
        return a.value is None or a.value is Ellipsis or isinstance(a.value, str)
    if isinstance(a, ast.Name):
        return a.id in ANNOTATION_BUILTINS
    if isinstance(a, ast.Attribute):
        base, attrs = chain(a)
        if isinstance(base, ast.Name) and base.id in FUNCTION_MODULES.roots:
            problem, used = resolve(base.id, attrs, FUNCTION_MODULES, FUNCTION)
            return problem is None and used == len(attrs)
        return False
    if isinstance(a, ast.Subscript):
        return _inert_annotation(a.value, lint) and _inert_annotation(a.slice, lint)
    if isinstance(a, (ast.Tuple, ast.List)):
        return all(_inert_annotation(e, lint) for e in a.elts)
    if isinstance(a, ast.BinOp) and isinstance(a.op, ast.BitOr):
        return _inert_annotation(a.left, lint) and _inert_annotation(a.right, lint)
    return False


def lint_jit(fn: ast.FunctionDef, known: Mapping[str, str]) -> list[str]:
    """Problems of a @triton.jit kernel (with its decorators): empty when the grader may load it."""
    if any(isinstance(n, ast.Name) and n.id == "NotImplementedError" for s in fn.body for n in ast.walk(s)):
        return [NOT_WRITTEN]
    lint = _Lint(KERNEL, KERNEL_MODULES, known)
    lint.bound = {a.arg for a in _arguments(fn)} | {
        n.id for s in fn.body for n in ast.walk(s) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    lint.bound -= set(KERNEL_MODULES.roots)
    _lint_jit_decorators(fn, lint)
    _lint_signature(fn, lint, kernel=True)
    lint.block(fn.body)
    # line by line; on a line, a name that is not defined first: it is the cause of what follows
    line = lambda p: int(p.split(":")[0].split()[1]) if p.startswith("line ") else 0  # noqa: E731
    return sorted(lint.problems, key=lambda p: (line(p), "is not defined" not in p and "builtin" not in p))


# ---- plain graded Python functions ----

def lint_function(fn: ast.FunctionDef, known: Mapping[str, str]) -> list[str]:
    """Problems of a plain graded function (phases 4 and 5): empty when the grader may load and call it."""
    lint = _Lint(FUNCTION, FUNCTION_MODULES, known)
    for dec in fn.decorator_list:
        lint.add(dec, f"a graded function cannot have a decorator (`@{dotted(getattr(dec, 'func', dec)) or '...'}`): "
                      f"{LOADS_FUNCTION}; write a plain `def`")
    _lint_signature(fn, lint, kernel=False)
    problems = lint.problems
    # A module's, a builtin's or a name the grader provides is never a name of the learner's own, in any scope: so
    # each use of it below means the module or the builtin, whatever nested lambda or comprehension it is in.
    for node, name in _bindings(fn):
        why = shadowing(name)
        if why:
            lint.add(node, f"`{name}` cannot name a variable or an argument in a graded function: it is {why}; "
                           "rename it")
    free = _free_names(fn)
    inner = {id(n.value) for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
    for node in ast.walk(fn):
        if node in fn.decorator_list:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ClassDef, ast.Delete)):
            problems.append(f"line {node.lineno}: `{type(node).__name__}` is not allowed in a graded function "
                            "(the modules it may use are already imported: math, statistics, torch, triton)")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            problems.append(f"line {node.lineno}: attribute `{node.attr}` is not allowed in a graded function")
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            problems.append(f"line {node.lineno}: assigning to `{dotted(node)}` is not allowed in a graded "
                            "function")
        elif isinstance(node, ast.Attribute) and node.attr in FUNCTION_DENIED_ATTRIBUTES:
            problems.append(f"line {node.lineno}: `.{node.attr}` is not allowed in a graded function: it reads or "
                            "writes files or raw memory")
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            base, attrs = chain(node)
            if isinstance(base, ast.Name) and base.id in FUNCTION_MODULES.roots:
                problem, _ = resolve(base.id, attrs, FUNCTION_MODULES, FUNCTION)
                if problem:
                    problems.append(f"line {node.lineno}: {problem}")
        elif isinstance(node, ast.Name) and node.id in FUNCTION_MODULES.roots \
                and isinstance(node.ctx, ast.Load) and id(node) not in inner:
            problems.append(f"line {node.lineno}: `{node.id}` is a module: use its members (`{node.id}.<name>`), "
                            "never the module itself, so that no variable can stand for a module")
    loaded = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for name in sorted(loaded):
        if _forbidden_builtin(name):
            problems.append(f"the builtin `{name}` is not allowed in a graded function")
    for name in sorted(free - set(FUNCTION_MODULES.roots) - set(known)):
        if not hasattr(builtins, name):
            problems.append(f"`{name}` is not defined for the function: define it inside the function, or "
                            "in the same solution cell")
    return problems


def _forbidden_builtin(name: str) -> bool:
    return name in FORBIDDEN_BUILTINS or (name.startswith("_") and hasattr(builtins, name))


def _bindings(fn: ast.FunctionDef):
    """(node, name) for every name the function binds in any of its scopes: arguments (its own, nested
    functions' and lambdas'), assignment, loop and comprehension targets, nested functions, exception names."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            yield node, node.id
        elif isinstance(node, ast.arg):
            yield node, node.arg
        elif isinstance(node, ast.FunctionDef) and node is not fn:
            yield node, node.name
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node, node.name


def _free_names(fn: ast.FunctionDef) -> set[str]:
    """Names the function reads that neither it nor its nested functions bind (an approximation of Python's
    scopes, used only to say which names are not defined)."""
    loaded, bound = set(), {a.arg for a in _arguments(fn)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fn:
            bound |= {a.arg for a in _arguments(node)}
            if isinstance(node, ast.FunctionDef):
                bound.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):  # refused, but what they bind is not undefined
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return loaded - bound


def lint_value(node: ast.Assign, known: Mapping[str, str]) -> list[str]:
    """Problems of a configuration value (``NAME = literal``)."""
    others = {n: k for n, k in known.items() if n != node.targets[0].id}
    return literal_problems(node.value, others)

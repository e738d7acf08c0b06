"""Device set-up: decide once whether kernels run compiled on an NVIDIA GPU or on Triton's interpreter.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, not at import, so
:func:`setup_device` must run before the first kernel is defined (the first cell of every notebook).
"""
from __future__ import annotations

import contextlib
import gc
import os
import warnings

_TRUTHY = {"1", "true", "yes", "on"}


def interpreter_requested() -> bool:
    """True when TRITON_INTERPRET asks for Triton's CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in _TRUTHY


def infer_device() -> str:
    """'cuda' when kernels will be compiled for a GPU, 'cpu' when they run on the interpreter."""
    if interpreter_requested() or not _gpu_device_nodes():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _gpu_device_nodes() -> bool:
    """Whether this machine shows a device node CUDA could use (NVIDIA's on Linux, /dev/dxg under WSL 2). Without
    one torch.cuda.is_available() is False, so the grader's processes learn "cpu" without importing torch (a second
    of CPU in each)."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/dxg")


def setup_device() -> str:
    """Turn the interpreter on when there is no GPU, and return the device tensors should live on.

    On the interpreter numpy evaluates masked-off lanes too, which can raise harmless
    overflow / invalid-value warnings; they are silenced so they never look like errors.
    """
    with imports_without_gc():
        device = infer_device()
        if device == "cpu":
            os.environ["TRITON_INTERPRET"] = "1"  # before triton.language makes its own @jit functions
        import torch  # noqa: F401  (what every notebook imports next, here without the collector)
        import triton.language  # noqa: F401
    if device == "cpu":
        import numpy as np

        np.seterr(all="ignore")
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        _skip_discarded_overflow_checks()
        _list_language_builtins_once()
    return device


@contextlib.contextmanager
def imports_without_gc():
    """The cyclic garbage collector off while torch and triton are imported: they make about a million objects,
    none of them garbage, which it would scan as they come (a sixth of the imports' CPU: 1.8 -> 1.5 s, 2026-11-29;
    every notebook's kernel and every grading process imports them)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _skip_discarded_overflow_checks() -> None:
    """Spare the interpreter work whose result it throws away.

    Triton's interpreter (3.6) computes an overflow check for every 32-bit integer add, sub and mul
    (InterpreterOptions.sanitize_overflow, on by default: the operands cast to int64, the operation, two
    comparisons), then hands it to device_assert, which drops it unless the options' ``debug`` is on. Outside
    debug mode, turning it off changes nothing a kernel computes or raises; it is about a fifth of the CPU time of a
    phase-1 check (1.87 s instead of 2.41 s for the 2**20-element test, 2026-11-26).
    """
    try:
        import dataclasses

        from triton.runtime import interpreter
    except Exception:  # another Triton: leave it as it is
        return
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or getattr(options, "debug", True) or not getattr(options, "sanitize_overflow", False):
        return
    try:
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    except (TypeError, ValueError):
        pass


def _list_language_builtins_once() -> None:
    """Spare the interpreter a search it repeats on every launch and every call of a ``@triton.jit`` helper.

    Before each launch, and again inside each call of a jitted helper from a kernel, Triton's interpreter (3.6)
    looks for the builtins of ``triton.language`` (and of ``tl.tensor``, ``tl.math``, ``tensor_descriptor_base``)
    to wrap them: ``inspect.getmembers`` over each (``dir``, a ``getattr`` of every name, a sort), hundreds of names,
    four times a call. A kernel whose loop calls a helper pays it in every program at every step: about a third of
    the CPU of phase 6's attention checks (0.84 -> 0.55 s, 2026-11-26); each phase's kernel tests as grading runs
    them (the source's, one at a time in the sandbox): phase 6 5.5 -> 4.5 s, phase 2 3.0 -> 2.4 s, phase 5 3.0 -> 2.5 s,
    phases 1 and 3 6% less, phase 4 the same. The names of those builtins are listed once
    per module or class, at its first search; each search then looks up only those names and wraps the ones that
    are builtins now, as before (inside a launch, already wrapped, they are left alone, as before). What a kernel
    computes, raises or leaves patched after a launch is unchanged (tests/units/test_device.py). Code that adds a new
    builtin to ``triton.language`` after the first launch would not see it wrapped (no kernel of the course does).
    """
    try:
        import inspect

        import triton.language as tl
        from triton.runtime import interpreter
    except Exception:  # another Triton: leave it as it is
        return
    original = getattr(interpreter, "_patch_builtin", None)
    patch_attr = getattr(interpreter, "_patch_attr", None)
    is_builtin = getattr(getattr(tl, "core", None), "is_builtin", None)
    if original is None or patch_attr is None or is_builtin is None or getattr(original, "_tritoncourse", False):
        return
    try:
        if list(inspect.signature(original).parameters) != ["pkg", "builder", "scope"]:
            return
    except (TypeError, ValueError):
        return
    names: dict[int, tuple[object, list[str]]] = {}

    def _patch_builtin(pkg, builder, scope):
        known = names.get(id(pkg))
        if known is None or known[0] is not pkg:
            known = names[id(pkg)] = (pkg, [name for name, member in inspect.getmembers(pkg) if is_builtin(member)])
        for name in known[1]:
            member = getattr(pkg, name, None)
            if is_builtin(member):
                patch_attr(pkg, name, member, builder, scope)

    _patch_builtin._tritoncourse = True
    interpreter._patch_builtin = _patch_builtin


def gpu_name() -> str | None:
    """The GPU's name, or None on the interpreter."""
    if infer_device() != "cuda":
        return None
    import torch

    return torch.cuda.get_device_name()


def describe_device() -> str:
    """One line for the top of a notebook: where kernels run and with which versions."""
    import torch
    import triton

    if infer_device() == "cuda":
        where = f"compiled on {gpu_name()}"
    else:
        where = "Triton's CPU interpreter (TRITON_INTERPRET=1): everything but timing works"
    return f"Kernels run {where}; torch {torch.__version__}, triton {triton.__version__}."

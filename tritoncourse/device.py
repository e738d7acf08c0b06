"""Device set-up: decide once whether kernels run compiled on an NVIDIA GPU or on Triton's interpreter.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, not at import, so
:func:`setup_device` must run before the first kernel is defined (the first cell of every notebook).
"""
from __future__ import annotations

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
    device = infer_device()
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        import numpy as np

        np.seterr(all="ignore")
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        _skip_discarded_overflow_checks()
    return device


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

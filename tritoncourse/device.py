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
    if interpreter_requested():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


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
    return device


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

"""Phase 7: ``torch.autograd.gradcheck`` of ``AttentionFunction`` on the learner's kernels.

The other checks hold the gradients against PyTorch's (an fp64 autograd of naive attention, SDPA's block); this one
holds the backward against the learner's own forward: are dQ, dK and dV the derivatives of the O that the forward
kernel computes? gradcheck's fast mode draws a random direction u for each input and a random w for O, and compares
w · (O(x + εu) − O(x − εu)) / 2ε, central differences of the forward kernel, with (w · J) · u from the backward
kernels: one number per input, no SDPA anywhere.

On Triton's interpreter only. The kernels accumulate in fp32 by their contract, so the check runs fp32 inputs with a
step ε of 1e-2 (at gradcheck's float64 default of 1e-6 the differences would measure fp32 rounding, not a gradient;
tolerances.GRADCHECK says what was measured). On a GPU, where fp32 tl.dot rounds its inputs to tf32 (about 1e-3
relative), the differences would measure that rounding instead: the check says so and returns, and the test's other
cases compare the gradients with fp64 autograd there.
"""
from __future__ import annotations

import contextlib
import re
import sys
import warnings

import torch
from torch.autograd.gradcheck import GradcheckError

from ...checking import Case, KernelCheckError, fresh_seed, generator, shown, stage
from ...device import infer_device
from ...tolerances import GRADCHECK, GRADCHECK_EPS
from .training import AttentionFunction, Kernels

INPUTS = ("dQ", "dK", "dV")
_gradcheck = sys.modules["torch.autograd.gradcheck"]  # the module (torch.autograd.gradcheck is its function)


def _mismatch(err: Exception) -> tuple[str, str]:
    """(the gradient gradcheck found wrong, its numbers) from a GradcheckError's text."""
    text = str(err)
    found = re.search(r"with respect to input (\d+)", text)
    which = INPUTS[int(found.group(1))] if found and int(found.group(1)) < 3 else "a gradient"
    numbers = re.search(r"numerical:\s*([-+.\deE]+)\s*analytical:\s*([-+.\deE]+)", text)
    detail = (f" (along gradcheck's directions, finite differences of your forward give {float(numbers.group(1)):.4g}, "
              f"your backward {float(numbers.group(2)):.4g})" if numbers else "")
    return which, detail


@contextlib.contextmanager
def _no_slow_mode():
    """gradcheck's fast mode, on a mismatch, recomputes both Jacobians element by element for its message: thousands
    of launches (minutes on the interpreter). The check needs the fast numbers only: that recomputation says nothing."""
    slow = getattr(_gradcheck, "_run_slow_mode_and_get_error", None)
    if slow is None:  # another torch: its message as it comes
        yield
        return
    _gradcheck._run_slow_mode_and_get_error = lambda *args, **kwargs: ""
    try:
        yield
    finally:
        _gradcheck._run_slow_mode_and_get_error = slow


def check_attention_gradcheck(forward, preprocess, dkdv, dq, *, batch: int = 1, heads: int = 2, seq_len: int,
                              head_dim: int = 16, causal: bool = False, dq_mode: str = "kernel",
                              seed: int | None = None) -> None:
    """``torch.autograd.gradcheck(AttentionFunction.apply, (q, k, v), fast_mode=True)`` on the learner's kernels, fp32,
    tolerances.GRADCHECK_EPS and GRADCHECK: each of dQ, dK, dV against central differences of the forward kernel's O."""
    kern = Kernels(forward, preprocess, dkdv, dq, dq_mode)
    seed = fresh_seed() if seed is None else seed
    kern.context = Case(f"gradcheck, batch={batch}, heads={heads}, seq_len={seq_len}, HEAD_DIM={head_dim}, "
                        f"{'causal' if causal else 'not causal'}, float32, dQ by {dq_mode}, seed {seed}",
                        "gradcheck", "causal" if causal else "not causal", f"dQ by {dq_mode}")
    if infer_device() != "cpu":
        stage(f"gradcheck skipped on a GPU: tf32 products ({kern.context})")
        print("gradcheck runs on Triton's interpreter only: on a GPU fp32 tl.dot rounds to tf32, about 1e-3 "
              "relative, which finite differences cannot see past.")
        return
    g = generator(seed)
    q, k, v = (torch.randn(batch, heads, seq_len, head_dim, generator=g).requires_grad_() for _ in range(3))
    scale = head_dim**-0.5
    stage(f"running torch.autograd.gradcheck ({kern.context})")
    try:
        with _no_slow_mode(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Input #", UserWarning)  # not double precision: fp32 on purpose
            torch.autograd.gradcheck(lambda a, b, c: AttentionFunction.apply(a, b, c, causal, scale, kern), (q, k, v),
                                     eps=GRADCHECK_EPS, atol=GRADCHECK.atol, rtol=GRADCHECK.rtol, fast_mode=True,
                                     check_undefined_grad=False)
    except GradcheckError as err:
        if "Jacobian mismatch" not in str(err):  # not reentrant, a wrong shape or dtype: torch's own words
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise KernelCheckError(
                f"gradcheck failed ({kern.context}){shown(': ' + first, '')}.\nLikely cause: the backward returns "
                "gradients of another shape or dtype than Q, K, V, or different values on two runs of the same "
                "inputs.") from None
        which, numbers = _mismatch(err)
        raise KernelCheckError(
            f"gradcheck failed ({kern.context}): {which} is not the derivative of the O your forward kernel "
            f"computes{shown(numbers, '')}.\nLikely cause: the backward's formula, not rounding (fp32, steps of "
            f"{GRADCHECK_EPS:g}): a missing D term, a scale (sm_scale, log2 e) applied on one side only, or a mask "
            "that differs from the forward's. The kernels' own tests above name the kernel.") from None
    stage("done")


__all__ = ["check_attention_gradcheck"]

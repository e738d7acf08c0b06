"""Phase 3: checks for ``triton_matmul_relu_kernel``: C = relu(A @ B), fp16 in and out, fp32 inside.

Each check launches the learner's kernel the way the notebook's wrapper does (a 2-D grid of
``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))`` programs) on fresh random fp16 inputs:

1. A and B sit inside NaN guards: a load that strays outside them (an unmasked K tail, rows past M,
   columns past N) reads NaN, and since 0 · NaN = NaN even a masked-to-zero partner cannot hide it;
2. C sits inside a guard of sentinels and starts out filled with another sentinel, so a stray store
   and an element never written are told apart from a wrong value;
3. A and B must be unchanged; the values must match an fp32 reference within :data:`TOLERANCE`;
4. on the interpreter, A and B are then stored so that they end exactly where an unreadable page
   begins (an electric fence), and the kernel runs again: an unmasked load crashes even when its
   values are never stored.

Layouts ("contiguous", "padded", "transposed") put each matrix in a different memory layout: the
kernel must follow the stride arguments. On a failure the message names the likely cause, found by
comparing the output with what known mistakes would have produced on the same inputs.

The inputs, layouts and reference are :mod:`.inputs`'s, the replayed mistakes and their causes
:mod:`.diagnosis`'s; this module launches and checks, and re-exports both.
"""
from __future__ import annotations

import torch
import triton

from ...checking import (Case, KernelCheckError, compare, fence_supported, fresh_seed, shown, size_kind, stage,
                         tiles_kind)
from ...device import infer_device
from ..common.launch import BOUNDARY_CHECK_HINT, explain_launch_error, launch, require_triton_kernel
from .diagnosis import _one_d_mapping_unwritten, _stride_hint, _swapped_ids_unwritten, diagnose
from .inputs import (LAYOUTS, MIN_BLOCK, NAME, PATTERNS, SIGNATURE, TOLERANCE, UNWRITTEN, _fenced, _linear,
                     _pad, _place, _place_output, _relu_in_loop, _where, dropped_k_output, make_inputs,
                     matmul_relu_ref, tolerance_catches)


# ------------------------------------------------------------------------------------------ launching
def run_matmul_relu(kernel, a, b, c, block_m: int, block_n: int, block_k: int, *, context: str,
                    device: str, fence_stage: str | None = None) -> None:
    """Launch ``kernel`` the way the notebook's wrapper does: a 2-D grid of output tiles.

    ``fence_stage``: the stage to record instead of the plain "running ..." one (a crash during a fenced
    run is then explained as an unmasked load).
    """
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    kwargs = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k}
    if fence_stage is None:
        launch(kernel, grid, args, kwargs, name=NAME, signature=SIGNATURE, context=context, device=device)
        return
    stage(fence_stage)  # launch() would overwrite it with "running ..."
    try:
        kernel[grid](*args, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as err:  # the learner's kernel may raise anything
        raise explain_launch_error(err, NAME, SIGNATURE, context) from None


# ---------------------------------------------------------------------------------------------- check
def check_matmul_relu(kernel, M: int, N: int, K: int, block_m: int = 32, block_n: int = 32,
                      block_k: int = 32, *, layout_a: str = "contiguous", layout_b: str = "contiguous",
                      layout_c: str = "contiguous", pattern: str = "random", seed: int | None = None) -> None:
    """Launch ``kernel`` on fresh random fp16 A (M x K) and B (K x N) and check C = relu(A @ B).

    Raises :class:`KernelCheckError` with a message for the learner on the first problem found.
    """
    require_triton_kernel(kernel, NAME)
    for label, value in (("BLOCK_M", block_m), ("BLOCK_N", block_n), ("BLOCK_K", block_k)):
        if value < MIN_BLOCK or value & (value - 1):
            raise ValueError(f"{label} = {value}: tests use powers of two >= {MIN_BLOCK} (tl.dot on a GPU)")
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    a, b = make_inputs(M, N, K, seed, pattern, block_k)
    expected = matmul_relu_ref(a, b)
    layouts = (layout_a, layout_b, layout_c)
    shown_layouts = "" if layouts == ("contiguous",) * 3 else f", A {layout_a}, B {layout_b}, C {layout_c}"
    context = Case(f"M={M}, N={N}, K={K}, BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k}{shown_layouts}, "
                   f"{pattern} fp16 inputs, seed {seed}", tiles_kind(M, N, block_m, block_n),
                   size_kind(K, block_k, "K", "BLOCK_K", "K steps"), shown_layouts.lstrip(", "),
                   f"{pattern} fp16 inputs")
    pad = _pad((block_m, block_n, block_k))
    ga_view, ga = _place(a, layout_a, pad, device)
    gb_view, gb = _place(b, layout_b, pad, device)
    c_view, gc = _place_output(M, N, layout_c, pad, device)
    run_matmul_relu(kernel, ga_view, gb_view, c_view, block_m, block_n, block_k, context=context, device=device)

    if not (torch.equal(ga_view.cpu(), a) and torch.equal(gb_view.cpu(), b)):
        raise KernelCheckError(f"The kernel changed its inputs A or B ({context}).\n"
                               "Likely cause: a tl.store to a_ptr or b_ptr instead of c_ptr.")
    if ga.guard_changes() or gb.guard_changes():
        raise KernelCheckError(f"The kernel wrote outside A or B ({context}).\n"
                               "Likely cause: a tl.store to a_ptr or b_ptr.")
    stray = gc.guard_changes()
    if stray:
        where = _where(gc.first_guard_change(), layout_c, (M, N))
        also = (" or the store does not use stride_cm and stride_cn (C is not contiguous in this test)"
                if layout_c != "contiguous" else "")
        raise KernelCheckError(
            f"{shown(f'{stray} element(s)', 'Elements')} outside C were written; the first at {where} ({context}).\n"
            "Likely cause: the tl.store is not masked with (rows < M) & (columns < N)"
            f"{BOUNDARY_CHECK_HINT}, so the last tiles' rows past M or columns past N are written{also}.")
    atol, rtol, _ = TOLERANCE
    ok, msg = compare(c_view, expected, atol=atol, rtol=rtol, name="C")
    if not ok:
        cause = diagnose(c_view, a, b, block_m, block_n, block_k, (ga_view, gb_view, c_view), layouts,
                         (ga.buffer, gb.buffer))
        if bool((c_view == UNWRITTEN).any()):
            msg += f"\n  ({UNWRITTEN:g} is what C held before the kernel ran: those elements were never written)"
        raise KernelCheckError(f"Wrong values ({context}).\n{msg}\nLikely cause: {cause}")

    if fence_supported(device):
        fa, fb = _fenced(a, layout_a, device), _fenced(b, layout_b, device)
        if fa is not None or fb is not None:
            a2 = fa[0] if fa is not None else ga_view
            b2 = fb[0] if fb is not None else gb_view
            c2, _ = _place_output(M, N, layout_c, pad, device)
            fence = (f"FENCE-READ: running `{NAME}` on A and B that end exactly where readable memory ends "
                     f"({context}): any unmasked load of a row of A >= M, a column of B >= N or a k >= K "
                     "crashes here")
            run_matmul_relu(kernel, a2, b2, c2, block_m, block_n, block_k, context=context, device=device,
                            fence_stage=fence)
            ok, msg = compare(c2, expected, atol=atol, rtol=rtol, name="C")
            if not ok:
                raise KernelCheckError(f"Wrong values on the second run, with A and B stored without guards "
                                       f"({context}).\n{msg}")
    stage("done")


__all__ = ["NAME", "SIGNATURE", "MIN_BLOCK", "LAYOUTS", "PATTERNS", "UNWRITTEN", "TOLERANCE", "make_inputs",
           "matmul_relu_ref", "dropped_k_output", "tolerance_catches", "run_matmul_relu", "diagnose",
           "check_matmul_relu", "_linear", "_relu_in_loop", "_place", "_place_output", "_swapped_ids_unwritten", "_one_d_mapping_unwritten",
           "_stride_hint"]

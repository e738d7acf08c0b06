"""Phase 1: checks for ``triton_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE)``."""
from __future__ import annotations

import torch
import triton

from ..checking import (KernelCheckError, compare, fence_supported, fenced_copy, fresh_seed, generator,
                        guarded_copy, guarded_empty, stage)
from ..device import infer_device
from . import launch, require_triton_kernel

NAME = "triton_vector_add_kernel"
SIGNATURE = "triton_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr)"


def vector_add_ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The torch reference, computed in fp64 so it is independent of the kernel's rounding."""
    return (x.double() + y.double()).to(x.dtype)


def run_vector_add(kernel, x, y, out, block_size: int, *, context: str, device: str,
                   stage_text: str | None = None) -> None:
    """Launch the kernel the way the notebook's wrapper does: a 1-D grid of cdiv(n, BLOCK_SIZE) programs."""
    n = out.numel()
    grid = (triton.cdiv(n, block_size),)
    launch(kernel, grid, (x, y, out, n), {"BLOCK_SIZE": block_size},
           name=NAME, signature=SIGNATURE, context=context, device=device, stage_text=stage_text)


def diagnose(out: torch.Tensor, x: torch.Tensor, y: torch.Tensor, expected: torch.Tensor,
             block_size: int) -> str:
    """Guess the likely cause of wrong values, in a learner's words."""
    out, x, y, expected = (t.detach().cpu().double() for t in (out, x, y, expected))
    n = out.numel()

    def same(a, b):
        return bool(torch.allclose(a, b, atol=1e-3, rtol=1e-3, equal_nan=False))

    if same(out, 2 * x):
        return "the output is x + x: did you load x twice instead of loading y?"
    if same(out, 2 * y):
        return "the output is y + y: did you load y twice instead of loading x?"
    if same(out, x) or same(out, y):
        return "the output equals one input: is the addition missing?"
    if same(out, x - y) or same(out, y - x):
        return "the output is a difference, not a sum."
    wrong = ~torch.isclose(out, expected, atol=1e-3, rtol=1e-3)
    nan_out = torch.isnan(out)
    if nan_out.all():
        return "nothing was written to the output: is there a tl.store to output_ptr?"
    if n > block_size and not wrong[:block_size].any() and wrong[block_size:].all():
        return ("only the first BLOCK_SIZE elements are right: every program handles the same block. "
                "Offsets should start at tl.program_id(0) * BLOCK_SIZE.")
    if nan_out.any() and not nan_out.all():
        first = int(nan_out.nonzero()[0])
        return (f"output element {first} is NaN: either it was never written, or the kernel read outside "
                "x or y (their guards hold NaN). Are the offsets pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)?")
    last_block_start = (n - 1) // block_size * block_size
    if wrong[last_block_start:].any() and not wrong[:last_block_start].any():
        return "only the last, partial block is wrong: check the mask offsets < n_elements."
    return "compare your offsets and mask with the picture of the blocks above the kernel."


def check_vector_add(kernel, n: int, block_size: int, dtype: torch.dtype = torch.float32,
                     seed: int | None = None) -> None:
    """Launch ``kernel`` on fresh random x, y of length ``n`` and check it the strict way.

    1. inputs and output sit inside guard buffers: a stray store shows in the guard, a stray read
       reads NaN; 2. the inputs must be unchanged; 3. the values must match x + y;
    4. on the interpreter, the inputs end (and start) at an unreadable page, so an unmasked load
       crashes even when its lanes are never stored.
    """
    require_triton_kernel(kernel, NAME)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    g = generator(seed)
    x = torch.randn(n, generator=g).to(dtype)
    y = (torch.rand(n, generator=g) * 4 + 1).to(dtype)  # a different distribution from x
    expected = vector_add_ref(x, y)
    context = f"n_elements={n}, BLOCK_SIZE={block_size}, {str(dtype).replace('torch.', '')}, seed {seed}"

    # Guards at least one block wide: a stray lane lands in the guard, never in unmapped memory.
    pad = max(64, block_size)
    gx, gy = guarded_copy(x.to(device), pad), guarded_copy(y.to(device), pad)
    gout = guarded_empty((n,), dtype, device, pad)
    run_vector_add(kernel, gx.view, gy.view, gout.view, block_size, context=context, device=device)

    if not (torch.equal(gx.view.cpu(), x) and torch.equal(gy.view.cpu(), y)):
        raise KernelCheckError(f"The kernel changed its inputs x or y ({context}).\n"
                               "Likely cause: a tl.store to x_ptr or y_ptr instead of output_ptr.")
    if gx.guard_changes() or gy.guard_changes():
        raise KernelCheckError(f"The kernel wrote outside x or y ({context}).\n"
                               "Likely cause: a tl.store to x_ptr or y_ptr with wrong offsets.")
    stray = gout.guard_changes()
    if stray:
        first = gout.first_guard_change()[0]
        where = f"index {first}" + (" (before index 0)" if first < 0 else f" (past the last, index {n - 1})")
        raise KernelCheckError(
            f"{stray} element(s) outside the output were written; the first at {where} ({context}).\n"
            "Likely cause: the tl.store is not masked, or its mask lets through lanes with "
            "offsets >= n_elements (use offsets < n_elements).")
    ok, msg = compare(gout.view, expected)
    if not ok:
        raise KernelCheckError(f"Wrong values ({context}).\n{msg}\n"
                               f"Likely cause: {diagnose(gout.view, x, y, expected, block_size)}")

    if fence_supported(device):
        for side in ("end", "start"):
            (fx, keep_x), (fy, keep_y) = fenced_copy(x.to(device), side), fenced_copy(y.to(device), side)
            out = guarded_empty((n,), dtype, device)
            where = "end exactly where" if side == "end" else "start exactly where"
            run_vector_add(kernel, fx, fy, out.view, block_size, context=context, device=device,
                           stage_text=f"FENCE-READ: running `{NAME}` on x and y that {where} unreadable memory "
                                      f"begins ({context})")
            ok, msg = compare(out.view, expected)
            if not ok:
                raise KernelCheckError(f"Wrong values on the second run ({context}).\n{msg}")
    stage("done")

"""The strict check of a 1-D elementwise kernel, shared by phase 1 (vector add) and phase 4 (add-ReLU-scale).

A check module gives the inputs, the expected output, how to launch its kernel and how to name a wrong
result; :func:`check_elementwise` does the rest the same way for every such kernel: guard buffers around
every tensor, the inputs unchanged, the values, then (where supported) inputs that end and start at
unreadable memory, so that an unmasked load crashes.
"""
from __future__ import annotations

from typing import Callable

import torch

from ...checking import (KernelCheckError, compare, fence_supported, fenced_copy, guarded_copy, guarded_empty, shown,
                         stage)
from ...tolerances import DIAGNOSIS

def check_elementwise(kernel_name: str, inputs: dict[str, torch.Tensor], expected: torch.Tensor, block_size: int,
                      run: Callable[..., None], diagnose: Callable[[torch.Tensor], str], *, context: str,
                      device: str) -> None:
    """Check an elementwise kernel the strict way; raise KernelCheckError with the likely cause.

    ``inputs``: the CPU input tensors by their name in the kernel (``x`` for ``x_ptr``), in argument order.
    ``run(inputs, out, stage_text)``: launch the kernel on these input tensors into ``out``; ``stage_text``
    says what a crash during the launch means (None: "running ...").
    ``diagnose(out)``: the likely cause of wrong values in ``out``, in a learner's words.
    """
    names = list(inputs)
    either, pointers = " or ".join(names), " or ".join(f"{n}_ptr" for n in names)
    n = expected.numel()
    # Guards at least one block wide: a stray lane lands in the guard, never in unmapped memory.
    pad = max(64, block_size)
    guarded = [guarded_copy(t.to(device), pad) for t in inputs.values()]
    gout = guarded_empty(expected.shape, expected.dtype, device, pad)
    run([g.view for g in guarded], gout.view, None)

    if not all(torch.equal(g.view.cpu(), t) for g, t in zip(guarded, inputs.values())):
        raise KernelCheckError(f"The kernel changed its inputs {either} ({context}).\n"
                               f"Likely cause: a tl.store to {pointers} instead of output_ptr.")
    if any(g.guard_changes() for g in guarded):
        raise KernelCheckError(f"The kernel wrote outside {either} ({context}).\n"
                               f"Likely cause: a tl.store to {pointers} with wrong offsets.")
    stray = gout.guard_changes()
    if stray:
        first = gout.first_guard_change()[0]
        where = f"index {first}" + (" (before index 0)" if first < 0 else f" (past the last, index {n - 1})")
        side = "before its start" if first < 0 else "past its end"
        raise KernelCheckError(
            shown(f"{stray} element(s) outside the output were written; the first at {where}",
                  f"Elements outside the output were written, {side}") + f" ({context}).\n"
            "Likely cause: the tl.store is not masked, or its mask lets through lanes with "
            "offsets >= n_elements (use offsets < n_elements).")
    ok, msg = compare(gout.view, expected)
    if not ok:
        raise KernelCheckError(f"Wrong values ({context}).\n{msg}\nLikely cause: {diagnose(gout.view)}")

    if fence_supported(device):
        for side in ("end", "start"):
            fenced = [fenced_copy(t.to(device), side) for t in inputs.values()]  # (tensor, keep-alive) pairs
            out = guarded_empty(expected.shape, expected.dtype, device, pad)
            where = "end exactly where" if side == "end" else "start exactly where"
            run([t for t, _ in fenced], out.view,
                f"FENCE-READ: running `{kernel_name}` on {' and '.join(names)} that {where} unreadable memory "
                f"begins ({context})")
            ok, msg = compare(out.view, expected)
            if not ok:
                raise KernelCheckError(f"Wrong values on the second run ({context}).\n{msg}")
    stage("done")


def diagnose_blocks(out: torch.Tensor, expected: torch.Tensor, block_size: int, inputs: str) -> str | None:
    """The mistakes in the blocks and masks any elementwise kernel can make, named from ``out`` (fp64, CPU);
    None when none of them explains it. ``inputs`` names the inputs for the message ("x or y")."""
    n = out.numel()
    wrong = ~torch.isclose(out, expected, atol=DIAGNOSIS.atol, rtol=DIAGNOSIS.rtol)
    nan_out = torch.isnan(out)
    if nan_out.all():
        return "nothing was written to the output: is there a tl.store to output_ptr?"
    if n > block_size and not wrong[:block_size].any() and wrong[block_size:].all():
        return ("only the first BLOCK_SIZE elements are right: every program handles the same block. "
                "Offsets should start at tl.program_id(0) * BLOCK_SIZE.")
    if nan_out.any():
        first = int(nan_out.nonzero()[0])
        return (f"{shown(f'output element {first} is', 'some output elements are')} NaN: "
                f"either it was never written, or the kernel read outside "
                f"{inputs} (their guards hold NaN). Are the offsets pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)?")
    last_block_start = (n - 1) // block_size * block_size
    if wrong[last_block_start:].any() and not wrong[:last_block_start].any():
        return "only the last, partial block is wrong: check the mask offsets < n_elements."
    return None

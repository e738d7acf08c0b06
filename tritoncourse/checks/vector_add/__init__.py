"""Phase 1: checks for ``triton_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE)``."""
from __future__ import annotations

import torch
import triton

from ...checking import Case, dtype_name, fresh_seed, generator, size_kind
from ...tolerances import DIAGNOSIS
from ...device import infer_device
from ..common.launch import launch, require_triton_kernel
from ..common.elementwise import check_elementwise, diagnose_blocks

NAME = "triton_vector_add_kernel"
SIGNATURE = "triton_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr)"


def vector_add_ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The torch reference, computed in fp64 so it is independent of the kernel's rounding."""
    return (x.double() + y.double()).to(x.dtype)


def run_vector_add(kernel, x, y, out, block_size: int, *, context, device: str,
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

    def same(a, b):
        return bool(torch.allclose(a, b, atol=DIAGNOSIS.atol, rtol=DIAGNOSIS.rtol, equal_nan=False))

    if same(out, 2 * x):
        return "the output is x + x: did you load x twice instead of loading y?"
    if same(out, 2 * y):
        return "the output is y + y: did you load y twice instead of loading x?"
    if same(out, x) or same(out, y):
        return "the output equals one input: is the addition missing?"
    if same(out, x - y) or same(out, y - x):
        return "the output is a difference, not a sum."
    return (diagnose_blocks(out, expected, block_size, "x or y")
            or "compare your offsets and mask with the picture of the blocks above the kernel.")


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
    context = Case(f"n_elements={n}, BLOCK_SIZE={block_size}, {dtype_name(dtype)}, seed {seed}",
                   size_kind(n, block_size), dtype_name(dtype))

    def run(inputs, out, stage_text):
        run_vector_add(kernel, *inputs, out, block_size, context=context, device=device, stage_text=stage_text)

    check_elementwise(NAME, {"x": x, "y": y}, expected, block_size, run,
                      lambda out: diagnose(out, x, y, expected, block_size), context=context, device=device)

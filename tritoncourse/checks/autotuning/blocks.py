"""Phase 5: every config of the two one-block-size kernels (the online softmax, the vector add), each launched
directly on fresh inputs inside guard buffers, then (where supported) on inputs that end at unreadable memory.
"""
from __future__ import annotations

import torch
import triton

from ...checking import (OUTPUT_SENTINEL, Case, KernelCheckError, compare, fence_supported, fenced_copy, fresh_seed,
                         generator, shown, size_kind, stage)
from ...device import infer_device
from ...gpus import describe
from ...tolerances import SOFTMAX as SOFTMAX_TOLERANCES  # phase 2's rows
from .configs import SOFTMAX, VECTOR_ADD, _configs, autotuner_of, block_limit_problems
from .launch import Strided, _config_meta, _launch, _runnable

# ---------------------------------------------------------------------------------------------- softmax
SOFTMAX_TOLERANCE = SOFTMAX_TOLERANCES[torch.float32]  # (atol, rtol, why) for fp32 rows, as phase 2's


def _check_softmax_case(fn, x: torch.Tensor, meta: dict, *, context: str, device: str) -> None:
    n_rows, n_cols = x.shape
    expected = torch.softmax(x.double(), dim=-1)
    pad = 64 + 2 * max(meta["BLOCK_SIZE"], n_cols)
    gin = Strided.copy_of(x, device, pad=pad)  # rows n_cols + 8 apart, NaN between
    gout = Strided.make(n_rows, n_cols, x.dtype, device, OUTPUT_SENTINEL, pad=pad)
    args = (gout.view, gin.view, gin.view.stride(0), gout.view.stride(0), n_rows, n_cols)
    _launch(fn, (n_rows,), args, meta, name=SOFTMAX, context=context, device=device)
    if not torch.equal(gin.view.cpu(), x) or gin.stray():
        raise KernelCheckError(f"The kernel changed its input or wrote next to it ({context}).\n"
                               "Likely cause: a tl.store to input_ptr instead of output_ptr.")
    if gout.stray():
        raise KernelCheckError(
            f"{shown(f'{gout.stray()} element(s)', 'Elements')} outside the output's rows were written ({context}).\n"
            "Likely cause: the "
            "tl.store is not masked with start + cols < n_cols, or rows are not output_row_stride apart.")
    atol, rtol, _ = SOFTMAX_TOLERANCE
    ok, msg = compare(gout.view, expected, atol=atol, rtol=rtol)
    if not ok:
        block = meta["BLOCK_SIZE"]
        shape = ("one tile, mostly masked" if block >= n_cols else f"{triton.cdiv(n_cols, block)} tiles per row, "
                 f"the last one {n_cols % block or block} wide")
        sizes = shown(f"BLOCK_SIZE = {block} and n_cols = {n_cols} ({shape})",
                      f"this config's BLOCK_SIZE ({size_kind(n_cols, block, 'rows of a length', 'it', 'tiles')})")
        raise KernelCheckError(
            f"Wrong values ({context}).\n{msg}\nLikely cause: with {sizes} the kernel does not compute the softmax. "
            f"It must work for every BLOCK_SIZE of its config "
            "space: walk the row with range(0, n_cols, BLOCK_SIZE), mask each tile with start + cols < n_cols "
            "(other=-inf), keep a running max and a running sum rescaled by exp(m_old - m_new).")
    if fence_supported(device):
        fx, keep = fenced_copy(x.to(device), "end")
        out = Strided.make(n_rows, n_cols, x.dtype, device, OUTPUT_SENTINEL, pad=pad)
        stage(f"FENCE-READ: running `{SOFTMAX}` on rows whose last row ends exactly where readable memory ends "
              f"({context})")
        _launch(fn, (n_rows,), (out.view, fx, n_cols, out.view.stride(0), n_rows, n_cols), meta, name=SOFTMAX,
                context=context, device=device)
        ok, msg = compare(out.view, expected, atol=atol, rtol=rtol)
        if not ok:
            raise KernelCheckError(f"Wrong values on a second run of the same rows ({context}).\n{msg}\n"
                                   "Likely cause: the kernel reads memory outside its rows.")
        del keep


def check_every_softmax_config(kernel, n_rows: int = 3, n_cols: int = 300, seed: int | None = None) -> None:
    """Each config of the online softmax's space, launched directly on a grid of one program per row,
    gives the softmax of fresh rows (std 2) inside NaN guards."""
    tuner = autotuner_of(kernel, SOFTMAX)
    configs = _configs(tuner, SOFTMAX)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    x = 2 * torch.randn(n_rows, n_cols, generator=generator(seed))
    for i in _runnable(SOFTMAX, configs, block_limit_problems(configs), ("BLOCK_SIZE",)):
        c = configs[i]
        meta = _config_meta(c)
        context = Case(f"config #{i} of {len(configs)}: {describe(c)}; n_rows={n_rows}, n_cols={n_cols}, seed {seed}",
                       f"config #{i} of {len(configs)} ({describe(c)})",
                       size_kind(n_cols, meta["BLOCK_SIZE"], "rows of a length", "its BLOCK_SIZE", "tiles"))
        _check_softmax_case(tuner.fn, x, meta, context=context, device=device)
    stage("done")


# ------------------------------------------------------------------------------------------- vector add
def _check_vector_add_case(fn, x: torch.Tensor, y: torch.Tensor, meta: dict, *, context: str, device: str) -> None:
    n = x.numel()
    expected = (x.double() + y.double()).float()
    pad = 64 + meta["BLOCK_SIZE"]
    gx = Strided.copy_of(x.view(1, n), device, pad=pad)
    gy = Strided.copy_of(y.view(1, n), device, pad=pad)
    gout = Strided.make(1, n, x.dtype, device, OUTPUT_SENTINEL, pad=pad)
    grid = (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    _launch(fn, grid, (gx.view[0], gy.view[0], gout.view[0], n), meta, name=VECTOR_ADD, context=context,
            device=device)
    if gx.stray() or gy.stray() or not (torch.equal(gx.view[0].cpu(), x) and torch.equal(gy.view[0].cpu(), y)):
        raise KernelCheckError(f"The kernel changed x or y, or wrote next to them ({context}).\n"
                               "Likely cause: a tl.store to x_ptr or y_ptr instead of output_ptr.")
    if gout.stray():
        raise KernelCheckError(f"{shown(f'{gout.stray()} element(s)', 'Elements')} outside the output were written "
                               f"({context}).\n"
                               "Likely cause: the tl.store is not masked with offsets < n_elements.")
    ok, msg = compare(gout.view[0], expected)
    if not ok:
        raise KernelCheckError(
            f"Wrong values ({context}).\n{msg}\nLikely cause: the kernel must work for every BLOCK_SIZE of its "
            "config space: offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE), masked with offsets < n_elements.")
    if fence_supported(device):
        (fx, kx), (fy, ky) = fenced_copy(x.to(device), "end"), fenced_copy(y.to(device), "end")
        out = torch.full((n,), float("nan"), device=device)
        stage(f"FENCE-READ: running `{VECTOR_ADD}` on x and y that end exactly where readable memory ends "
              f"({context})")
        _launch(fn, grid, (fx, fy, out, n), meta, name=VECTOR_ADD, context=context, device=device)
        ok, msg = compare(out, expected)
        if not ok:
            raise KernelCheckError(f"Wrong values on a second run ({context}).\n{msg}")
        del kx, ky


def check_every_vector_add_config(kernel, n: int = 1000, seed: int | None = None) -> None:
    """Each config of the vector add's space, launched directly on cdiv(n, BLOCK_SIZE) programs, gives x + y."""
    tuner = autotuner_of(kernel, VECTOR_ADD)
    configs = _configs(tuner, VECTOR_ADD)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    g = generator(seed)
    x, y = torch.randn(n, generator=g), torch.rand(n, generator=g) * 4 + 1
    for i in _runnable(VECTOR_ADD, configs, block_limit_problems(configs), ("BLOCK_SIZE",)):
        c = configs[i]
        meta = _config_meta(c)
        context = Case(f"config #{i} of {len(configs)}: {describe(c)}; n_elements={n}, seed {seed}",
                       f"config #{i} of {len(configs)} ({describe(c)})",
                       size_kind(n, meta["BLOCK_SIZE"], unit="its BLOCK_SIZE"))
        _check_vector_add_case(tuner.fn, x, y, meta, context=context, device=device)
    stage("done")

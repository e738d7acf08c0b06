"""Phase 2: checks for the three softmax kernels.

    triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride,
                          n_rows, n_cols, BLOCK_SIZE)            # one tile holds the whole row
    triton_online_softmax_kernel(... the same arguments ...)     # the row is walked in tiles
    triton_softmax_backward_kernel(grad_input_ptr, output_ptr, grad_output_ptr, grad_input_row_stride,
                                   output_row_stride, grad_output_row_stride, n_rows, n_cols, BLOCK_SIZE)

Each check launches the learner's kernel itself, on a grid of one program per row as the notebook's
wrappers do, with fresh random rows. Every matrix lives inside a guard buffer (:class:`Rows`): NaN
around and between the inputs' rows, so a stray read poisons the result, and a sentinel around and
between the output's rows, so a stray store shows. On the interpreter the inputs are then placed
again so that the last row ends (or the first row starts) exactly at an unreadable page: an
unmasked load crashes even when its values are thrown away with ``tl.where``.

Wrong values are explained by replaying the usual mistakes on the same inputs (no max subtraction,
padding with 0, a running sum that is not rescaled, only the first tile, the wrong stride ...) and
naming the one that reproduces the kernel's output.

The inputs, buffers and references are :mod:`.inputs`'s, the replayed mistakes and their causes
:mod:`.diagnosis`'s; this module runs the checks and re-exports both.
"""
from __future__ import annotations

import torch
import triton

from ...checking import (OUTPUT_SENTINEL, KernelCheckError, compare, fence_supported, fresh_seed, generator, shown,
                         stage)
from ...device import infer_device
from ...tolerances import SOFTMAX as TOLERANCES  # (atol, rtol, why) by output dtype; fp64 reference
from ..common.launch import explain_launch_error, launch, require_triton_kernel
from .diagnosis import _explain_backward, _explain_online, _explain_softmax, _explain_stray_stores, _unwritten
from .inputs import (BACKWARD, BACKWARD_GAPS, DATA, FORWARD_GAPS, ONLINE, SIGNATURES, SOFTMAX, UNWRITTEN,
                     FencedRows, Rows, _Case, _pad_after, _strides, make_rows, softmax_backward_ref,
                     softmax_ref)


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    atol, rtol, _ = TOLERANCES[dtype]
    return atol, rtol


def _launch(kernel, case: _Case, args: tuple, device: str, n_rows: int | None = None,
            fence_stage: str | None = None) -> None:
    """Launch like the wrappers do (grid (n_rows,)); errors explained. ``fence_stage``: the stage to record
    for a fenced run (the shared ``launch`` would overwrite it with a plain "running ...")."""
    grid = (case.n_rows if n_rows is None else n_rows,)
    name, signature = case.kernel_name, SIGNATURES[case.kernel_name]
    try:
        if fence_stage is None:
            launch(kernel, grid, args, {"BLOCK_SIZE": case.block}, name=name, signature=signature,
                   context=case.context(), device=device)
        else:
            stage(fence_stage)
            try:
                kernel[grid](*args, BLOCK_SIZE=case.block)
                if device == "cuda":
                    torch.cuda.synchronize()
            except Exception as err:  # the learner's kernel may raise anything
                raise explain_launch_error(err, name, signature, case.context()) from None
    except KernelCheckError as err:
        text = str(err)
        if "Expected dtype" in text and "fp16" in text:
            head = text.split("\nLikely cause:")[0]
            raise KernelCheckError(
                f"{head}\nLikely cause: tl.exp, tl.exp2 and tl.log work on fp32 only: convert what you load "
                "with .to(tl.float32) and do the arithmetic in fp32 (tl.store converts back to fp16)."
            ) from None
        raise


def _check_inputs_untouched(case: _Case, inputs: dict[str, tuple[Rows, torch.Tensor]]) -> None:
    for name, (rows, original) in inputs.items():
        if not torch.equal(rows.view.detach().cpu(), original):
            raise KernelCheckError(f"The kernel changed its input `{name}` ({case.context()}).\n"
                                   f"Likely cause: a tl.store to {name}_ptr instead of the output pointer.")
        stray = rows.stray()
        if stray:
            first = shown(f" (the first: {rows.where(stray[0])})", "")
            raise KernelCheckError(f"The kernel wrote next to its input `{name}`{first} "
                                   f"({case.context()}).\nLikely cause: a tl.store to {name}_ptr.")


def _check_values(out: torch.Tensor, expected: torch.Tensor, case: _Case, explain) -> None:
    atol, rtol = _tolerance(case.dtype)
    ok, msg = compare(out, expected, atol=atol, rtol=rtol)
    if not ok:
        n_unwritten = int(_unwritten(out).sum())
        if n_unwritten:
            msg += (f"\n  {shown(f'{n_unwritten} element(s) were', 'some elements were')} never written (they "
                    f"still hold {UNWRITTEN:g}, the value "
                    "the output starts with)")
        raise KernelCheckError(f"Wrong values ({case.context()}).\n{msg}\nLikely cause: {explain()}")


def _fenced_runs(kernel, case: _Case, x: torch.Tensor, expected: torch.Tensor, device: str,
                 run, what: str) -> None:
    """Run again with the inputs ending (then starting) exactly where readable memory does: 2 rows each way.
    On the interpreter always; on a GPU only under compute-sanitizer (:func:`fence_supported`)."""
    if not fence_supported(device):
        return
    for side in ("end", "start"):
        rows = slice(-2, None) if side == "end" else slice(0, 2)
        edge = "last row ends exactly where readable memory ends" if side == "end" else \
            "first row starts exactly where readable memory starts"
        out = run(rows, side, f"FENCE-READ: running `{case.kernel_name}` on {what} whose {edge} "
                              f"({case.context()})")
        atol, rtol = _tolerance(case.dtype)
        ok, msg = compare(out, expected[rows], atol=atol, rtol=rtol)
        if not ok:
            raise KernelCheckError(f"Wrong values on a second run of the same rows ({case.context()}).\n{msg}\n"
                                   "Likely cause: the kernel reads memory outside its rows.")


def _forward(kernel, kernel_name: str, n_rows: int, n_cols: int, block: int, dtype, data: str, strided: bool,
             seed: int | None, explain) -> None:
    require_triton_kernel(kernel, kernel_name)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    x = make_rows(data, n_rows, n_cols, generator(seed)).to(dtype)
    expected = softmax_ref(x)
    strides = _strides(strided, n_cols, FORWARD_GAPS)
    case = _Case(kernel_name, n_rows, n_cols, block, dtype, data, strides, seed)
    pad = _pad_after(n_rows, n_cols, block, strides)

    gin = Rows.copy_of(x.to(device), strides["input"], device, pad_after=pad)
    gout = Rows(n_rows, n_cols, strides["output"], dtype, device, OUTPUT_SENTINEL, pad_after=pad)
    _launch(kernel, case, (gout.view, gin.view, strides["input"], strides["output"], n_rows, n_cols), device)

    _check_inputs_untouched(case, {"input": (gin, x)})
    stray = gout.stray()
    if stray:
        raise _explain_stray_stores(gout, stray, case, "output_row_stride", {"input_row_stride": strides["input"]})
    _check_values(gout.view, expected, case, lambda: explain(gout.view.cpu(), x, expected, case, gin))

    def run(rows, side, fence_stage):
        xs = x[rows]
        fin = FencedRows(xs, strides["input"], side, device)
        out = Rows(xs.shape[0], n_cols, strides["output"], dtype, device, OUTPUT_SENTINEL, pad_after=pad)
        _launch(kernel, case, (out.view, fin.view, strides["input"], strides["output"], xs.shape[0], n_cols),
                device, n_rows=xs.shape[0], fence_stage=fence_stage)
        return out.view
    _fenced_runs(kernel, case, x, expected, device, run, "input rows")
    stage("done")


def check_softmax(kernel, n_rows: int, n_cols: int, dtype: torch.dtype = torch.float32, data: str = "randn",
                  strided: bool = False, seed: int | None = None) -> None:
    """Launch ``triton_softmax_kernel`` like the wrapper does (grid (n_rows,), BLOCK_SIZE =
    next_power_of_2(n_cols)) on fresh rows of the kind ``data`` and check it the strict way.

    ``strided``: rows lie further apart than n_cols, by a different amount in the input and the output.
    """
    block = triton.next_power_of_2(n_cols)
    _forward(kernel, SOFTMAX, n_rows, n_cols, block, dtype, data, strided, seed, _explain_softmax)


def check_online_softmax(kernel, n_rows: int, n_cols: int, block_size: int, dtype: torch.dtype = torch.float32,
                         data: str = "randn", strided: bool = False, seed: int | None = None) -> None:
    """Launch ``triton_online_softmax_kernel`` on a grid of (n_rows,) with a BLOCK_SIZE that may be
    smaller (many tiles, a ragged last one) or larger (a single, mostly masked tile) than the row."""
    if block_size & (block_size - 1):
        raise ValueError(f"block_size = {block_size} must be a power of two")
    _forward(kernel, ONLINE, n_rows, n_cols, block_size, dtype, data, strided, seed, _explain_online)


def check_softmax_backward(kernel, n_rows: int, n_cols: int, dtype: torch.dtype = torch.float32,
                           strided: bool = False, seed: int | None = None) -> None:
    """Launch ``triton_softmax_backward_kernel`` (grid (n_rows,), BLOCK_SIZE = next_power_of_2(n_cols)) on
    y = softmax(x) and a random dy, both NaN-guarded, and compare dx with torch's autograd."""
    require_triton_kernel(kernel, BACKWARD)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    g = generator(seed)
    y = softmax_ref(make_rows("randn", n_rows, n_cols, g)).to(dtype)
    dy = torch.randn(n_rows, n_cols, generator=g).to(dtype)
    expected = softmax_backward_ref(y, dy)
    block = triton.next_power_of_2(n_cols)
    strides = _strides(strided, n_cols, BACKWARD_GAPS)
    case = _Case(BACKWARD, n_rows, n_cols, block, dtype, "y = softmax(random normal rows), dy random normal",
                 strides, seed)
    pad = _pad_after(n_rows, n_cols, block, strides)

    gy = Rows.copy_of(y.to(device), strides["output"], device, pad_after=pad)
    gdy = Rows.copy_of(dy.to(device), strides["grad_output"], device, pad_after=pad)
    gdx = Rows(n_rows, n_cols, strides["grad_input"], dtype, device, OUTPUT_SENTINEL, pad_after=pad)

    def args(dx, yv, dyv, rows):
        return (dx, yv, dyv, strides["grad_input"], strides["output"], strides["grad_output"], rows, n_cols)

    _launch(kernel, case, args(gdx.view, gy.view, gdy.view, n_rows), device)
    _check_inputs_untouched(case, {"output": (gy, y), "grad_output": (gdy, dy)})
    stray = gdx.stray()
    if stray:
        raise _explain_stray_stores(gdx, stray, case, "grad_input_row_stride",
                                    {"output_row_stride": strides["output"],
                                     "grad_output_row_stride": strides["grad_output"]})
    _check_values(gdx.view, expected, case, lambda: _explain_backward(gdx.view.cpu(), y, dy, expected, case))

    def run(rows, side, fence_stage):
        fy = FencedRows(y[rows], strides["output"], side, device)
        fdy = FencedRows(dy[rows], strides["grad_output"], side, device)
        m = fy.view.shape[0]
        out = Rows(m, n_cols, strides["grad_input"], dtype, device, OUTPUT_SENTINEL, pad_after=pad)
        _launch(kernel, case, args(out.view, fy.view, fdy.view, m), device, n_rows=m, fence_stage=fence_stage)
        return out.view
    _fenced_runs(kernel, case, y, expected, device, run, "y and dy")
    stage("done")


__all__ = ["SOFTMAX", "ONLINE", "BACKWARD", "SIGNATURES", "DATA", "UNWRITTEN", "FORWARD_GAPS", "BACKWARD_GAPS",
           "TOLERANCES", "make_rows", "softmax_ref", "softmax_backward_ref", "Rows", "FencedRows", "check_softmax",
           "check_online_softmax", "check_softmax_backward"]

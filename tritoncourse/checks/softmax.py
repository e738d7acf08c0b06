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
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from ..checking import (OUTPUT_SENTINEL, Fenced, KernelCheckError, compare, fence_supported, fresh_seed,
                        generator, stage)
from ..device import infer_device
from ..tolerances import SOFTMAX as TOLERANCES, SOFTMAX_DIAGNOSIS  # (atol, rtol, why) by output dtype; fp64 reference
from . import explain_launch_error, launch, require_triton_kernel

SOFTMAX = "triton_softmax_kernel"
ONLINE = "triton_online_softmax_kernel"
BACKWARD = "triton_softmax_backward_kernel"
SIGNATURES = {
    SOFTMAX: "triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, "
             "n_cols, BLOCK_SIZE: tl.constexpr)",
    ONLINE: "triton_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, "
            "n_rows, n_cols, BLOCK_SIZE: tl.constexpr)",
    BACKWARD: "triton_softmax_backward_kernel(grad_input_ptr, output_ptr, grad_output_ptr, "
              "grad_input_row_stride, output_row_stride, grad_output_row_stride, n_rows, n_cols, "
              "BLOCK_SIZE: tl.constexpr)",
}

# Rows the checks feed the kernels: how to make them, and how a message names them.
DATA = {
    "randn": "random normal rows (std 2)",
    "plus1000": "rows around +1000",
    "minus1000": "rows around -1000",
    "negative": "rows of negative values (-8.5 to -0.5)",
}
# The output's elements start at this value: an element the kernel never wrote shows as -54321
# (NaN would be ambiguous: a kernel without the max subtraction writes NaN).
UNWRITTEN = -54321.0

# Strided layouts: how far apart rows are, beyond n_cols, in each tensor. Different on purpose, so that
# swapping two strides or using n_cols as the stride shows.
FORWARD_GAPS = {"input": 29, "output": 11}
BACKWARD_GAPS = {"grad_input": 11, "output": 29, "grad_output": 5}


def make_rows(data: str, n_rows: int, n_cols: int, g: torch.Generator) -> torch.Tensor:
    """fp32 rows of the kind ``data`` (see :data:`DATA`)."""
    z = torch.randn(n_rows, n_cols, generator=g)
    if data == "randn":
        return 2 * z
    if data == "plus1000":
        return 2 * z + 1000
    if data == "minus1000":
        return 2 * z - 1000
    if data == "negative":
        return -(torch.rand(n_rows, n_cols, generator=g) * 8 + 0.5)
    raise ValueError(f"unknown data kind {data!r}; one of {sorted(DATA)}")


def softmax_ref(x: torch.Tensor) -> torch.Tensor:
    """The torch reference along the last dimension, in fp64 (the kernel's output is compared to it)."""
    return torch.softmax(x.double(), dim=-1)


def softmax_backward_ref(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = y * (dy - sum(y * dy)) per row, in fp64: what torch's autograd does for softmax.

    It is computed with ``torch.ops.aten._softmax_backward_data``, the very function torch's autograd
    calls for ``torch.softmax``, from the (rounded) y and dy the kernel is given.
    """
    return torch.ops.aten._softmax_backward_data(dy.double(), y.double(), -1, torch.float64)


# ---------------------------------------------------------------------------------------------------
# Rows inside guard buffers


class Rows:
    """An (n_rows, n_cols) matrix whose rows are ``stride`` elements apart inside a 1-D guard buffer.

    Every element of the buffer that is not one of the matrix's is guard: ``pad_before`` elements
    before row 0, ``pad_after`` after the last row, and the ``stride - n_cols`` elements between
    rows. The guard holds ``fill`` (NaN for inputs, a sentinel for outputs); the matrix's own elements
    start at ``start`` (:data:`UNWRITTEN` for outputs, so that unwritten elements show).
    """

    def __init__(self, n_rows: int, n_cols: int, stride: int, dtype, device: str, fill: float,
                 pad_before: int = 64, pad_after: int = 64, start: float = UNWRITTEN):
        if stride < n_cols:
            raise ValueError(f"stride {stride} < n_cols {n_cols}")
        self.n_rows, self.n_cols, self.stride, self.fill = n_rows, n_cols, stride, fill
        self.offset = pad_before
        span = (n_rows - 1) * stride + n_cols
        self.buffer = torch.full((pad_before + span + pad_after,), fill, dtype=dtype, device=device)
        self.view = self.buffer.as_strided((n_rows, n_cols), (stride, 1), pad_before)
        self.view.fill_(start)

    @classmethod
    def copy_of(cls, x: torch.Tensor, stride: int, device: str, pad_after: int = 64) -> "Rows":
        """An input: a copy of ``x`` with NaN around and between its rows."""
        rows = cls(x.shape[0], x.shape[1], stride, x.dtype, device, float("nan"), pad_after=pad_after,
                   start=float("nan"))
        rows.view.copy_(x)
        return rows

    def inside(self) -> torch.Tensor:
        """True for the buffer elements that belong to the matrix."""
        rel = torch.arange(self.buffer.numel()) - self.offset
        row = torch.div(rel, self.stride, rounding_mode="floor")
        col = torch.remainder(rel, self.stride)
        return (rel >= 0) & (row < self.n_rows) & (col < self.n_cols)

    def stray(self) -> list[int]:
        """Offsets, relative to element [0, 0], of the guard elements that were overwritten."""
        buf = self.buffer.detach().cpu()
        if self.fill != self.fill:
            changed = ~torch.isnan(buf)
        else:
            changed = buf != torch.tensor(self.fill, dtype=buf.dtype)
        changed &= ~self.inside()
        return (changed.nonzero().flatten() - self.offset).tolist()

    def where(self, offset: int) -> str:
        """Describe an offset relative to element [0, 0] in rows and columns."""
        if offset < 0:
            return "just before row 0" if offset == -1 else f"{-offset} elements before row 0"
        row, col = divmod(offset, self.stride)
        if row >= self.n_rows:
            past = offset - ((self.n_rows - 1) * self.stride + self.n_cols) + 1
            return "just past the end of the last row" if past == 1 else \
                f"{past} elements past the end of the last row"
        return f"row {row}, column {col}"

    def read(self, row_stride: int, width: int) -> torch.Tensor:
        """What a kernel would load from this buffer with the given row stride and row width (fp64;
        NaN where it would fall outside the buffer)."""
        buf = self.buffer.detach().cpu().double()
        idx = (torch.arange(self.n_rows)[:, None] * row_stride + torch.arange(width)[None, :]) + self.offset
        ok = (idx >= 0) & (idx < buf.numel())
        out = torch.full(idx.shape, float("nan"), dtype=torch.float64)
        out[ok] = buf[idx[ok]]
        return out


class FencedRows:
    """An input matrix whose last row ends (``side='end'``) or whose first row starts (``'start'``) exactly
    where readable memory does: an unmasked lane beyond it is caught at once.

    On the interpreter the neighbouring page is unreadable (a :class:`Fenced` buffer: the process dies
    with SIGSEGV); on a GPU the rows get an allocation of their own, exactly as long as they are, which
    compute-sanitizer's memcheck fences.
    """

    def __init__(self, x: torch.Tensor, stride: int, side: str, device: str):
        n_rows, n_cols = x.shape
        span = (n_rows - 1) * stride + n_cols
        if device == "cpu":
            self._fence = Fenced(span, x.dtype, side)  # keeps the mapping alive
            flat = self._fence.tensor
        else:
            flat = torch.empty(span, dtype=x.dtype, device=device)
        flat.fill_(float("nan"))
        self.view = flat.as_strided((n_rows, n_cols), (stride, 1))
        self.view.copy_(x.to(device))


# ---------------------------------------------------------------------------------------------------
# Replaying likely mistakes


def _same(actual: torch.Tensor, candidate: torch.Tensor) -> bool:
    """True when the kernel's output is (loosely) the candidate, NaN for NaN, everywhere."""
    a = actual.detach().cpu().double()
    c = candidate.detach().cpu().double()
    return bool(torch.isclose(a, c, rtol=SOFTMAX_DIAGNOSIS.rtol, atol=SOFTMAX_DIAGNOSIS.atol, equal_nan=True).all())


def _softmax_rows(x: torch.Tensor) -> torch.Tensor:
    """Row softmax in fp64 that propagates NaN (a NaN anywhere in a row makes the row NaN)."""
    x = x.double()
    m = x.amax(dim=1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(dim=1, keepdim=True)


def _naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """exp(x) / sum(exp(x)) in fp32, without subtracting the max: overflows past 88, underflows below -103."""
    e = torch.exp(x.float())
    return e / e.sum(dim=1, keepdim=True)


def _zero_padded(x: torch.Tensor, width: int) -> torch.Tensor:
    """Softmax of each row padded with zeros up to ``width`` columns (the first n_cols columns)."""
    n_rows, n_cols = x.shape
    padded = torch.cat([x.double(), torch.zeros(n_rows, width - n_cols, dtype=torch.float64)], dim=1)
    return _softmax_rows(padded)[:, :n_cols]


def _online_replay(x: torch.Tensor, block: int, *, rescale: bool = True, tiles: int | None = None,
                   start_max: float = -math.inf) -> torch.Tensor:
    """The online softmax, tile by tile, in fp32 like a kernel; optionally with a mistake:
    no rescaling of the running sum, only the first ``tiles`` tiles, a running max starting at ``start_max``."""
    x = x.float()
    n_rows, n_cols = x.shape
    m = torch.full((n_rows, 1), start_max)
    s = torch.zeros(n_rows, 1)
    n_tiles = -(-n_cols // block) if tiles is None else tiles
    for t in range(n_tiles):
        tile = x[:, t * block:(t + 1) * block]
        m_new = torch.maximum(m, tile.amax(dim=1, keepdim=True))
        scale = torch.exp(m - m_new) if rescale else torch.ones_like(s)
        s = s * scale + torch.exp(tile - m_new).sum(dim=1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / s


def _unwritten(out: torch.Tensor) -> torch.Tensor:
    """True for the output elements the kernel never wrote (they still hold UNWRITTEN)."""
    out = out.detach().cpu()
    return out == torch.tensor(UNWRITTEN, dtype=out.dtype)


def _nonfinite_where_finite(out: torch.Tensor, expected: torch.Tensor) -> bool:
    """True when some output is NaN or inf where the reference is a number."""
    return bool((~torch.isfinite(out.detach().cpu()) & torch.isfinite(expected)).any())


# ---------------------------------------------------------------------------------------------------
# Checks


@dataclass
class _Case:
    """One launch's inputs and how to describe them."""

    kernel_name: str
    n_rows: int
    n_cols: int
    block: int
    dtype: torch.dtype
    data: str
    strides: dict[str, int]
    seed: int

    def context(self) -> str:
        dt = str(self.dtype).replace("torch.", "")
        strides = ", ".join(f"{k} row stride {v}" for k, v in self.strides.items())
        return (f"n_rows={self.n_rows}, n_cols={self.n_cols}, BLOCK_SIZE={self.block}, {dt}, "
                f"{DATA.get(self.data, self.data)}, {strides}, seed {self.seed}")


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
            raise KernelCheckError(f"The kernel wrote next to its input `{name}` (the first: {rows.where(stray[0])}) "
                                   f"({case.context()}).\nLikely cause: a tl.store to {name}_ptr.")


def _explain_stray_stores(out: Rows, stray: list[int], case: _Case, out_stride_arg: str,
                          other_strides: dict[str, int]) -> KernelCheckError:
    """A message for stores that landed outside the output's rows, naming the likely mistake."""
    n_rows, n_cols, block = out.n_rows, out.n_cols, case.block
    written = set(stray)

    def addresses(stride: int, width: int) -> set[int]:
        return {r * stride + c for r in range(n_rows) for c in range(width)}

    if out.stride != n_cols and written <= addresses(n_cols, n_cols):
        cause = (f"rows of the output are addressed with n_cols as their stride; rows are `{out_stride_arg}` "
                 f"elements apart (here {out.stride}, not n_cols={n_cols}): use "
                 f"row * {out_stride_arg} for the output pointer.")
    elif any(s != out.stride and written <= addresses(s, n_cols) for s in other_strides.values()):
        arg = next(a for a, s in other_strides.items() if s != out.stride and written <= addresses(s, n_cols))
        cause = (f"the output is addressed with `{arg}`; each tensor has its own row stride: use "
                 f"row * {out_stride_arg} for the output and `{arg}` only for its own tensor. "
                 "Are two strides swapped?")
    elif all(s >= 0 for s in stray) and written <= {r * out.stride + c for r in range(n_rows)
                                                    for c in range(n_cols, max(block, n_cols + 1))}:
        cause = ("the tl.store is not masked, or its mask lets through lanes past the end of the row: "
                 "store with mask=cols < n_cols.")
    else:
        cause = ("a tl.store with wrong offsets: rows start at output_ptr + row * "
                 f"{out_stride_arg}, and only columns 0 .. n_cols - 1 of a row may be written.")
    return KernelCheckError(
        f"{len(stray)} element(s) outside the output's rows were written; the first: "
        f"{out.where(stray[0])} ({case.context()}).\nLikely cause: {cause}")


def _check_values(out: torch.Tensor, expected: torch.Tensor, case: _Case, explain) -> None:
    atol, rtol = _tolerance(case.dtype)
    ok, msg = compare(out, expected, atol=atol, rtol=rtol)
    if not ok:
        n_unwritten = int(_unwritten(out).sum())
        if n_unwritten:
            msg += (f"\n  {n_unwritten} element(s) were never written (they still hold {UNWRITTEN:g}, the value "
                    "the output starts with)")
        raise KernelCheckError(f"Wrong values ({case.context()}).\n{msg}\nLikely cause: {explain()}")


def _strides(strided: bool, n_cols: int, gaps: dict[str, int]) -> dict[str, int]:
    return {name: n_cols + (gap if strided else 0) for name, gap in gaps.items()}


def _pad_after(n_rows: int, n_cols: int, block: int, strides: dict[str, int]) -> int:
    """Room after the last row for stray stores, even with a swapped or too-large stride."""
    return 64 + max(block, n_cols) + (n_rows - 1) * (max(strides.values()) - min(strides.values()))


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


def _explain_common(out, x, expected, case: _Case, gin: Rows, width: int) -> str | None:
    """Mistakes both forward kernels can make; None when none of them reproduces the output."""
    n_rows, n_cols = x.shape
    if _unwritten(out).all():
        return "nothing was stored: is there a tl.store to output_ptr + row * output_row_stride + cols?"
    if _same(out, _naive_softmax(x)) and not _same(expected, _naive_softmax(x)):
        return ("the row max is not subtracted before tl.exp. exp(1000) overflows to inf and exp(-1000) "
                "underflows to 0, so the division gives inf/inf or 0/0 = NaN. Subtract the row's max first: "
                "softmax(x) = softmax(x - max(x)).")
    if width > n_cols and _same(out, _zero_padded(x, width)):
        return ("masked lanes are padded with 0 instead of -inf: tl.load(..., mask=mask, other=0.0) makes the "
                "padding count in the max and in the sum (exp(0 - max) > 0). Use other=-float('inf'): "
                "exp(-inf) = 0.")
    if gin.stride != n_cols and _same(out, _softmax_rows(gin.read(n_cols, n_cols))):
        return ("rows of the input are addressed with n_cols as their stride; rows are input_row_stride "
                f"elements apart (here {gin.stride}): use input_ptr + row * input_row_stride.")
    if case.strides["output"] != gin.stride and \
            _same(out, _softmax_rows(gin.read(case.strides["output"], n_cols))):
        return ("the input is read with output_row_stride; each tensor has its own stride: "
                "input_ptr + row * input_row_stride. Are the two strides swapped?")
    if width > n_cols and _same(out, _softmax_rows(gin.read(gin.stride, width))[:, :n_cols]):
        return ("the tl.load is not masked: lanes past the end of the row read whatever lies there (here NaN "
                "or the next row). Load with mask=cols < n_cols and other=-float('inf').")
    if _same(out, torch.exp(x.double() - x.double().amax(dim=1, keepdim=True))):
        return "the row is not divided by its sum: softmax = exp(x - max) / sum(exp(x - max))."
    return None


def _explain_softmax(out, x, expected, case: _Case, gin: Rows) -> str:
    found = _explain_common(out, x, expected, case, gin, case.block)
    if found:
        return found
    if _nonfinite_where_finite(out, expected):
        return ("some outputs are NaN or inf: a row read NaN from outside its columns (the guards around the rows "
                "hold NaN), or some columns were never stored. Load with mask=cols < n_cols, "
                "other=-float('inf'), and store every column with the same mask.")
    return ("compare your kernel with the steps above it: load the row with -inf padding, subtract its max, "
            "exp, divide by the sum, store with the mask.")


def _explain_online(out, x, expected, case: _Case, gin: Rows) -> str:
    n_rows, n_cols = x.shape
    block = case.block
    n_tiles = -(-n_cols // block)
    unwritten = _unwritten(out)
    if n_tiles > 1 and unwritten[:, block:].all() and not unwritten[:, :block].all():
        return ("only the first tile of each row was written: the kernel must walk the whole row, "
                "for start in range(0, n_cols, BLOCK_SIZE), both to find the max and sum and to store.")
    if n_tiles > 1 and _same(out[:, :block], _softmax_rows(x[:, :block])):
        return ("the max and the sum come from the first tile only: every tile must update the running max "
                "and the running sum (loop over range(0, n_cols, BLOCK_SIZE)).")
    full = n_cols // block * block
    if 0 < full < n_cols and _same(out[:, :full], _softmax_rows(x[:, :full])):
        return ("the last, partial tile is left out: the loop must run over tl.cdiv(n_cols, BLOCK_SIZE) tiles, "
                "e.g. range(0, n_cols, BLOCK_SIZE), with the mask start + cols < n_cols.")
    if n_tiles > 1 and _same(out, _online_replay(x, block, rescale=False)) and \
            not _same(expected, _online_replay(x, block, rescale=False)):
        return ("the running sum is not rescaled when the running max grows: before adding a tile's "
                "sum(exp(x - m_new)), multiply the running sum by exp(m_old - m_new).")
    if _same(out, _online_replay(x, block, start_max=0.0)) and not _same(expected, _online_replay(x, block, start_max=0.0)):
        return ("the running max starts at 0 instead of -inf: for a row whose values are all far below 0 "
                "(here -1000), exp(x - 0) underflows to 0 and the sum is 0. Start it at -float('inf').")
    width = n_tiles * block
    found = _explain_common(out, x, expected, case, gin, width)
    if found:
        return found
    nan_rows = (torch.isnan(out.detach().cpu()) & torch.isfinite(expected)).any(dim=1)
    if n_cols < block and nan_rows.any():
        return ("a row shorter than BLOCK_SIZE came out NaN. Lanes that are masked in every tile keep a running "
                "max of -inf, and exp(m_old - m_new) = exp(-inf - (-inf)) = exp(NaN). With per-lane "
                "accumulators, start the running max at a large finite negative value or guard the rescale "
                "with tl.where; with a scalar running max, take tl.max over the tile first.")
    if _nonfinite_where_finite(out, expected):
        return ("some outputs are NaN or inf: a tile read NaN from outside the row (the guards around the rows hold "
                "NaN), a rescale computed exp(-inf - (-inf)), or some columns were never stored.")
    return ("replay your kernel on the widget's row: the running max must be the max of all tiles so far, and "
            "the running sum must be rescaled by exp(m_old - m_new) whenever the max grows.")


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


def _explain_backward(out, y, dy, expected, case: _Case) -> str:
    y64, dy64 = y.double(), dy.double()
    s = (y64 * dy64).sum(dim=1, keepdim=True)
    if _unwritten(out).all():
        return "nothing was stored: is there a tl.store to grad_input_ptr + row * grad_input_row_stride + cols?"
    candidates = [
        (y64 * dy64, "dx = y * dy misses the second term: dx = y * (dy - sum(y * dy)), where the sum runs over "
                     "the whole row."),
        (dy64 - s, "the factor y is missing: dx = y * (dy - sum(y * dy))."),
        (y64 * (1 - y64) * dy64, "y * (1 - y) * dy keeps only the diagonal of the Jacobian; the off-diagonal "
                                 "terms -y_i * y_j add up to -y_i * sum(y * dy): dx = y * (dy - sum(y * dy))."),
        (y64 * (s - dy64), "the sign is flipped: dx = y * (dy - sum(y * dy))."),
        (y64 * (dy64 - dy64.sum(dim=1, keepdim=True)), "the sum must be over y * dy, not over dy."),
    ]
    for candidate, cause in candidates:
        if _same(out, candidate):
            return cause
    if _nonfinite_where_finite(out, expected):
        return ("some gradients are NaN or inf: a load read outside the row (the guards around the rows hold NaN), "
                "or masked lanes were padded with something other than 0 (y and dy must be 0 there, so that "
                "they add nothing to sum(y * dy)), or some columns were never stored.")
    if case.dtype == torch.float16:
        return ("the values are close but not close enough for fp16: do the products and the sum in fp32 "
                "(.to(tl.float32) after each load); an fp16 sum over a long row loses digits.")
    return "check the formula dx = y * (dy - sum(y * dy)) and the three row strides."


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


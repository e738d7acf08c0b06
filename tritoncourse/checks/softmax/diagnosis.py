"""Phase 2: why a softmax kernel is wrong: the usual mistakes (no max subtraction, padding with 0, a running sum
that is not rescaled, only the first tile, a row stride swapped or taken as n_cols, an unmasked store, the backward's
missing term ...) replayed on the same inputs, and the one that reproduces the kernel's output named in a learner's
words.
"""
from __future__ import annotations

import math

import torch

from ...checking import KernelCheckError, shown
from ...tolerances import SOFTMAX_DIAGNOSIS  # looser closeness: which replayed mistake the output is
from .inputs import UNWRITTEN, Rows, _Case


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


def _explain_stray_stores(out: Rows, stray: list[int], case: _Case, out_stride_arg: str,
                          other_strides: dict[str, int]) -> KernelCheckError:
    """A message for stores that landed outside the output's rows, naming the likely mistake."""
    n_rows, n_cols, block = out.n_rows, out.n_cols, case.block
    written = set(stray)

    def addresses(stride: int, width: int) -> set[int]:
        return {r * stride + c for r in range(n_rows) for c in range(width)}

    if out.stride != n_cols and written <= addresses(n_cols, n_cols):
        cause = (f"rows of the output are addressed with n_cols as their stride; rows are `{out_stride_arg}` "
                 f"elements apart{shown(f' (here {out.stride}, not n_cols={n_cols})', ', not n_cols')}: use "
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
        shown(f"{len(stray)} element(s) outside the output's rows were written; the first: {out.where(stray[0])}",
              "Elements outside the output's rows were written") + f" ({case.context()}).\nLikely cause: {cause}")


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
                f"elements apart{shown(f' (here {gin.stride})', '')}: use input_ptr + row * input_row_stride.")
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

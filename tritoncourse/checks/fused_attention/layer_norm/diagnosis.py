"""Phase 6, LayerNorm: the likely cause of a wrong y, mean or rstd, found by replaying known mistakes on the same
inputs (the bias or weight missing, the unbiased variance, eps outside the square root, the masked lanes counted,
statistics in half precision, ...)."""
from __future__ import annotations

import math

import torch

from ....checking import shown
from ....tolerances import DIAGNOSIS, LAYER_NORM as LN_TOLERANCES, MEAN_DIAGNOSIS, ROUNDOFF, RSTD_DIAGNOSIS
from .inputs import UNWRITTEN, layer_norm_ref

def _ln_candidates(x, w, b, eps, block_size):
    """(y, cause) of the known mistakes, replayed in fp64."""
    x64, w64, b64 = x.double().cpu(), w.double().cpu(), b.double().cpu()
    n = x.shape[1]
    mean = x64.mean(-1, keepdim=True)
    var = x64.var(-1, unbiased=False, keepdim=True)
    padded_var = (((x64 - mean) ** 2).sum(-1, keepdim=True) + (block_size - n) * mean**2) / n
    norm = lambda m, v, e=eps: (x64 - m) / torch.sqrt(v + e)
    out = [
        (norm(mean, var) * w64, "the bias is missing: y = (x - mean) * rstd * w + b."),
        (norm(mean, var) + b64, "the weight is missing: y = (x - mean) * rstd * w + b."),
        (norm(mean, x64.var(-1, unbiased=True, keepdim=True)) * w64 + b64,
         "the variance is divided by n_cols - 1: LayerNorm uses the biased variance, sum((x - mean)**2) / n_cols."),
        ((x64 - mean) / (torch.sqrt(var) + eps) * w64 + b64,
         "eps is added outside the square root: rstd = 1 / sqrt(var + eps) (it matters for rows whose variance is "
         "of the order of eps, as half of these rows have)."),
        (norm(mean, var, 0.0) * w64 + b64,
         "eps is missing: rstd = 1 / sqrt(var + eps) (it matters for rows whose variance is of the order of eps, as "
         "half of these rows have)."),
        ((x64 - mean) * torch.sqrt(var + eps) * w64 + b64,
         "(x - mean) is multiplied by sqrt(var + eps) instead of divided by it: rstd = 1 / sqrt(var + eps)."),
        (norm(x64.sum(-1, keepdim=True) / block_size, var) * w64 + b64,
         f"the mean is divided by BLOCK_SIZE{shown(f' = {block_size}', '')} instead of n_cols{shown(f' = {n}', '')}."),
        (norm(mean, padded_var) * w64 + b64,
         "the variance counts the masked-off lanes: they load as 0, so x - mean is -mean there. Zero them before "
         "squaring: xc = tl.where(cols < n_cols, x - mean, 0.0)."),
        (x64 / torch.sqrt(var + eps) * w64 + b64, "the mean is not subtracted: y = (x - mean) * rstd * w + b."),
    ]
    for e in (1e-5, 1e-6):
        if not math.isclose(e, eps, rel_tol=1e-3):
            out.append((norm(mean, var, e) * w64 + b64, f"eps is not the eps argument"
                                                        f"{shown(f' (here {eps:g})', '')}: the kernel "
                                                        f"uses {e:g}. Use the eps the wrapper passes."))
    return out


def _ln_diagnose(y, x, w, b, eps, block_size, data, mean_k=None, rstd_k=None, tol=None):
    yc = y.detach().double().cpu()
    if (yc == UNWRITTEN).all():
        return "nothing was written to y: is there a tl.store to y_ptr + row * stride_y_row + cols?"
    if (yc == UNWRITTEN).any():
        r, c = (yc == UNWRITTEN).nonzero()[0].tolist()
        return (f"{shown(f'y[{r}, {c}] was', 'Some of y was')} never written: "
                f"does each program store its whole row (mask cols < n_cols)?")
    if torch.isnan(yc).any():
        r, c = torch.isnan(yc).nonzero()[0].tolist()
        return (f"{shown(f'y[{r}, {c}] is', 'Some of y is')} NaN: "
                f"the kernel read outside x, w or b (the memory around them holds NaN in this "
                "test). Mask the loads with cols < n_cols and use other=0.0.")
    atol, rtol = tol if tol else LN_TOLERANCES[y.dtype][:2]
    for cand, words in _ln_candidates(x, w, b, eps, block_size):
        if torch.allclose(yc, cand.to(y.dtype).double(), atol=atol, rtol=rtol):
            return words
    _, mean_ref, rstd_ref = layer_norm_ref(x, w, b, eps)
    if mean_k is not None and rstd_k is not None:
        mk, rk = mean_k.detach().double().cpu(), rstd_k.detach().double().cpu()
        mean_ok = torch.allclose(mk, mean_ref, atol=MEAN_DIAGNOSIS.atol * float(rstd_ref.reciprocal().min()),
                                 rtol=MEAN_DIAGNOSIS.rtol)
        rstd_ok = torch.allclose(rk, rstd_ref, atol=RSTD_DIAGNOSIS.atol, rtol=RSTD_DIAGNOSIS.rtol)
        x64, w64, b64 = x.double().cpu(), w.double().cpu(), b.double().cpu()
        own = (x64 - mk[:, None]) * rk[:, None] * w64 + b64  # y from the kernel's own statistics
        consistent = torch.allclose(yc, own.to(y.dtype).double(), atol=10 * atol, rtol=10 * rtol)
        if mean_ok and not rstd_ok and consistent:
            if data == "offset":
                return ("the rows are around +1000 here and the stored rstd is wrong while the mean is right: "
                        "computing the variance as mean(x**2) - mean(x)**2 loses every digit to cancellation in fp32. "
                        "Subtract the mean first: var = sum((x - mean)**2) / n_cols.")
            return ("the stored mean is right but rstd is not (and y follows the wrong rstd): var = sum((x - mean)**2)"
                    " / n_cols over the n_cols lanes only, rstd = 1 / sqrt(var + eps).")
        if mean_ok and rstd_ok and not consistent:
            return ("the stored mean and rstd are right but y is not: y = (x - mean) * rstd * w + b, with w and b "
                    "loaded at w_ptr + cols and b_ptr + cols (the same for every row).")
        if not mean_ok:
            return "the stored mean is wrong: mean = sum(x) / n_cols over the n_cols lanes only (masked lanes load 0)."
    return ("compare with the reference step by step: the mean over n_cols (masked lanes excluded), the biased "
            "variance of x - mean, rstd = 1 / sqrt(var + eps), then (x - mean) * rstd * w + b, computed in fp32.")


def _ln_stats_cause(name: str, got, ref, dtype) -> str:
    """Why a stored statistic (mean or rstd) is wrong while y passed its own tolerance."""
    g, r = got.detach().double().cpu(), ref.double().cpu()
    if name == "rstd" and torch.allclose(g * r, torch.ones_like(r), rtol=DIAGNOSIS.rtol):
        return "rstd holds the standard deviation sqrt(var + eps): store its inverse, rstd = 1 / sqrt(var + eps)."
    if dtype in (torch.float16, torch.bfloat16):
        u = ROUNDOFF[dtype][0]  # the dtype's unit roundoff
        if torch.allclose(g, r, rtol=16 * u, atol=16 * u * float(r.abs().max())):
            kind = str(dtype).replace("torch.", "")
            return (f"the {name} is right only to {kind} precision: the statistics are computed in {kind}. Convert x "
                    "to fp32 as it is loaded (tl.load(...).to(tl.float32)), so that the sums, the mean and rstd are "
                    "fp32, and round only y to the output's dtype.")
    return f"the kernel must store each row's {name} (fp32) at {name}_ptr + row; the backward needs them."

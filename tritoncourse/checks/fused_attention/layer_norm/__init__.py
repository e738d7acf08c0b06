"""Phase 6: checks for the fused LayerNorm forward and backward kernels.

    triton_layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride_x_row, stride_y_row,
                             n_cols, eps, BLOCK_SIZE)                    # grid (n_rows,)
    triton_layer_norm_backward_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_partial_ptr,
                                      db_partial_ptr, stride_row, n_rows, n_cols, ROWS_PER_PROGRAM, BLOCK_SIZE)

Like the attention checks (:mod:`..attention`): inputs inside NaN, outputs inside sentinels, an fp64 reference, then
a second run with every input (x, w, b; the backward's dy, x, w, mean, rstd) ending at an unreadable page. The data
make every term of the formula matter: half the rows have a variance far below eps's scale (std 1e-3 to 1e-2, so
eps moves rstd by 5% or more) and the others a variance that dwarfs it, with means 2 to 3 in size.
"""
from __future__ import annotations

import torch
import triton

from ....checking import (OUTPUT_SENTINEL, Case, KernelCheckError, compare, dtype_name, fence_supported, fenced_copy,
                          fresh_seed, shown, stage)
from ....device import infer_device
from ....tolerances import (LAYER_NORM as LN_TOLERANCES, LAYER_NORM_BACKWARD as LN_BACKWARD_TOLERANCES,
                            LAYER_NORM_STATS as LN_STATS_TOLERANCE)
from ...common.launch import launch, require_triton_kernel
# The inputs, references and diagnoses live in their own modules; the notebook's checks.fused_attention imports
# them (and LN_TOLERANCES) from here.
from .diagnosis import _ln_candidates, _ln_diagnose, _ln_stats_cause
from .inputs import (LAYER_NORM, LN_BACKWARD, SIGNATURES, UNWRITTEN, layer_norm_backward_ref,
                     layer_norm_ref, layer_norm_tolerance, make_ln_backward_inputs, make_ln_inputs)

__all__ = ["check_layer_norm", "check_layer_norm_backward", "LAYER_NORM", "LN_BACKWARD", "SIGNATURES", "UNWRITTEN",
           "LN_TOLERANCES", "LN_BACKWARD_TOLERANCES", "LN_STATS_TOLERANCE", "_ln_candidates", "_ln_diagnose",
           "layer_norm_backward_ref", "layer_norm_ref", "layer_norm_tolerance", "make_ln_backward_inputs",
           "make_ln_inputs"]


def _vec(t, pad, device, fill=float("nan")):
    """A copy of the 1-D ``t`` inside a buffer of ``fill``: (buffer, view)."""
    buf = torch.full((2 * pad + t.numel(),), fill, dtype=t.dtype, device=device)
    view = buf[pad:pad + t.numel()]
    view.copy_(t.reshape(-1))
    return buf, view


def _length_kind(n_cols: int, block: int) -> str:
    return "rows whose length is a power of two" if n_cols == block else \
        "rows whose length is not a power of two (the tile's last lanes are masked)"


def check_layer_norm(kernel, n_rows: int, n_cols: int, dtype: torch.dtype = torch.float32, *, eps: float = 1e-5,
                     data: str = "randn", row_gap: int = 0, seed: int | None = None) -> None:
    """Launch ``triton_layer_norm_kernel`` like the wrapper does (grid (n_rows,), BLOCK_SIZE =
    next_power_of_2(n_cols)) and check y, mean and rstd. ``data``: "randn" or "offset" (rows around +1000);
    ``row_gap``: x is a slice of rows ``n_cols + row_gap`` apart (NaN between them) while y is contiguous, as the
    wrapper allocates it for such an x, so that each has a row stride of its own."""
    require_triton_kernel(kernel, LAYER_NORM)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    x, w, b = make_ln_inputs(n_rows, n_cols, dtype, data, seed)
    block = triton.next_power_of_2(n_cols)
    pad = max(64, block)
    rows_words = ("rows around +1000" if data == "offset" else
                  "rows of std 2 with means 2 to 3 in size, and rows of std 1e-3 to 1e-2 around 0")
    context = Case(f"{n_rows} rows of {n_cols}, {dtype_name(dtype)}, {rows_words}"
                   f"{f', x rows {n_cols + row_gap} apart and y contiguous' if row_gap else ''}"
                   f"{f', eps={eps:g}' if eps != 1e-5 else ''}, BLOCK_SIZE={block}, seed {seed}",
                   _length_kind(n_cols, block), dtype_name(dtype), rows_words,
                   "x rows further apart than n_cols and y contiguous" if row_gap else "",
                   "an eps other than 1e-5" if eps != 1e-5 else "")
    stride = n_cols + row_gap
    size = pad + n_rows * stride + pad  # room for either tensor's rows addressed with the other's stride
    xs = torch.full((size,), float("nan"), dtype=dtype, device=device)
    xv = xs[pad:pad + n_rows * stride].view(n_rows, stride)[:, :n_cols]
    xv.copy_(x)
    (ws, wv), (bs, bv) = _vec(w, pad, device), _vec(b, pad, device)
    ys = torch.full((size,), OUTPUT_SENTINEL, dtype=dtype, device=device)
    yv = ys[pad:pad + n_rows * n_cols].view(n_rows, n_cols)
    yv.fill_(UNWRITTEN)
    stats = [torch.full((2 * pad + n_rows,), OUTPUT_SENTINEL, dtype=torch.float32, device=device) for _ in range(2)]
    mean_v, rstd_v = (s[pad:pad + n_rows] for s in stats)
    for s in (mean_v, rstd_v):
        s.fill_(UNWRITTEN)
    args = (xv, yv, wv, bv, mean_v, rstd_v, xv.stride(0), yv.stride(0), n_cols, eps)
    launch(kernel, (n_rows,), args, {"BLOCK_SIZE": block}, name=LAYER_NORM, signature=SIGNATURES[LAYER_NORM],
           context=context, device=device)
    if not (torch.equal(xv.cpu(), x) and torch.equal(wv.cpu(), w) and torch.equal(bv.cpu(), b)):
        raise KernelCheckError(f"The kernel changed its inputs x, w or b ({context}).\n"
                               "Likely cause: a tl.store to x_ptr, w_ptr or b_ptr instead of y_ptr.")
    y_ref, mean_ref, rstd_ref = layer_norm_ref(x, w, b, eps)
    atol, rtol, mean_err = layer_norm_tolerance(dtype, mean_ref, rstd_ref, w)
    inside = torch.zeros_like(ys, dtype=torch.bool)
    inside[pad:pad + n_rows * n_cols] = True
    stray = int((ys[~inside] != OUTPUT_SENTINEL).sum())
    if stray or any(int((torch.cat([s[:pad], s[pad + n_rows:]]) != OUTPUT_SENTINEL).sum()) for s in stats):
        cause = ("the tl.store to y is not masked with cols < n_cols (a row's block is BLOCK_SIZE wide), or a row "
                 "is addressed without stride_y_row.")
        if row_gap:  # replay y stored with x's row stride
            want = torch.full_like(ys, OUTPUT_SENTINEL).cpu()
            want[pad:pad + n_rows * n_cols] = UNWRITTEN
            want.as_strided((n_rows, n_cols), (stride, 1), pad).copy_(y_ref.to(dtype))
            if torch.allclose(ys.cpu().double(), want.double(), atol=atol, rtol=rtol):
                cause = (f"y is addressed with x's row stride: here x's rows are {shown(f'{stride} apart', 'further apart')}"
                         f" (a slice of wider rows) and y's {shown(str(n_cols), 'n_cols')} (contiguous). "
                         f"Store row r at y_ptr + r * stride_y_row + cols.")
        raise KernelCheckError(f"The kernel wrote outside y, mean or rstd ({context}).\nLikely cause: {cause}")
    ok, msg = compare(yv, y_ref, atol=atol, rtol=rtol, name="y")
    if not ok:
        cause = None
        if row_gap:  # replay x read with y's row stride
            xr = xs.cpu().as_strided((n_rows, n_cols), (n_cols, 1), pad)
            if torch.allclose(yv.cpu().double(), layer_norm_ref(xr, w, b, eps)[0].to(dtype).double(), atol=atol,
                              rtol=rtol, equal_nan=True):
                cause = (f"x is addressed with y's row stride: here x's rows are {shown(f'{stride} apart', 'further apart')}"
                         f" (a slice of wider rows) and y's {shown(str(n_cols), 'n_cols')}. "
                         f"Load row r at x_ptr + r * stride_x_row + cols.")
        cause = cause or _ln_diagnose(yv, x, w, b, eps, block, data, mean_v, rstd_v, (atol, rtol))
        raise KernelCheckError(f"Wrong values ({context}).\n{msg}\nLikely cause: {cause}")
    s_atol, s_rtol, _ = LN_STATS_TOLERANCE
    s_atol += mean_err
    for name, got, ref in (("mean", mean_v, mean_ref), ("rstd", rstd_v, rstd_ref)):
        ok, msg = compare(got, ref, atol=s_atol, rtol=s_rtol, name=name)
        if not ok:
            raise KernelCheckError(f"Wrong {name} ({context}).\n{msg}\nLikely cause: "
                                   f"{_ln_stats_cause(name, got, ref, dtype)}")
    if fence_supported(device):
        (xf, kx), (wf, kw), (bf, kb) = (fenced_copy(t.to(device), "end") for t in (x, w, b))
        y2 = torch.empty(n_rows, n_cols, dtype=dtype, device=device)
        m2, r2 = (torch.empty(n_rows, device=device) for _ in range(2))
        launch(kernel, (n_rows,), (xf, y2, wf, bf, m2, r2, n_cols, n_cols, n_cols, eps), {"BLOCK_SIZE": block},
               name=LAYER_NORM, signature=SIGNATURES[LAYER_NORM], context=context, device=device,
               stage_text=f"FENCE-READ: running `{LAYER_NORM}` on x, w and b that each end exactly where readable "
                          f"memory ends ({context}): a load of w or b, or of x's last row, without the mask "
                          "cols < n_cols crashes here, even when the lanes it reads are never stored")
        ok, msg = compare(y2, y_ref, atol=atol, rtol=rtol, name="y")
        if not ok:
            raise KernelCheckError(f"Wrong values on the second run, x, w and b stored without guards ({context})."
                                   f"\n{msg}")
        del kx, kw, kb
    stage("done")


# ----------------------------------------------------------------------------------- LayerNorm backward

def check_layer_norm_backward(kernel, n_rows: int, n_cols: int, rows_per_program: int = 4,
                              dtype: torch.dtype = torch.float32, *, eps: float = 1e-5, row_gap: int = 0,
                              seed: int | None = None) -> None:
    """Launch ``triton_layer_norm_backward_kernel`` like the notebook's LayerNormFunction.backward does (grid
    (cdiv(n_rows, ROWS_PER_PROGRAM),), one partial row of dw and db per program, summed afterwards) and check dx,
    dw and db against torch.autograd in fp64."""
    require_triton_kernel(kernel, LN_BACKWARD)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    x, w, b, dy = make_ln_backward_inputs(n_rows, n_cols, dtype, seed)
    _, mean, rstd = layer_norm_ref(x, w, b, eps)
    mean, rstd = mean.float(), rstd.float()
    block = triton.next_power_of_2(n_cols)
    n_prog = triton.cdiv(n_rows, rows_per_program)
    pad = max(64, block)
    stride = n_cols + row_gap
    context = Case(f"{n_rows} rows of {n_cols}, {dtype_name(dtype)}, ROWS_PER_PROGRAM="
                   f"{rows_per_program} ({n_prog} programs), BLOCK_SIZE={block}"
                   f"{f', rows {stride} apart' if row_gap else ''}, seed {seed}",
                   _length_kind(n_cols, block), dtype_name(dtype),
                   "the last program with fewer rows than ROWS_PER_PROGRAM" if n_rows % rows_per_program else
                   "every program with ROWS_PER_PROGRAM rows", "rows further apart than n_cols" if row_gap else "")

    def rows_buffer(t, fill):
        buf = torch.full((pad + n_rows * stride + pad,), fill, dtype=dtype, device=device)
        view = buf[pad:pad + n_rows * stride].view(n_rows, stride)[:, :n_cols]
        view.copy_(t)
        return buf, view

    (xb, xv), (dyb, dyv) = rows_buffer(x, float("nan")), rows_buffer(dy, float("nan"))
    (wb, wv), (mb, mv), (rb, rv) = _vec(w, pad, device), _vec(mean, pad, device), _vec(rstd, pad, device)
    dxb, dxv = rows_buffer(torch.full((n_rows, n_cols), UNWRITTEN), OUTPUT_SENTINEL)
    dwb, dwv = _vec(torch.full((n_prog, n_cols), UNWRITTEN), pad, device, OUTPUT_SENTINEL)
    dbb, dbv = _vec(torch.full((n_prog, n_cols), UNWRITTEN), pad, device, OUTPUT_SENTINEL)
    args = (dyv, xv, wv, mv, rv, dxv, dwv, dbv, stride, n_rows, n_cols)
    launch(kernel, (n_prog,), args, {"ROWS_PER_PROGRAM": rows_per_program, "BLOCK_SIZE": block}, name=LN_BACKWARD,
           signature=SIGNATURES[LN_BACKWARD], context=context, device=device)
    inside = torch.zeros(dxb.numel(), dtype=torch.bool)
    inside[pad:pad + n_rows * stride].view(n_rows, stride)[:, :n_cols] = True
    stray = int((dxb.cpu()[~inside] != OUTPUT_SENTINEL).sum())
    stray += sum(int((torch.cat([t[:pad], t[-pad:]]) != OUTPUT_SENTINEL).sum()) for t in (dwb, dbb))
    if stray:
        raise KernelCheckError(f"{shown(f'{stray} element(s)', 'Elements')} outside dx, dw_partial or db_partial were "
                               f"written ({context}).\n"
                               "Likely cause: a store without the mask cols < n_cols, or a row past n_rows stored "
                               "(the last program has fewer than ROWS_PER_PROGRAM rows: skip rows >= n_rows), or a "
                               "partial row addressed other than dw_partial_ptr + pid * n_cols + cols.")
    dx_ref, dw_ref, db_ref = layer_norm_backward_ref(x, w, b, dy, eps)
    atol, rtol, _ = LN_BACKWARD_TOLERANCES[dtype]
    xhat = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
    ok, msg = compare(dxv, dx_ref, atol=atol, rtol=rtol, name="dx")
    if not ok:
        dxc = dxv.detach().double().cpu()
        if (dxc == UNWRITTEN).any():
            r, c = (dxc == UNWRITTEN).nonzero()[0].tolist()
            cause = (f"{shown(f'dx[{r}, {c}] was', 'Some of dx was')} never written: "
                     f"program pid handles rows pid * ROWS_PER_PROGRAM + i for i in "
                     "range(ROWS_PER_PROGRAM); does it store every one of them (rows < n_rows)?")
        elif torch.isnan(dxc).any():
            cause = "dx holds NaN: a load outside x, dy or w (mask cols < n_cols, other=0.0; rows < n_rows)."
        else:
            wdy = w.double() * dy.double()
            rs = rstd.double()[:, None]
            c1, c2 = (xhat * wdy).mean(-1, keepdim=True), wdy.mean(-1, keepdim=True)
            first = lambda t: t[:1].expand_as(t)  # row 0's statistic for every row
            xhat0 = (x.double() - first(mean.double()[:, None])) * first(rs)
            candidates = [
                (wdy * rs, "dx = w·dy·rstd misses the terms that come from the mean and the variance depending on x: "
                           "dx = (w·dy - (xhat·c1 + c2))·rstd with c1 = sum(xhat·w·dy)/n_cols, c2 = sum(w·dy)/n_cols."),
                ((wdy - xhat * c1) * rs, "the c2 = sum(w·dy)/n_cols term is missing: dx = (w·dy - (xhat·c1 + c2))·rstd."),
                ((wdy - c2) * rs, "the xhat·c1 term is missing (c1 = sum(xhat·w·dy)/n_cols): dx = (w·dy - (xhat·c1 + "
                                  "c2))·rstd."),
                ((wdy - (xhat0 * (xhat0 * wdy).mean(-1, keepdim=True) + c2)) * first(rs),
                 "every row uses row 0's mean and rstd: load them at mean_ptr + row and rstd_ptr + row."),
                ((dy.double() - (xhat * (xhat * dy.double()).mean(-1, keepdim=True) + dy.double().mean(-1, True)))
                 * rs, "w is missing: the gradient reaching xhat is w·dy, so dx = (w·dy - (xhat·c1 + c2))·rstd."),
                (wdy - (xhat * c1 + c2), "dx is not multiplied by rstd at the end: dx = (w·dy - (xhat·c1 + "
                                         "c2))·rstd."),
                ((wdy - (xhat * c1 + c2) * n_cols / block) * rs,
                 f"c1 and c2 are divided by BLOCK_SIZE{shown(f' = {block}', '')} instead of n_cols"
                 f"{shown(f' = {n_cols}', '')}: the masked lanes are "
                 "not part of the row (c1 = sum(xhat·w·dy)/n_cols, c2 = sum(w·dy)/n_cols)."),
            ]
            cause = next((words for cand, words in candidates
                          if torch.allclose(dxc, cand.to(dtype).double(), atol=atol, rtol=rtol)),
                         "dx = (w·dy - (xhat·c1 + c2))·rstd with xhat = (x - mean)·rstd (0 in masked lanes), "
                         "c1 = sum(xhat·w·dy)/n_cols and c2 = sum(w·dy)/n_cols, all in fp32.")
        raise KernelCheckError(f"Wrong dx ({context}).\n{msg}\nLikely cause: {cause}")
    for name, part, ref in (("dw", dwv, dw_ref), ("db", dbv, db_ref)):
        p = part.detach().cpu().view(n_prog, n_cols).double()
        if (p == UNWRITTEN).any():
            r, c = (p == UNWRITTEN).nonzero()[0].tolist()
            raise KernelCheckError(f"{shown(f'{name}_partial[{r}, {c}] was', f'Some of {name}_partial was')} never "
                                   f"written ({context}).\nLikely cause: each "
                                   f"program must store its partial {name} (summed over its rows) at "
                                   f"{name}_partial_ptr + pid * n_cols + cols, masked with cols < n_cols.")
        ok, msg = compare(p.sum(0), ref, atol=atol * n_rows ** 0.5, rtol=rtol, name=f"{name} (partials summed)")
        if not ok:
            hint = (f"{name} is the sum over every row of " + ("dy·xhat" if name == "dw" else "dy") +
                    f": each program adds its ROWS_PER_PROGRAM rows into an fp32 accumulator (start it at 0 "
                    "before the row loop, and do not add rows >= n_rows) and stores it once, at the end.")
            terms = dy.double() * xhat if name == "dw" else dy.double()
            last_rows = [min((i + 1) * rows_per_program, n_rows) - 1 for i in range(n_prog)]
            first_rows = [i * rows_per_program for i in range(n_prog)]
            for picked in (last_rows, first_rows):
                if torch.allclose(p, terms[picked], atol=atol, rtol=rtol):
                    hint = (f"each program's partial {name} holds only one of its rows: it must be summed over all "
                            f"of the program's rows ({name} += ... inside the row loop, starting from 0). " + hint)
            if name == "dw" and torch.allclose(p.sum(0), (dy.double() * x.double()).sum(0), atol=atol * n_rows**0.5,
                                               rtol=rtol):
                hint = "dw sums dy·x: it is the sum of dy·xhat, with xhat = (x - mean)·rstd."
            if name == "dw" and torch.allclose(p.sum(0), (w.double() * dy.double() * xhat).sum(0),
                                               atol=atol * n_rows**0.5, rtol=rtol):
                hint = ("dw sums w·dy·xhat: w is not part of its own gradient. dL/dw is the sum over the rows of "
                        "dy·xhat (w·dy is what reaches xhat, for dx).")
            raise KernelCheckError(f"Wrong {name} ({context}).\n{msg}\nLikely cause: {hint}")
    if fence_supported(device):
        # every input ends at an unreadable page: x, dy (rows n_cols apart), w, mean and rstd
        (x2, kx), (dy2, kdy), (w2, kw), (m2, km), (r2, kr) = (fenced_copy(t.to(device), "end")
                                                              for t in (x, dy, w, mean, rstd))
        dx2 = torch.empty(n_rows, n_cols, dtype=dtype, device=device)
        dw2, db2 = (torch.empty(n_prog, n_cols, device=device) for _ in range(2))
        launch(kernel, (n_prog,), (dy2, x2, w2, m2, r2, dx2, dw2, db2, n_cols, n_rows, n_cols),
               {"ROWS_PER_PROGRAM": rows_per_program, "BLOCK_SIZE": block}, name=LN_BACKWARD,
               signature=SIGNATURES[LN_BACKWARD], context=context, device=device,
               stage_text=f"FENCE-READ: running `{LN_BACKWARD}` on x, dy, w, mean and rstd that each end exactly "
                          f"where readable memory ends ({context}): a load of w or of the last row of x or dy without "
                          "the mask cols < n_cols, or of a row >= n_rows (its mean or rstd too), crashes here")
        ok, msg = compare(dx2, dx_ref, atol=atol, rtol=rtol, name="dx")
        if not ok:
            raise KernelCheckError(f"Wrong dx on the second run, its inputs stored without guards ({context}).\n{msg}")
        del kx, kdy, kw, km, kr
    stage("done")

"""Phase 7, the attention backward: the likely cause of a wrong dQ, dK, dV or D, found by replaying known mistakes
in fp64 on the same inputs (the D term left out, the LSE not reused or in the wrong base, the causal mask off in a
backward kernel, a scale missing or doubled, dK and dV kept from one query tile only, dQ stored instead of added).
"""
from __future__ import annotations

import math

import torch

from ...checking import shown
from ...tolerances import DIAGNOSIS
from .inputs import LOG2E, causal_mask, scores

GRADS = ("dQ", "dK", "dV")
ONE_KEY_TILE = ("dQ holds one key tile's part only: with ATOMIC_DQ every key tile's program adds its part, "
                "tl.atomic_add(dq_ptrs, dq, mask=...), into the zeroed fp32 dQ; a tl.store (or a load, add and store, "
                "which races on a GPU) keeps only one.")


def replay(q, k, v, do, o, lse, causal, sm_scale, block_m, block_n, *, delta=True, lse_factor=1.0, use_lse=True,
           tile_softmax=False, mask=None, skip=None, dkdv_tiles=None, dq_tile=None, skip_diagonal=False,
           fp16_acc=False, scaled_scores=True):
    """(dQ, dK, dV) in fp64 as a backward kernel computes them, with one mistake switched on.

    ``delta`` off: dS = P ∘ dP (no D term). ``lse_factor``: P = exp(S - LSE · factor) (ln 2: a natural LSE
    subtracted from log2-unit scores; log2(e): an LSE converted for exp2 but used with exp). ``use_lse`` off: P =
    exp(S). ``tile_softmax``: P recomputed as a softmax over each key tile alone (the normaliser from scratch).
    ``mask``: the causal mask (default: ``causal``). ``skip``: causal tile skipping (default: ``causal``).
    ``dkdv_tiles``: "last" or "first": dK, dV from one query tile only (stored per tile, not accumulated). ``dq_tile``
    "last": dQ from the last key tile that visits each query tile only (tl.store instead of tl.atomic_add, as the
    interpreter runs the programs in order); an int j: key tile j's part of dQ alone.
    ``skip_diagonal``: the causal dQ kernel's key loop ends before its query tile's start (the diagonal tile lost).
    ``fp16_acc``: the accumulators held in fp16, rounded after each tile's sum is added (dQ over key tiles of
    ``block_n``, dK and dV over query tiles of ``block_m``).
    ``scaled_scores`` off: P = exp(Q Kᵀ - LSE), the scores' sm_scale left out of the exponential (dQ and dK still
    carry it)."""
    mask = causal if mask is None else mask
    skip = causal if skip is None else skip
    S = q.shape[-2]
    s = scores(q, k, mask, sm_scale if scaled_scores else 1.0)
    lse = lse.double().cpu().reshape(s.shape[:-1])
    if tile_softmax:
        p = torch.zeros_like(s)
        for start in range(0, S, block_n):
            blk = s[..., start:start + block_n]
            p[..., start:start + block_n] = torch.nan_to_num(torch.softmax(blk, -1), nan=0.0)
    else:
        p = torch.exp(s - (lse[..., None] * lse_factor if use_lse else 0.0))
    rows, cols = torch.arange(S)[:, None], torch.arange(S)[None, :]
    if skip:  # the tiles a causal kernel visits: the key tile's programs start at its query tile
        visited = (rows // block_m) * block_m + block_m > (cols // block_n) * block_n
        if not mask:
            p = p * visited
    if skip_diagonal:  # key tiles that start at or after the query tile's start are never visited
        p = p * ((cols // block_n) * block_n < (rows // block_m) * block_m)
    dod, vd, qd, kd = (t.double().cpu() for t in (do, v, q, k))
    dp = dod @ vd.transpose(-2, -1)
    d = (dod * o.double().cpu()).sum(-1) if delta else torch.zeros_like(lse)
    ds = p * (dp - d[..., None])
    dq = sm_scale * ds @ kd
    sel = None
    if dkdv_tiles:
        n_qt = -(-S // block_m)
        if dkdv_tiles == "last":
            sel = (rows // block_m == n_qt - 1).expand(S, S)
        else:
            first = ((cols // block_n) * block_n // block_m) if skip else torch.zeros_like(cols)
            sel = rows // block_m == first
    pk, dsk = (p, ds) if sel is None else (p * sel, ds * sel)
    dk = sm_scale * dsk.transpose(-2, -1) @ qd
    dv = pk.transpose(-2, -1) @ dod
    if fp16_acc:
        dq, dk, dv = _fp16_accumulated(p, ds, qd, kd, dod, sm_scale, block_m, block_n)
    if dq_tile == "last":
        key_tile = cols // block_n
        starts = key_tile * block_n
        visits = (starts // block_m <= rows // block_m) if skip else torch.ones(S, S, dtype=torch.bool)
        last = (key_tile * visits).amax(-1, keepdim=True)  # the last key tile's program to store each query row
        dq = sm_scale * (ds * (key_tile == last)) @ kd
    elif isinstance(dq_tile, int) and not isinstance(dq_tile, bool):  # key tile dq_tile's part alone
        dq = sm_scale * (ds * (cols // block_n == dq_tile)) @ kd
    return dq, dk, dv


def one_key_tile(got, inputs, causal, sm_scale, block_m, block_n, atol: float, rtol: float) -> bool:
    """Whether every element of ``got`` (dQ) is one key tile's part alone: the mistake of a tl.store where ATOMIC_DQ
    needs tl.atomic_add. Which key tile's program stores last is the GPU's choice, element by element (a tile's store
    is many threads' writes; on the interpreter the last program's whole tile), so each element may hold any key
    tile's part."""
    S = got.shape[-2]
    g = got.double().cpu()
    fits = torch.zeros(g.shape, dtype=torch.bool)
    for j in range(-(-S // block_n)):
        part = replay(*inputs, causal, sm_scale, block_m, block_n, dq_tile=j)[0]
        fits |= (g - part).abs() <= atol + rtol * part.abs()
    return bool(fits.all())


def _fp16_accumulated(p, ds, q, k, do, sm_scale, block_m, block_n):
    """(dQ, dK, dV) with fp16 accumulators: each tile's product rounded to fp16 (``tl.dot(...).to(tl.float16)``),
    added, and the total rounded to fp16, tile by tile."""
    S = q.shape[-2]
    half = lambda t: t.to(torch.float16).double()
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(k)
    for start in range(0, S, block_n):
        dq = half(dq + half(ds[..., start:start + block_n] @ k[..., start:start + block_n, :]))
    for start in range(0, S, block_m):
        rows = slice(start, start + block_m)
        dk = half(dk + half(ds[..., rows, :].transpose(-2, -1) @ q[..., rows, :]))
        dv = half(dv + half(p[..., rows, :].transpose(-2, -1) @ do[..., rows, :]))
    return sm_scale * dq, sm_scale * dk, dv


# The remedy of every fp16-accumulator diagnosis of phase 7 (here and kernels.py's), one text.
FP32_ACCUMULATORS = ("keep the accumulators in fp32 (tl.zeros(..., dtype=tl.float32)) and add tl.dot's fp32 result "
                     "without converting it (tl.dot(a, b, acc)); convert P and dS to the inputs' dtype only for tl.dot, "
                     "and the gradients to theirs only at the store.")
FP16_ACCUMULATOR = ("an accumulator is held in fp16 (the output matches fp16 accumulation over the tiles, not fp32's): "
                    + FP32_ACCUMULATORS)


def fp16_accumulator_cause(outputs: dict, refs: dict, inputs, causal, sm_scale, block_m, block_n) -> str | None:
    """FP16_ACCUMULATOR when the outputs are several times closer to fp16 accumulation than to the reference."""
    dq, dk, dv = replay(*inputs, causal, sm_scale, block_m, block_n, fp16_acc=True)
    got = dict(dQ=dq, dK=dk, dV=dv)
    for name, out in outputs.items():
        o = out.double().cpu()
        if not torch.isfinite(o).all():
            return None
        to_ref, to_half = float((o - refs[name]).abs().max()), float((o - got[name]).abs().max())
        if to_ref > 0 and to_half < to_ref / 4:
            return FP16_ACCUMULATOR
    return None


def _replays(causal, S, block_m, block_n, kernel: str):
    """(keyword arguments of :func:`replay`, cause), the first that matches wins; ``kernel``: "dkdv" or "dq"."""
    which = "triton_attention_bwd_dkdv_kernel" if kernel == "dkdv" else "triton_attention_bwd_dq_kernel"
    out = [
        (dict(delta=False), "the D term is missing: dS = P ∘ (dP - D[:, None]) with D[row] = Σ_d dO·O, loaded from "
                            "delta_ptr for the query rows (the softmax's Jacobian subtracts it: without it the "
                            "gradient of every probability ignores that the row sums to 1)."),
        (dict(lse_factor=math.log(2)), "the scores are in log2 units (scaled by sm_scale · log2(e) for exp2) but the "
                                       "natural LSE is subtracted as it is: multiply LSE by log2(e) too, P = "
                                       "exp2(s · sm_scale · log2(e) - LSE · log2(e))."),
        (dict(lse_factor=LOG2E), "LSE is multiplied by log2(e) but P is computed with exp of natural-unit scores: "
                                 "use exp2 for both, or exp(s · sm_scale - LSE) with the LSE as stored."),
        (dict(use_lse=False), "P = exp(S) without subtracting the forward's LSE: the probabilities are exp(S - LSE), "
                              "with LSE[row] loaded from lse_ptr (the forward's log of the row's whole sum)."),
        (dict(scaled_scores=False), "the scores are not multiplied by sm_scale before the exponential: P = "
                                    "exp(Q Kᵀ · sm_scale - LSE), so with exp2 the scores take sm_scale · log2(e), "
                                    "not log2(e) alone (the LSE is the forward's, of the scaled scores)."),
        (dict(tile_softmax=True), "P is recomputed as a softmax over each key tile alone: its maximum and sum must be "
                                  "the whole row's, which the forward stored as LSE. Reuse it: P = exp(S - LSE[:, "
                                  "None]), nothing recomputed."),
    ]
    if causal:
        out += [
            (dict(mask=False, skip=False), f"`{which}` ignores CAUSAL: the forward was causal, so its probabilities "
                                           "are 0 for keys after their query; mask P (tl.where(query >= key, p, "
                                           "0)) and skip the tiles no query of which sees a key."),
            (dict(mask=False), f"`{which}` skips the right tiles but does not mask the diagonal ones: set P to 0 "
                               "where the key comes after the query (rows[:, None] >= cols[None, :])."),
        ]
    if kernel == "dq" and causal:
        out.append((dict(skip_diagonal=True), "the causal key loop stops before the query tile's own (diagonal) key "
                                              "tile: loop up to min((pid_m + 1) * BLOCK_M, seq_len) and mask the "
                                              "diagonal tile with rows[:, None] >= cols[None, :]."))
    if kernel == "dkdv":
        out += [
            (dict(dkdv_tiles="last"), "dK and dV hold the last query tile's part only: they must be summed over every "
                                      "query tile in fp32 accumulators (dk += ..., dv += ...) and stored once, after "
                                      "the loop."),
            (dict(dkdv_tiles="first"), "dK and dV hold the first query tile's part only: loop over every query tile "
                                       "(from the key tile's diagonal when causal) up to seq_len, adding each."),
        ]
    return out


SCALES = ((lambda c: 1.0 / c, "sm_scale is missing: dQ = sm_scale · dS K and dK = sm_scale · dSᵀ Q (S = Q Kᵀ · "
                              "sm_scale, so each carries the scale once)."),
          (lambda c: c, "sm_scale is applied twice: multiply dS K (dSᵀ Q) by sm_scale once."),
          (lambda c: LOG2E, "the gradient is multiplied by sm_scale · log2(e), the exp2 scale of the scores: the "
                            "chain rule gives sm_scale alone (log2(e) belongs inside exp2 only)."),
          (lambda c: 1.0 / LOG2E, "the gradient is divided by log2(e): multiply by sm_scale alone."))


def _factor(got: torch.Tensor, ref: torch.Tensor, atol: float = 0.0) -> float | None:
    """The c with got ≈ c · ref (least squares), when got is a multiple of ref, else None. ``atol``: the test's own
    tolerance of the right gradient, which a multiple of it carries times c (on a GPU, tf32's rounding: dQ without
    sm_scale, 4x the right one, was off 4x's tolerance from 4 · ref on an H200, 2026-11-28)."""
    denom = float((ref * ref).sum())
    if denom == 0 or not torch.isfinite(got).all():
        return None
    c = float((got * ref).sum()) / denom
    resid = float((got - c * ref).abs().max())
    return c if resid <= max(DIAGNOSIS.atol * float(ref.abs().max()) * 8, 2 * abs(c) * atol) else None


def scale_cause(name: str, got: torch.Tensor, ref: torch.Tensor, sm_scale: float, atol: float = 0.0) -> str | None:
    """The cause when ``got`` is ``ref`` times a wrong scale (``atol``: the test's tolerance of ``ref``)."""
    # 1% either way: on a GPU, tl.dot rounds fp32 inputs to tf32, and a least-squares factor of a right gradient
    # came out 0.9973, of one times log2(e) 1.439 (H200, 2026-11-28); the scales told apart differ far more.
    c = _factor(got.double().cpu(), ref, atol)
    if c is None or math.isclose(c, 1.0, rel_tol=1e-2):
        return None
    for fn, words in SCALES:
        if math.isclose(c, fn(sm_scale), rel_tol=1e-2):
            return f"{name} is off by a constant factor: {words}"
    return (f"{name} is the right gradient times {shown(f'{c:.4g}', 'a constant')}: a scale is wrong (dQ and dK "
            "carry sm_scale once, dV none).")


def diagnose(outputs: dict[str, torch.Tensor], tols: dict[str, tuple], refs: dict[str, torch.Tensor], inputs, causal,
             sm_scale, block_m, block_n, kernel: str, dq_tile_store: bool = False, fp32: bool = False) -> str | None:
    """The cause that matches every checked gradient of ``outputs`` (names from :data:`GRADS`), or None."""
    q, k, v, do, o, lse = inputs
    S = q.shape[-2]
    # the verdict's atol is relative to the right gradient's size: a replay is judged relative to its own
    rel = {n: tols[n][0] / max(float(refs[n].abs().max()), 1e-300) for n in outputs}
    close = lambda name, cand: bool(torch.allclose(outputs[name].double().cpu(), cand,
                                                   atol=rel[name] * float(cand.abs().max()), rtol=tols[name][1]))
    candidates = _replays(causal, S, block_m, block_n, kernel)
    if dq_tile_store and "dQ" in outputs and not close("dQ", refs["dQ"]) and one_key_tile(
            outputs["dQ"], inputs, causal, sm_scale, block_m, block_n, tols["dQ"][0], tols["dQ"][1]):
        return ONE_KEY_TILE
    for kwargs, words in candidates:
        dq, dk, dv = replay(q, k, v, do, o, lse, causal, sm_scale, block_m, block_n, **kwargs)
        got = dict(dQ=dq, dK=dk, dV=dv)
        if all(close(n, got[n]) for n in outputs) and not all(close(n, refs[n]) for n in outputs):
            return words
    for name in outputs:
        if name != "dV":
            cause = scale_cause(name, outputs[name], refs[name], sm_scale, tols[name][0])
            if cause:
                return cause
    if fp32:  # an fp32 run: fp16 accumulation rounds far more than the kernel's own arithmetic
        return fp16_accumulator_cause(outputs, refs, inputs, causal, sm_scale, block_m, block_n)
    return None


def nan_cause(name: str, data: str, S: int, block: int, mixed: bool = False, other_block: int | None = None) -> str:
    """Why a gradient holds NaN or inf; ``block`` is the tile of the kernel's programs, ``other_block`` its loop's."""
    if data == "huge_do":
        return (f"{name} holds inf or NaN with dO's values past fp16's range (fp16 ends at 65504): an accumulator or a "
                "tl.dot operand is held in fp16. In an fp32 run keep the accumulators in fp32 (tl.zeros(..., "
                "dtype=tl.float32)) and convert P and dS only to the inputs' own dtype (p.to(do.dtype)).")
    strides = ("in this test each has strides of its own (Q[b, h, m, d] at q_ptr + b*stride_qb + h*stride_qh + "
               "m*stride_qm + d*stride_qd, and likewise K, V, dO and the outputs with theirs).")
    if mixed and not S % block and not S % (other_block or block):
        return (f"{name} holds NaN, and every tile is whole here (seq_len = {S}), so no row past seq_len is read: a "
                "tensor is addressed with another's strides, and reads NaN from the memory around it: " + strides)
    tail = shown(f" (seq_len = {S} is not a multiple of the tiles of {block} here)",
                 " (seq_len is not a multiple of the tiles here)") if S % block else ""
    return (f"{name} holds NaN: the kernel read outside Q, K, V, dO, LSE or D (the memory around them holds NaN in "
            f"this test){tail}. Mask the loads of rows >= seq_len (other=0.0) and set P to 0 for them."
            + (" Or a tensor is addressed with another's strides: " + strides if mixed else ""))


def delta_cause(got: torch.Tensor, o, do) -> str:
    """The likely cause of a wrong D = rowsum(dO ∘ O)."""
    od, dod = o.double().cpu(), do.double().cpu()
    g = got.double().cpu().reshape(od.shape[:-1])
    close = lambda cand: bool(torch.allclose(g, cand, atol=DIAGNOSIS.atol * float(cand.abs().max() + 1),
                                             rtol=DIAGNOSIS.rtol))
    if close((od * od).sum(-1)) or close((dod * dod).sum(-1)):
        return "D is the sum of squares of one tensor: D[row] = Σ_d dO[row, d] · O[row, d], one load from each."
    if close(od.sum(-1)) or close(dod.sum(-1)):
        return "D is the row sum of one tensor alone: multiply dO by O element-wise first, then tl.sum(..., axis=1)."
    return ("D[pid_bh, row] must be Σ_d dO[b, h, row, d] · O[b, h, row, d] in fp32, stored at delta_ptr + pid_bh * "
            "seq_len + row for rows < seq_len; O and dO each addressed with their own strides.")


__all__ = ["GRADS", "FP16_ACCUMULATOR", "FP32_ACCUMULATORS", "replay", "one_key_tile", "diagnose", "scale_cause", "fp16_accumulator_cause", "nan_cause",
           "delta_cause"]

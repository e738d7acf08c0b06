"""Phase 6: checks for the fused LayerNorm forward and the attention forward.

    triton_layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride_x_row, stride_y_row,
                             n_cols, eps, BLOCK_SIZE)                    # grid (n_rows,)
    triton_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, <4 strides each of q, k, v, o>,
                            n_heads, seq_len, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL)
                                                                         # grid (cdiv(seq_len, BLOCK_M), batch * heads)

Each check launches the learner's kernel itself, the way the notebook's wrapper does, on fresh random inputs:

1. every input lies inside a buffer of NaN (around it, and in the "padded" layout between the rows of every
   head), so a load outside it poisons the result; every output lies inside a buffer of sentinels and starts out
   filled with another sentinel, so a stray store and an element never written are told apart from a wrong value;
2. the values are compared with an fp64 reference within a tolerance derived from the dtype, the device and the
   size of the scores (:func:`attention_tolerance`);
3. on the interpreter, the inputs are then stored so that they end exactly where an unreadable page begins (an
   electric fence) and the kernel runs again: an unmasked load past the last row crashes even when the scores it
   gives are thrown away by a mask.

On a failure the message names the likely cause, found by replaying known mistakes (no rescale, the scale applied
after the softmax, a causal mask off by one, the last key tile dropped, ...) on the same inputs.
"""
from __future__ import annotations

import math

import torch
import triton

from ..checking import (OUTPUT_SENTINEL, Fenced, KernelCheckError, compare, fence_supported, fresh_seed, generator,
                        stage)
from ..device import infer_device
from . import launch, require_triton_kernel

LAYER_NORM = "triton_layer_norm_kernel"
ATTENTION = "triton_attention_kernel"
SIGNATURES = {
    LAYER_NORM: "triton_layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride_x_row, "
                "stride_y_row, n_cols, eps, BLOCK_SIZE: tl.constexpr)",
    ATTENTION: "triton_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, stride_qb, stride_qh, stride_qm, "
               "stride_qd, stride_kb, stride_kh, stride_kn, stride_kd, stride_vb, stride_vh, stride_vn, stride_vd, "
               "stride_ob, stride_oh, stride_om, stride_od, n_heads, seq_len, sm_scale, HEAD_DIM: tl.constexpr, "
               "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr)",
}
UNWRITTEN = -54272.0  # what every output element holds before the kernel runs: exact in fp32, fp16 and bf16
LAYOUTS = ("contiguous", "padded", "bshd")
DTYPES = (torch.float32, torch.float16)
MIN_BLOCK = 16  # tl.dot needs 16 along every side on a GPU

# Unit roundoff of each dtype (half an ulp, relative) and why it enters the tolerance.
ROUNDOFF = {
    torch.float32: (2.0**-24, "fp32 keeps 24 significant bits"),
    torch.float16: (2.0**-11, "fp16 keeps 11 significant bits: the output is rounded once to fp16, and so are the "
                              "probabilities P before the P @ V tl.dot (tensor cores multiply fp16)"),
    torch.bfloat16: (2.0**-8, "bf16 keeps 8 significant bits: the output is rounded once to bf16, and so are the "
                              "probabilities P before the P @ V tl.dot (tensor cores multiply bf16)"),
}
HALF = (torch.float16, torch.bfloat16)  # P and O are rounded to these; the scores and the sums stay fp32
TF32_ROUNDOFF = 2.0**-11  # a GPU's tl.dot rounds fp32 inputs to tf32 (10 stored mantissa bits) by default


# ------------------------------------------------------------------------------------------------ buffers
class Placed:
    """A strided view inside a flat buffer whose other elements hold ``fill`` (NaN around inputs)."""

    def __init__(self, flat: torch.Tensor, view: torch.Tensor, fill: float, keep=None):
        self.flat, self.view, self.fill, self.keep = flat, view, fill, keep
        idx = torch.arange(flat.numel())
        inside = idx.as_strided(view.shape, view.stride(), view.storage_offset() - flat.storage_offset())
        self.inside = torch.zeros(flat.numel(), dtype=torch.bool)
        self.inside[inside.reshape(-1)] = True

    def guard_changes(self) -> int:
        outside = self.flat.detach().cpu()[~self.inside].float()
        if self.fill != self.fill:
            return int((~torch.isnan(outside)).sum())
        return int((outside != torch.tensor(self.fill, dtype=self.flat.dtype).float()).sum())


def _strides(shape: tuple[int, ...], layout: str, pad_rows: int) -> tuple[tuple[int, ...], int, int]:
    """(strides, offset, buffer size) of a (B, H, S, D) tensor in ``layout`` with ``pad_rows`` guard rows."""
    B, H, S, D = shape
    total = B * H * S * D
    if layout == "contiguous":  # guard rows before the first and after the last head only
        return (H * S * D, S * D, D, 1), pad_rows * D, total + 2 * pad_rows * D
    if layout == "padded":  # every head's rows followed by guard rows
        rows = S + 2 * pad_rows
        return (H * rows * D, rows * D, D, 1), pad_rows * D, B * H * rows * D
    if layout == "bshd":  # stored (batch, seq, heads, dim), seen as (batch, heads, seq, dim): heads interleaved
        return (S * H * D, D, H * D, 1), pad_rows * D, total + 2 * pad_rows * D
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def place(t: torch.Tensor, layout: str, pad_rows: int, device: str, fill: float = float("nan")) -> Placed:
    """A copy of the (B, H, S, D) ``t`` in ``layout`` inside a buffer of ``fill``."""
    strides, offset, size = _strides(tuple(t.shape), layout, pad_rows)
    flat = torch.full((size,), fill, dtype=t.dtype, device=device)
    view = flat.as_strided(t.shape, strides, offset)
    view.copy_(t)
    return Placed(flat, view, fill)


def place_output(shape, dtype, layout: str, pad_rows: int, device: str) -> Placed:
    out = place(torch.full(shape, UNWRITTEN, dtype=dtype), layout, pad_rows, device, fill=OUTPUT_SENTINEL)
    return out


def place_fenced(t: torch.Tensor, layout: str, device: str):
    """``t`` stored compactly in ``layout`` ending exactly where readable memory ends (the CPU: an unreadable
    page; a GPU under compute-sanitizer: its own allocation). None for the padded layout (its guards sit
    between the heads already)."""
    if layout == "padded":
        return None
    strides, _, _ = _strides(tuple(t.shape), layout, 0)
    n = t.numel()
    if device == "cpu":
        fence = Fenced(n, t.dtype, "end")
        flat = fence.tensor
    else:
        fence, flat = None, torch.empty(n, dtype=t.dtype, device=device)
    view = flat.as_strided(t.shape, strides, 0)
    view.copy_(t)
    return view, fence


# -------------------------------------------------------------------------------------------- LayerNorm
LN_TOLERANCES = {
    torch.float32: (2e-5, 2e-5, "fp32 results differ from an fp64 reference by rounding only: the mean and the "
                                "variance of up to a few thousand values, and one multiply-add"),
    torch.float16: (2e-3, 2e-3, "computed in fp32 and rounded once to fp16 (half an ulp is 4.9e-4 relative; "
                                "the outputs reach |y| ~ 4, where an ulp is 2e-3)"),
    torch.bfloat16: (4e-3, 8e-3, "computed in fp32 and rounded once to bf16: half an ulp is 3.9e-3 relative (8 "
                                 "times fp16's), and nearly 0 for y near 0"),
}
LN_STATS_TOLERANCE = (1e-5, 1e-5, "the mean and 1/std are fp32 in every dtype")


def make_ln_inputs(n_rows: int, n_cols: int, dtype: torch.dtype, data: str, seed: int):
    """Fresh (x, w, b). "randn": rows of std 2 whose means lie between 2 and 3 in size (either sign), so that a
    variance that counts the masked-off lanes (each adds mean²) is off by at least a few percent; "offset": rows
    around +1000, where mean(x²) - mean(x)² cancels in fp32."""
    g = generator(seed)
    x = torch.randn(n_rows, n_cols, generator=g) * 2
    if data == "offset":
        x = x + 1000.0
    elif data == "randn":
        sign = torch.where(torch.rand(n_rows, 1, generator=g) < 0.5, -1.0, 1.0)
        x = x + sign * (2 + torch.rand(n_rows, 1, generator=g))
    else:
        raise ValueError(f"data must be randn or offset, got {data!r}")
    w = (torch.rand(n_cols, generator=g) + 0.5).to(dtype)
    b = torch.randn(n_cols, generator=g).to(dtype)
    return x.to(dtype), w, b


def layer_norm_tolerance(dtype, mean_ref, rstd_ref, w) -> tuple[float, float, float]:
    """(atol, rtol, the error of an fp32 mean) for y: :data:`LN_TOLERANCES` plus what an fp32 mean costs. The
    fp32 mean of n values around |mean| is off by up to about 2·log2(n) fp32 roundoffs of |mean| (a tree sum), and
    y inherits that error times rstd·|w|: it matters only for rows far from 0 ("offset")."""
    atol, rtol, _ = LN_TOLERANCES[dtype]
    mean_err = 2 * math.log2(max(w.numel(), 2)) * 2.0**-24 * float(mean_ref.abs().max())
    return atol + mean_err * float(rstd_ref.max()) * float(w.abs().max()), rtol, mean_err


def layer_norm_ref(x, w, b, eps):
    """(y, mean, rstd) in fp64 on the CPU: y = (x - mean) / sqrt(var + eps) * w + b, var the biased variance."""
    x64 = x.double().cpu()
    mean = x64.mean(-1)
    var = x64.var(-1, unbiased=False)
    rstd = 1.0 / torch.sqrt(var + eps)
    y = (x64 - mean[:, None]) * rstd[:, None] * w.double().cpu() + b.double().cpu()
    return y, mean, rstd


def _ln_candidates(x, w, b, eps, block_size):
    x64, w64, b64 = x.double().cpu(), w.double().cpu(), b.double().cpu()
    n = x.shape[1]
    mean = x64.mean(-1, keepdim=True)
    var = x64.var(-1, unbiased=False, keepdim=True)
    padded_var = (((x64 - mean) ** 2).sum(-1, keepdim=True) + (block_size - n) * mean**2) / n
    norm = lambda m, v: (x64 - m) / torch.sqrt(v + eps)
    return [
        (norm(mean, var) * w64, "the bias is missing: y = (x - mean) * rstd * w + b."),
        (norm(mean, var) + b64, "the weight is missing: y = (x - mean) * rstd * w + b."),
        (norm(mean, x64.var(-1, unbiased=True, keepdim=True)) * w64 + b64,
         "the variance is divided by n_cols - 1: LayerNorm uses the biased variance, sum((x - mean)**2) / n_cols."),
        ((x64 - mean) / (torch.sqrt(var) + eps) * w64 + b64,
         "eps is added outside the square root: rstd = 1 / sqrt(var + eps)."),
        (norm(x64.sum(-1, keepdim=True) / block_size, var) * w64 + b64,
         f"the mean is divided by BLOCK_SIZE = {block_size} instead of n_cols = {n}."),
        (norm(mean, padded_var) * w64 + b64,
         "the variance counts the masked-off lanes: they load as 0, so x - mean is -mean there. Zero them before "
         "squaring: xc = tl.where(cols < n_cols, x - mean, 0.0)."),
    ]


def _ln_diagnose(y, x, w, b, eps, block_size, data):
    yc = y.detach().double().cpu()
    if (yc == UNWRITTEN).all():
        return "nothing was written to y: is there a tl.store to y_ptr + row * stride_y_row + cols?"
    if (yc == UNWRITTEN).any():
        r, c = (yc == UNWRITTEN).nonzero()[0].tolist()
        return (f"y[{r}, {c}] was never written: does each program store its whole row (mask cols < n_cols)?")
    if torch.isnan(yc).any():
        r, c = torch.isnan(yc).nonzero()[0].tolist()
        return (f"y[{r}, {c}] is NaN: the kernel read outside x, w or b (the memory around them holds NaN in this "
                "test). Mask the loads with cols < n_cols and use other=0.0.")
    atol, rtol, _ = LN_TOLERANCES[y.dtype]
    for cand, words in _ln_candidates(x, w, b, eps, block_size):
        if torch.allclose(yc, cand.to(y.dtype).double(), atol=atol, rtol=rtol):
            return words
    if data == "offset":
        return ("the rows are around +1000 here: computing the variance as mean(x**2) - mean(x)**2 loses every "
                "digit to cancellation in fp32. Subtract the mean first: var = sum((x - mean)**2) / n_cols.")
    return ("compare with the reference step by step: the mean over n_cols (masked lanes excluded), the biased "
            "variance of x - mean, rstd = 1 / sqrt(var + eps), then (x - mean) * rstd * w + b, computed in fp32.")


def check_layer_norm(kernel, n_rows: int, n_cols: int, dtype: torch.dtype = torch.float32, *, eps: float = 1e-5,
                     data: str = "randn", row_gap: int = 0, seed: int | None = None) -> None:
    """Launch ``triton_layer_norm_kernel`` like the wrapper does (grid (n_rows,), BLOCK_SIZE =
    next_power_of_2(n_cols)) and check y, mean and rstd. ``data``: "randn" or "offset" (rows around +1000);
    ``row_gap``: extra NaN elements between the rows of x and sentinels between those of y."""
    require_triton_kernel(kernel, LAYER_NORM)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    x, w, b = make_ln_inputs(n_rows, n_cols, dtype, data, seed)
    block = triton.next_power_of_2(n_cols)
    pad = max(64, block)
    context = (f"{n_rows} rows of {n_cols}, {str(dtype).replace('torch.', '')}, "
               f"{'rows around +1000' if data == 'offset' else 'random normal rows (std 2, means 2 to 3 in size)'}"
               f"{f', rows {n_cols + row_gap} apart' if row_gap else ''}, BLOCK_SIZE={block}, seed {seed}")
    stride = n_cols + row_gap
    xs = torch.full((pad + n_rows * stride + pad,), float("nan"), dtype=dtype, device=device)
    xv = xs[pad:pad + n_rows * stride].view(n_rows, stride)[:, :n_cols]
    xv.copy_(x)
    ws = torch.full((2 * pad + n_cols,), float("nan"), dtype=dtype, device=device)
    bs = ws.clone()
    wv, bv = ws[pad:pad + n_cols], bs[pad:pad + n_cols]
    wv.copy_(w)
    bv.copy_(b)
    ys = torch.full((pad + n_rows * stride + pad,), OUTPUT_SENTINEL, dtype=dtype, device=device)
    yv = ys[pad:pad + n_rows * stride].view(n_rows, stride)[:, :n_cols]
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
    inside = torch.zeros_like(ys, dtype=torch.bool)
    inside[pad:pad + n_rows * stride].view(n_rows, stride)[:, :n_cols] = True
    stray = int((ys[~inside] != OUTPUT_SENTINEL).sum())
    if stray or any(int((torch.cat([s[:pad], s[pad + n_rows:]]) != OUTPUT_SENTINEL).sum()) for s in stats):
        raise KernelCheckError(
            f"The kernel wrote outside y, mean or rstd ({context}).\n"
            "Likely cause: the tl.store to y is not masked with cols < n_cols (a row's block is BLOCK_SIZE wide), "
            "or a row is addressed without stride_y_row.")
    y_ref, mean_ref, rstd_ref = layer_norm_ref(x, w, b, eps)
    atol, rtol, mean_err = layer_norm_tolerance(dtype, mean_ref, rstd_ref, w)
    ok, msg = compare(yv, y_ref, atol=atol, rtol=rtol, name="y")
    if not ok:
        raise KernelCheckError(f"Wrong values ({context}).\n{msg}\n"
                               f"Likely cause: {_ln_diagnose(yv, x, w, b, eps, block, data)}")
    s_atol, s_rtol, _ = LN_STATS_TOLERANCE
    s_atol += mean_err
    for name, got, ref in (("mean", mean_v, mean_ref), ("rstd", rstd_v, rstd_ref)):
        ok, msg = compare(got, ref, atol=s_atol, rtol=s_rtol, name=name)
        if not ok:
            raise KernelCheckError(f"Wrong {name} ({context}).\n{msg}\nLikely cause: the kernel must store each "
                                   f"row's {name} (fp32) at {name}_ptr + row; the backward needs them.")
    if fence_supported(device):
        fx, keep = (Fenced(n_rows * n_cols, dtype, "end"), None) if device == "cpu" else (None, None)
        xf = fx.tensor.view(n_rows, n_cols) if fx else torch.empty(n_rows, n_cols, dtype=dtype, device=device)
        xf.copy_(x)
        y2 = torch.empty(n_rows, n_cols, dtype=dtype, device=device)
        m2, r2 = (torch.empty(n_rows, device=device) for _ in range(2))
        stage(f"FENCE-READ: running `{LAYER_NORM}` on an x that ends exactly where readable memory ends "
              f"({context}): a load of the last row without the mask cols < n_cols crashes here")
        try:
            kernel[(n_rows,)](xf, y2, wv, bv, m2, r2, n_cols, n_cols, n_cols, eps, BLOCK_SIZE=block)
        except Exception as err:  # pragma: no cover - the first launch would have failed the same way
            raise KernelCheckError(f"The second run raised {type(err).__name__}: {err}") from None
        ok, msg = compare(y2, y_ref, atol=atol, rtol=rtol, name="y")
        if not ok:
            raise KernelCheckError(f"Wrong values on the second run, x stored without guards ({context}).\n{msg}")
    stage("done")


# -------------------------------------------------------------------------------------------- attention
def attention_ref(q, k, v, causal: bool, sm_scale: float):
    """(O, LSE) in fp64 on the CPU: O = softmax(Q Kᵀ · sm_scale) V, LSE = logsumexp of each row of scores."""
    s = (q.double().cpu() @ k.double().cpu().transpose(-2, -1)) * sm_scale
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v.double().cpu(), torch.logsumexp(s, -1)


def attention_tolerance(dtype: torch.dtype, device: str, max_score: float, max_v: float) -> tuple[float, float, str]:
    """(atol, rtol, why) for O: a relative error δ in the probabilities moves O by at most δ·max|V|.

    δ comes from rounding the scores (u·|score| for a unit roundoff u of the arithmetic that produced them) and
    from rounding P to the input dtype before P @ V; the output's own rounding is the rtol.
    """
    u_out, why_out = ROUNDOFF[dtype]
    u_dot = TF32_ROUNDOFF if (dtype == torch.float32 and device == "cuda") else 2.0**-24
    u_p = u_out if dtype in HALF else u_dot
    delta = 4 * (u_dot * max(max_score, 1.0) * 2 + u_p)
    atol = delta * max(max_v, 1.0) + 8 * u_out
    rtol = 4 * u_out if dtype in HALF else max(4 * u_dot, 1e-5)
    why = (f"{why_out}; the scores (up to {max_score:.3g} here) are computed with unit roundoff {u_dot:.2g}"
           f"{' (tf32 on the GPU)' if u_dot == TF32_ROUNDOFF else ''}, and a relative error δ in the probabilities "
           f"moves O by at most δ·max|V| (max|V| = {max_v:.3g})")
    return atol, rtol, why


LSE_TOLERANCE = {"cpu": (2e-5, 1e-5), "cuda": (2e-3, 1e-3)}  # plus the scores' rounding (attention_tolerance)


def make_qkv(batch, heads, seq_len, head_dim, dtype, data: str, seed: int):
    """Fresh Q, K, V. "randn": N(0, 1); "large": Q and K ~ N(0, 20²), scores of several hundred, so that exp
    overflows without the max subtracted; "shifted": V ~ 1 + N(0, 1), so a lost normalisation shows; "huge_v": V ~
    N(0, 1) · 2^17, past fp16's largest value (65504), so an accumulator (or P @ V) held in fp16 overflows (fp32 only:
    on a GPU, where fp32 tl.dot rounds to tf32, the tolerance cannot tell an fp16 accumulator's rounding apart)."""
    if data == "huge_v" and dtype != torch.float32:
        raise ValueError("data='huge_v' is for fp32 inputs (the test is of an fp32 kernel's range)")
    g = generator(seed)
    shape = (batch, heads, seq_len, head_dim)
    q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
    if data == "large":
        q, k = q * 20, k * 20
    elif data == "shifted":
        v = v + 1.0
    elif data == "huge_v":
        v = v * 2.0**17
    elif data != "randn":
        raise ValueError(f"data must be randn, large, shifted or huge_v, got {data!r}")
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _tiled(q, k, v, causal, sm_scale, block_n, *, rescale_acc=True, rescale_l=True, drop_last=False,
           scale_after=False, diag=0, block_m=None, compute=torch.float64, p_dtype=None):
    """Replay a tiled online-softmax forward in ``compute`` (fp64), with one mistake switched on; returns O.
    ``p_dtype``: round P to it before P @ V, as a kernel does (fp32 ``compute`` then replays a correct kernel)."""
    q, k, v = q.to(compute).cpu(), k.to(compute).cpu(), v.to(compute).cpu()
    S = q.shape[-2]
    scale = 1.0 if scale_after else sm_scale
    m = torch.full(q.shape[:-1], float("-inf"), dtype=compute)
    l = torch.zeros(q.shape[:-1], dtype=compute)
    acc = torch.zeros(q.shape, dtype=compute)
    rows = torch.arange(S)[:, None]
    end = S // block_n * block_n if drop_last else S
    for start in range(0, end, block_n):
        cols = torch.arange(start, min(start + block_n, S))[None, :]
        s = (q @ k[..., start:start + block_n, :].transpose(-2, -1)) * scale
        if causal:
            s = s.masked_fill(rows + diag < cols, float("-inf"))
            if block_m:  # the kernel visits only the key tiles up to the end of its query tile
                s = s.masked_fill(cols >= (rows // block_m + 1) * block_m, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        finite = torch.isfinite(m_new)
        m_safe = torch.where(finite, m_new, torch.zeros_like(m_new))
        p = torch.exp(s - m_safe[..., None])
        alpha = torch.where(finite, torch.exp(m - m_safe), torch.zeros_like(m))
        l = (l * alpha if rescale_l else l) + p.sum(-1)
        p = p if p_dtype is None else p.to(p_dtype).to(compute)
        acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ v[..., start:start + block_n, :]
        m = m_new
    o = acc / l[..., None]
    return o * sm_scale if scale_after else o


def _attention_diagnose(o, lse, q, k, v, causal, sm_scale, block_m, block_n, tol, ref_lse, data) -> str:
    oc = o.detach().double().cpu()
    if (oc == UNWRITTEN).all():
        return "nothing was written to O: is there a tl.store to o_ptr with this program's rows?"
    if (oc == UNWRITTEN).any():
        b, h, r, d = (oc == UNWRITTEN).nonzero()[0].tolist()
        return (f"O[{b}, {h}, {r}, {d}] was never written: does every program store all BLOCK_M rows of its query "
                f"tile (mask rows < seq_len) for its (batch, head) = (pid_1 // n_heads, pid_1 % n_heads)?")
    atol, rtol = tol
    close = lambda cand: bool(torch.allclose(oc, cand.to(o.dtype).double(), atol=atol, rtol=rtol, equal_nan=True))
    S = q.shape[-2]
    if torch.isnan(oc).any() or torch.isinf(oc).any():
        if data == "large":
            return ("O holds NaN or inf with scores of several hundred: exp overflows unless the running maximum "
                    "is subtracted first (p = exp2(s - m_new), and alpha = exp2(m_old - m_new) for the rescale).")
        if data == "huge_v":
            return ("O holds inf or NaN with V's values past fp16's range (|V| up to "
                    f"{float(v.abs().max()):.3g}, fp16 ends at 65504): the accumulator or P @ V is held in fp16. In an "
                    "fp32 run keep everything fp32: acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32), and "
                    "convert P only to V's own dtype (p.to(v.dtype)) for the tl.dot.")
        if causal and close(_tiled(q, k, v, causal, sm_scale, block_n, diag=-1)):
            return ("the causal mask is off by one: query i must see keys j <= i (the diagonal included), so "
                    "keep offs_m[:, None] >= cols[None, :]; with > instead, row 0 sees no key at all and is NaN.")
        b, h, r, d = (torch.isnan(oc) | torch.isinf(oc)).nonzero()[0].tolist()
        tail = f" (seq_len = {S} is not a multiple of BLOCK_N = {block_n})" if S % block_n else ""
        return (f"O[{b}, {h}, {r}, {d}] is NaN: the kernel read outside Q, K or V (the memory around them holds NaN "
                f"in this test){tail}. Mask the loads of rows >= seq_len (other=0.0) and give the scores of keys "
                "past seq_len the value -inf before the maximum and the exponential.")
    candidates = [
        (dict(rescale_acc=False), "the accumulator is not rescaled when the running maximum grows: before adding "
                                  "P @ V, multiply acc by alpha = exp(m_old - m_new), as the sum l is."),
        (dict(rescale_acc=False, rescale_l=False), "neither the accumulator nor the running sum is rescaled when "
                                                   "the running maximum grows: multiply both by exp(m_old - m_new)."),
        (dict(scale_after=True), "sm_scale is applied after the softmax: multiply the scores Q·Kᵀ by sm_scale before "
                                 "the maximum and the exponential (softmax(s)·c is not softmax(s·c))."),
        (dict(drop_last=True), f"the last key tile is dropped: seq_len = {S} is not a multiple of BLOCK_N = "
                               f"{block_n}, so loop over tl.cdiv(seq_len, BLOCK_N) tiles and mask the last one."),
    ]
    if causal:
        candidates += [
            (dict(diag=1, block_m=block_m), "the causal mask is off by one: query i must see keys j <= i and not j = i + 1; keep "
                           "offs_m[:, None] >= cols[None, :]."),
            (dict(diag=1), "the causal mask is off by one: query i must see keys j <= i and not j = i + 1; keep "
                           "offs_m[:, None] >= cols[None, :]."),
            (dict(diag=-1), "the causal mask is off by one: query i must see key j = i too (the diagonal); keep "
                            "offs_m[:, None] >= cols[None, :], not >."),
        ]
    for kwargs, words in candidates:
        try:
            if close(_tiled(q, k, v, causal, sm_scale, block_n, **kwargs)):
                return words
        except RuntimeError:
            continue
    if close(attention_ref(q, k, v, not causal, sm_scale)[0]):
        return ("the result is that of " + ("non-causal" if causal else "causal") + " attention: "
                + ("with CAUSAL, query i may only see keys j <= i (mask the scores with -inf where j > i)."
                   if causal else "without CAUSAL every query sees every key."))
    if close(attention_ref(q, k, v, causal, 1.0)[0]):
        return "sm_scale is not applied: multiply the scores Q·Kᵀ by sm_scale (1/sqrt(HEAD_DIM) by default)."
    ref = attention_ref(q, k, v, causal, sm_scale)[0]
    err = (oc - ref).abs().max().item()
    if err < 64 * atol:
        return ("the values are close but not within the rounding of an fp32 computation: keep the accumulator, "
                "the running maximum and the sum in fp32 (acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)), "
                "convert P to V's dtype only for the tl.dot, and O to its dtype only at the store.")
    return ("compare with the online softmax of phase 2, tile by tile: s = (q · kᵀ) · scale, m_new = max(m, "
            "max(s)), p = exp(s - m_new), alpha = exp(m - m_new), l = l·alpha + sum(p), acc = acc·alpha + p @ v, "
            "and O = acc / l at the end.")


def run_attention(kernel, q, k, v, o, lse, causal, sm_scale, block_m, block_n, *, context, device, stage_text=None):
    B, H, S, D = q.shape
    grid = (triton.cdiv(S, block_m), B * H)
    args = (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(), H, S, sm_scale)
    kwargs = {"HEAD_DIM": D, "BLOCK_M": block_m, "BLOCK_N": block_n, "CAUSAL": causal}
    launch(kernel, grid, args, kwargs, name=ATTENTION, signature=SIGNATURES[ATTENTION], context=context,
           device=device, stage_text=stage_text)


def check_attention(kernel, batch: int, heads: int, seq_len: int, head_dim: int, block_m: int = 16,
                    block_n: int = 16, *, causal: bool = False, dtype: torch.dtype = torch.float32,
                    layout: str = "contiguous", data: str = "randn", sm_scale: float | None = None,
                    seed: int | None = None) -> None:
    """Launch ``triton_attention_kernel`` on fresh (batch, heads, seq_len, head_dim) Q, K, V and check O and LSE.

    Raises :class:`KernelCheckError` with a message for the learner on the first problem found."""
    require_triton_kernel(kernel, ATTENTION)
    for label, value in (("BLOCK_M", block_m), ("BLOCK_N", block_n), ("HEAD_DIM", head_dim)):
        if value < MIN_BLOCK or value & (value - 1):
            raise ValueError(f"{label} = {value}: tests use powers of two >= {MIN_BLOCK} (tl.dot on a GPU)")
    if block_m % block_n:
        raise ValueError(f"BLOCK_M = {block_m} must be a multiple of BLOCK_N = {block_n}")
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    sm_scale = head_dim**-0.5 if sm_scale is None else sm_scale
    q, k, v = make_qkv(batch, heads, seq_len, head_dim, dtype, data, seed)
    ref_o, ref_lse = attention_ref(q, k, v, causal, sm_scale)
    max_score = float(ref_lse.abs().max()) + math.log(seq_len)
    atol, rtol, _ = attention_tolerance(dtype, device, max_score, float(v.abs().max()))
    l_atol, l_rtol = LSE_TOLERANCE[device]
    l_atol += 8 * (TF32_ROUNDOFF if (device == "cuda" and dtype == torch.float32) else 2.0**-24) * max_score
    name = str(dtype).replace("torch.", "")
    context = (f"batch={batch}, heads={heads}, seq_len={seq_len}, HEAD_DIM={head_dim}, BLOCK_M={block_m}, "
               f"BLOCK_N={block_n}, {'causal' if causal else 'not causal'}, {name}, {layout} layout, {data} inputs, "
               f"seed {seed}")
    pad = max(block_m, block_n) + 8
    gq, gk, gv = (place(t, layout, pad, device) for t in (q, k, v))
    go = place_output(q.shape, dtype, layout, pad, device)
    lse_flat = torch.full((2 * pad + batch * heads * seq_len,), OUTPUT_SENTINEL, dtype=torch.float32, device=device)
    lse = lse_flat[pad:pad + batch * heads * seq_len].view(batch * heads, seq_len)
    lse.fill_(UNWRITTEN)
    run_attention(kernel, gq.view, gk.view, gv.view, go.view, lse, causal, sm_scale, block_m, block_n,
                  context=context, device=device)
    if not all(torch.equal(g.view.cpu(), t) for g, t in ((gq, q), (gk, k), (gv, v))) or \
            any(g.guard_changes() for g in (gq, gk, gv)):
        raise KernelCheckError(f"The kernel changed Q, K or V or the memory around them ({context}).\n"
                               "Likely cause: a tl.store to q_ptr, k_ptr or v_ptr instead of o_ptr.")
    stray = go.guard_changes()
    lse_stray = int((torch.cat([lse_flat[:pad], lse_flat[pad + lse.numel():]]) != OUTPUT_SENTINEL).sum())
    if stray or lse_stray:
        what = "O" if stray else "LSE"
        raise KernelCheckError(
            f"{stray or lse_stray} element(s) outside {what} were written ({context}).\n"
            "Likely cause: the tl.store of the query tile is not masked with rows < seq_len (the last tile has "
            f"rows past seq_len = {seq_len} when it is not a multiple of BLOCK_M = {block_m})"
            + (", or O is not addressed with its own strides stride_ob, stride_oh, stride_om, stride_od."
               if layout != "contiguous" else "."))
    ok, msg = compare(go.view, ref_o, atol=atol, rtol=rtol, name="O")
    if not ok:
        cause = _attention_diagnose(go.view, lse, q, k, v, causal, sm_scale, block_m, block_n, (atol, rtol), ref_lse, data)
        if layout != "contiguous" and "compare with" in cause:
            cause = ("the kernel does not follow the stride arguments: in this test Q, K, V and O are stored "
                     f"{'with gaps between the heads' if layout == 'padded' else 'as (batch, seq, heads, dim)'}. "
                     "Address Q[b, h, m, d] as q_ptr + b*stride_qb + h*stride_qh + m*stride_qm + d*stride_qd, and "
                     "K, V, O likewise with their own strides.")
        raise KernelCheckError(f"Wrong values ({context}).\n{msg}\nLikely cause: {cause}")
    ok, msg = compare(lse, ref_lse.reshape(batch * heads, seq_len), atol=l_atol, rtol=l_rtol, name="LSE")
    if not ok:
        got = lse.detach().double().cpu().reshape(ref_lse.shape)
        if torch.allclose(got, ref_lse / math.log(2), atol=10 * l_atol, rtol=10 * l_rtol):
            hint = ("LSE is in base 2: with exp2 and scores scaled by log2(e), the natural log-sum-exp is "
                    "(m + log2(l)) · ln(2).")
        else:
            hint = ("LSE[row] must be the natural log of the sum over keys of exp(scaled score), i.e. m + log(l) "
                    "with the running maximum m and sum l of the scaled scores (fp32, stored at lse_ptr + "
                    "(batch * n_heads + head) * seq_len + row, masked with rows < seq_len).")
        raise KernelCheckError(f"Wrong log-sum-exp ({context}).\n{msg}\nLikely cause: {hint}")

    if fence_supported(device) and layout != "padded":
        fenced = [place_fenced(t, layout, device) for t in (q, k, v)]
        o2 = place_output(q.shape, dtype, layout, pad, device)
        lse2 = torch.empty(batch * heads, seq_len, device=device)
        run_attention(kernel, *(f[0] for f in fenced), o2.view, lse2, causal, sm_scale, block_m, block_n,
                      context=context, device=device,
                      stage_text=f"FENCE-READ: running `{ATTENTION}` on Q, K and V that end exactly where readable "
                                 f"memory ends ({context}): a load of a query or key row >= seq_len without a mask "
                                 "crashes here, even when its scores are then masked with -inf")
        ok, msg = compare(o2.view, ref_o, atol=atol, rtol=rtol, name="O")
        if not ok:
            raise KernelCheckError(f"Wrong values on the second run, Q, K and V stored without guards "
                                   f"({context}).\n{msg}")
    stage("done")


# ----------------------------------------------------------------------------------- LayerNorm backward
LN_BACKWARD = "triton_layer_norm_backward_kernel"
SIGNATURES[LN_BACKWARD] = ("triton_layer_norm_backward_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, "
                           "dw_partial_ptr, db_partial_ptr, stride_row, n_rows, n_cols, "
                           "ROWS_PER_PROGRAM: tl.constexpr, BLOCK_SIZE: tl.constexpr)")
LN_BACKWARD_TOLERANCES = {
    torch.float32: (1e-4, 1e-4, "dx sums n_cols products twice (c1, c2) in fp32; dw and db add up to a few hundred "
                                "rows' terms in another order than the fp64 reference"),
    torch.float16: (4e-3, 4e-3, "dx is rounded once to fp16 (4.9e-4 relative) after an fp32 computation; dw and "
                                "db stay fp32"),
    torch.bfloat16: (4e-3, 8e-3, "dx is rounded once to bf16 (3.9e-3 relative) after an fp32 computation; dw and "
                                 "db stay fp32"),
}


def layer_norm_backward_ref(x, w, b, dy, eps):
    """(dx, dw, db) in fp64 by torch.autograd through the fp64 reference."""
    x64 = x.double().cpu().requires_grad_()
    w64 = w.double().cpu().requires_grad_()
    b64 = b.double().cpu().requires_grad_()
    y = torch.nn.functional.layer_norm(x64, (x.shape[1],), w64, b64, eps)
    y.backward(dy.double().cpu())
    return x64.grad, w64.grad, b64.grad


def check_layer_norm_backward(kernel, n_rows: int, n_cols: int, rows_per_program: int = 4,
                              dtype: torch.dtype = torch.float32, *, eps: float = 1e-5, row_gap: int = 0,
                              seed: int | None = None) -> None:
    """Launch ``triton_layer_norm_backward_kernel`` like the notebook's LayerNormFunction.backward does (grid
    (cdiv(n_rows, ROWS_PER_PROGRAM),), one partial row of dw and db per program, summed afterwards) and check dx,
    dw and db against torch.autograd in fp64."""
    require_triton_kernel(kernel, LN_BACKWARD)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    g = generator(seed)
    x = (torch.randn(n_rows, n_cols, generator=g) * 2 + 0.5).to(dtype)
    w = (torch.rand(n_cols, generator=g) + 0.5).to(dtype)
    b = torch.randn(n_cols, generator=g).to(dtype)
    dy = torch.randn(n_rows, n_cols, generator=g).to(dtype)
    _, mean, rstd = layer_norm_ref(x, w, b, eps)
    mean, rstd = mean.float(), rstd.float()
    block = triton.next_power_of_2(n_cols)
    n_prog = triton.cdiv(n_rows, rows_per_program)
    pad = max(64, block)
    stride = n_cols + row_gap
    context = (f"{n_rows} rows of {n_cols}, {str(dtype).replace('torch.', '')}, ROWS_PER_PROGRAM="
               f"{rows_per_program} ({n_prog} programs), BLOCK_SIZE={block}"
               f"{f', rows {stride} apart' if row_gap else ''}, seed {seed}")

    def rows_buffer(t, fill):
        buf = torch.full((pad + n_rows * stride + pad,), fill, dtype=dtype, device=device)
        view = buf[pad:pad + n_rows * stride].view(n_rows, stride)[:, :n_cols]
        view.copy_(t)
        return buf, view

    def vec(t, fill=float("nan")):
        buf = torch.full((2 * pad + t.numel(),), fill, dtype=t.dtype, device=device)
        view = buf[pad:pad + t.numel()]
        view.copy_(t.reshape(-1))
        return buf, view

    (xb, xv), (dyb, dyv) = rows_buffer(x, float("nan")), rows_buffer(dy, float("nan"))
    (wb, wv), (mb, mv), (rb, rv) = vec(w), vec(mean), vec(rstd)
    dxb, dxv = rows_buffer(torch.full((n_rows, n_cols), UNWRITTEN), OUTPUT_SENTINEL)
    dwb, dwv = vec(torch.full((n_prog, n_cols), UNWRITTEN), OUTPUT_SENTINEL)
    dbb, dbv = vec(torch.full((n_prog, n_cols), UNWRITTEN), OUTPUT_SENTINEL)
    args = (dyv, xv, wv, mv, rv, dxv, dwv, dbv, stride, n_rows, n_cols)
    launch(kernel, (n_prog,), args, {"ROWS_PER_PROGRAM": rows_per_program, "BLOCK_SIZE": block}, name=LN_BACKWARD,
           signature=SIGNATURES[LN_BACKWARD], context=context, device=device)
    inside = torch.zeros(dxb.numel(), dtype=torch.bool)
    inside[pad:pad + n_rows * stride].view(n_rows, stride)[:, :n_cols] = True
    stray = int((dxb.cpu()[~inside] != OUTPUT_SENTINEL).sum())
    stray += sum(int((torch.cat([t[:pad], t[-pad:]]) != OUTPUT_SENTINEL).sum()) for t in (dwb, dbb))
    if stray:
        raise KernelCheckError(f"{stray} element(s) outside dx, dw_partial or db_partial were written ({context}).\n"
                               "Likely cause: a store without the mask cols < n_cols, or a row past n_rows stored "
                               "(the last program has fewer than ROWS_PER_PROGRAM rows: skip rows >= n_rows), or a "
                               "partial row addressed other than dw_partial_ptr + pid * n_cols + cols.")
    dx_ref, dw_ref, db_ref = layer_norm_backward_ref(x, w, b, dy, eps)
    atol, rtol, _ = LN_BACKWARD_TOLERANCES[dtype]
    ok, msg = compare(dxv, dx_ref, atol=atol, rtol=rtol, name="dx")
    if not ok:
        dxc = dxv.detach().double().cpu()
        if (dxc == UNWRITTEN).any():
            r, c = (dxc == UNWRITTEN).nonzero()[0].tolist()
            cause = (f"dx[{r}, {c}] was never written: program pid handles rows pid * ROWS_PER_PROGRAM + i for i in "
                     "range(ROWS_PER_PROGRAM); does it store every one of them (rows < n_rows)?")
        elif torch.isnan(dxc).any():
            cause = "dx holds NaN: a load outside x, dy or w (mask cols < n_cols, other=0.0; rows < n_rows)."
        else:
            xhat = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
            wdy = w.double() * dy.double()
            no_mean_terms = wdy * rstd.double()[:, None]
            if torch.allclose(dxc, no_mean_terms, atol=atol, rtol=rtol):
                cause = ("dx = w·dy·rstd misses the terms that come from the mean and the variance depending on x: "
                         "dx = (w·dy - (xhat·c1 + c2))·rstd with c1 = sum(xhat·w·dy)/n_cols, c2 = sum(w·dy)/n_cols.")
            elif torch.allclose(dxc, (wdy - xhat * (xhat * wdy).mean(-1, keepdim=True)) * rstd.double()[:, None],
                                atol=atol, rtol=rtol):
                cause = "the c2 = sum(w·dy)/n_cols term is missing: dx = (w·dy - (xhat·c1 + c2))·rstd."
            else:
                cause = ("dx = (w·dy - (xhat·c1 + c2))·rstd with xhat = (x - mean)·rstd (0 in masked lanes), "
                         "c1 = sum(xhat·w·dy)/n_cols and c2 = sum(w·dy)/n_cols, all in fp32.")
        raise KernelCheckError(f"Wrong dx ({context}).\n{msg}\nLikely cause: {cause}")
    for name, part, ref in (("dw", dwv, dw_ref), ("db", dbv, db_ref)):
        p = part.detach().cpu().view(n_prog, n_cols).double()
        if (p == UNWRITTEN).any():
            r, c = (p == UNWRITTEN).nonzero()[0].tolist()
            raise KernelCheckError(f"{name}_partial[{r}, {c}] was never written ({context}).\nLikely cause: each "
                                   f"program must store its partial {name} (summed over its rows) at "
                                   f"{name}_partial_ptr + pid * n_cols + cols, masked with cols < n_cols.")
        ok, msg = compare(p.sum(0), ref, atol=atol * n_rows ** 0.5, rtol=rtol, name=f"{name} (partials summed)")
        if not ok:
            hint = (f"{name} is the sum over every row of " + ("dy·xhat" if name == "dw" else "dy") +
                    f": each program adds its ROWS_PER_PROGRAM rows into an fp32 accumulator (start it at 0 "
                    "before the row loop, and do not add rows >= n_rows) and stores it once, at the end.")
            xhat = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
            terms = dy.double() * xhat if name == "dw" else dy.double()
            last_rows = [min((i + 1) * rows_per_program, n_rows) - 1 for i in range(n_prog)]
            first_rows = [i * rows_per_program for i in range(n_prog)]
            for picked in (last_rows, first_rows):
                if torch.allclose(p, terms[picked], atol=atol, rtol=rtol):
                    hint = (f"each program's partial {name} holds only one of its rows: it must be summed over all "
                            f"of the program's rows ({name} += ... inside the row loop, starting from 0). " + hint)
            raise KernelCheckError(f"Wrong {name} ({context}).\n{msg}\nLikely cause: {hint}")
    if fence_supported(device):
        fx = Fenced(n_rows * n_cols, dtype, "end") if device == "cpu" else None
        fdy = Fenced(n_rows * n_cols, dtype, "end") if device == "cpu" else None
        x2 = fx.tensor.view(n_rows, n_cols) if fx else torch.empty(n_rows, n_cols, dtype=dtype, device=device)
        dy2 = fdy.tensor.view(n_rows, n_cols) if fdy else torch.empty(n_rows, n_cols, dtype=dtype, device=device)
        x2.copy_(x)
        dy2.copy_(dy)
        dx2 = torch.empty(n_rows, n_cols, dtype=dtype, device=device)
        dw2, db2 = (torch.empty(n_prog, n_cols, device=device) for _ in range(2))
        stage(f"FENCE-READ: running `{LN_BACKWARD}` on x and dy that end exactly where readable memory ends "
              f"({context}): a load of the last row without the mask cols < n_cols, or of a row >= n_rows, crashes here")
        kernel[(n_prog,)](dy2, x2, wv, mv, rv, dx2, dw2, db2, n_cols, n_rows, n_cols,
                          ROWS_PER_PROGRAM=rows_per_program, BLOCK_SIZE=block)
        ok, msg = compare(dx2, dx_ref, atol=atol, rtol=rtol, name="dx")
        if not ok:
            raise KernelCheckError(f"Wrong dx on the second run, x and dy stored without guards ({context}).\n{msg}")
    stage("done")

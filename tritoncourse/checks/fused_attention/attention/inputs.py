"""Phase 6, attention: what the checks give the kernel and what they expect of it.

Q, K, V and O in buffers of their own layouts (contiguous, guard rows between heads, a permuted (batch, seq,
heads, dim) view, a slice of a fused QKV projection), fenced copies for the interpreter's electric fence, fresh
inputs, the fp64 reference and its tolerance. The package (:mod:`..attention`) runs the check; :mod:`.diagnosis` names
the likely cause of a failure.
"""
from __future__ import annotations

import math

import torch

from ....checking import fenced_copy, generator
from ....tolerances import ATTENTION_LSE, ROUNDOFF, TF32_ROUNDOFF  # unit roundoffs; LSE's tolerance
from ...common.strided import (LAYOUT_WORDS, LAYOUTS, UNWRITTEN, Placed, place, place_inputs,  # noqa: F401
                              place_output)
from ...common.strided import buffer_room as _room, layout_strides as _strides  # noqa: F401

# Q, K, V, O each laid out differently: every stride of one tensor used for another's gives other addresses
PRESETS = {"mixed": ("bshd", "fused", "padded", "contiguous"), "fused_qkv": ("fused", "fused", "fused", "contiguous")}
TENSORS = ("Q", "K", "V", "O")
ROW_LETTER = {"Q": "m", "K": "n", "V": "n", "O": "m"}
DTYPES = (torch.float32, torch.float16)
MIN_BLOCK = 16  # tl.dot needs 16 along every side on a GPU

HALF = (torch.float16, torch.bfloat16)  # P and O are rounded to these; the scores and the sums stay fp32


def layouts_of(layout) -> tuple[str, str, str, str]:
    """The (Q, K, V, O) layouts that ``layout`` names: one for all, a preset of :data:`PRESETS`, or four."""
    lays = PRESETS.get(layout, (layout,) * 4) if isinstance(layout, str) else tuple(layout)
    if len(lays) != 4 or any(lay not in LAYOUTS for lay in lays) or lays[3] == "fused":
        raise ValueError(f"layout: one of {LAYOUTS}, a preset of {tuple(PRESETS)}, or four layouts for Q, K, V, O "
                         f"(O not fused), got {layout!r}")
    return lays


def place_fenced(qkv, lays, device: str):
    """Q, K, V stored compactly in their layouts (padded ones contiguous, fused ones in one projection), each
    buffer ending exactly where readable memory ends (the CPU: an unreadable page; a GPU under compute-sanitizer:
    its own allocation). Returns (views, keep-alives)."""
    shape = tuple(qkv[0].shape)
    views, keep = [None] * 3, []
    fused = [i for i, lay in enumerate(lays) if lay == "fused"]
    if fused:
        compact = torch.full((3 * qkv[0].numel(),), float("nan"), dtype=qkv[0].dtype)
        for i in fused:
            strides, offset, _ = _strides(shape, "fused", 0, i)
            compact.as_strided(shape, strides, offset).copy_(qkv[i])
        flat, k = fenced_copy(compact.to(device), "end")
        keep.append(k)
        for i in fused:
            strides, offset, _ = _strides(shape, "fused", 0, i)
            views[i] = flat.as_strided(shape, strides, flat.storage_offset() + offset)
    for i, (t, lay) in enumerate(zip(qkv, lays)):
        if lay == "fused":
            continue
        strides, _, _ = _strides(shape, "contiguous" if lay == "padded" else lay, 0)
        compact = torch.empty(t.numel(), dtype=t.dtype)
        compact.as_strided(shape, strides, 0).copy_(t)
        flat, k = fenced_copy(compact.to(device), "end")
        keep.append(k)
        views[i] = flat.as_strided(shape, strides, flat.storage_offset())
    return views, keep


# -------------------------------------------------------------------------------------------- reference
def attention_ref(q, k, v, causal: bool, sm_scale: float):
    """(O, LSE) in fp64 on the CPU: O = softmax(Q Kᵀ · sm_scale) V, LSE = logsumexp of each row of scores."""
    s = (q.double().cpu() @ k.double().cpu().transpose(-2, -1)) * sm_scale
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v.double().cpu(), torch.logsumexp(s, -1)


def _score_roundoff(dtype: torch.dtype, device: str) -> float:
    """The unit roundoff of the scores Q·Kᵀ: tf32's where a GPU's tl.dot rounds fp32 inputs to it, else fp32's."""
    return TF32_ROUNDOFF if (dtype == torch.float32 and device == "cuda") else ROUNDOFF[torch.float32][0]


def attention_tolerance(dtype: torch.dtype, device: str, max_score: float, max_v: float) -> tuple[float, float, str]:
    """(atol, rtol, why) for O: a relative error δ in the probabilities moves O by at most δ·max|V|.

    δ comes from rounding the scores (u·|score| for a unit roundoff u of the arithmetic that produced them) and
    from rounding P to the input dtype before P @ V; the output's own rounding is the rtol.
    """
    u_out, why_out = ROUNDOFF[dtype]
    u_dot = _score_roundoff(dtype, device)
    u_p = u_out if dtype in HALF else u_dot
    delta = 4 * (u_dot * max(max_score, 1.0) * 2 + u_p)
    atol = delta * max(max_v, 1.0) + 8 * u_out
    rtol = 4 * u_out if dtype in HALF else max(4 * u_dot, 1e-5)
    why = (f"{why_out}; the scores (up to {max_score:.3g} here) are computed with unit roundoff {u_dot:.2g}"
           f"{' (tf32 on the GPU)' if u_dot == TF32_ROUNDOFF else ''}, and a relative error δ in the probabilities "
           f"moves O by at most δ·max|V| (max|V| = {max_v:.3g})")
    return atol, rtol, why


def attention_tolerances(v: torch.Tensor, ref_lse: torch.Tensor, device: str) -> tuple[tuple, tuple, str]:
    """((atol, rtol) for O, (atol, rtol) for LSE, why) of one attention case, as the tests judge it: O's from
    :func:`attention_tolerance` with the case's largest score (bounded by max|LSE| + log(seq_len)) and max|V|; LSE's
    from ATTENTION_LSE plus the scores' rounding (8 unit roundoffs of the largest score)."""
    max_score = float(ref_lse.abs().max()) + math.log(ref_lse.shape[-1])
    atol, rtol, why = attention_tolerance(v.dtype, device, max_score, float(v.abs().max()))
    l_atol, l_rtol, _ = ATTENTION_LSE[device]
    l_atol += 8 * _score_roundoff(v.dtype, device) * max_score
    return (atol, rtol), (l_atol, l_rtol), why


def make_qkv(batch, heads, seq_len, head_dim, dtype, data: str, seed: int):
    """Fresh Q, K, V. "randn": N(0, 1); "large": Q and K ~ N(0, 20²), scores of several hundred, so that exp
    overflows without the max subtracted; "negative": "large" with Q's first feature set to +a and K's to -a, every
    score about -2000 ± 400, so that exp(s) underflows to 0 in every row unless the row's own maximum is subtracted
    (a running maximum started at 0, not -inf, gives l = 0 and O = 0 / 0), the softmax as nearly one-hot as with
    "large"; "shifted": V ~ 1 + N(0, 1), so a lost normalisation shows; "huge_v": V ~
    N(0, 1) · 2^17, past fp16's largest value (65504), so an accumulator (or P @ V) held in fp16 overflows (fp32 only:
    on a GPU, where fp32 tl.dot rounds to tf32, the tolerance cannot tell an fp16 accumulator's rounding apart)."""
    if data == "huge_v" and dtype != torch.float32:
        raise ValueError("data='huge_v' is for fp32 inputs (the test is of an fp32 kernel's range)")
    g = generator(seed)
    shape = (batch, heads, seq_len, head_dim)
    q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
    if data == "large":
        q, k = q * 20, k * 20
    elif data == "negative":
        a = (2000 * head_dim**0.5) ** 0.5  # q·k = -a² + N(0, 400² (HEAD_DIM - 1)), times sm_scale = HEAD_DIM**-0.5
        q, k = q * 20, k * 20
        q[..., 0], k[..., 0] = a, -a
    elif data == "shifted":
        v = v + 1.0
    elif data == "huge_v":
        v = v * 2.0**17
    elif data != "randn":
        raise ValueError(f"data must be randn, large, negative, shifted or huge_v, got {data!r}")
    return q.to(dtype), k.to(dtype), v.to(dtype)

"""Phase 6, attention: what the checks give the kernel and what they expect of it.

Q, K, V and O in buffers of their own layouts (contiguous, guard rows between heads, a permuted (batch, seq,
heads, dim) view, a slice of a fused QKV projection), fenced copies for the interpreter's electric fence, fresh
inputs, the fp64 reference and its tolerance. The package (:mod:`..attention`) runs the check; :mod:`.diagnosis` names
the likely cause of a failure.
"""
from __future__ import annotations

import math

import torch

from ....checking import OUTPUT_SENTINEL, fenced_copy, generator
from ....tolerances import ATTENTION_LSE, ROUNDOFF, TF32_ROUNDOFF  # unit roundoffs; LSE's tolerance
from ..layer_norm import UNWRITTEN

LAYOUTS = ("contiguous", "padded", "bshd", "fused")
LAYOUT_WORDS = {"contiguous": "contiguous", "padded": "with guard rows between the heads",
                "bshd": "a (batch, seq, heads, dim) tensor seen as (batch, heads, seq, dim)",
                "fused": "a slice of one (batch, seq, 3, heads, dim) projection"}
# Q, K, V, O each laid out differently: every stride of one tensor used for another's gives other addresses
PRESETS = {"mixed": ("bshd", "fused", "padded", "contiguous"), "fused_qkv": ("fused", "fused", "fused", "contiguous")}
TENSORS = ("Q", "K", "V", "O")
ROW_LETTER = {"Q": "m", "K": "n", "V": "n", "O": "m"}
DTYPES = (torch.float32, torch.float16)
MIN_BLOCK = 16  # tl.dot needs 16 along every side on a GPU

HALF = (torch.float16, torch.bfloat16)  # P and O are rounded to these; the scores and the sums stay fp32



# ------------------------------------------------------------------------------------------------ buffers
class Placed:
    """A strided view inside a flat buffer whose other elements hold ``fill`` (NaN around inputs)."""

    def __init__(self, flat: torch.Tensor, view: torch.Tensor, fill: float, layout: str = "contiguous"):
        self.flat, self.view, self.fill, self.layout = flat, view, fill, layout
        self.inside = self.mask_of(view)

    def mask_of(self, view) -> torch.Tensor:
        idx = torch.arange(self.flat.numel())
        inside = idx.as_strided(view.shape, view.stride(), view.storage_offset() - self.flat.storage_offset())
        mask = torch.zeros(self.flat.numel(), dtype=torch.bool)
        mask[inside.reshape(-1)] = True
        return mask

    def read_as(self, strides) -> torch.Tensor:
        """What a kernel reads from this tensor's pointer with other strides (the buffer leaves room for any)."""
        return self.flat.detach().cpu().as_strided(self.view.shape, strides, self.view.storage_offset())

    def guard_changes(self) -> int:
        outside = self.flat.detach().cpu()[~self.inside].float()
        if self.fill != self.fill:
            return int((~torch.isnan(outside)).sum())
        return int((outside != torch.tensor(self.fill, dtype=self.flat.dtype).float()).sum())


def _strides(shape: tuple[int, ...], layout: str, pad_rows: int, slot: int = 0) -> tuple[tuple[int, ...], int, int]:
    """(strides, offset, buffer size) of a (B, H, S, D) tensor in ``layout`` with ``pad_rows`` guard rows;
    ``slot``: Q, K or V's place (0, 1, 2) in a fused projection."""
    B, H, S, D = shape
    total = B * H * S * D
    if layout == "contiguous":  # guard rows before the first and after the last head only
        return (H * S * D, S * D, D, 1), pad_rows * D, total + 2 * pad_rows * D
    if layout == "padded":  # every head's rows followed by guard rows
        rows = S + 2 * pad_rows
        return (H * rows * D, rows * D, D, 1), pad_rows * D, B * H * rows * D
    if layout == "bshd":  # stored (batch, seq, heads, dim), seen as (batch, heads, seq, dim): heads interleaved
        return (S * H * D, D, H * D, 1), pad_rows * D, total + 2 * pad_rows * D
    if layout == "fused":  # (batch, seq, 3, heads, dim): Q, K, V side by side in every row of a projection
        return (S * 3 * H * D, D, 3 * H * D, 1), pad_rows * D + slot * H * D, 3 * total + 2 * pad_rows * D
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def _room(shape, pad_rows) -> int:
    """A buffer size that holds the tensor addressed with the strides of any layout, from any offset."""
    B, H, S, D = shape
    return max(_strides(shape, lay, pad_rows)[2] for lay in LAYOUTS) + pad_rows * D + 3 * H * D


def layouts_of(layout) -> tuple[str, str, str, str]:
    """The (Q, K, V, O) layouts that ``layout`` names: one for all, a preset of :data:`PRESETS`, or four."""
    lays = PRESETS.get(layout, (layout,) * 4) if isinstance(layout, str) else tuple(layout)
    if len(lays) != 4 or any(lay not in LAYOUTS for lay in lays) or lays[3] == "fused":
        raise ValueError(f"layout: one of {LAYOUTS}, a preset of {tuple(PRESETS)}, or four layouts for Q, K, V, O "
                         f"(O not fused), got {layout!r}")
    return lays


def place(t: torch.Tensor, layout: str, pad_rows: int, device: str, fill: float = float("nan")) -> Placed:
    """A copy of the (B, H, S, D) ``t`` in ``layout`` inside a buffer of ``fill``."""
    strides, offset, _ = _strides(tuple(t.shape), layout, pad_rows)
    flat = torch.full((_room(tuple(t.shape), pad_rows),), fill, dtype=t.dtype, device=device)
    view = flat.as_strided(t.shape, strides, offset)
    view.copy_(t)
    return Placed(flat, view, fill, layout)


def place_inputs(qkv, lays, pad_rows: int, device: str) -> list[Placed]:
    """Q, K, V in their layouts; those that are "fused" share one projection buffer (the other slots NaN)."""
    shape = tuple(qkv[0].shape)
    shared = torch.full((_room(shape, pad_rows),), float("nan"), dtype=qkv[0].dtype, device=device)
    placed = []
    for slot, (t, lay) in enumerate(zip(qkv, lays)):
        if lay != "fused":
            placed.append(place(t, lay, pad_rows, device))
            continue
        strides, offset, _ = _strides(shape, lay, pad_rows, slot)
        view = shared.as_strided(shape, strides, offset)
        view.copy_(t)
        placed.append(Placed(shared, view, float("nan"), lay))
    fused = [p for p in placed if p.layout == "fused"]
    if fused:  # the projection's other slots hold other values, as a real one does: finite, not NaN
        g = generator(len(fused))
        slots = [shared.as_strided(shape, *_strides(shape, "fused", pad_rows, slot)[:2]) for slot in range(3)]
        for slot, lay in enumerate(lays[:3]):
            if lay != "fused":
                slots[slot].copy_(torch.randn(shape, generator=g).to(shared.dtype))
        inside = torch.stack([fused[0].mask_of(view) for view in slots]).any(0)
        for p in fused:  # a shared buffer's guard is what lies outside the projection
            p.inside = inside
    return placed


def place_output(shape, dtype, layout: str, pad_rows: int, device: str) -> Placed:
    return place(torch.full(shape, UNWRITTEN, dtype=dtype), layout, pad_rows, device, fill=OUTPUT_SENTINEL)


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

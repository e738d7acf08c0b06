"""Phase 7, the attention backward: what the checks give the kernels and what they expect of them.

Q, K, V, dO (and O for the preprocess) in buffers of their own layouts, the outputs dQ, dK, dV in sentinels, LSE and D
as contiguous fp32 rows inside NaN, fenced copies for the interpreter's electric fence, fresh inputs, the fp64
autograd reference and the gradients' tolerances. The buffers and layouts are phase 6's
(:mod:`..fused_attention.attention.inputs`).
"""
from __future__ import annotations

import torch

from ...checking import OUTPUT_SENTINEL, KernelCheckError, fenced_copy, generator
from ...tolerances import ATTENTION_BACKWARD, ATTENTION_BACKWARD_TF32, ROUNDOFF, TF32_ROUNDOFF
from ..common.strided import (LAYOUT_WORDS, LAYOUTS, UNWRITTEN, Placed, layout_strides, place, place_inputs,
                             place_output)

# The tensors a backward kernel reads or writes, each with a layout of its own (phase 6's four).
NAMES = ("Q", "K", "V", "dO", "O", "dQ", "dK", "dV")
PRESETS = {
    "contiguous": dict.fromkeys(NAMES, "contiguous"),
    # dO as a caller's gradient often is: (batch, seq, heads, dim) seen as (batch, heads, seq, dim); no two tensors
    # that a kernel reads together share their strides
    "mixed": dict(Q="contiguous", K="fused", V="padded", dO="bshd", O="padded", dQ="padded", dK="bshd",
                  dV="contiguous"),
    "mixed_2": dict(Q="bshd", K="padded", V="fused", dO="padded", O="bshd", dQ="contiguous", dK="padded",
                    dV="bshd"),
}
DATA = ("randn", "large", "shifted", "huge_do")
MIN_BLOCK = 16  # tl.dot needs 16 along every side on a GPU
LOG2E = 1.4426950408889634


def layouts_of(layout) -> dict[str, str]:
    """{tensor: layout} for a preset name, a single layout of :data:`LAYOUTS` for all, or a dict (the rest
    contiguous)."""
    if isinstance(layout, str):
        if layout in PRESETS:
            return dict(PRESETS[layout])
        if layout in LAYOUTS and layout != "fused":
            return dict.fromkeys(NAMES, layout)
    elif isinstance(layout, dict) and set(layout) <= set(NAMES):
        lays = {**PRESETS["contiguous"], **layout}
        if all(lay in LAYOUTS for lay in lays.values()) and all(
                lays[n] != "fused" for n in NAMES if n not in ("Q", "K", "V")):
            return lays
    raise ValueError(f"layout: a preset of {tuple(PRESETS)}, one of {LAYOUTS[:3]}, or a dict of layouts for "
                     f"{NAMES} (only Q, K, V may be fused), got {layout!r}")


def layout_words(lays: dict[str, str], names) -> str:
    """The layouts of ``names`` in words, for a message."""
    if len({lays[n] for n in names}) == 1:
        return f"{lays[names[0]]} layout"
    return "layouts " + ", ".join(f"{n} {lays[n]}" for n in names)


def make_inputs(batch, heads, seq_len, head_dim, dtype, data: str, seed: int):
    """Fresh Q, K, V and dO. "randn": N(0, 1); "large": Q and K ~ N(0, 10²), scores of about a hundred, so that a
    softmax recomputed without its maximum overflows; "shifted": V ~ 1 + N(0, 1) and dO ~ 1 + N(0, 1), so that D is
    large and leaving it out shows everywhere; "huge_do": dO ~ N(0, 1) · 2^17, past fp16's largest value (65504),
    so that an accumulator or a tl.dot operand held in fp16 overflows (fp32 only, as phase 6's "huge_v")."""
    if data not in DATA:
        raise ValueError(f"data must be one of {DATA}, got {data!r}")
    if data == "huge_do" and dtype != torch.float32:
        raise ValueError("data='huge_do' is for fp32 inputs (the test is of an fp32 kernel's range)")
    g = generator(seed)
    shape = (batch, heads, seq_len, head_dim)
    q, k, v, do = (torch.randn(shape, generator=g) for _ in range(4))
    if data == "large":
        q, k = q * 10, k * 10
    elif data == "shifted":
        v, do = v + 1.0, do + 1.0
    elif data == "huge_do":
        do = do * 2.0**17
    return tuple(t.to(dtype) for t in (q, k, v, do))


def causal_mask(n: int) -> torch.Tensor:
    """True where key j comes after query i (j > i): those scores are -inf."""
    return torch.ones(n, n, dtype=torch.bool).triu(1)


def scores(q, k, causal: bool, sm_scale: float) -> torch.Tensor:
    """S = Q Kᵀ · sm_scale in fp64 on the CPU, -inf after the diagonal when causal."""
    s = (q.double().cpu() @ k.double().cpu().transpose(-2, -1)) * sm_scale
    return s.masked_fill(causal_mask(q.shape[-2]), float("-inf")) if causal else s


def backward_ref(q, k, v, do, causal: bool, sm_scale: float):
    """The fp64 reference by torch's autograd through naive attention: (O, LSE, D, dQ, dK, dV), all fp64 on the
    CPU, D = rowsum(dO ∘ O)."""
    q2, k2, v2 = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    s = (q2 @ k2.transpose(-2, -1)) * sm_scale
    if causal:
        s = s.masked_fill(causal_mask(q.shape[-2]), float("-inf"))
    o = torch.softmax(s, -1) @ v2
    dod = do.double().cpu()
    o.backward(dod)
    o = o.detach()
    return o, torch.logsumexp(s.detach(), -1), (dod * o).sum(-1), q2.grad, k2.grad, v2.grad


def gradient_tolerance(dtype: torch.dtype, device: str, ref: torch.Tensor, max_score: float = 0.0
                       ) -> tuple[float, float, str]:
    """(atol, rtol, why) for one gradient: the table's atol is in units of the gradient's largest |value|, plus what
    rounding the scores costs: P = exp(S - LSE) moves by u·|S| relative for a unit roundoff u of the scores (fp32's,
    or tf32's for fp32 inputs on a GPU), as phase 6's O does."""
    entry = ATTENTION_BACKWARD_TF32 if (dtype == torch.float32 and device == "cuda") else ATTENTION_BACKWARD[dtype]
    u_dot = TF32_ROUNDOFF if (dtype == torch.float32 and device == "cuda") else ROUNDOFF[torch.float32][0]
    scale = max(float(ref.abs().max()), 1e-3)
    return (entry.atol + 8 * u_dot * max(max_score, 1.0)) * scale, entry.rtol, (
        f"{entry.why}; plus the scores' rounding (up to {max_score:.3g} here, unit roundoff {u_dot:.2g})")


def max_score(q, k, causal: bool, sm_scale: float) -> float:
    """The largest |score| a query sees (the -inf of the causal mask left out)."""
    s = scores(q, k, causal, sm_scale)
    return float(s[torch.isfinite(s)].abs().max())


def place_rows(t: torch.Tensor, pad: int, device: str, fill: float = float("nan")) -> tuple[torch.Tensor,
                                                                                          torch.Tensor]:
    """A (batch * heads, seq_len) fp32 copy of ``t`` inside a flat buffer of ``fill``: (view, flat)."""
    rows = t.reshape(-1, t.shape[-1]).float()
    flat = torch.full((2 * pad + rows.numel(),), fill, dtype=torch.float32, device=device)
    view = flat[pad:pad + rows.numel()].view(rows.shape)
    view.copy_(rows)
    return view, flat


def place_tensors(tensors: dict[str, torch.Tensor], lays: dict[str, str], pad: int, device: str) -> dict[str, Placed]:
    """The (B, H, S, D) inputs of ``tensors`` (Q, K, V together, so that fused ones share a projection; dO, O alone)
    in their layouts inside NaN."""
    out = {}
    qkv = [n for n in ("Q", "K", "V") if n in tensors]
    if qkv == ["Q", "K", "V"]:
        out.update(zip(qkv, place_inputs([tensors[n] for n in qkv], [lays[n] for n in qkv], pad, device)))
    for name, t in tensors.items():
        if name not in out:
            lay = "contiguous" if lays[name] == "fused" else lays[name]
            out[name] = place(t, lay, pad, device)
    return out


def place_outputs(names, shape, dtype, lays: dict[str, str], pad: int, device: str) -> dict[str, Placed]:
    """Outputs in their layouts, filled with the "never written" value, inside sentinels."""
    return {n: place_output(shape, dtype, lays[n], pad, device) for n in names}


def place_zeroed(shape, lays: dict[str, str], name: str, pad: int, device: str) -> Placed:
    """An fp32 accumulator (dQ for tl.atomic_add) zeroed as the wrapper zeroes it, inside sentinels."""
    return place(torch.zeros(shape, dtype=torch.float32), lays[name], pad, device, fill=OUTPUT_SENTINEL)


def fenced_tensor(t: torch.Tensor, layout: str, device: str):
    """``t`` stored compactly in ``layout`` (padded as contiguous, fused as its own projection's slot 0), its buffer
    ending where readable memory ends. Returns (view, keep-alive)."""
    shape = tuple(t.shape)
    lay = "contiguous" if layout in ("padded", "fused") else layout
    strides, _, _ = layout_strides(shape, lay, 0)
    compact = torch.empty(t.numel(), dtype=t.dtype)
    compact.as_strided(shape, strides, 0).copy_(t)
    flat, keep = fenced_copy(compact.to(device), "end")
    return flat.as_strided(shape, strides, flat.storage_offset()), keep


def fenced_rows(t: torch.Tensor, device: str):
    """A contiguous (batch * heads, seq_len) fp32 copy ending where readable memory ends: (view, keep-alive)."""
    rows = t.reshape(-1, t.shape[-1]).float().contiguous()
    flat, keep = fenced_copy(rows.to(device), "end")
    return flat.view(rows.shape), keep


# ---- the whole-op checks' buffers (training.py, gradcheck.py): inputs and outputs followed by NaN rows
GUARD_ROWS = 256  # NaN rows after every tensor a whole-op launch reads or writes: more than a tile of any wrapper's


def guarded(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its strides, followed in memory by NaN: a kernel's unmasked read of rows past the end gets
    NaN every time (deterministically wrong), not whatever the allocator left there."""
    if 0 in t.stride():  # a broadcast dO (the gradient of a sum): its own copy, then guarded
        t = t.contiguous()
    span = _span(t)
    # rows past the end are a row stride apart (a transposed view's is heads x head_dim): GUARD_ROWS of them, so that an
    # unmasked read past the last row reads NaN here, not past the allocation (compute-sanitizer's report on a GPU)
    row = max(abs(t.stride(-2)) if t.dim() > 1 else 1, t.shape[-1])
    flat = torch.full((span + GUARD_ROWS * row,), float("nan"), dtype=t.dtype, device=t.device)
    view = flat.as_strided(t.shape, t.stride(), 0)
    view.copy_(t.detach())
    return view


def _span(t: torch.Tensor) -> int:
    """Elements from ``t``'s first to one past its last (its strides followed)."""
    return 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)


def check_guard(out: torch.Tensor, name: str, kernel: str, context) -> None:
    """A :func:`guarded` output's guard still NaN after ``kernel`` stored it: a store past its last row landed there
    (on the CPU, without the guard, it corrupts the process's memory and fails later, or not at all)."""
    guard = out._base[_span(out):]
    if not bool(torch.isnan(guard).all()):
        raise KernelCheckError(
            f"`{kernel}` wrote past the end of {name} ({context}): rows at or after seq_len were stored.\nLikely "
            f"cause: a tl.store without its mask; mask it with rows < seq_len (keys < seq_len for dK and dV).")


__all__ = ["UNWRITTEN", "NAMES", "PRESETS", "DATA", "MIN_BLOCK", "LOG2E", "LAYOUT_WORDS", "layouts_of", "layout_words",
           "make_inputs", "causal_mask", "scores", "backward_ref", "gradient_tolerance", "max_score", "place_rows",
           "place_tensors", "place_outputs", "place_zeroed", "fenced_tensor", "fenced_rows", "GUARD_ROWS", "guarded",
           "check_guard"]

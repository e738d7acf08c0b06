"""Phase 6: checks for the attention forward kernel.

    triton_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, <4 strides each of q, k, v, o>,
                            n_heads, seq_len, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL)
                                                                         # grid (cdiv(seq_len, BLOCK_M), batch * heads)

Each check launches the learner's kernel itself, the way the notebook's wrapper does, on fresh random inputs:

1. every input lies inside a buffer of NaN (around it, and in the "padded" layout between the rows of every
   head), so a load outside it poisons the result; every output lies inside a buffer of sentinels and starts out
   filled with another sentinel, so a stray store and an element never written are told apart from a wrong value.
   Q, K, V and O may each have a layout of their own (``layout=("bshd", "fused", "padded", "contiguous")``, or the
   presets of :data:`PRESETS`), as real callers have them: Q, K, V sliced from one fused projection, O contiguous;
2. the values are compared with an fp64 reference within a tolerance derived from the dtype, the device and the
   size of the scores (:func:`attention_tolerance`);
3. on the interpreter, the inputs are then stored so that they end exactly where an unreadable page begins (an
   electric fence) and the kernel runs again: an unmasked load past the last row crashes even when the scores it
   gives are thrown away by a mask.

On a failure the message names the likely cause, found by replaying known mistakes on the same inputs (the rescale
missing, the scale wrong, a causal mask off by one or tile-local, masked scores 0 instead of -inf, the key pointers
not advanced, keys past one tile never seen, a tensor addressed with another's strides, ...).

The buffers, inputs, reference and tolerance are :mod:`.inputs`'s, the replays and causes
:mod:`.diagnosis`'s; this module runs the check and re-exports both.
"""
from __future__ import annotations

import torch
import triton

from ....checking import (OUTPUT_SENTINEL, Case, KernelCheckError, compare, fence_supported, fresh_seed, shown,
                          size_kind, stage)
from ....device import infer_device
from ....tolerances import ATTENTION_LSE as LSE_TOLERANCE, ROUNDOFF, TF32_ROUNDOFF  # unit roundoffs; LSE's tolerance
from ...common.launch import BOUNDARY_CHECK_HINT_ROWS, launch, require_triton_kernel
from .diagnosis import (_attention_diagnose, _input_stride_replays, _lse_diagnose, _output_stride_cause,
                        _replays, _scale_candidates, _tiled)
from .inputs import (DTYPES, HALF, LAYOUT_WORDS, LAYOUTS, MIN_BLOCK, PRESETS, ROW_LETTER, TENSORS, Placed,
                     attention_ref, attention_tolerance, attention_tolerances, layouts_of, make_qkv, place,
                     place_fenced, place_inputs, place_output)
from ..layer_norm import UNWRITTEN

ATTENTION = "triton_attention_kernel"
SIGNATURE = ("triton_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, stride_qb, stride_qh, stride_qm, "
             "stride_qd, stride_kb, stride_kh, stride_kn, stride_kd, stride_vb, stride_vh, stride_vn, stride_vd, "
             "stride_ob, stride_oh, stride_om, stride_od, n_heads, seq_len, sm_scale, HEAD_DIM: tl.constexpr, "
             "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr)")
__all__ = ["ATTENTION", "SIGNATURE", "check_attention", "run_attention", "DTYPES", "HALF", "LAYOUT_WORDS", "LAYOUTS",
           "MIN_BLOCK", "PRESETS", "ROW_LETTER", "TENSORS", "Placed", "attention_ref", "attention_tolerance",
           "attention_tolerances", "layouts_of", "make_qkv", "place", "place_fenced", "place_inputs", "place_output",
           "LSE_TOLERANCE", "ROUNDOFF", "TF32_ROUNDOFF", "_attention_diagnose", "_input_stride_replays",
           "_lse_diagnose", "_output_stride_cause", "_replays", "_scale_candidates", "_tiled"]


def _stray_cause(what: str, seq_len: int, block_m: int, o_layout: str) -> str:
    """Why stores landed outside O (or LSE): an unmasked last tile can only be the cause where the last query tile
    has rows past seq_len; where every tile is whole, the program's (batch, head) or rows are wrong."""
    strides = (", or O is not addressed with its own strides stride_ob, stride_oh, stride_om, stride_od"
               if what == "O" and o_layout != "contiguous" else "")
    if seq_len % block_m:
        return ("the tl.store of the query tile is not masked with rows < seq_len (the last tile has rows past "
                f"seq_len{shown(f' = {seq_len}', '')} when it is not a multiple of BLOCK_M"
                f"{shown(f' = {block_m}', '')}){BOUNDARY_CHECK_HINT_ROWS}{strides}.")
    where = ("o_ptr + batch*stride_ob + head*stride_oh + row*stride_om + d*stride_od" if what == "O" else
             "lse_ptr + (batch * n_heads + head) * seq_len + row")
    return (f"every query tile is whole here (seq_len{shown(f' = {seq_len}', '')} is a multiple of BLOCK_M"
            f"{shown(f' = {block_m}', '')}), so no "
            "row past seq_len was stored: the program's (batch, head) or rows are wrong. With pid_1 = "
            "tl.program_id(1): batch = pid_1 // n_heads, head = pid_1 % n_heads (not the other way round), rows = "
            f"tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M), and {what}[batch, head, row] is at {where}"
            f"{strides}.")


# ------------------------------------------------------------------------------------------------ check
def run_attention(kernel, q, k, v, o, lse, causal, sm_scale, block_m, block_n, *, context, device, stage_text=None):
    B, H, S, D = q.shape
    grid = (triton.cdiv(S, block_m), B * H)
    args = (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(), H, S, sm_scale)
    kwargs = {"HEAD_DIM": D, "BLOCK_M": block_m, "BLOCK_N": block_n, "CAUSAL": causal}
    launch(kernel, grid, args, kwargs, name=ATTENTION, signature=SIGNATURE, context=context,
           device=device, stage_text=stage_text)


def check_attention(kernel, batch: int, heads: int, seq_len: int, head_dim: int, block_m: int = 16,
                    block_n: int = 16, *, causal: bool = False, dtype: torch.dtype = torch.float32,
                    layout="contiguous", data: str = "randn", sm_scale: float | None = None,
                    fence: bool = True, seed: int | None = None) -> None:
    """Launch ``triton_attention_kernel`` on fresh (batch, heads, seq_len, head_dim) Q, K, V and check O and LSE.

    ``layout``: one of :data:`LAYOUTS` for all four tensors, a preset of :data:`PRESETS`, or a layout each for
    Q, K, V and O. ``fence=False`` skips the second run on fenced inputs (for whole tiles, where no row past the end
    is in reach of a kernel that stays in its tiles; it halves the time on the interpreter). Raises
    :class:`KernelCheckError` with a message for the learner on the first problem found."""
    require_triton_kernel(kernel, ATTENTION)
    for label, value in (("BLOCK_M", block_m), ("BLOCK_N", block_n), ("HEAD_DIM", head_dim)):
        if value < MIN_BLOCK or value & (value - 1):
            raise ValueError(f"{label} = {value}: tests use powers of two >= {MIN_BLOCK} (tl.dot on a GPU)")
    if block_m % block_n:
        raise ValueError(f"BLOCK_M = {block_m} must be a multiple of BLOCK_N = {block_n}")
    lays = layouts_of(layout)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    sm_scale = head_dim**-0.5 if sm_scale is None else sm_scale
    q, k, v = make_qkv(batch, heads, seq_len, head_dim, dtype, data, seed)
    ref_o, ref_lse = attention_ref(q, k, v, causal, sm_scale)
    (atol, rtol), (l_atol, l_rtol), _ = attention_tolerances(v, ref_lse, device)
    name = str(dtype).replace("torch.", "")
    where = (f"{lays[0]} layout" if len(set(lays)) == 1 else
             "layouts " + ", ".join(f"{n} {lay}" for n, lay in zip(TENSORS, lays)))
    causal_words = "causal" if causal else "not causal"
    scale_words = "an sm_scale other than 1/sqrt(HEAD_DIM)" if sm_scale != head_dim**-0.5 else ""
    context = Case(f"batch={batch}, heads={heads}, seq_len={seq_len}, HEAD_DIM={head_dim}, BLOCK_M={block_m}, "
                   f"BLOCK_N={block_n}, {causal_words}, {name}, {where}, {data} inputs"
                   f"{f', sm_scale={sm_scale:g}' if sm_scale != head_dim**-0.5 else ''}, seed {seed}",
                   size_kind(seq_len, block_n, "a seq_len", "BLOCK_N", "key tiles"), causal_words, name, where,
                   f"{data} inputs", scale_words)
    pad = max(block_m, block_n) + 8
    placed = place_inputs((q, k, v), lays, pad, device)
    go = place_output(q.shape, dtype, lays[3], pad, device)
    lse_flat = torch.full((2 * pad + batch * heads * seq_len,), OUTPUT_SENTINEL, dtype=torch.float32, device=device)
    lse = lse_flat[pad:pad + batch * heads * seq_len].view(batch * heads, seq_len)
    lse.fill_(UNWRITTEN)
    run_attention(kernel, *(p.view for p in placed), go.view, lse, causal, sm_scale, block_m, block_n,
                  context=context, device=device)
    if not all(torch.equal(p.view.cpu(), t) for p, t in zip(placed, (q, k, v))) or \
            any(p.guard_changes() for p in placed):
        raise KernelCheckError(f"The kernel changed Q, K or V or the memory around them ({context}).\n"
                               "Likely cause: a tl.store to q_ptr, k_ptr or v_ptr instead of o_ptr.")
    stray = go.guard_changes()
    lse_stray = int((torch.cat([lse_flat[:pad], lse_flat[pad + lse.numel():]]) != OUTPUT_SENTINEL).sum())
    ok, msg = compare(go.view, ref_o, atol=atol, rtol=rtol, name="O")
    o_cause = _output_stride_cause(go, placed, ref_o, (atol, rtol), lays) if stray or not ok else None
    if (stray or lse_stray) and not o_cause:
        what = "O" if stray else "LSE"
        raise KernelCheckError(f"{shown(f'{stray or lse_stray} element(s)', 'Elements')} outside {what} were written "
                               f"({context}).\n"
                               f"Likely cause: {_stray_cause(what, seq_len, block_m, lays[3])}")
    if not ok or o_cause:
        cause = o_cause or _attention_diagnose(go.view, lse, q, k, v, causal, sm_scale, block_m, block_n,
                                               (atol, rtol), ref_lse, data, placed + [go], lays)
        head = f"{shown(f'{stray} element(s)', 'Elements')} outside O were written" if stray else "Wrong values"
        raise KernelCheckError(f"{head} ({context}).\n{msg}\nLikely cause: {cause}")
    ok, msg = compare(lse, ref_lse.reshape(batch * heads, seq_len), atol=l_atol, rtol=l_rtol, name="LSE")
    if not ok:
        got = lse.detach().double().cpu().reshape(ref_lse.shape)
        s = (q.double() @ k.double().transpose(-2, -1)) * sm_scale
        if causal:
            s = s.masked_fill(torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1), float("-inf"))
        hint = _lse_diagnose(got, ref_lse, s.amax(-1), l_atol, l_rtol)
        raise KernelCheckError(f"Wrong log-sum-exp ({context}).\n{msg}\nLikely cause: {hint}")

    if fence and fence_supported(device):
        views, keep = place_fenced((q, k, v), lays, device)
        o2 = place_output(q.shape, dtype, "contiguous" if lays[3] == "padded" else lays[3], pad, device)
        lse2 = torch.empty(batch * heads, seq_len, device=device)
        run_attention(kernel, *views, o2.view, lse2, causal, sm_scale, block_m, block_n,
                      context=context, device=device,
                      stage_text=f"FENCE-READ: running `{ATTENTION}` on Q, K and V that end exactly where readable "
                                 f"memory ends ({context}): a load of a query or key row >= seq_len without a mask "
                                 "crashes here, even when its scores are then masked with -inf")
        ok, msg = compare(o2.view, ref_o, atol=atol, rtol=rtol, name="O")
        if not ok:
            raise KernelCheckError(f"Wrong values on the second run, Q, K and V stored without guards "
                                   f"({context}).\n{msg}")
        del keep
    stage("done")

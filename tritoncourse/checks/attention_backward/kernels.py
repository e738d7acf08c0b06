"""Phase 7: checks of the three backward kernels, each launched alone, as the notebook's wrapper launches it.

    triton_attention_bwd_preprocess_kernel  grid (cdiv(seq_len, BLOCK_M), batch * heads)   D = rowsum(dO ∘ O)
    triton_attention_bwd_dkdv_kernel        grid (cdiv(seq_len, BLOCK_N), batch * heads)   dK, dV (and dQ atomically)
    triton_attention_bwd_dq_kernel          grid (cdiv(seq_len, BLOCK_M), batch * heads)   dQ

Each kernel gets the right LSE and D (the fp64 reference's, in fp32), so a wrong gradient is that kernel's own. As in
phase 6: every input inside NaN (in its own layout: Q, K, V, dO each with strides of their own), every output inside
sentinels and filled with a "never written" value; the gradients compared with torch's autograd through naive
attention in fp64 (:func:`.inputs.backward_ref`) within :func:`.inputs.gradient_tolerance`; on the interpreter a
second run on inputs that end where readable memory ends (an unmasked load of a row past seq_len crashes). A
failure names the likely cause (:mod:`.diagnosis`).
"""
from __future__ import annotations

import torch
import triton

from ...checking import (OUTPUT_SENTINEL, Case, KernelCheckError, compare, fence_supported, fresh_seed, shown,
                         size_kind, stage)
from ...device import infer_device
from ..common.launch import launch, require_triton_kernel
from .diagnosis import FP32_ACCUMULATORS, delta_cause, diagnose, nan_cause
from .inputs import (MIN_BLOCK, UNWRITTEN, backward_ref, fenced_rows, fenced_tensor, gradient_tolerance, layout_words,
                     layouts_of, make_inputs, max_score, place_outputs, place_rows, place_tensors, place_zeroed)
from .strides import stride_cause

PREPROCESS = "triton_attention_bwd_preprocess_kernel"
DKDV = "triton_attention_bwd_dkdv_kernel"
DQ = "triton_attention_bwd_dq_kernel"
_STRIDES = lambda *names: ", ".join(f"stride_{n}b, stride_{n}h, stride_{n}{'m' if n in ('q', 'do', 'dq', 'o') else 'n'}"
                                    f", stride_{n}d" for n in names)
SIGNATURES = {
    PREPROCESS: (f"{PREPROCESS}(o_ptr, do_ptr, delta_ptr, {_STRIDES('o', 'do')}, n_heads, seq_len, "
                 "HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr)"),
    DKDV: (f"{DKDV}(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr, "
           f"{_STRIDES('q', 'k', 'v', 'do', 'dk', 'dv', 'dq')}, n_heads, seq_len, sm_scale, HEAD_DIM: tl.constexpr, "
           "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, ATOMIC_DQ: tl.constexpr)"),
    DQ: (f"{DQ}(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, {_STRIDES('q', 'k', 'v', 'do', 'dq')}, "
         "n_heads, seq_len, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
         "CAUSAL: tl.constexpr)"),
}


def _require_blocks(**blocks) -> None:
    for label, value in blocks.items():
        if value < MIN_BLOCK or value & (value - 1):
            raise ValueError(f"{label} = {value}: tests use powers of two >= {MIN_BLOCK} (tl.dot on a GPU)")


def _case(batch, heads, seq_len, head_dim, blocks: dict, causal, dtype, lays, names, data, sm_scale, seed,
          unit: str) -> Case:
    name = str(dtype).replace("torch.", "")
    causal_words = "causal" if causal else "not causal"
    where = layout_words(lays, names)
    odd_scale = sm_scale != head_dim**-0.5
    block_text = ", ".join(f"{k}={v}" for k, v in blocks.items())
    return Case(f"batch={batch}, heads={heads}, seq_len={seq_len}, HEAD_DIM={head_dim}, {block_text}, "
                f"{causal_words}, {name}, {where}, {data} inputs{f', sm_scale={sm_scale:g}' if odd_scale else ''}, "
                f"seed {seed}",
                size_kind(seq_len, blocks[unit], "a seq_len", unit, "tiles"), causal_words, name, where,
                f"{data} inputs", "an sm_scale other than 1/sqrt(HEAD_DIM)" if odd_scale else "")


def _rows_changed(view, flat, t, pad) -> bool:
    """Whether a (batch * heads, seq_len) input placed by :func:`.inputs.place_rows` or its NaN guard changed."""
    guard = torch.cat([flat[:pad], flat[pad + view.numel():]])
    return not torch.equal(view.cpu(), t) or bool((~torch.isnan(guard)).any())


def _inputs_unchanged(placed: dict, originals: dict, rows: dict, context, kernel: str) -> None:
    changed = [n for n, p in placed.items() if not torch.equal(p.view.cpu(), originals[n]) or p.guard_changes()]
    changed += [n for n, row in rows.items() if _rows_changed(*row)]
    if changed:
        raise KernelCheckError(f"`{kernel}` changed {', '.join(changed)} or the memory around them ({context}).\n"
                               "Likely cause: a tl.store to an input's pointer instead of an output's.")


def _stray(outs: dict, context, kernel: str, seq_len: int, block: int, unit: str) -> None:
    stray = {n: p.guard_changes() for n, p in outs.items()}
    bad = [n for n, c in stray.items() if c]
    if bad:
        tail = (f"the last tile has rows past seq_len{shown(f' = {seq_len}', '')} (not a multiple of {unit}"
                f"{shown(f' = {block}', '')}): mask its tl.store with rows < seq_len"
                if seq_len % block else "every tile is whole here, so the program's (batch, head) or rows are "
                "wrong: batch = pid_1 // n_heads, head = pid_1 % n_heads")
        raise KernelCheckError(f"{shown(f'{sum(stray.values())} element(s)', 'Elements')} outside "
                               f"{' and '.join(bad)} were written by `{kernel}` ({context}).\nLikely cause: {tail}, "
                               f"and each output addressed with its own strides.")




def _fp16_values(got: torch.Tensor) -> bool:
    """Whether every value of an fp32 result is one fp16 represents exactly (and some are not 0): of thousands of
    fp32 sums, a right kernel's never are; an fp16 accumulator's always are, however small its error."""
    return bool(torch.isfinite(got).all()) and bool((got != 0).any()) and torch.equal(got, got.half().double())


def _judge_grads(outs: dict, refs: dict, dtype, device, context, kernel: str, replay_inputs, causal, sm_scale,
                 block_m, block_n, data, dq_tile_store=False, mixed=False, buffers=None, lays=None, d=None) -> None:
    tols, fails = {}, []
    top = max_score(replay_inputs[0], replay_inputs[1], causal, sm_scale)
    for name, placed in outs.items():
        atol, rtol, _ = gradient_tolerance(dtype, device, refs[name], top)
        tols[name] = (atol, rtol)
        ok, msg = compare(placed.view, refs[name], atol=atol, rtol=rtol, name=name)
        if not ok:
            fails.append((name, msg))
    if not fails:
        return
    got = {n: p.view.detach().double().cpu() for n, p in outs.items()}
    unwritten = [n for n, g in got.items() if (g == UNWRITTEN).any()]
    S = refs[next(iter(refs))].shape[-2]
    nonfinite = any(not torch.isfinite(g).all() for g in got.values())
    # With dO past fp16's range an fp16 accumulator's values lie on fp16's grid near UNWRITTEN (-54272, a multiple of
    # its spacing there, 32): one may equal it by chance (seen on an H200, 2026-11-28), so overflow is told first there.
    if unwritten and not (data == "huge_do" and nonfinite):
        cause = (f"some of {' and '.join(unwritten)} was never written: does every program store all its rows (masked "
                 "with rows < seq_len) for its (batch, head) = (pid_1 // n_heads, pid_1 % n_heads)?")
    elif nonfinite:
        name = next(n for n, g in got.items() if not torch.isfinite(g).all())
        cause = nan_cause(name, data, S, block_n if kernel == DKDV else block_m, mixed,
                          other_block=block_m if kernel == DKDV else block_n)
    elif dtype == torch.float32 and (held := [n for n, _ in fails if _fp16_values(got[n])]):
        cause = (f"every value of {' and '.join(held)} is one that fp16 can hold, in an fp32 test: an accumulator (or "
                 "the value stored) is fp16. " + FP32_ACCUMULATORS)
    else:
        close_enough = all(float((got[n] - refs[n]).abs().max()) < 64 * tols[n][0] for n, _ in fails)
        cause = diagnose(got, tols, refs, replay_inputs, causal, sm_scale, block_m, block_n,
                         "dkdv" if kernel == DKDV else "dq", dq_tile_store, dtype == torch.float32) or (
            stride_cause(got, tols, refs, buffers, lays, replay_inputs[5], d, causal, sm_scale) if mixed else None) or (
            "the values are close but not within the rounding of an fp32 computation: " + FP32_ACCUMULATORS
            if close_enough else None) or (
            "compare with the formulas of section 1 tile by tile: P = exp(S - LSE), dV += Pᵀ dO, dP = dO Vᵀ, "
            "dS = P ∘ (dP - D), dK += dSᵀ Q, dQ += dS K; dQ and dK times sm_scale once; accumulators fp32; every "
            "tensor addressed with its own strides.")
    msgs = "\n".join(msg for _, msg in fails)
    raise KernelCheckError(f"Wrong {' and '.join(n for n, _ in fails)} from `{kernel}` ({context}).\n{msgs}\n"
                           f"Likely cause: {cause}")


def _launch(kernel, name, grid, args, kwargs, context, device, stage_text=None):
    launch(kernel, grid, args, kwargs, name=name, signature=SIGNATURES[name], context=context, device=device,
           stage_text=stage_text)


def _fence_text(name, context) -> str:
    return (f"FENCE-READ: running `{name}` on inputs that end exactly where readable memory ends ({context}): a "
            "load of a row >= seq_len (of Q, K, V, dO, LSE or D) without a mask crashes here")


def check_attention_bwd_preprocess(kernel, batch: int, heads: int, seq_len: int, head_dim: int, block_m: int = 16, *,
                                   dtype: torch.dtype = torch.float32, layout="contiguous", fence: bool = True,
                                   seed: int | None = None) -> None:
    """Launch the preprocess kernel on a fresh O and dO and check D = rowsum(dO ∘ O) (fp32)."""
    require_triton_kernel(kernel, PREPROCESS)
    _require_blocks(BLOCK_M=block_m, HEAD_DIM=head_dim)
    lays, device = layouts_of(layout), infer_device()
    seed = fresh_seed() if seed is None else seed
    _, _, o, do = make_inputs(batch, heads, seq_len, head_dim, dtype, "randn", seed)
    ref = (o.double() * do.double()).sum(-1).reshape(batch * heads, seq_len)
    context = _case(batch, heads, seq_len, head_dim, {"BLOCK_M": block_m}, False, dtype, lays, ("O", "dO"), "randn",
                    head_dim**-0.5, seed, "BLOCK_M")
    pad = block_m + 8
    placed = place_tensors({"O": o, "dO": do}, lays, pad, device)
    delta, flat = place_rows(torch.full((batch * heads, seq_len), UNWRITTEN), pad, device, fill=OUTPUT_SENTINEL)
    args = (placed["O"].view, placed["dO"].view, delta, *placed["O"].view.stride(), *placed["dO"].view.stride(),
            heads, seq_len)
    grid = (triton.cdiv(seq_len, block_m), batch * heads)
    _launch(kernel, PREPROCESS, grid, args, {"HEAD_DIM": head_dim, "BLOCK_M": block_m}, context, device)
    _inputs_unchanged(placed, {"O": o, "dO": do}, {}, context, PREPROCESS)
    outside = torch.cat([flat[:pad], flat[pad + delta.numel():]])
    if bool((outside != OUTPUT_SENTINEL).any()):
        raise KernelCheckError(f"Elements outside D were written by `{PREPROCESS}` ({context}).\nLikely cause: mask "
                               "the tl.store with rows < seq_len, at delta_ptr + pid_bh * seq_len + row.")
    # D's error: fp32 sums of HEAD_DIM products, rounded fp16/bf16 inputs exact in fp32: the O tolerance's rules
    atol, rtol, _ = gradient_tolerance(torch.float32, device, ref)
    ok, msg = compare(delta, ref, atol=atol, rtol=rtol, name="D")
    if not ok:
        cause = ("some D[row] were never written: store a value for every row < seq_len." if
                 bool((delta == UNWRITTEN).any()) else delta_cause(delta, o, do))
        raise KernelCheckError(f"Wrong D from `{PREPROCESS}` ({context}).\n{msg}\nLikely cause: {cause}")
    if fence and fence_supported(device):
        (o2, k1), (do2, k2) = fenced_tensor(o, lays["O"], device), fenced_tensor(do, lays["dO"], device)
        d2 = torch.empty(batch * heads, seq_len, device=device)
        _launch(kernel, PREPROCESS, grid, (o2, do2, d2, *o2.stride(), *do2.stride(), heads, seq_len),
                {"HEAD_DIM": head_dim, "BLOCK_M": block_m}, context, device, _fence_text(PREPROCESS, context))
        ok, msg = compare(d2, ref, atol=atol, rtol=rtol, name="D")
        if not ok:
            raise KernelCheckError(f"Wrong values on the second run, O and dO stored without guards ({context}).\n"
                                   f"{msg}")
        del k1, k2
    stage("done")


def _setup(batch, heads, seq_len, head_dim, dtype, data, seed, causal, sm_scale):
    q, k, v, do = make_inputs(batch, heads, seq_len, head_dim, dtype, data, seed)
    o, lse, d, dq, dk, dv = backward_ref(q, k, v, do, causal, sm_scale)
    return (q, k, v, do), (o, lse, d), dict(dQ=dq, dK=dk, dV=dv)


def check_attention_bwd_dkdv(kernel, batch: int, heads: int, seq_len: int, head_dim: int, block_m: int = 16,
                             block_n: int = 16, *, causal: bool = False, dtype: torch.dtype = torch.float32,
                             layout="contiguous", data: str = "randn", sm_scale: float | None = None,
                             atomic_dq: bool = False, fence: bool = True, seed: int | None = None) -> None:
    """Launch the dK/dV kernel (with ``atomic_dq``: ATOMIC_DQ, dQ added atomically into a zeroed fp32 dQ) on fresh
    inputs with the right LSE and D; check dK, dV (and dQ), and that nothing else was written."""
    require_triton_kernel(kernel, DKDV)
    _require_blocks(BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=head_dim)
    lays, device = layouts_of(layout), infer_device()
    seed = fresh_seed() if seed is None else seed
    sm_scale = head_dim**-0.5 if sm_scale is None else sm_scale
    (q, k, v, do), (o, lse, d), refs = _setup(batch, heads, seq_len, head_dim, dtype, data, seed, causal, sm_scale)
    names = ("Q", "K", "V", "dO", "dK", "dV") + (("dQ",) if atomic_dq else ())
    context = _case(batch, heads, seq_len, head_dim, {"BLOCK_M": block_m, "BLOCK_N": block_n}, causal, dtype, lays,
                    names, data, sm_scale, seed, "BLOCK_N")
    if atomic_dq:
        context = context.but("ATOMIC_DQ, ", "dQ added atomically")
    pad = max(block_m, block_n) + 8
    shape = tuple(q.shape)
    originals = {"Q": q, "K": k, "V": v, "dO": do}
    placed = place_tensors(originals, lays, pad, device)
    lse_v, lse_f = place_rows(lse, pad, device)
    d_v, d_f = place_rows(d, pad, device)
    outs = place_outputs(("dK", "dV"), shape, dtype, lays, pad, device)
    dq = place_zeroed(shape, lays, "dQ", pad, device) if atomic_dq else place_outputs(
        ("dQ",), shape, torch.float32, lays, pad, device)["dQ"]
    kwargs = {"HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n, "CAUSAL": causal, "ATOMIC_DQ": atomic_dq}
    grid = (triton.cdiv(seq_len, block_n), batch * heads)

    def run(views, lse_, d_, dk, dv, dq_, stage_text=None):
        strides = [s for t in (*views, dk, dv, dq_) for s in t.stride()]
        _launch(kernel, DKDV, grid, (*views, lse_, d_, dk, dv, dq_, *strides, heads, seq_len, sm_scale), kwargs,
                context, device, stage_text)

    run([placed[n].view for n in ("Q", "K", "V", "dO")], lse_v, d_v, outs["dK"].view, outs["dV"].view, dq.view)
    _inputs_unchanged(placed, originals, {"LSE": (lse_v, lse_f, lse.float().reshape(lse_v.shape), pad),
                                          "D": (d_v, d_f, d.float().reshape(d_v.shape), pad)}, context, DKDV)
    if not atomic_dq and (dq.guard_changes() or bool((dq.view.cpu() != UNWRITTEN).any())):
        raise KernelCheckError(f"`{DKDV}` wrote to dq_ptr without ATOMIC_DQ ({context}).\nLikely cause: add dQ's "
                               "partial sums only under `if ATOMIC_DQ:` (the separate dQ kernel computes dQ then).")
    checked = dict(outs, **({"dQ": dq} if atomic_dq else {}))
    _stray(checked, context, DKDV, seq_len, block_n, "BLOCK_N")
    replay_inputs = (q, k, v, do, o, lse)
    _judge_grads(checked, {n: refs[n] for n in checked}, dtype, device, context, DKDV, replay_inputs, causal,
                 sm_scale, block_m, block_n, data, dq_tile_store=atomic_dq,
                 mixed=len(set(lays.values())) > 1, buffers={**placed, **checked}, lays=lays, d=d)
    if fence and fence_supported(device):
        fenced = [fenced_tensor(t, lays[n], device) for n, t in originals.items()]
        (lse2, k1), (d2, k2) = fenced_rows(lse, device), fenced_rows(d, device)
        outs2 = place_outputs(("dK", "dV"), shape, dtype, dict.fromkeys(("dK", "dV"), "contiguous"), pad, device)
        dq2 = place_zeroed(shape, {"dQ": "contiguous"}, "dQ", pad, device)
        run([f[0] for f in fenced], lse2, d2, outs2["dK"].view, outs2["dV"].view, dq2.view, _fence_text(DKDV, context))
        for name, p in dict(outs2, **({"dQ": dq2} if atomic_dq else {})).items():
            atol, rtol, _ = gradient_tolerance(dtype, device, refs[name], max_score(q, k, causal, sm_scale))
            ok, msg = compare(p.view, refs[name], atol=atol, rtol=rtol, name=name)
            if not ok:
                raise KernelCheckError(f"Wrong values on the second run, the inputs stored without guards "
                                       f"({context}).\n{msg}")
        del fenced, k1, k2
    stage("done")


def check_attention_bwd_dq(kernel, batch: int, heads: int, seq_len: int, head_dim: int, block_m: int = 16,
                           block_n: int = 16, *, causal: bool = False, dtype: torch.dtype = torch.float32,
                           layout="contiguous", data: str = "randn", sm_scale: float | None = None, fence: bool = True,
                           seed: int | None = None) -> None:
    """Launch the dQ kernel on fresh inputs with the right LSE and D; check dQ, and that nothing else was written."""
    require_triton_kernel(kernel, DQ)
    _require_blocks(BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=head_dim)
    lays, device = layouts_of(layout), infer_device()
    seed = fresh_seed() if seed is None else seed
    sm_scale = head_dim**-0.5 if sm_scale is None else sm_scale
    (q, k, v, do), (o, lse, d), refs = _setup(batch, heads, seq_len, head_dim, dtype, data, seed, causal, sm_scale)
    context = _case(batch, heads, seq_len, head_dim, {"BLOCK_M": block_m, "BLOCK_N": block_n}, causal, dtype, lays,
                    ("Q", "K", "V", "dO", "dQ"), data, sm_scale, seed, "BLOCK_M")
    pad = max(block_m, block_n) + 8
    shape = tuple(q.shape)
    originals = {"Q": q, "K": k, "V": v, "dO": do}
    placed = place_tensors(originals, lays, pad, device)
    lse_v, lse_f = place_rows(lse, pad, device)
    d_v, d_f = place_rows(d, pad, device)
    out = place_outputs(("dQ",), shape, dtype, lays, pad, device)
    kwargs = {"HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n, "CAUSAL": causal}
    grid = (triton.cdiv(seq_len, block_m), batch * heads)

    def run(views, lse_, d_, dq_, stage_text=None):
        strides = [s for t in (*views, dq_) for s in t.stride()]
        _launch(kernel, DQ, grid, (*views, lse_, d_, dq_, *strides, heads, seq_len, sm_scale), kwargs, context, device,
                stage_text)

    run([placed[n].view for n in ("Q", "K", "V", "dO")], lse_v, d_v, out["dQ"].view)
    _inputs_unchanged(placed, originals, {"LSE": (lse_v, lse_f, lse.float().reshape(lse_v.shape), pad),
                                          "D": (d_v, d_f, d.float().reshape(d_v.shape), pad)}, context, DQ)
    _stray(out, context, DQ, seq_len, block_m, "BLOCK_M")
    _judge_grads(out, {"dQ": refs["dQ"]}, dtype, device, context, DQ, (q, k, v, do, o, lse), causal, sm_scale,
                 block_m, block_n, data, mixed=len(set(lays.values())) > 1, buffers={**placed, **out}, lays=lays, d=d)
    if fence and fence_supported(device):
        fenced = [fenced_tensor(t, lays[n], device) for n, t in originals.items()]
        (lse2, k1), (d2, k2) = fenced_rows(lse, device), fenced_rows(d, device)
        out2 = place_outputs(("dQ",), shape, dtype, {"dQ": "contiguous"}, pad, device)
        run([f[0] for f in fenced], lse2, d2, out2["dQ"].view, _fence_text(DQ, context))
        atol, rtol, _ = gradient_tolerance(dtype, device, refs["dQ"], max_score(q, k, causal, sm_scale))
        ok, msg = compare(out2["dQ"].view, refs["dQ"], atol=atol, rtol=rtol, name="dQ")
        if not ok:
            raise KernelCheckError(f"Wrong values on the second run, the inputs stored without guards ({context}).\n"
                                   f"{msg}")
        del fenced, k1, k2
    stage("done")


__all__ = ["PREPROCESS", "DKDV", "DQ", "SIGNATURES", "check_attention_bwd_preprocess", "check_attention_bwd_dkdv",
           "check_attention_bwd_dq"]

"""Developers only: phase 7's backward in one pass over the scores (issue 43: the training step's backward). Not part
of the course.

The notebook's backward runs two kernels: dK/dV over query tiles (four products a tile) and dQ over key tiles (three,
two of them the dK/dV kernel's again): seven matrix products where FlashAttention's backward does five. Its
ATOMIC_DQ variant does five, but adds dQ with `tl.atomic_add`, one fp32 add a value, and measured 52-149 TFLOP/s.
Here the dK/dV kernel adds each query tile's dQ through a tensor descriptor (`desc.atomic_add`: on Hopper one TMA
reduce of the whole (BLOCK_M, HEAD_DIM) tile, as FlashAttention-3 does) into an fp32 buffer, then casts it.
Timed on an H200 at the training block's shape (thirtieth session, tools/sweep_block.py --parts backward,step3): at
(64, 128, 8 warps, 3 stages) 1062-1063 us against the notebook's 1121-1128 us and cuDNN's 816-827 us (0.77x cuDNN
against 0.73x); other tiles slower (255 registers and spills, or 1 program an SM); the training step unchanged
(0.861x SDPA's default both). ws_dkdv_kernel, the dK/dV loop warp-specialized with Q and dO through descriptors:
Triton 3.6.0 and 3.9.0 fail at 4 warps (an assertion in WSLowerToken) and never split at 8.

    from sweep_backward_tma import tma_dq_backward
    dq, dk, dv = tma_dq_backward(nb, q, k, v, o, lse, do, causal, (64, 128, 8, 2))   # nb: the notebook's module

    python tools/sweep_backward_tma.py           # registers and spills for sm_90a, no GPU (the interpreter has no
                                                 # descriptor reduce: tools/sweep_block.py checks it on a GPU)
"""
from __future__ import annotations

import sys

import triton
import triton.language as tl


@triton.jit
def tma_dq_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd, stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd, stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    n_heads, seq_len, rows, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The notebook's dK/dV kernel; dQ (fp32, (batch·heads·seq_len, HEAD_DIM) contiguous, zeroed) gets sm_scale · dS K
    of each query tile by one descriptor reduce. Rows past seq_len add zeros (their P is 0) or fall off the end."""
    desc_dq = tl.make_tensor_descriptor(dq_ptr, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    keys = offs_n[:, None] < seq_len
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=keys, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=keys, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    row0 = pid_bh * seq_len
    for start_m in range(lo, seq_len, BLOCK_M):
        rows_m = start_m + offs_m
        in_seq = rows_m < seq_len
        q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                    mask=in_seq[:, None], other=0.0)
        do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows_m[:, None] * stride_dom
                     + offs_d[None, :] * stride_dod, mask=in_seq[:, None], other=0.0)
        lse = tl.load(lse_ptr + row0 + rows_m, mask=in_seq, other=0.0) * 1.4426950408889634
        delta = tl.load(delta_ptr + row0 + rows_m, mask=in_seq, other=0.0)
        s_t = tl.dot(k, tl.trans(q)) * qk_scale
        keep = keys & in_seq[None, :]
        if CAUSAL:
            keep = keep & (rows_m[None, :] >= offs_n[:, None])
        p_t = tl.where(keep, tl.math.exp2(s_t - lse[None, :]), 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        desc_dq.atomic_add([row0 + start_m, 0], tl.dot(tl.trans(ds_t), k) * sm_scale)
    tl.store(dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd,
             (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=keys)
    tl.store(dv_ptr + b * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :] * stride_dvd,
             dv.to(dv_ptr.dtype.element_ty), mask=keys)


def tma_dq_backward(nb, q, k, v, o, lse, do, causal, cfg, sm_scale=None):
    """(dQ, dK, dV): the notebook's preprocess kernel (D), then tma_dq_dkdv_kernel at cfg = (BLOCK_M, BLOCK_N, warps,
    stages), then dQ cast to Q's dtype."""
    import torch

    batch, heads, seq_len, head_dim = q.shape
    sm_scale = head_dim**-0.5 if sm_scale is None else sm_scale
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=q.device))
    lse = lse.reshape(batch * heads, seq_len).contiguous()
    delta = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    pbm = 128 if q.is_cuda else 16
    nb.triton_attention_bwd_preprocess_kernel[(triton.cdiv(seq_len, pbm), batch * heads)](
        o, do, delta, *o.stride(), *do.stride(), heads, seq_len, HEAD_DIM=head_dim, BLOCK_M=pbm, num_warps=4)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dq = torch.zeros((batch * heads * seq_len, head_dim), device=q.device, dtype=torch.float32)
    bm, bn, warps, stages = cfg
    tma_dq_dkdv_kernel[(triton.cdiv(seq_len, bn), batch * heads)](
        q, k, v, do, lse, delta, dk, dv, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(),
        *dv.stride(), heads, seq_len, batch * heads * seq_len, sm_scale, HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn,
        CAUSAL=causal, num_warps=warps, num_stages=stages)
    return dq.view(batch, heads, seq_len, head_dim).to(q.dtype), dk, dv


def compile_stats() -> None:
    """Registers, spill bytes and shared bytes for sm_90a (no GPU): Triton's interpreter has no descriptor reduce,
    so the check against the notebook's backward is tools/sweep_block.py's, on a GPU."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sweep_registers import compile_for_hopper, ptxas_stats, split_words

    for d, cfgs in ((128, ((64, 64, 4, 2), (64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 8, 2), (32, 128, 8, 3))),
                    (64, ((64, 128, 8, 2), (64, 64, 4, 3)))):
        for cfg in cfgs:
            for causal in (False, True):
                c = compile_for_hopper(tma_dq_dkdv_kernel, d, cfg, causal)
                print(f"d{d} {cfg} causal={causal}: {ptxas_stats(c)} (registers, spill bytes, shared bytes)", flush=True)
    for cfg in ((64, 128, 4, 2), (64, 128, 8, 2)):
        label = f"ws_dkdv_kernel d128 {cfg} warp_specialize=True"
        try:
            c = compile_for_hopper(ws_dkdv_kernel, 128, cfg, True, WARP_SPECIALIZE=True)
            print(f"{label}: {ptxas_stats(c)}; {split_words(c)}", flush=True)
        except Exception as err:
            print(f"{label}: {type(err).__name__}: {str(err)[:80]}", flush=True)


@triton.jit
def ws_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
    stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh, stride_dvn,
    n_heads, seq_len, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr):
    """The notebook's dK/dV kernel (no dQ) with Q and dO tiles loaded through descriptors made per (batch, head) and
    its query loop warp-specialized when asked; seq_len a multiple of BLOCK_M and BLOCK_N."""
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    desc_q = tl.make_tensor_descriptor(q_ptr + b * stride_qb + h * stride_qh, [seq_len, HEAD_DIM], [stride_qm, 1],
                                       [BLOCK_M, HEAD_DIM])
    desc_do = tl.make_tensor_descriptor(do_ptr + b * stride_dob + h * stride_doh, [seq_len, HEAD_DIM],
                                        [stride_dom, 1], [BLOCK_M, HEAD_DIM])
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :])
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :])
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    row0 = pid_bh * seq_len
    for start_m in tl.range(lo, seq_len, BLOCK_M, warp_specialize=WARP_SPECIALIZE):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows_m = start_m + offs_m
        q = desc_q.load([start_m, 0])
        do = desc_do.load([start_m, 0])
        lse = tl.load(lse_ptr + row0 + rows_m) * 1.4426950408889634
        delta = tl.load(delta_ptr + row0 + rows_m)
        s_t = tl.dot(k, tl.trans(q)) * qk_scale
        if CAUSAL:
            s_t = s_t + tl.where(rows_m[None, :] >= offs_n[:, None], 0.0, -1.0e6)
        p_t = tl.math.exp2(s_t - lse[None, :])
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    tl.store(dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :],
             (dk * sm_scale).to(dk_ptr.dtype.element_ty))
    tl.store(dv_ptr + b * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :],
             dv.to(dv_ptr.dtype.element_ty))


if __name__ == "__main__":
    compile_stats()

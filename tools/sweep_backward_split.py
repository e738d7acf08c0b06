"""Developers only, no GPU needed: phase 7's dK/dV kernel with its query loop split into masked and unmasked tiles (as
phase 6's forward splits its key loop), against the notebook's own (issue 43: the training step's backward, whose
dK/dV kernel spills at head_dim 128). Not part of the course.

    python tools/sweep_backward_split.py check      # the same dK and dV as the notebook's kernel, on the interpreter
    python tools/sweep_backward_split.py compile    # registers, spill bytes and shared bytes of both, for sm_90a

The split kernel loads and computes without masks in the query tiles that are whole and wholly after the key tile's
diagonal; the tiles that cross the diagonal (causal) and the ragged last one keep the notebook's masks. On
2026-11-29 (twenty-ninth session, Triton 3.6.0, ptxas of its wheel): at head_dim 128, (64, 64, 4 warps, 2 stages),
causal (the training block's shape and BWD_CONFIG's tiles), 255 registers and 0 bytes of spill stores against the
notebook's 44; 3 stages 8 against 124; not causal it spilled more (72 against 12). Timed on an H200 at the block's
shape (thirtieth session, tools/sweep_block.py --parts backward): slower, 1274-1282 us against the notebook's
1121-1131 us (0.64x cuDNN against 0.73x): fewer spills did not make it faster.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
CHECK = sys.argv[1:2] == ["check"]
from sweep_registers import compile_for_hopper, notebook_cell, ptxas_stats  # noqa: E402  (unsets TRITON_INTERPRET)

if CHECK:  # before any @triton.jit below or in the notebook's cell: the interpreter
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_ptr, delta_ptr, row0, offs_n, offs_m, offs_d, stride_qm, stride_qd,
                stride_dom, stride_dod, seq_len, qk_scale, lo, hi, BLOCK_M: tl.constexpr, MASKED: tl.constexpr,
                CAUSAL: tl.constexpr):
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + offs_m
        if MASKED:
            in_seq = rows < seq_len
            q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=in_seq[:, None],
                        other=0.0)
            do = tl.load(do_base + rows[:, None] * stride_dom + offs_d[None, :] * stride_dod, mask=in_seq[:, None],
                         other=0.0)
            lse = tl.load(lse_ptr + row0 + rows, mask=in_seq, other=0.0) * 1.4426950408889634
            delta = tl.load(delta_ptr + row0 + rows, mask=in_seq, other=0.0)
        else:
            q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd)
            do = tl.load(do_base + rows[:, None] * stride_dom + offs_d[None, :] * stride_dod)
            lse = tl.load(lse_ptr + row0 + rows) * 1.4426950408889634
            delta = tl.load(delta_ptr + row0 + rows)
        s_t = tl.dot(k, tl.trans(q)) * qk_scale
        if MASKED:
            keep = (offs_n[:, None] < seq_len) & in_seq[None, :]
            if CAUSAL:
                keep = keep & (rows[None, :] >= offs_n[:, None])
            p_t = tl.where(keep, tl.math.exp2(s_t - lse[None, :]), 0.0)
        else:
            p_t = tl.math.exp2(s_t - lse[None, :])
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def split_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd, stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd, stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd, n_heads, seq_len, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    ATOMIC_DQ: tl.constexpr):
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
    row0 = pid_bh.to(tl.int64) * seq_len
    q_base = q_ptr + b * stride_qb + h * stride_qh
    do_base = do_ptr + b * stride_dob + h * stride_doh
    full_end = (seq_len // BLOCK_M) * BLOCK_M  # whole query tiles end here
    if CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M
        # the query tiles that cross the key tile's diagonal, masked; after them every query sees every key
        diag_end = tl.minimum(((start_n + BLOCK_N + BLOCK_M - 1) // BLOCK_M) * BLOCK_M, seq_len)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_ptr, delta_ptr, row0, offs_n, offs_m, offs_d, stride_qm,
                             stride_qd, stride_dom, stride_dod, seq_len, qk_scale, lo, diag_end, BLOCK_M, True, CAUSAL)
        mid_lo = diag_end
    else:
        mid_lo = 0
    mid_end = tl.maximum(full_end, mid_lo)
    dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_ptr, delta_ptr, row0, offs_n, offs_m, offs_d, stride_qm,
                         stride_qd, stride_dom, stride_dod, seq_len, qk_scale, mid_lo, mid_end, BLOCK_M, False, CAUSAL)
    dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_ptr, delta_ptr, row0, offs_n, offs_m, offs_d, stride_qm,
                         stride_qd, stride_dom, stride_dod, seq_len, qk_scale, mid_end, seq_len, BLOCK_M, True, CAUSAL)
    tl.store(dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd,
             (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=keys)
    tl.store(dv_ptr + b * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :] * stride_dvd,
             dv.to(dv_ptr.dtype.element_ty), mask=keys)


def compile_both(reference) -> None:
    """Registers, spill bytes and shared bytes of the notebook's kernel and the split one, for sm_90a."""
    for d, cfg in ((128, (64, 64, 4, 2)), (128, (64, 64, 4, 3)), (64, (32, 128, 4, 3)), (128, (32, 64, 4, 3))):
        for causal in (False, True):
            ref, split = (ptxas_stats(compile_for_hopper(fn, d, cfg, causal)) for fn in (reference, split_dkdv_kernel))
            print(f"d{d} {cfg} causal={causal}: notebook {ref}, split {split} (registers, spill bytes, shared bytes)", flush=True)


def check_both(reference) -> None:
    """The largest |difference| of dK and dV between the two kernels, causal or not, whole and ragged seq_len."""
    import torch

    for causal in (False, True):
        for S in (64, 70, 128, 100):
            B, H, D = 1, 2, 32
            g = torch.Generator().manual_seed(S)
            q, k, v, do = (torch.randn(B, H, S, D, generator=g) for _ in range(4))
            lse = torch.randn(B * H, S, generator=g).abs() + 3
            delta = torch.randn(B * H, S, generator=g)
            outs = []
            for fn in (reference, split_dkdv_kernel):
                dk, dv, dq = torch.zeros_like(k), torch.zeros_like(v), torch.zeros_like(q)
                fn[(triton.cdiv(S, 32), B * H)](
                    q, k, v, do, lse, delta, dk, dv, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(),
                    *dk.stride(), *dv.stride(), *dq.stride(), H, S, 0.3, HEAD_DIM=D, BLOCK_M=16, BLOCK_N=32,
                    CAUSAL=causal, ATOMIC_DQ=False)
                outs.append((dk, dv))
            print(causal, S, float((outs[0][0] - outs[1][0]).abs().max()), float((outs[0][1] - outs[1][1]).abs().max()))


if __name__ == "__main__":
    notebooks = notebook_cell("07_attention_backward", "attention_bwd_dkdv_kernel").triton_attention_bwd_dkdv_kernel
    (check_both if CHECK else compile_both)(notebooks)

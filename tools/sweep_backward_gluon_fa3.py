"""Developers only, on a Hopper GPU: attention's backward in one Gluon kernel laid out as FlashAttention-3's
(hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp at head_dim 128: kBlockN 128, kBlockM 64, two MMA warp groups, SdP_swapAB,
dK/dV from registers, dQ split along head_dim, dQ's adds by a warp of their own), for issue 43's training step.
Also the Gluon forward (tritoncourse/hopper_gluon.py's partitions) with descriptors made in the kernel from the real
strides, so that the block's strided q, k, v are read in place and O is written in (batch, seq, heads, dim).

One program per key tile of 128; per query tile of 64 (a ring of Q and dO tiles, filled by a one-warp TMA producer):
each of the two consumer groups (64 keys) computes Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (asynchronous), Pᵀ, dSᵀ, stores its dSᵀ
into a shared tile of 128 keys × 64 queries (two stages), issues dV += Pᵀ·dO; once both groups have stored
(an mbarrier of count 2), issues dQ = dS·K over all 128 keys but only its half of head_dim (64 × 64, 32 registers a
thread), then dK += dSᵀ·Q; it stores its dQ half in fp32 to shared memory and signals a fifth warp, which adds it
into an fp32 dQ buffer in global memory by a TMA reduce (tools/sweep_backward_gluon_fused.py's ``_tma_add``), so no
group waits for an add. dQ = buffer × sm_scale in fp16 by a small kernel after.

    python tools/sweep_block.py --parts fa3 --repeats 3
"""
from __future__ import annotations

import functools

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from sweep_backward_gluon import LOG2E, _desc, _p_transposed
from sweep_backward_gluon_fused import _tma_add
from tritoncourse import hopper_gluon
from tritoncourse.hopper_gluon import wgmma_layout


@gluon.jit
def _producer(desc_k, desc_v, desc_q, desc_do, k_smem, v_smem, q_ring, do_ring, bars, at, key0, first, n_tiles,
              STAGES: gl.constexpr):
    """K's and V's tiles of 128 keys once, then Q's and dO's tiles of 64 queries into the ring. at: the (batch,
    head)'s first row and its columns in q, k, v, dO (all 0 with descriptors of its own)."""
    kv_bar, ready, empty = bars[0], bars[1], bars[2]
    row0, col_q, col_k, col_v, col_do = at
    BLOCK_M: gl.constexpr = desc_q.block_type.shape[0]
    mbarrier.expect(kv_bar, desc_k.block_type.nbytes + desc_v.block_type.nbytes)
    tma.async_copy_global_to_shared(desc_k, [row0 + key0, col_k], kv_bar, k_smem)
    tma.async_copy_global_to_shared(desc_v, [row0 + key0, col_v], kv_bar, v_smem)
    for i in range(n_tiles):
        st = i % STAGES
        row = row0 + (first + i) * BLOCK_M
        mbarrier.wait(empty.index(st), ((i // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(st), desc_q.block_type.nbytes + desc_do.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_q, [row, col_q], ready.index(st), q_ring.index(st))
        tma.async_copy_global_to_shared(desc_do, [row, col_do], ready.index(st), do_ring.index(st))


@gluon.jit
def _writer(desc_dq, dq_smem, bars, dq_row0, first, n_tiles):
    """One warp: each tile's two dQ halves, when their group has stored them, added into dQ's fp32 buffer (its
    (batch, head)'s rows from dq_row0)."""
    dq_full, dq_empty = bars[4], bars[5]
    BLOCK_M: gl.constexpr = dq_smem.type.shape[1]
    HALF_D: gl.constexpr = dq_smem.type.shape[2]
    for i in range(n_tiles):
        row = dq_row0 + (first + i) * BLOCK_M
        mbarrier.wait(dq_full.index(0), i & 1)
        _tma_add(desc_dq, [row, 0], dq_smem.index(0))
        mbarrier.wait(dq_full.index(1), i & 1)
        _tma_add(desc_dq, [row, HALF_D], dq_smem.index(1))
        tma.store_wait(1)  # the first add has read its buffer
        mbarrier.arrive(dq_empty.index(0), count=1)
        tma.store_wait(0)
        mbarrier.arrive(dq_empty.index(1), count=1)


@gluon.jit
def _consumer(GROUP: gl.constexpr, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars, lse_ptr, delta_ptr,
              dk_ptr, dv_ptr, key0, first, n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
              SYNC: gl.constexpr):
    """64 keys: dK and dV over the query tiles first .. first + n_tiles - 1; dQ's half (head_dim) of each tile."""
    kv_bar, ready, empty, ds_bar, dq_full, dq_empty = bars
    HALF: gl.constexpr = 64
    HEAD_DIM: gl.constexpr = k_smem.type.shape[1]
    BLOCK_M: gl.constexpr = q_ring.type.shape[1]
    dtype: gl.constexpr = k_smem.dtype
    s_layout: gl.constexpr = wgmma_layout(BLOCK_M)
    acc_layout: gl.constexpr = wgmma_layout(HEAD_DIM)
    dq_layout: gl.constexpr = wgmma_layout(HEAD_DIM // 2)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    cols: gl.constexpr = gl.SliceLayout(0, s_layout)
    k = k_smem.slice(GROUP * HALF, HALF, dim=0)
    v = v_smem.slice(GROUP * HALF, HALF, dim=0)
    k_cols = k_smem.slice(GROUP * (HEAD_DIM // 2), HEAD_DIM // 2, dim=1)  # dQ's B: all keys, this group's columns
    dq_buf = dq_smem.index(GROUP)
    offs_k = key0 + GROUP * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout))
    zero_s = gl.zeros([HALF, BLOCK_M], gl.float32, s_layout)
    zero_dq = gl.zeros([BLOCK_M, HEAD_DIM // 2], gl.float32, dq_layout)
    dk = gl.zeros([HALF, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([HALF, HEAD_DIM], gl.float32, acc_layout)
    last_key = key0 + GROUP * HALF + HALF - 1
    mbarrier.wait(kv_bar, 0)
    for i in range(n_tiles):
        st = i % STAGES
        ds_st = i % 2
        offs_q = (first + i) * BLOCK_M + gl.arange(0, BLOCK_M, layout=cols)
        mbarrier.wait(ready.index(st), (i // STAGES) & 1)
        q = q_ring.index(st)
        do = do_ring.index(st)
        s_tok = warpgroup_mma(k, q.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dp_tok = warpgroup_mma(v, do.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(1, deps=(s_tok, ))
        p, delta = _p_transposed(s, lse_ptr, delta_ptr, offs_q, offs_k, (first + i) * BLOCK_M, last_key, qk_scale,
                                 CAUSAL)
        dp = warpgroup_mma_wait(0, deps=(dp_tok, ))
        ds = (p * (dp - delta[None, :])).to(dtype)
        ds_all = ds_smem.index(ds_st)
        ds_all.slice(GROUP * HALF, HALF, dim=0).store(ds)  # dSᵀ: this group's 64 keys of the tile's 128
        p16 = gl.convert_layout(p.to(dtype), a_layout)
        dv = warpgroup_mma(p16, do, dv, is_async=True)
        fence_async_shared()
        if SYNC:
            gl.thread_barrier()
        mbarrier.arrive(ds_bar.index(ds_st), count=1)
        mbarrier.wait(ds_bar.index(ds_st), (i // 2) & 1)  # both groups' dSᵀ are in
        dq_tok = warpgroup_mma(ds_all.permute((1, 0)), k_cols, zero_dq, use_acc=False, is_async=True)
        dv, p16 = warpgroup_mma_wait(1, deps=(dv, p16))
        ds16 = gl.convert_layout(ds, a_layout)
        dk = warpgroup_mma(ds16, q, dk, is_async=True)
        dq = warpgroup_mma_wait(1, deps=(dq_tok, ))  # dK may run on
        mbarrier.wait(dq_empty.index(GROUP), (i & 1) ^ 1)  # the writer has read this buffer's last half
        dq_buf.store(dq)
        fence_async_shared()
        if SYNC:
            gl.thread_barrier()
        mbarrier.arrive(dq_full.index(GROUP), count=1)
        dk, ds16 = warpgroup_mma_wait(0, deps=(dk, ds16))
        mbarrier.arrive(empty.index(st), count=1)
    rows = key0 + GROUP * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, acc_layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    offs = rows[:, None] * HEAD_DIM + offs_d[None, :]
    gl.store(dk_ptr + offs, (dk * sm_scale).to(dtype))
    gl.store(dv_ptr + offs, dv.to(dtype))


@gluon.jit
def _partition(ROLE: gl.constexpr, descs, at, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars, lse_ptr,
               delta_ptr, dk_ptr, dv_ptr, key0, first, n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr,
               STAGES: gl.constexpr, SYNC: gl.constexpr):
    desc_k, desc_v, desc_q, desc_do, desc_dq = descs
    if ROLE == 2:
        _producer(desc_k, desc_v, desc_q, desc_do, k_smem, v_smem, q_ring, do_ring, bars, at[:5], key0, first,
                  n_tiles, STAGES)
    elif ROLE == 3:
        _writer(desc_dq, dq_smem, bars, at[5], first, n_tiles)
    else:
        _consumer(ROLE, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                  key0, first, n_tiles, qk_scale, sm_scale, CAUSAL, STAGES, SYNC)


@gluon.jit
def fa3_backward_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_acc_ptr,
                        sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sdo_b, sdo_h, sdo_s,
                        n_heads, seq_len, sm_scale, HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr,
                        STAGES: gl.constexpr, REGS: gl.constexpr, SYNC: gl.constexpr, GROUP: gl.constexpr,
                        HOST: gl.constexpr, num_warps: gl.constexpr):
    """HOST: q_ptr, k_ptr, v_ptr, do_ptr and dq_acc_ptr are descriptors made on the host, over rows (batch·seq_len)
    and columns (heads·head_dim: a head's columns from h·stride_h), and dq_acc's rows (batch·heads·seq_len), instead of
    pointers from which descriptors of one (batch, head) are made here (each program writing five, then fencing)."""
    BLOCK_N: gl.constexpr = 128
    BLOCK_M: gl.constexpr = 64
    # GROUP > 0: a grid of one axis, GROUP (batch, head)s at a time, each group's first key tiles (causal: the most
    # query tiles) first: the heaviest programs early while the group's Q, dO and dQ rows stay in L2; 0: the grid
    # (key tiles, batch·heads)
    if GROUP > 0:
        pid = gl.program_id(0)
        per_group = GROUP * (seq_len // BLOCK_N)
        pid_n = (pid % per_group) // GROUP
        bh = (pid // per_group) * GROUP + pid % GROUP
    else:
        pid_n = gl.program_id(0)
        bh = gl.program_id(1)
    key0 = pid_n * BLOCK_N
    row = bh * seq_len
    dq_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM // 2], gl.float32)
    if HOST:
        desc_k, desc_v, desc_q, desc_do, desc_dq = k_ptr, v_ptr, q_ptr, do_ptr, dq_acc_ptr
        h = bh % n_heads
        at = ((bh // n_heads) * seq_len, h * sq_h, h * sk_h, h * sv_h, h * sdo_h, row)
    else:
        desc_k = _desc(k_ptr, bh, n_heads, sk_b, sk_h, sk_s, seq_len, BLOCK_N, HEAD_DIM)
        desc_v = _desc(v_ptr, bh, n_heads, sv_b, sv_h, sv_s, seq_len, BLOCK_N, HEAD_DIM)
        desc_q = _desc(q_ptr, bh, n_heads, sq_b, sq_h, sq_s, seq_len, BLOCK_M, HEAD_DIM)
        desc_do = _desc(do_ptr, bh, n_heads, sdo_b, sdo_h, sdo_s, seq_len, BLOCK_M, HEAD_DIM)
        desc_dq = tma.make_tensor_descriptor(dq_acc_ptr + row.to(gl.int64) * HEAD_DIM, [seq_len, HEAD_DIM],
                                             [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM // 2], dq_sl)
        at = (0, 0, 0, 0, 0, 0)
    dtype: gl.constexpr = desc_q.dtype
    first = key0 // BLOCK_M if CAUSAL else 0
    n_tiles = seq_len // BLOCK_M - first
    k_smem = gl.allocate_shared_memory(dtype, desc_k.block_type.shape, desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, desc_v.block_type.shape, desc_v.layout)
    q_ring = gl.allocate_shared_memory(dtype, [STAGES] + desc_q.block_type.shape, desc_q.layout)
    do_ring = gl.allocate_shared_memory(dtype, [STAGES] + desc_do.block_type.shape, desc_do.layout)
    ds_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_sl)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, HEAD_DIM // 2], dq_sl)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ds_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    dq_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    dq_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both consumer groups free a stage
    for g in gl.static_range(2):
        mbarrier.init(ds_bar.index(g), count=2)  # both groups have stored their dSᵀ
        mbarrier.init(dq_full.index(g), count=1)
        mbarrier.init(dq_empty.index(g), count=1)
    args = ((desc_k, desc_v, desc_q, desc_do, desc_dq), at, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem,
            (kv_bar, ready, empty, ds_bar, dq_full, dq_empty), lse_ptr + row, delta_ptr + row,
            dk_ptr + row.to(gl.int64) * HEAD_DIM, dv_ptr + row.to(gl.int64) * HEAD_DIM, key0, first, n_tiles,
            sm_scale * LOG2E, sm_scale, CAUSAL, STAGES, SYNC)
    gl.warp_specialize([(_partition, (0, ) + args), (_partition, (1, ) + args), (_partition, (2, ) + args),
                        (_partition, (3, ) + args)], [4, 1, 1], [REGS, 24, 24])


@functools.lru_cache(maxsize=None)
def shared_layout(rows, cols, dtype):
    """NVMMASharedLayout.get_default_for, made once a shape (a step's launches make eight descriptors: the CPU's time
    counts in do_bench's)."""
    import torch

    dt = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dt)


def rows_descriptor(t, block_rows):
    """A host descriptor of t (batch, heads, seq_len, head_dim) whose rows have one stride (batch stride = seq_len ×
    row stride): rows (batch·seq_len) × columns (heads·stride_h), blocks of block_rows × head_dim."""
    batch, heads, seq_len, head_dim = t.shape
    return TensorDescriptor(t, [batch * seq_len, heads * t.stride(1)], [t.stride(2), 1], [block_rows, head_dim],
                            shared_layout(block_rows, head_dim, t.dtype))


def _scratch(size, align, stream):
    import torch

    return torch.empty(size, dtype=torch.int8, device="cuda")


def use_scratch_allocator():
    """Triton's allocator for the descriptors made in kernels (their global scratch). A context variable: set at
    every call, since autograd runs a backward in a thread of its own (set once, call 5 of the thirty-third session
    found none there)."""
    triton.set_allocator(_scratch)


@triton.jit
def _prep_kernel(o_ptr, do_ptr, delta_ptr, acc_ptr, so_b, so_h, so_s, sdo_b, sdo_h, sdo_s, n_heads, seq_len,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Δ = rowsum(O ∘ dO) of BLOCK_M rows of one (batch, head), and the same rows of dQ's fp32 buffer zeroed: one
    pass instead of Δ's kernel and a memset."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // n_heads).to(tl.int64)
    h = (bh % n_heads).to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    o = tl.load(o_ptr + b * so_b + h * so_h + rows[:, None] * so_s + cols[None, :]).to(tl.float32)
    do = tl.load(do_ptr + b * sdo_b + h * sdo_h + rows[:, None] * sdo_s + cols[None, :]).to(tl.float32)
    tl.store(delta_ptr + bh * seq_len + rows, tl.sum(o * do, 1))
    offs = (bh.to(tl.int64) * seq_len + rows[:, None]) * HEAD_DIM + cols[None, :]
    tl.store(acc_ptr + offs, tl.zeros([BLOCK_M, HEAD_DIM], tl.float32))


@triton.jit
def _dq_convert_kernel(acc_ptr, dq_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dq_ptr + offs, (tl.load(acc_ptr + offs, mask=mask) * scale).to(dq_ptr.dtype.element_ty), mask=mask)


def fa3_backward(q, k, v, o, lse, do, causal, sm_scale=None, stages=2, regs=240, sync=True, group=0, prep=False,
                 host=False, delta_of=None, kernel_only=False):
    """(dQ, dK, dV), contiguous, of q, k, v, dO of (batch, heads, seq_len, head_dim) with any strides but the last
    (1) and LSE (natural log) of (batch·heads, seq_len); head_dim 128 (dQ's halves of 64), seq_len a multiple of
    128. delta_of(o, do) -> Δ of (batch·heads, seq_len) fp32 (torch's unless given); prep: Δ and the zeroed dQ
    buffer by _prep_kernel instead; group: the programs' order (fa3_backward_kernel's GROUP); host: descriptors
    made here (fa3_backward_kernel's HOST) where each of q, k, v, dO has rows of one stride (batch stride =
    seq_len × row stride, as the block's views have); kernel_only: the main kernel alone, on buffers made once
    (wrong dQ: for timing)."""
    import torch

    batch, heads, seq_len, head_dim = q.shape
    if seq_len % 128 or head_dim != 128:
        raise ValueError("seq_len a multiple of 128, head_dim 128")
    sm_scale = sm_scale or head_dim**-0.5
    use_scratch_allocator()
    lse = lse.reshape(batch * heads, seq_len).contiguous()
    dk, dv = (torch.empty(batch, heads, seq_len, head_dim, device=q.device, dtype=q.dtype) for _ in range(2))
    if kernel_only:
        if getattr(fa3_backward, "made", None) is None or fa3_backward.made[0].shape != q.shape:
            fa3_backward.made = (torch.zeros(q.shape, device=q.device), (o.float() * do.float()).sum(-1))
        dq_acc, delta = fa3_backward.made
    elif prep:
        delta = torch.empty(batch * heads, seq_len, device=q.device, dtype=torch.float32)
        dq_acc = torch.empty(batch, heads, seq_len, head_dim, device=q.device, dtype=torch.float32)
        _prep_kernel[(seq_len // 64, batch * heads)](o, do, delta, dq_acc, *o.stride()[:3], *do.stride()[:3], heads,
                                                     seq_len, HEAD_DIM=head_dim, BLOCK_M=64, num_warps=4)
    else:
        delta = delta_of(o, do) if delta_of else (o.float() * do.float()).sum(-1).contiguous()
        dq_acc = torch.zeros(batch, heads, seq_len, head_dim, device=q.device, dtype=torch.float32)
    strides = [s for t in (q, k, v, do) for s in t.stride()[:3]]
    grid = (batch * heads * seq_len // 128, ) if group else (seq_len // 128, batch * heads)
    tensors = (q, k, v, do, dq_acc)
    host = host and all(t.stride(0) == seq_len * t.stride(2) and t.stride(3) == 1 for t in (q, k, v, do))
    if host:
        tensors = [rows_descriptor(t, bm) for t, bm in zip((q, k, v, do), (64, 128, 128, 64))]
        tensors.append(TensorDescriptor(dq_acc, [dq_acc.numel() // head_dim, head_dim], [head_dim, 1],
                                        [64, head_dim // 2], shared_layout(64, head_dim // 2, torch.float32)))
    fa3_backward_kernel[grid](*tensors[:4], lse, delta, dk, dv, tensors[4], *strides, heads, seq_len, sm_scale,
                              HEAD_DIM=head_dim, CAUSAL=causal, STAGES=stages, REGS=regs, SYNC=sync, GROUP=group,
                              HOST=host, num_warps=4)
    if kernel_only:
        return dq_acc, dk, dv
    dq = torch.empty_like(dk)
    n = dq.numel()
    _dq_convert_kernel[(triton.cdiv(n, 4096), )](dq_acc, dq, n, sm_scale, BLOCK=4096, num_warps=8)
    return dq, dk, dv


@gluon.jit
def strided_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s,
                           so_b, so_h, so_s, n_heads, seq_len, qk_scale, HEAD_DIM: gl.constexpr,
                           CAUSAL: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                           SWAP: gl.constexpr, num_warps: gl.constexpr):
    """tritoncourse/hopper_gluon.py's kernel with one descriptor a (batch, head) made here from the strides: its
    partitions as they are, rows counted from the (batch, head)'s first. SWAP: the grid is (batch·heads, query
    tiles), every (batch, head)'s heaviest tile first."""
    HALF: gl.constexpr = 64
    BLOCK_N: gl.constexpr = 128
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    pid_m = gl.program_id(1 if SWAP else 0)
    if CAUSAL:
        pid_m = gl.num_programs(1 if SWAP else 0) - 1 - pid_m
    bh = gl.program_id(0 if SWAP else 1)
    q_start = pid_m * (2 * HALF)
    n_tiles = (q_start + 2 * HALF) // BLOCK_N if CAUSAL else seq_len // BLOCK_N
    desc_q = _desc(q_ptr, bh, n_heads, sq_b, sq_h, sq_s, seq_len, HALF, HEAD_DIM)
    desc_o = _desc(o_ptr, bh, n_heads, so_b, so_h, so_s, seq_len, HALF, HEAD_DIM)
    desc_k = _desc(k_ptr, bh, n_heads, sk_b, sk_h, sk_s, seq_len, BLOCK_N, HEAD_DIM)
    desc_v = _desc(v_ptr, bh, n_heads, sv_b, sv_h, sv_s, seq_len, BLOCK_N, HEAD_DIM)
    q_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], desc_q.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], desc_v.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    args = (desc_q, desc_k, desc_v, desc_o, lse_ptr + bh * seq_len, q_smem, k_smem, v_smem,
            (q_bar, k_ready, k_empty, v_ready, v_empty), q_start, 0, q_start, n_tiles, qk_scale, CAUSAL, STAGES)
    gl.warp_specialize([(hopper_gluon._partition, (0, ) + args), (hopper_gluon._partition, (1, ) + args),
                        (hopper_gluon._partition, (2, ) + args)], [4, 1], [CONSUMER_REGS, 24])


def strided_forward(q, k, v, causal, sm_scale=None, stages=2, regs=232, swap=False):
    """(O, LSE) of q, k, v of (batch, heads, seq_len, head_dim) with any strides but the last; O allocated as
    (batch, seq_len, heads, head_dim) and returned through a transpose (the notebook's layout), LSE (batch·heads,
    seq_len) natural-log fp32; seq_len a multiple of 128, head_dim 64 or 128."""
    import torch

    batch, heads, seq_len, head_dim = q.shape
    sm_scale = sm_scale or head_dim**-0.5
    use_scratch_allocator()
    o = torch.empty(batch, seq_len, heads, head_dim, device=q.device, dtype=q.dtype).transpose(1, 2)
    lse = torch.empty(batch * heads, seq_len, device=q.device, dtype=torch.float32)
    strides = [s for t in (q, k, v, o) for s in t.stride()[:3]]
    grid = (batch * heads, seq_len // 128) if swap else (seq_len // 128, batch * heads)
    strided_forward_kernel[grid](q, k, v, o, lse, *strides, heads, seq_len, sm_scale * 1.4426950408889634,
                                 HEAD_DIM=head_dim, CAUSAL=causal, STAGES=stages, CONSUMER_REGS=regs, SWAP=swap,
                                 num_warps=4)
    return o, lse

"""Phase 7's optional Hopper section (never graded): the training step in Gluon. The forward is hopper_gluon.py's,
reading the block's strided Q, K, V through host descriptors; the backward is laid out as FlashAttention-3's at
head_dim 128: a program per 128 keys, a one-warp TMA producer filling a ring of Q and dO tiles of 64 queries, two
4-warp groups of 64 keys (Sᵀ, dPᵀ, dV, dK by asynchronous wgmma) sharing each tile's dSᵀ through shared memory and
computing dQ for half of head_dim each, and a fifth warp adding those halves into an fp32 buffer by TMA reduces. Δ
and the zeroed buffer come from a small kernel before, dQ in fp16 from one after. docs/GPU-RUNS.md, 33rd session."""
from __future__ import annotations

import functools
import inspect

import torch
import triton
import triton.language as tl
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from tritoncourse.hopper_gluon import _buffers, _consumer as _forward_consumer, wgmma_layout

LOG2E = gl.constexpr(1.4426950408889634)

GROUP = 4  # (batch, head)s whose programs run together (their Q, dO and dQ rows stay in L2)


@builtin
def _tma_add(tensor_desc, coord, src, _semantic=None):
    """Add the shared tile ``src`` into global memory at ``coord`` (a TMA reduce: Triton 3.6's Gluon has the
    builder's operation but no wrapper; later Triton calls it tma.async_atomic_add)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@gluon.jit
def _forward_producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, bars, at, q_start, n_tiles,
                      STAGES: gl.constexpr):
    """hopper_gluon's producer, rows from at[0], each tensor's columns from at[1..3]."""
    q_bar, k_ready, k_empty, v_ready, v_empty = bars
    row0, col_q, col_k, col_v = at
    HALF: gl.constexpr = desc_q.block_type.shape[0]
    BLOCK_N: gl.constexpr = desc_k.block_type.shape[0]
    mbarrier.expect(q_bar, 2 * desc_q.block_type.nbytes)
    tma.async_copy_global_to_shared(desc_q, [row0 + q_start, col_q], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(desc_q, [row0 + q_start + HALF, col_q], q_bar, q_smem.index(1))
    for i in range(n_tiles):
        stage = i % STAGES
        phase = (i // STAGES) & 1
        row = row0 + (n_tiles - 1 - i) * BLOCK_N
        mbarrier.wait(k_empty.index(stage), phase ^ 1)
        mbarrier.expect(k_ready.index(stage), desc_k.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_k, [row, col_k], k_ready.index(stage), k_smem.index(stage))
        mbarrier.wait(v_empty.index(stage), phase ^ 1)
        mbarrier.expect(v_ready.index(stage), desc_v.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_v, [row, col_v], v_ready.index(stage), v_smem.index(stage))


@gluon.jit
def _forward_partition(ROLE: gl.constexpr, desc_q, desc_k, desc_v, desc_o, lse_ptr, q_smem, k_smem, v_smem, bars, at,
                       q_start, n_tiles, qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    if ROLE == 2:
        _forward_producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, bars, at, q_start, n_tiles, STAGES)
    else:
        HALF: gl.constexpr = desc_q.block_type.shape[0]
        _forward_consumer(ROLE, desc_o, lse_ptr, q_smem, k_smem, v_smem, bars, q_start, q_start + ROLE * HALF,
                          n_tiles, qk_scale, CAUSAL, STAGES)


@gluon.jit
def forward_kernel(desc_q, desc_k, desc_v, o_ptr, lse_ptr, sq_h, sk_h, sv_h, so_b, so_h, so_s, n_heads, seq_len,
                   qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    HALF: gl.constexpr = desc_q.block_type.shape[0]
    HEAD_DIM: gl.constexpr = desc_q.block_type.shape[1]
    BLOCK_N: gl.constexpr = desc_k.block_type.shape[0]
    dtype: gl.constexpr = desc_q.dtype
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    h = bh % n_heads
    q_start = pid_m * (2 * HALF)
    n_tiles = (q_start + 2 * HALF) // BLOCK_N if CAUSAL else seq_len // BLOCK_N
    o_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF, HEAD_DIM], dtype)
    desc_o = tma.make_tensor_descriptor(o_ptr + (bh // n_heads).to(gl.int64) * so_b + h.to(gl.int64) * so_h,
                                        [seq_len, HEAD_DIM], [so_s, 1], [HALF, HEAD_DIM], o_layout)
    q_smem, k_smem, v_smem, bars = _buffers(desc_q, desc_k, desc_v, STAGES)
    at = ((bh // n_heads) * seq_len, h * sq_h, h * sk_h, h * sv_h)
    args = (desc_q, desc_k, desc_v, desc_o, lse_ptr + bh * seq_len, q_smem, k_smem, v_smem, bars, at, q_start,
            n_tiles, qk_scale, CAUSAL, STAGES)
    gl.warp_specialize([(_forward_partition, (0, ) + args), (_forward_partition, (1, ) + args),
                        (_forward_partition, (2, ) + args)], [4, 1], [232, 24])


@gluon.jit
def _producer(desc_k, desc_v, desc_q, desc_do, k_smem, v_smem, q_ring, do_ring, bars, at, key0, first, n_tiles,
              STAGES: gl.constexpr):
    """One warp: K's and V's tiles of 128 keys once, then Q's and dO's tiles of 64 queries into the ring."""
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
    """One warp: each tile's two dQ halves, once their groups have stored them, added into dQ's fp32 buffer."""
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
def _consumer(GROUP_ID: gl.constexpr, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars, lse_ptr, delta_ptr,
              dk_ptr, dv_ptr, key0, first, n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    """64 keys: dK and dV over the query tiles first .. first + n_tiles - 1; its half (head_dim) of each tile's dQ."""
    kv_bar, ready, empty, ds_bar, dq_full, dq_empty = bars
    HALF: gl.constexpr = 64
    HEAD_DIM: gl.constexpr = k_smem.type.shape[1]
    BLOCK_M: gl.constexpr = q_ring.type.shape[1]
    dtype: gl.constexpr = k_smem.dtype
    s_layout: gl.constexpr = wgmma_layout(BLOCK_M)
    acc_layout: gl.constexpr = wgmma_layout(HEAD_DIM)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    cols: gl.constexpr = gl.SliceLayout(0, s_layout)
    k = k_smem.slice(GROUP_ID * HALF, HALF, dim=0)
    v = v_smem.slice(GROUP_ID * HALF, HALF, dim=0)
    k_cols = k_smem.slice(GROUP_ID * (HEAD_DIM // 2), HEAD_DIM // 2, dim=1)  # dQ's B: all keys, its columns
    dq_buf = dq_smem.index(GROUP_ID)
    offs_k = key0 + GROUP_ID * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout))
    zero_s = gl.zeros([HALF, BLOCK_M], gl.float32, s_layout)
    zero_dq = gl.zeros([BLOCK_M, HEAD_DIM // 2], gl.float32, wgmma_layout(HEAD_DIM // 2))
    dk = gl.zeros([HALF, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([HALF, HEAD_DIM], gl.float32, acc_layout)
    last_key = key0 + GROUP_ID * HALF + HALF - 1
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
        lse = gl.load(lse_ptr + offs_q) * LOG2E
        delta = gl.load(delta_ptr + offs_q)
        p = gl.exp2(s * qk_scale - lse[None, :])
        if CAUSAL:
            if (first + i) * BLOCK_M < last_key:  # the tile crosses the diagonal
                p = gl.where(offs_q[None, :] >= offs_k[:, None], p, 0.0)
        dp = warpgroup_mma_wait(0, deps=(dp_tok, ))
        ds = (p * (dp - delta[None, :])).to(dtype)
        ds_all = ds_smem.index(ds_st)
        ds_all.slice(GROUP_ID * HALF, HALF, dim=0).store(ds)  # dSᵀ: its 64 keys of the tile's 128
        p16 = gl.convert_layout(p.to(dtype), a_layout)
        dv = warpgroup_mma(p16, do, dv, is_async=True)
        fence_async_shared()
        gl.thread_barrier()  # the group's stores are done before its one thread arrives
        mbarrier.arrive(ds_bar.index(ds_st), count=1)
        mbarrier.wait(ds_bar.index(ds_st), (i // 2) & 1)  # both groups' dSᵀ are in
        dq_tok = warpgroup_mma(ds_all.permute((1, 0)), k_cols, zero_dq, use_acc=False, is_async=True)
        dv, p16 = warpgroup_mma_wait(1, deps=(dv, p16))
        ds16 = gl.convert_layout(ds, a_layout)
        dk = warpgroup_mma(ds16, q, dk, is_async=True)
        dq = warpgroup_mma_wait(1, deps=(dq_tok, ))  # dK may run on
        mbarrier.wait(dq_empty.index(GROUP_ID), (i & 1) ^ 1)  # the writer has read this buffer's last half
        dq_buf.store(dq)
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(dq_full.index(GROUP_ID), count=1)
        dk, ds16 = warpgroup_mma_wait(0, deps=(dk, ds16))
        mbarrier.arrive(empty.index(st), count=1)
    rows = key0 + GROUP_ID * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, acc_layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    offs = rows[:, None] * HEAD_DIM + offs_d[None, :]
    gl.store(dk_ptr + offs, (dk * sm_scale).to(dtype))
    gl.store(dv_ptr + offs, dv.to(dtype))


@gluon.jit
def _partition(ROLE: gl.constexpr, descs, at, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars, lse_ptr,
               delta_ptr, dk_ptr, dv_ptr, key0, first, n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr,
               STAGES: gl.constexpr):
    desc_k, desc_v, desc_q, desc_do, desc_dq = descs
    if ROLE == 2:
        _producer(desc_k, desc_v, desc_q, desc_do, k_smem, v_smem, q_ring, do_ring, bars, at[:5], key0, first,
                  n_tiles, STAGES)
    elif ROLE == 3:
        _writer(desc_dq, dq_smem, bars, at[5], first, n_tiles)
    else:
        _consumer(ROLE, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                  key0, first, n_tiles, qk_scale, sm_scale, CAUSAL, STAGES)


@gluon.jit
def backward_kernel(desc_q, desc_k, desc_v, desc_do, desc_dq, lse_ptr, delta_ptr, dk_ptr, dv_ptr, sq_h, sk_h, sv_h,
                    sdo_h, n_heads, seq_len, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                    GROUP: gl.constexpr, num_warps: gl.constexpr):
    """desc_q, k, v, dO: rows (batch·seq_len) × columns (heads·stride_h); desc_dq: dQ's fp32 buffer, rows
    (batch·heads·seq_len), blocks of half head_dim."""
    BLOCK_N: gl.constexpr = 128
    BLOCK_M: gl.constexpr = 64
    HEAD_DIM: gl.constexpr = desc_q.block_type.shape[1]
    dtype: gl.constexpr = desc_q.dtype
    pid = gl.program_id(0)
    per_group = GROUP * (seq_len // BLOCK_N)
    key0 = (pid % per_group) // GROUP * BLOCK_N
    bh = (pid // per_group) * GROUP + pid % GROUP
    row = bh * seq_len
    h = bh % n_heads
    at = ((bh // n_heads) * seq_len, h * sq_h, h * sk_h, h * sv_h, h * sdo_h, row)
    first = key0 // BLOCK_M if CAUSAL else 0
    n_tiles = seq_len // BLOCK_M - first
    k_smem = gl.allocate_shared_memory(dtype, desc_k.block_type.shape, desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, desc_v.block_type.shape, desc_v.layout)
    q_ring = gl.allocate_shared_memory(dtype, [STAGES] + desc_q.block_type.shape, desc_q.layout)
    do_ring = gl.allocate_shared_memory(dtype, [STAGES] + desc_do.block_type.shape, desc_do.layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2] + desc_dq.block_type.shape, desc_dq.layout)
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
            sm_scale * LOG2E, sm_scale, CAUSAL, STAGES)
    gl.warp_specialize([(_partition, (0, ) + args), (_partition, (1, ) + args), (_partition, (2, ) + args),
                        (_partition, (3, ) + args)], [4, 1, 1], [240, 24, 24])


@triton.jit
def _prep_kernel(o_ptr, do_ptr, delta_ptr, acc_ptr, so_b, so_h, so_s, sdo_b, sdo_h, sdo_s, n_heads, seq_len,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Δ = rowsum(O ∘ dO) of BLOCK_M rows of one (batch, head), and the same rows of dQ's buffer zeroed."""
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


@functools.lru_cache(maxsize=None)
def _layout(rows, cols, dtype):
    dt = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dt)


def _rows(t, block_rows):
    """A host descriptor of t (batch, heads, seq_len, head_dim), rows (batch·seq_len) × columns (heads·stride_h)."""
    batch, heads, seq_len, head_dim = t.shape
    return TensorDescriptor(t, [batch * seq_len, heads * t.stride(1)], [t.stride(2), 1], [block_rows, head_dim],
                            _layout(block_rows, head_dim, t.dtype))


def _bshd(t):
    """t itself where its rows have one stride (batch stride = seq_len × row stride: a projection's views, or a
    (batch, seq, heads, dim) tensor seen through a transpose), else such a copy."""
    if t.stride(0) == t.shape[2] * t.stride(2) and t.stride(3) == 1 and t.stride(1) % 8 == 0 and t.data_ptr() % 16 == 0:
        return t
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _check(q, k, v):
    if q.shape[-1] != 128 or q.shape[2] % 128 or q.dtype not in (torch.float16, torch.bfloat16) or not all(
            t.shape == q.shape and t.dtype == q.dtype for t in (k, v)):
        raise ValueError("q, k, v of one shape and dtype (fp16 or bf16), head_dim 128, seq_len a multiple of 128")


def _scratch(size, align, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def attention_forward(q, k, v, causal=False, sm_scale=None):
    """(O, LSE): O as (batch, seq_len, heads, head_dim) seen through a transpose, LSE (batch·heads, seq_len) fp32."""
    _check(q, k, v)
    q, k, v = (_bshd(t) for t in (q, k, v))
    batch, heads, seq_len, head_dim = q.shape
    sm_scale = head_dim**-0.5 if sm_scale is None else sm_scale
    triton.set_allocator(_scratch)  # O's descriptor, made in the kernel (a context variable: set at every call)
    o = torch.empty(batch, seq_len, heads, head_dim, device=q.device, dtype=q.dtype).transpose(1, 2)
    lse = torch.empty(batch * heads, seq_len, device=q.device, dtype=torch.float32)
    forward_kernel[(seq_len // 128, batch * heads)](_rows(q, 64), _rows(k, 128), _rows(v, 128), o, lse, q.stride(1),
                                                   k.stride(1), v.stride(1), *o.stride()[:3], heads, seq_len,
                                                   sm_scale * 1.4426950408889634, CAUSAL=causal, STAGES=2,
                                                   num_warps=4)
    return o, lse


def attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None, stages=2):
    """(dQ, dK, dV) of (batch, heads, seq_len, head_dim) fp16/bf16 tensors, head_dim 128; lse as the forward's."""
    _check(q, k, v)
    q, k, v, do = (_bshd(t) for t in (q, k, v, do))
    batch, heads, seq_len, head_dim = q.shape
    sm_scale = head_dim**-0.5 if sm_scale is None else sm_scale
    lse = lse.reshape(batch * heads, seq_len).contiguous()
    delta = torch.empty(batch * heads, seq_len, device=q.device, dtype=torch.float32)
    acc = torch.empty(batch, heads, seq_len, head_dim, device=q.device, dtype=torch.float32)
    _prep_kernel[(seq_len // 64, batch * heads)](o, do, delta, acc, *o.stride()[:3], *do.stride()[:3], heads, seq_len,
                                                 HEAD_DIM=head_dim, BLOCK_M=64, num_warps=4)
    dk, dv = (torch.empty(batch, heads, seq_len, head_dim, device=q.device, dtype=q.dtype) for _ in range(2))
    desc_dq = TensorDescriptor(acc, [acc.numel() // head_dim, head_dim], [head_dim, 1], [64, head_dim // 2],
                               _layout(64, head_dim // 2, torch.float32))
    group = GROUP if (batch * heads) % GROUP == 0 else 1
    backward_kernel[(batch * heads * seq_len // 128, )](
        _rows(q, 64), _rows(k, 128), _rows(v, 128), _rows(do, 64), desc_dq, lse, delta, dk, dv, q.stride(1),
        k.stride(1), v.stride(1), do.stride(1), heads, seq_len, sm_scale, CAUSAL=causal, STAGES=stages, GROUP=group,
        num_warps=4)
    dq = torch.empty_like(dk)
    _dq_convert_kernel[(triton.cdiv(dq.numel(), 4096), )](acc, dq, dq.numel(), sm_scale, BLOCK=4096, num_warps=8)
    return dq, dk, dv


class GluonAttention(torch.autograd.Function):
    """softmax(Q Kᵀ · scale) V with the Gluon forward and backward above."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, sm_scale=None):
        o, lse = attention_forward(q, k, v, causal, sm_scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None


def gluon_attend(q, k, v, causal):
    """The notebook's AttentionBlock's ``attend``: AttentionBlock(embed, heads, gluon_attend, causal)."""
    return GluonAttention.apply(q, k, v, causal)


def kernel_source() -> str:
    """The backward's partitions, its kernel and its wrapper, as written above: what phase 7's notebook prints."""
    functions = (_producer, _writer, _consumer, _partition, backward_kernel, attention_backward)
    return "\n\n".join(inspect.getsource(getattr(f, "fn", f)) for f in functions)

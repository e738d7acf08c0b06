"""Developers only, on a Hopper GPU: tritoncourse/hopper_gluon.py's forward on the training block's strided q, k, v
with TMA descriptors made on the host (tools/sweep_backward_gluon_fa3.py's strided_forward makes four a program in
the kernel). Each of q, k, v must have rows of one stride (batch stride = seq_len × row stride, as the block's views
of its projection have): a descriptor then covers rows (batch·seq_len) × columns (heads·head_dim), a (batch, head)
starting at row b·seq_len and column h·stride_h. The consumers are hopper_gluon's as they are; O (allocated as
(batch, seq_len, heads, head_dim)) is written through a descriptor of its (batch, head) made in the kernel, one a
program. Only the producer is new: hopper_gluon's with a column for each tensor.

    python tools/sweep_block.py --parts fa3   (tools/sweep_block_gluon.py)
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from sweep_backward_gluon import _desc
from tritoncourse.hopper_gluon import _consumer


@gluon.jit
def _producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, bars, at, q_start, n_tiles, STAGES: gl.constexpr):
    """hopper_gluon's producer, rows counted from at[0] and each tensor's columns from its own at[1..3]."""
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
def _partition(ROLE: gl.constexpr, desc_q, desc_k, desc_v, desc_o, lse_ptr, q_smem, k_smem, v_smem, bars, at,
               q_start, n_tiles, qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    if ROLE == 2:
        _producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, bars, at, q_start, n_tiles, STAGES)
    else:
        HALF: gl.constexpr = desc_q.block_type.shape[0]
        _consumer(ROLE, desc_o, lse_ptr, q_smem, k_smem, v_smem, bars, q_start, q_start + ROLE * HALF, n_tiles,
                  qk_scale, CAUSAL, STAGES)


@gluon.jit
def host_forward_kernel(desc_q, desc_k, desc_v, o_ptr, lse_ptr, sq_h, sk_h, sv_h, so_b, so_h, so_s, n_heads,
                        seq_len, qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                        num_warps: gl.constexpr):
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
    desc_o = _desc(o_ptr, bh, n_heads, so_b, so_h, so_s, seq_len, HALF, HEAD_DIM)
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
    at = ((bh // n_heads) * seq_len, h * sq_h, h * sk_h, h * sv_h)
    args = (desc_q, desc_k, desc_v, desc_o, lse_ptr + bh * seq_len, q_smem, k_smem, v_smem,
            (q_bar, k_ready, k_empty, v_ready, v_empty), at, q_start, n_tiles, qk_scale, CAUSAL, STAGES)
    gl.warp_specialize([(_partition, (0, ) + args), (_partition, (1, ) + args), (_partition, (2, ) + args)], [4, 1],
                       [CONSUMER_REGS, 24])


def host_forward(q, k, v, causal, sm_scale=None, stages=2, regs=232):
    """(O, LSE) as tools/sweep_backward_gluon_fa3.strided_forward gives them (O in (batch, seq_len, heads,
    head_dim) seen through a transpose), q, k, v read through descriptors made here (falls back to strided_forward
    where a tensor's rows are not of one stride)."""
    import torch

    from sweep_backward_gluon_fa3 import rows_descriptor, use_scratch_allocator, strided_forward

    batch, heads, seq_len, head_dim = q.shape
    if not all(t.stride(0) == seq_len * t.stride(2) and t.stride(3) == 1 for t in (q, k, v)):
        return strided_forward(q, k, v, causal, sm_scale, stages, regs)
    sm_scale = sm_scale or head_dim**-0.5
    use_scratch_allocator()
    o = torch.empty(batch, seq_len, heads, head_dim, device=q.device, dtype=q.dtype).transpose(1, 2)
    lse = torch.empty(batch * heads, seq_len, device=q.device, dtype=torch.float32)
    descs = [rows_descriptor(t, bm) for t, bm in zip((q, k, v), (64, 128, 128))]
    host_forward_kernel[(seq_len // 128, batch * heads)](*descs, o, lse, q.stride(1), k.stride(1), v.stride(1),
                                                        *o.stride()[:3], heads, seq_len,
                                                        sm_scale * 1.4426950408889634, CAUSAL=causal, STAGES=stages,
                                                        CONSUMER_REGS=regs, num_warps=4)
    return o, lse

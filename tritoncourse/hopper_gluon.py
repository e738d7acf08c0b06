"""Phase 6's optional Hopper section, its last part: attention's forward written in Gluon, with FlashAttention-3's
overlap spelled out. Read and measured in the notebook on an H100 or H200, never graded.

Gluon (``triton.experimental.gluon``) is Triton's lower-level language: the same Python front end, but the kernel
says what ``@triton.jit`` leaves to the compiler: each tensor's layout (which thread holds which element), shared
memory buffers, the barriers that order copies and products, asynchronous matrix products (Hopper's ``wgmma``), and
which warps do what (``gl.warp_specialize``). Here:

- a **producer** (one warp) copies Q once and then K and V tiles into rings of ``STAGES`` shared buffers with the TMA
  unit, each when both consumers have freed its buffer (``mbarrier``: a "ready" and an "empty" barrier a buffer);
- two **consumer** warp groups (4 warps each) take 64 query rows each of the program's 128 and run the online
  softmax. Each overlaps its own work: it issues the next tile's Q·Kᵀ and the previous tile's P·V as asynchronous
  products, computes the new tile's softmax while P·V still runs, and only then waits and rescales O
  (FlashAttention-3's intra-warpgroup overlap; the two groups' interleaving is left to the warp schedulers);
- the key tiles go from the last to the first, so that the causal diagonal's tile, the only one with a mask, is the
  first, computed alone before the loop, and the loop has no mask at all.

Triton's own pass (``tritoncourse/hopper.py``, ``warp_specialize=True``) splits the loop the same way into warp
groups, but each group waits for its Q·Kᵀ before its softmax and for its P·V before the next Q·Kᵀ, so the tensor
cores idle while it computes exponentials. A Gluon kernel runs compiled only (Triton's CPU interpreter does not run
Gluon) and this one only on Hopper (compute capability 9.x: ``wgmma``).
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

LOG2E = 1.4426950408889634


@gluon.constexpr_function
def wgmma_layout(columns):
    """The layout of a wgmma result of 64 rows by ``columns`` over one 4-warp group: each warp 16 rows, an
    instruction as wide as the tile."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, columns, 16])


@gluon.jit
def _producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, bars, row_q, row_kv, n_tiles, STAGES: gl.constexpr):
    """One warp: Q's two halves once, then K and V tiles, last to first, into the rings."""
    q_bar, k_ready, k_empty, v_ready, v_empty = bars
    HALF: gl.constexpr = desc_q.block_type.shape[0]
    BLOCK_N: gl.constexpr = desc_k.block_type.shape[0]
    mbarrier.expect(q_bar, 2 * desc_q.block_type.nbytes)  # the barrier completes when this many bytes have landed
    tma.async_copy_global_to_shared(desc_q, [row_q, 0], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(desc_q, [row_q + HALF, 0], q_bar, q_smem.index(1))
    for i in range(n_tiles):
        stage = i % STAGES
        phase = (i // STAGES) & 1  # each pass around the ring flips a barrier's phase
        row = row_kv + (n_tiles - 1 - i) * BLOCK_N
        mbarrier.wait(k_empty.index(stage), phase ^ 1)  # both consumers are done with this buffer's last tile
        mbarrier.expect(k_ready.index(stage), desc_k.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_k, [row, 0], k_ready.index(stage), k_smem.index(stage))
        mbarrier.wait(v_empty.index(stage), phase ^ 1)
        mbarrier.expect(v_ready.index(stage), desc_v.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_v, [row, 0], v_ready.index(stage), v_smem.index(stage))


@gluon.jit
def _consumer(GROUP: gl.constexpr, desc_o, lse_ptr, q_smem, k_smem, v_smem, bars, row_q, q_start, n_tiles, qk_scale,
              CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    """One warp group: the online softmax of its 64 query rows over every key tile (scores in base 2, as yours)."""
    q_bar, k_ready, k_empty, v_ready, v_empty = bars
    HALF: gl.constexpr = desc_o.block_type.shape[0]
    HEAD_DIM: gl.constexpr = desc_o.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_smem.type.shape[1]
    dtype: gl.constexpr = desc_o.dtype
    # The layouts of wgmma's results (S: HALF x BLOCK_N, O: HALF x HEAD_DIM over the group's 4 warps), of P as the
    # left operand read from registers, and of a row's statistics (m, l).
    s_layout: gl.constexpr = wgmma_layout(BLOCK_N)
    o_layout: gl.constexpr = wgmma_layout(HEAD_DIM)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    q = q_smem.index(GROUP)
    zero_s = gl.zeros([HALF, BLOCK_N], gl.float32, s_layout)

    mbarrier.wait(q_bar, 0)
    # The first key tile (the causal diagonal's), alone: S = Q·Kᵀ (K's buffer read transposed), then the softmax.
    mbarrier.wait(k_ready.index(0), 0)
    s_acc = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s_acc = warpgroup_mma_wait(0, deps=(s_acc, ))
    mbarrier.arrive(k_empty.index(0), count=1)
    s = s_acc * qk_scale
    if CAUSAL:  # a key after its query gets a large negative score (0 after exp2); every row keeps its own key
        offs_m = q_start + gl.arange(0, HALF, layout=rows_s)
        offs_n = (n_tiles - 1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        s = gl.where(offs_m[:, None] >= offs_n[None, :], s, -1.0e6)
    m_i = gl.max(s, 1)
    p = gl.exp2(s - m_i[:, None])
    l_i = gl.sum(p, 1)
    o = gl.zeros([HALF, HEAD_DIM], gl.float32, o_layout)

    for i in range(1, n_tiles):
        stage = i % STAGES
        prev = (i - 1) % STAGES
        mbarrier.wait(k_ready.index(stage), (i // STAGES) & 1)
        s_acc = warpgroup_mma(q, k_smem.index(stage).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        p16 = gl.convert_layout(p.to(dtype), p_layout)  # the previous tile's P, as wgmma's left operand
        mbarrier.wait(v_ready.index(prev), ((i - 1) // STAGES) & 1)
        o_acc = warpgroup_mma(p16, v_smem.index(prev), o, is_async=True)  # O += P·V, in flight from here...
        s_acc = warpgroup_mma_wait(1, deps=(s_acc, ))  # ...while this tile's scores are ready (one product left)
        mbarrier.arrive(k_empty.index(stage), count=1)
        s = s_acc * qk_scale
        m_new = gl.maximum(m_i, gl.max(s, 1))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new
        o, p16 = warpgroup_mma_wait(0, deps=(o_acc, p16))  # P·V done: V's buffer is free, O can be rescaled
        mbarrier.arrive(v_empty.index(prev), count=1)
        o = o * gl.convert_layout(alpha, rows_o)[:, None]

    last = (n_tiles - 1) % STAGES
    p16 = gl.convert_layout(p.to(dtype), p_layout)
    mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
    o_acc = warpgroup_mma(p16, v_smem.index(last), o, is_async=True)
    o, p16 = warpgroup_mma_wait(0, deps=(o_acc, p16))
    mbarrier.arrive(v_empty.index(last), count=1)

    o = o / gl.convert_layout(l_i, rows_o)[:, None]
    q.store(o.to(dtype))  # Q's buffer, read for the last time above, holds O for the TMA copy out
    fence_async_shared()  # order the threads' writes before the TMA unit reads the buffer
    tma.async_copy_shared_to_global(desc_o, [row_q + GROUP * HALF, 0], q)
    gl.store(lse_ptr + q_start + gl.arange(0, HALF, layout=rows_s), (m_i + gl.log2(l_i)) * 0.6931471805599453)
    tma.store_wait(0)


@gluon.jit
def _partition(ROLE: gl.constexpr, desc_q, desc_k, desc_v, desc_o, lse_ptr, q_smem, k_smem, v_smem, bars, row_q,
               row_kv, q_start, n_tiles, qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    """Every partition's entry (ROLE 0 and 1: the consumer groups, 2: the producer), so that all share a signature."""
    if ROLE == 2:
        _producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, bars, row_q, row_kv, n_tiles, STAGES)
    else:
        HALF: gl.constexpr = desc_q.block_type.shape[0]
        _consumer(ROLE, desc_o, lse_ptr, q_smem, k_smem, v_smem, bars, row_q, q_start + ROLE * HALF, n_tiles,
                  qk_scale, CAUSAL, STAGES)


@gluon.jit
def _buffers(desc_q, desc_k, desc_v, STAGES: gl.constexpr):
    """Q's two halves and the rings of K and V tiles in shared memory, with their barriers: Q's, and a ready and an
    empty one a buffer of each ring."""
    HALF: gl.constexpr = desc_q.block_type.shape[0]
    HEAD_DIM: gl.constexpr = desc_q.block_type.shape[1]
    BLOCK_N: gl.constexpr = desc_k.block_type.shape[0]
    dtype: gl.constexpr = desc_q.dtype
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
        mbarrier.init(k_empty.index(i), count=2)  # both consumer groups free a buffer
        mbarrier.init(v_empty.index(i), count=2)
    return q_smem, k_smem, v_smem, (q_bar, k_ready, k_empty, v_ready, v_empty)


@gluon.jit
def gluon_attention_kernel(desc_q, desc_k, desc_v, desc_o,  # (batch·heads·seq_len, HEAD_DIM) views; Q, O: 64 rows
                           lse_ptr,  # (batch·heads, seq_len) fp32: the natural-log LSE, as your kernel's
                           seq_len, qk_scale,  # qk_scale = sm_scale · log2(e)
                           CAUSAL: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                           num_warps: gl.constexpr):
    HALF: gl.constexpr = desc_q.block_type.shape[0]
    BLOCK_N: gl.constexpr = desc_k.block_type.shape[0]
    pid_m = gl.program_id(0)
    if CAUSAL:  # the heaviest query tiles first
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    row_kv = bh * seq_len  # this (batch, head)'s first row
    q_start = pid_m * (2 * HALF)  # the program's first query within its (batch, head)
    if CAUSAL:
        n_tiles = (q_start + 2 * HALF) // BLOCK_N
    else:
        n_tiles = seq_len // BLOCK_N

    q_smem, k_smem, v_smem, bars = _buffers(desc_q, desc_k, desc_v, STAGES)
    args = (desc_q, desc_k, desc_v, desc_o, lse_ptr + bh * seq_len, q_smem, k_smem, v_smem, bars, row_kv + q_start,
            row_kv, q_start, n_tiles, qk_scale, CAUSAL, STAGES)
    # the default partition (this program's num_warps: consumer 0), then the workers: consumer 1 (4 warps, its
    # registers a thread) and the producer (1 warp, few registers: it only issues copies)
    gl.warp_specialize([(_partition, (0, ) + args), (_partition, (1, ) + args), (_partition, (2, ) + args)], [4, 1],
                       [CONSUMER_REGS, 24])


def gluon_attention(q, k, v, causal=False, stages=None, consumer_regs=232):
    """(O, LSE, the compiled kernel) by gluon_attention_kernel: contiguous q, k, v of (batch, heads, seq_len,
    head_dim), fp16 or bf16, head_dim 64 or 128, seq_len a multiple of 128; 128 x 128 tiles (two groups of 64 query
    rows, 128 keys a tile), K and V rings of 2 stages at head_dim 128 (160 KiB of shared memory in all), 3 at 64."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    batch, heads, seq_len, head_dim = q.shape
    if seq_len % 128 or head_dim not in (64, 128) or q.dtype not in (torch.float16, torch.bfloat16) or not all(
            t.is_contiguous() and t.shape == q.shape and t.dtype == q.dtype for t in (q, k, v)):
        raise ValueError("contiguous fp16 or bf16 q, k, v of one shape, head_dim 64 or 128, seq_len a multiple of 128")
    stages = stages or (2 if head_dim == 128 else 3)
    o = torch.empty_like(q)
    lse = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    rows = batch * heads * seq_len
    dt = gl.float16 if q.dtype == torch.float16 else gl.bfloat16
    half_block = gl.NVMMASharedLayout.get_default_for([64, head_dim], dt)
    key_block = gl.NVMMASharedLayout.get_default_for([128, head_dim], dt)
    desc_q, desc_o = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [64, head_dim], half_block) for t in (q, o))
    desc_k, desc_v = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [128, head_dim], key_block)
                      for t in (k, v))
    compiled = gluon_attention_kernel[(seq_len // 128, batch * heads)](
        desc_q, desc_k, desc_v, desc_o, lse, seq_len, head_dim**-0.5 * LOG2E, CAUSAL=causal, STAGES=stages,
        CONSUMER_REGS=consumer_regs, num_warps=4)
    return o, lse.view(batch, heads, seq_len), compiled


def kernel_source() -> str:
    """The kernel's partitions and the wrapper, as written above: what the notebook prints."""
    import inspect

    functions = (wgmma_layout, _producer, _consumer, _partition, _buffers, gluon_attention_kernel, gluon_attention)
    return "\n\n".join(inspect.getsource(getattr(f, "fn", f)) for f in functions)

"""Developers only, on a Hopper GPU: attention's backward in Gluon with the forward's overlap (issue 43's training
step), as two kernels like the notebook's (dK/dV over query tiles, dQ over key tiles, no atomics). Not part of the
course.

Each kernel: a one-warp producer copies the program's fixed tiles once (K and V halves, or Q and dO halves) and the
moving tiles into a ring (TMA, made in the kernel from each (batch, head)'s base and strides, so strided q, k, v, dO
as the training block makes them); two 4-warp consumer groups take 64 rows each and issue their products as
asynchronous wgmma, computing P and dS while the other products run:
dK/dV (per key group, per query tile): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ issued together; Pᵀ from Sᵀ; dV += Pᵀ·dO issued;
dSᵀ = Pᵀ ∘ (dPᵀ − Δ) while it runs; dK += dSᵀ·Q issued, left in flight into the next tile.
dQ (per query group, per key tile): S = Q·Kᵀ and dP = dO·Vᵀ together; P; dS; dQ += dS·K left in flight.
Δ = rowsum(dO ∘ O) by torch first. The causal mask is applied in every tile (a select).

    python tools/sweep_block.py --parts gluon --repeats 3   (tools/sweep_block_gluon.py: the backward alone, the step)
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma, warpgroup_mma_init,
                                                              warpgroup_mma_wait)

from tritoncourse.hopper_gluon import wgmma_layout

LOG2E = gl.constexpr(1.4426950408889634)


@gluon.jit
def _desc(ptr, bh, n_heads, stride_b, stride_h, stride_s, seq_len, BLOCK: gl.constexpr, HEAD_DIM: gl.constexpr):
    """A descriptor of one (batch, head)'s (seq_len, HEAD_DIM) rows, blocks of BLOCK rows."""
    b = (bh // n_heads).to(gl.int64)
    h = (bh % n_heads).to(gl.int64)
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK, HEAD_DIM], ptr.dtype.element_ty)
    return tma.make_tensor_descriptor(ptr + b * stride_b + h * stride_h, [seq_len, HEAD_DIM], [stride_s, 1],
                                      [BLOCK, HEAD_DIM], layout)


@gluon.jit
def _buffers(desc_fa, desc_fb, desc_ma, desc_mb, STAGES: gl.constexpr):
    """Shared memory for the two fixed tiles' halves (2 each), the rings of the two moving tiles, and the barriers:
    the fixed tiles', and a ready and an empty one (both consumer groups free a buffer) a stage."""
    dtype: gl.constexpr = desc_fa.dtype
    fixed_a = gl.allocate_shared_memory(dtype, [2] + desc_fa.block_type.shape, desc_fa.layout)
    fixed_b = gl.allocate_shared_memory(dtype, [2] + desc_fb.block_type.shape, desc_fb.layout)
    ring_a = gl.allocate_shared_memory(dtype, [STAGES] + desc_ma.block_type.shape, desc_ma.layout)
    ring_b = gl.allocate_shared_memory(dtype, [STAGES] + desc_mb.block_type.shape, desc_mb.layout)
    fixed_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(fixed_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    return fixed_a, fixed_b, ring_a, ring_b, (fixed_bar, ready, empty)


@gluon.jit
def _load_pair(desc_a, desc_b, row, bar, smem_a, smem_b):
    mbarrier.expect(bar, desc_a.block_type.nbytes + desc_b.block_type.nbytes)
    tma.async_copy_global_to_shared(desc_a, [row, 0], bar, smem_a)
    tma.async_copy_global_to_shared(desc_b, [row, 0], bar, smem_b)


@gluon.jit
def _producer(desc_fa, desc_fb, desc_ma, desc_mb, fixed_a, fixed_b, ring_a, ring_b, bars, fixed_row, first, n_tiles,
              STAGES: gl.constexpr):
    """The fixed tiles' two halves once, then the moving tiles first, first + 1, ... into the ring."""
    fixed_bar, ready, empty = bars
    HALF: gl.constexpr = desc_fa.block_type.shape[0]
    BLOCK: gl.constexpr = desc_ma.block_type.shape[0]
    mbarrier.expect(fixed_bar, 4 * desc_fa.block_type.nbytes)
    for g in gl.static_range(2):
        tma.async_copy_global_to_shared(desc_fa, [fixed_row + g * HALF, 0], fixed_bar, fixed_a.index(g))
        tma.async_copy_global_to_shared(desc_fb, [fixed_row + g * HALF, 0], fixed_bar, fixed_b.index(g))
    for i in range(n_tiles):
        st = i % STAGES
        mbarrier.wait(empty.index(st), ((i // STAGES) & 1) ^ 1)
        _load_pair(desc_ma, desc_mb, (first + i) * BLOCK, ready.index(st), ring_a.index(st), ring_b.index(st))


@gluon.jit
def _p_transposed(s, lse_ptr, delta_ptr, offs_q, offs_k, tile_start, last_key, qk_scale, CAUSAL: gl.constexpr):
    """Pᵀ of a tile of 64 keys x BLOCK_M queries from its scores Sᵀ and the queries' LSE, masked where the tile
    crosses the causal diagonal; and the queries' Δ."""
    lse = gl.load(lse_ptr + offs_q) * LOG2E
    delta = gl.load(delta_ptr + offs_q)
    p = gl.exp2(s * qk_scale - lse[None, :])
    if CAUSAL:
        if tile_start < last_key:  # a query of this tile comes before one of the group's keys
            p = gl.where(offs_q[None, :] >= offs_k[:, None], p, 0.0)
    return p, delta


@gluon.jit
def _dkdv_consumer(GROUP: gl.constexpr, k_smem, v_smem, q_ring, do_ring, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                   key0, first, n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    """64 keys: dK and dV over the query tiles first .. first + n_tiles - 1."""
    fixed_bar, ready, empty = bars
    HALF: gl.constexpr = k_smem.type.shape[1]
    HEAD_DIM: gl.constexpr = k_smem.type.shape[2]
    BLOCK_M: gl.constexpr = q_ring.type.shape[1]
    dtype: gl.constexpr = k_smem.dtype
    s_layout: gl.constexpr = wgmma_layout(BLOCK_M)
    acc_layout: gl.constexpr = wgmma_layout(HEAD_DIM)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    cols: gl.constexpr = gl.SliceLayout(0, s_layout)
    k = k_smem.index(GROUP)
    v = v_smem.index(GROUP)
    offs_k = key0 + GROUP * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout))
    zero_s = gl.zeros([HALF, BLOCK_M], gl.float32, s_layout)
    dk = warpgroup_mma_init(gl.zeros([HALF, HEAD_DIM], gl.float32, acc_layout))
    dv = warpgroup_mma_init(gl.zeros([HALF, HEAD_DIM], gl.float32, acc_layout))
    p16 = gl.zeros([HALF, BLOCK_M], dtype, a_layout)
    ds16 = gl.zeros([HALF, BLOCK_M], dtype, a_layout)
    mbarrier.wait(fixed_bar, 0)
    last_key = key0 + GROUP * HALF + HALF - 1
    for i in range(n_tiles):
        st = i % STAGES
        offs_q = (first + i) * BLOCK_M + gl.arange(0, BLOCK_M, layout=cols)
        mbarrier.wait(ready.index(st), (i // STAGES) & 1)
        q = q_ring.index(st)
        do = do_ring.index(st)
        s_tok = warpgroup_mma(k, q.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dp_tok = warpgroup_mma(v, do.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        # the last tile's dV and dK are done once only dPᵀ may still run
        s, dk, dv, p16, ds16 = warpgroup_mma_wait(1, deps=(s_tok, dk, dv, p16, ds16))
        if i > 0:
            mbarrier.arrive(empty.index((i - 1) % STAGES), count=1)
        p, delta = _p_transposed(s, lse_ptr, delta_ptr, offs_q, offs_k, (first + i) * BLOCK_M, last_key, qk_scale,
                                 CAUSAL)
        p16 = gl.convert_layout(p.to(dtype), a_layout)
        dv = warpgroup_mma(p16, do, dv, is_async=True)
        dp = warpgroup_mma_wait(1, deps=(dp_tok, ))
        ds = p * (dp - delta[None, :])
        ds16 = gl.convert_layout(ds.to(dtype), a_layout)
        dk = warpgroup_mma(ds16, q, dk, is_async=True)
    dk, dv, p16, ds16 = warpgroup_mma_wait(0, deps=(dk, dv, p16, ds16))
    if n_tiles > 0:
        mbarrier.arrive(empty.index((n_tiles - 1) % STAGES), count=1)
    rows = key0 + GROUP * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, acc_layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    offs = rows[:, None] * HEAD_DIM + offs_d[None, :]
    gl.store(dk_ptr + offs, (dk * sm_scale).to(dtype))
    gl.store(dv_ptr + offs, dv.to(dtype))


@gluon.jit
def _dkdv_consumer_ahead(GROUP: gl.constexpr, k_smem, v_smem, q_ring, do_ring, bars, lse_ptr, delta_ptr, dk_ptr,
                         dv_ptr, key0, first, n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr,
                         STAGES: gl.constexpr):
    """_dkdv_consumer with the next tile's Sᵀ and dPᵀ issued before this tile's dK, so that waiting for the scores
    never waits for dK: in flight, in order, ... dV(i-1), S(i), dP(i), dK(i-1). A tile's buffers are freed two
    tiles later (4 stages). The first wait finds a dK in flight too: a product of zeros before the loop; the last
    tile's Sᵀ and dPᵀ are issued once more after it (the tile's own buffers, not yet freed)."""
    fixed_bar, ready, empty = bars
    HALF: gl.constexpr = k_smem.type.shape[1]
    HEAD_DIM: gl.constexpr = k_smem.type.shape[2]
    BLOCK_M: gl.constexpr = q_ring.type.shape[1]
    dtype: gl.constexpr = k_smem.dtype
    s_layout: gl.constexpr = wgmma_layout(BLOCK_M)
    acc_layout: gl.constexpr = wgmma_layout(HEAD_DIM)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    cols: gl.constexpr = gl.SliceLayout(0, s_layout)
    k = k_smem.index(GROUP)
    v = v_smem.index(GROUP)
    offs_k = key0 + GROUP * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout))
    zero_s = gl.zeros([HALF, BLOCK_M], gl.float32, s_layout)
    dv = warpgroup_mma_init(gl.zeros([HALF, HEAD_DIM], gl.float32, acc_layout))
    p16 = gl.zeros([HALF, BLOCK_M], dtype, a_layout)
    ds16 = gl.zeros([HALF, BLOCK_M], dtype, a_layout)
    ds16_prev = gl.zeros([HALF, BLOCK_M], dtype, a_layout)
    mbarrier.wait(fixed_bar, 0)
    last_key = key0 + GROUP * HALF + HALF - 1
    mbarrier.wait(ready.index(0), 0)
    s_tok = warpgroup_mma(k, q_ring.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dp_tok = warpgroup_mma(v, do_ring.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dk = warpgroup_mma(ds16, q_ring.index(0), gl.zeros([HALF, HEAD_DIM], gl.float32, acc_layout), is_async=True)
    for i in range(n_tiles):
        st = i % STAGES
        q = q_ring.index(st)
        do = do_ring.index(st)
        offs_q = (first + i) * BLOCK_M + gl.arange(0, BLOCK_M, layout=cols)
        # S(i) done; dP(i) and dK(i-1) may run on. dV(i-1) and dK(i-2) are done: tile i-2 is free
        s, dv, p16, ds16_prev = warpgroup_mma_wait(2, deps=(s_tok, dv, p16, ds16_prev))
        if i >= 2:
            mbarrier.arrive(empty.index((i - 2) % STAGES), count=1)
        p, delta = _p_transposed(s, lse_ptr, delta_ptr, offs_q, offs_k, (first + i) * BLOCK_M, last_key, qk_scale,
                                 CAUSAL)
        p16 = gl.convert_layout(p.to(dtype), a_layout)
        dv = warpgroup_mma(p16, do, dv, is_async=True)
        dp = warpgroup_mma_wait(2, deps=(dp_tok, ))  # dK(i-1) and dV(i) may run on
        ds16_prev = ds16
        ds16 = gl.convert_layout((p * (dp - delta[None, :])).to(dtype), a_layout)
        nxt = i + (i + 1 < n_tiles).to(gl.int32)  # the next tile; the last one again after the last
        mbarrier.wait(ready.index(nxt % STAGES), (nxt // STAGES) & 1)
        s_tok = warpgroup_mma(k, q_ring.index(nxt % STAGES).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dp_tok = warpgroup_mma(v, do_ring.index(nxt % STAGES).permute((1, 0)), zero_s, use_acc=False,
                               is_async=True)
        dk = warpgroup_mma(ds16, q, dk, is_async=True)  # dK(i-1)'s result, still in flight, is its accumulator
    dk, dv, s, dp, p16, ds16, ds16_prev = warpgroup_mma_wait(0, deps=(dk, dv, s_tok, dp_tok, p16, ds16, ds16_prev))
    if n_tiles >= 2:
        mbarrier.arrive(empty.index((n_tiles - 2) % STAGES), count=1)
    if n_tiles > 0:
        mbarrier.arrive(empty.index((n_tiles - 1) % STAGES), count=1)
    rows = key0 + GROUP * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, acc_layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    offs = rows[:, None] * HEAD_DIM + offs_d[None, :]
    gl.store(dk_ptr + offs, (dk * sm_scale).to(dtype))
    gl.store(dv_ptr + offs, dv.to(dtype))


@gluon.jit
def _dkdv_partition(ROLE: gl.constexpr, descs, k_smem, v_smem, q_ring, do_ring, bars, lse_ptr, delta_ptr, dk_ptr,
                    dv_ptr, key0, first, n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    desc_k, desc_v, desc_q, desc_do = descs
    if ROLE == 2:
        _producer(desc_k, desc_v, desc_q, desc_do, k_smem, v_smem, q_ring, do_ring, bars, key0, first, n_tiles,
                  STAGES)
    else:
        _dkdv_consumer(ROLE, k_smem, v_smem, q_ring, do_ring, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr, key0, first,
                       n_tiles, qk_scale, sm_scale, CAUSAL, STAGES)


@gluon.jit
def _dkdv_partition_ahead(ROLE: gl.constexpr, descs, k_smem, v_smem, q_ring, do_ring, bars, lse_ptr, delta_ptr,
                          dk_ptr, dv_ptr, key0, first, n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr,
                          STAGES: gl.constexpr):
    """_dkdv_partition with _dkdv_consumer_ahead (a partition with an if between the two consumers fails to
    compile in Triton 3.6, whichever the if takes)."""
    desc_k, desc_v, desc_q, desc_do = descs
    if ROLE == 2:
        _producer(desc_k, desc_v, desc_q, desc_do, k_smem, v_smem, q_ring, do_ring, bars, key0, first, n_tiles,
                  STAGES)
    else:
        _dkdv_consumer_ahead(ROLE, k_smem, v_smem, q_ring, do_ring, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr, key0,
                             first, n_tiles, qk_scale, sm_scale, CAUSAL, STAGES)


@gluon.jit
def dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sdo_b, sdo_h, sdo_s,
                n_heads, seq_len, sm_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr,
                STAGES: gl.constexpr, REGS: gl.constexpr, AHEAD: gl.constexpr, num_warps: gl.constexpr):
    HALF: gl.constexpr = 64
    pid_n = gl.program_id(0)
    bh = gl.program_id(1)
    key0 = pid_n * (2 * HALF)
    desc_k = _desc(k_ptr, bh, n_heads, sk_b, sk_h, sk_s, seq_len, HALF, HEAD_DIM)
    desc_v = _desc(v_ptr, bh, n_heads, sv_b, sv_h, sv_s, seq_len, HALF, HEAD_DIM)
    desc_q = _desc(q_ptr, bh, n_heads, sq_b, sq_h, sq_s, seq_len, BLOCK_M, HEAD_DIM)
    desc_do = _desc(do_ptr, bh, n_heads, sdo_b, sdo_h, sdo_s, seq_len, BLOCK_M, HEAD_DIM)
    first = key0 // BLOCK_M if CAUSAL else 0
    n_tiles = seq_len // BLOCK_M - first
    k_smem, v_smem, q_ring, do_ring, bars = _buffers(desc_k, desc_v, desc_q, desc_do, STAGES)
    row = bh * seq_len
    args = ((desc_k, desc_v, desc_q, desc_do), k_smem, v_smem, q_ring, do_ring, bars,
            lse_ptr + row, delta_ptr + row, dk_ptr + row.to(gl.int64) * HEAD_DIM, dv_ptr + row.to(gl.int64) * HEAD_DIM,
            key0, first, n_tiles, sm_scale * LOG2E, sm_scale, CAUSAL, STAGES)
    if AHEAD:
        gl.warp_specialize([(_dkdv_partition_ahead, (0, ) + args), (_dkdv_partition_ahead, (1, ) + args),
                            (_dkdv_partition_ahead, (2, ) + args)], [4, 1], [REGS, 24])
    else:
        gl.warp_specialize([(_dkdv_partition, (0, ) + args), (_dkdv_partition, (1, ) + args),
                            (_dkdv_partition, (2, ) + args)], [4, 1], [REGS, 24])


@gluon.jit
def _dq_consumer(GROUP: gl.constexpr, q_smem, do_smem, k_ring, v_ring, bars, lse_ptr, delta_ptr, dq_ptr, q0, n_tiles,
                 qk_scale, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    """64 queries: dQ over the key tiles 0 .. n_tiles - 1."""
    fixed_bar, ready, empty = bars
    HALF: gl.constexpr = q_smem.type.shape[1]
    HEAD_DIM: gl.constexpr = q_smem.type.shape[2]
    BLOCK_N: gl.constexpr = k_ring.type.shape[1]
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = wgmma_layout(BLOCK_N)
    acc_layout: gl.constexpr = wgmma_layout(HEAD_DIM)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    q = q_smem.index(GROUP)
    do = do_smem.index(GROUP)
    offs_q = q0 + GROUP * HALF + gl.arange(0, HALF, layout=rows_s)
    lse = gl.load(lse_ptr + offs_q) * LOG2E
    delta = gl.load(delta_ptr + offs_q)
    zero_s = gl.zeros([HALF, BLOCK_N], gl.float32, s_layout)
    dq = warpgroup_mma_init(gl.zeros([HALF, HEAD_DIM], gl.float32, acc_layout))
    ds16 = gl.zeros([HALF, BLOCK_N], dtype, a_layout)
    mbarrier.wait(fixed_bar, 0)
    for j in range(n_tiles):
        st = j % STAGES
        mbarrier.wait(ready.index(st), (j // STAGES) & 1)
        k = k_ring.index(st)
        v = v_ring.index(st)
        s_tok = warpgroup_mma(q, k.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dp_tok = warpgroup_mma(do, v.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s, dq, ds16 = warpgroup_mma_wait(1, deps=(s_tok, dq, ds16))
        if j > 0:
            mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)
        p = gl.exp2(s * qk_scale - lse[:, None])
        if CAUSAL:
            if (j + 1) * BLOCK_N - 1 > q0 + GROUP * HALF:  # a key of this tile comes after one of the group's queries
                offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
                p = gl.where(offs_q[:, None] >= offs_n[None, :], p, 0.0)
        dp = warpgroup_mma_wait(0, deps=(dp_tok, ))
        ds16 = gl.convert_layout((p * (dp - delta[:, None])).to(dtype), a_layout)
        dq = warpgroup_mma(ds16, k, dq, is_async=True)
    dq, ds16 = warpgroup_mma_wait(0, deps=(dq, ds16))
    if n_tiles > 0:
        mbarrier.arrive(empty.index((n_tiles - 1) % STAGES), count=1)
    rows = q0 + GROUP * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, acc_layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    gl.store(dq_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], (dq * sm_scale).to(dtype))


@gluon.jit
def _dq_partition(ROLE: gl.constexpr, descs, q_smem, do_smem, k_ring, v_ring, bars, lse_ptr, delta_ptr, dq_ptr, q0,
                  n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    desc_q, desc_do, desc_k, desc_v = descs
    if ROLE == 2:
        _producer(desc_q, desc_do, desc_k, desc_v, q_smem, do_smem, k_ring, v_ring, bars, q0, 0, n_tiles, STAGES)
    else:
        _dq_consumer(ROLE, q_smem, do_smem, k_ring, v_ring, bars, lse_ptr, delta_ptr, dq_ptr, q0, n_tiles, qk_scale,
                     sm_scale, CAUSAL, STAGES)


@gluon.jit
def dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
              sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sdo_b, sdo_h, sdo_s,
              n_heads, seq_len, sm_scale, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
              STAGES: gl.constexpr, REGS: gl.constexpr, num_warps: gl.constexpr):
    HALF: gl.constexpr = 64
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    q0 = pid_m * (2 * HALF)
    desc_q = _desc(q_ptr, bh, n_heads, sq_b, sq_h, sq_s, seq_len, HALF, HEAD_DIM)
    desc_do = _desc(do_ptr, bh, n_heads, sdo_b, sdo_h, sdo_s, seq_len, HALF, HEAD_DIM)
    desc_k = _desc(k_ptr, bh, n_heads, sk_b, sk_h, sk_s, seq_len, BLOCK_N, HEAD_DIM)
    desc_v = _desc(v_ptr, bh, n_heads, sv_b, sv_h, sv_s, seq_len, BLOCK_N, HEAD_DIM)
    n_tiles = (q0 + 2 * HALF + BLOCK_N - 1) // BLOCK_N if CAUSAL else seq_len // BLOCK_N
    q_smem, do_smem, k_ring, v_ring, bars = _buffers(desc_q, desc_do, desc_k, desc_v, STAGES)
    row = bh * seq_len
    args = ((desc_q, desc_do, desc_k, desc_v), q_smem, do_smem, k_ring, v_ring, bars,
            lse_ptr + row, delta_ptr + row, dq_ptr + row.to(gl.int64) * HEAD_DIM, q0, n_tiles, sm_scale * LOG2E,
            sm_scale, CAUSAL, STAGES)
    gl.warp_specialize([(_dq_partition, (0, ) + args), (_dq_partition, (1, ) + args), (_dq_partition, (2, ) + args)],
                       [4, 1], [REGS, 24])


def gluon_backward(q, k, v, o, lse, do, causal, sm_scale=None, dkdv=(64, 2, 240), dq=(64, 2, 232), delta_of=None,
                   kernels=("dkdv", "dq")):
    """(dQ, dK, dV), contiguous, of q, k, v, dO of (batch, heads, seq_len, head_dim) with any strides but the last
    (1), LSE (natural log, as the forward stores it) of (batch, heads, seq_len); seq_len a multiple of 128.
    dkdv = (BLOCK_M, stages, registers[, the next tile's products ahead of dK]), dq = (BLOCK_N, stages, registers);
    delta_of(o, do) -> Δ of (batch·heads, seq_len) fp32 (torch's unless given); kernels: which of the two to launch
    (both, or one to time it alone)."""
    import torch
    import triton

    batch, heads, seq_len, head_dim = q.shape
    if seq_len % 128 or head_dim not in (64, 128):
        raise ValueError("seq_len a multiple of 128, head_dim 64 or 128")
    sm_scale = sm_scale or head_dim**-0.5
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=q.device))
    delta = delta_of(o, do) if delta_of else (o.float() * do.float()).sum(-1).contiguous()
    lse = lse.contiguous()
    dq_out, dk, dv = (torch.empty(batch, heads, seq_len, head_dim, device=q.device, dtype=q.dtype)
                      for _ in range(3))
    strides = [s for t in (q, k, v, do) for s in t.stride()[:3]]
    bm, st, regs, *ahead = dkdv
    if "dkdv" in kernels:
        dkdv_kernel[(seq_len // 128, batch * heads)](q, k, v, do, lse, delta, dk, dv, *strides, heads, seq_len,
                                                    sm_scale, HEAD_DIM=head_dim, BLOCK_M=bm, CAUSAL=causal, STAGES=st,
                                                    REGS=regs, AHEAD=bool(ahead and ahead[0]), num_warps=4)
    bn, st, regs = dq
    if "dq" in kernels:
        dq_kernel[(seq_len // 128, batch * heads)](q, k, v, do, lse, delta, dq_out, *strides, heads, seq_len,
                                                   sm_scale, HEAD_DIM=head_dim, BLOCK_N=bn, CAUSAL=causal, STAGES=st,
                                                   REGS=regs, num_warps=4)
    return dq_out, dk, dv

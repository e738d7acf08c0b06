"""Developers only, on a Hopper GPU: attention's backward in one Gluon kernel, FlashAttention-3's way (issue 43's
training step): tools/sweep_backward_gluon.py's dK/dV kernel that also adds each tile's dQ into an fp32 buffer by
TMA reduce-adds from shared memory, so that no product is recomputed (five a tile instead of the two kernels' seven).

Gluon 3.6 has no wrapper for the TMA reduce (later Triton calls it ``tma.async_atomic_add``), but its builder has the
operation (``create_async_tma_reduce``): ``_tma_add`` below is that wrapper. Per tile of 64 queries, each consumer
group (64 keys) stores its dSᵀ to shared memory, multiplies dQ's part (dS·K of its keys, 64 × head_dim) as an
asynchronous wgmma beside dK's, then stores it to shared memory and hands it to the TMA unit, which adds it into
dQ's fp32 buffer in global memory; dQ = that buffer × sm_scale, in fp16, after the kernel.
"""
from __future__ import annotations

from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_init, warpgroup_mma_wait)

from sweep_backward_gluon import LOG2E, _buffers, _desc, _p_transposed, _producer
from tritoncourse.hopper_gluon import wgmma_layout


@builtin
def _tma_add(tensor_desc, coord, src, _semantic=None):
    """Add the shared-memory tile ``src`` into global memory at ``coord`` of ``tensor_desc`` (a TMA reduce)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                              src.handle)


@gluon.jit
def _fused_consumer(GROUP: gl.constexpr, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars, desc_dq, lse_ptr,
                    delta_ptr, dk_ptr, dv_ptr, row0, key0, first, n_tiles, qk_scale, sm_scale, CAUSAL: gl.constexpr,
                    STAGES: gl.constexpr):
    """64 keys: dK and dV over the query tiles first .. first + n_tiles - 1, and each tile's dQ part added out."""
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
    ds_buf = ds_smem.index(GROUP)
    dq_buf = dq_smem.index(GROUP)
    offs_k = key0 + GROUP * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout))
    zero_s = gl.zeros([HALF, BLOCK_M], gl.float32, s_layout)
    zero_dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, acc_layout)
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
        s, dk, dv, p16, ds16 = warpgroup_mma_wait(1, deps=(s_tok, dk, dv, p16, ds16))
        if i > 0:
            mbarrier.arrive(empty.index((i - 1) % STAGES), count=1)
        p, delta = _p_transposed(s, lse_ptr, delta_ptr, offs_q, offs_k, (first + i) * BLOCK_M, last_key, qk_scale,
                                 CAUSAL)
        p16 = gl.convert_layout(p.to(dtype), a_layout)
        dv = warpgroup_mma(p16, do, dv, is_async=True)
        dp = warpgroup_mma_wait(1, deps=(dp_tok, ))
        ds = (p * (dp - delta[None, :])).to(dtype)
        ds_buf.store(ds)  # dSᵀ (keys x queries), read transposed as dQ's left operand
        fence_async_shared()
        dq_tok = warpgroup_mma(ds_buf.permute((1, 0)), k, zero_dq, use_acc=False, is_async=True)
        ds16 = gl.convert_layout(ds, a_layout)
        dk = warpgroup_mma(ds16, q, dk, is_async=True)
        dq_part = warpgroup_mma_wait(1, deps=(dq_tok, ))  # dK may run on
        tma.store_wait(0)  # the last tile's add has read dq_buf
        dq_buf.store(dq_part)
        fence_async_shared()
        _tma_add(desc_dq, [row0 + (first + i) * BLOCK_M, 0], dq_buf)
    dk, dv, p16, ds16 = warpgroup_mma_wait(0, deps=(dk, dv, p16, ds16))
    if n_tiles > 0:
        mbarrier.arrive(empty.index((n_tiles - 1) % STAGES), count=1)
    rows = key0 + GROUP * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, acc_layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    offs = rows[:, None] * HEAD_DIM + offs_d[None, :]
    gl.store(dk_ptr + offs, (dk * sm_scale).to(dtype))
    gl.store(dv_ptr + offs, dv.to(dtype))
    tma.store_wait(0)


@gluon.jit
def _fused_partition(ROLE: gl.constexpr, descs, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars, lse_ptr,
                     delta_ptr, dk_ptr, dv_ptr, row0, key0, first, n_tiles, qk_scale, sm_scale,
                     CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    desc_k, desc_v, desc_q, desc_do, desc_dq = descs
    if ROLE == 2:
        _producer(desc_k, desc_v, desc_q, desc_do, k_smem, v_smem, q_ring, do_ring, bars, key0, first, n_tiles,
                  STAGES)
    else:
        _fused_consumer(ROLE, k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars, desc_dq, lse_ptr, delta_ptr,
                        dk_ptr, dv_ptr, row0, key0, first, n_tiles, qk_scale, sm_scale, CAUSAL, STAGES)


@gluon.jit
def fused_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_acc_ptr,
                 sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sdo_b, sdo_h, sdo_s,
                 n_heads, seq_len, sm_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr,
                 STAGES: gl.constexpr, REGS: gl.constexpr, num_warps: gl.constexpr):
    HALF: gl.constexpr = 64
    pid_n = gl.program_id(0)
    bh = gl.program_id(1)
    key0 = pid_n * (2 * HALF)
    desc_k = _desc(k_ptr, bh, n_heads, sk_b, sk_h, sk_s, seq_len, HALF, HEAD_DIM)
    desc_v = _desc(v_ptr, bh, n_heads, sv_b, sv_h, sv_s, seq_len, HALF, HEAD_DIM)
    desc_q = _desc(q_ptr, bh, n_heads, sq_b, sq_h, sq_s, seq_len, BLOCK_M, HEAD_DIM)
    desc_do = _desc(do_ptr, bh, n_heads, sdo_b, sdo_h, sdo_s, seq_len, BLOCK_M, HEAD_DIM)
    dq_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], gl.float32)
    desc_dq = tma.make_tensor_descriptor(dq_acc_ptr, [gl.num_programs(1) * seq_len, HEAD_DIM], [HEAD_DIM, 1],
                                         [BLOCK_M, HEAD_DIM], dq_layout)
    first = key0 // BLOCK_M if CAUSAL else 0
    n_tiles = seq_len // BLOCK_M - first
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    k_smem, v_smem, q_ring, do_ring, bars = _buffers(desc_k, desc_v, desc_q, desc_do, STAGES)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [2, HALF, BLOCK_M], ds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, HEAD_DIM], dq_layout)
    row = bh * seq_len
    args = ((desc_k, desc_v, desc_q, desc_do, desc_dq), k_smem, v_smem, q_ring, do_ring, ds_smem, dq_smem, bars,
            lse_ptr + row, delta_ptr + row, dk_ptr + row.to(gl.int64) * HEAD_DIM, dv_ptr + row.to(gl.int64) * HEAD_DIM,
            row, key0, first, n_tiles, sm_scale * LOG2E, sm_scale, CAUSAL, STAGES)
    gl.warp_specialize([(_fused_partition, (0, ) + args), (_fused_partition, (1, ) + args),
                        (_fused_partition, (2, ) + args)], [4, 1], [REGS, 24])


def fused_backward(q, k, v, o, lse, do, causal, sm_scale=None, stages=2, regs=240, delta_of=None):
    """(dQ, dK, dV) as sweep_backward_gluon.gluon_backward gives them, by fused_kernel (BLOCK_M 64)."""
    import torch
    import triton

    batch, heads, seq_len, head_dim = q.shape
    if seq_len % 128 or head_dim not in (64, 128):
        raise ValueError("seq_len a multiple of 128, head_dim 64 or 128")
    sm_scale = sm_scale or head_dim**-0.5
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=q.device))
    delta = delta_of(o, do) if delta_of else (o.float() * do.float()).sum(-1).contiguous()
    lse = lse.contiguous()
    dk, dv = (torch.empty(batch, heads, seq_len, head_dim, device=q.device, dtype=q.dtype) for _ in range(2))
    dq_acc = torch.zeros(batch, heads, seq_len, head_dim, device=q.device, dtype=torch.float32)
    strides = [s for t in (q, k, v, do) for s in t.stride()[:3]]
    fused_kernel[(seq_len // 128, batch * heads)](q, k, v, do, lse, delta, dk, dv, dq_acc, *strides, heads, seq_len,
                                                 sm_scale, HEAD_DIM=head_dim, BLOCK_M=64, CAUSAL=causal,
                                                 STAGES=stages, REGS=regs, num_warps=4)
    return (dq_acc * sm_scale).to(q.dtype), dk, dv

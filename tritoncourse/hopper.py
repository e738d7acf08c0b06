"""Phase 6's optional Hopper section: attention's forward with tensor descriptors (TMA) and a key loop that Triton 3.6
splits into warp groups when asked (warp_specialize=True: descriptors made in the kernel, 4-warp groups). Read and
measured in the notebook, never graded.

It lives here, not in a notebook cell, because the grader takes every @triton.jit function of a learner's notebook
and lints it, and a descriptor's methods (``desc.load``, ``desc.store``) are outside what a graded kernel may use.
Running it needs a Hopper GPU (compute capability 9.x): tensor descriptors made on the host are a Hopper feature.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, lo, hi, offs_m, offs_n, qk_scale,
               BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """Your _attention_tiles with K and V tiles loaded through descriptors; no key tile is ragged here."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([row0 + start_n, 0])  # a (BLOCK_N, HEAD_DIM) tile, copied by the TMA unit
        s = tl.dot(q, k.T)
        if DIAGONAL:  # the causal diagonal: keys after their query get a large negative score
            s = s * qk_scale + tl.where(offs_m[:, None] >= start_n + offs_n[None, :], 0.0, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            s = s - m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m_i - m_new)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([row0 + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + l_ij
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _descriptor(desc_or_ptr, rows, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """A descriptor made on the host, as given; a pointer (to rows x HEAD_DIM contiguous values) made into one here."""
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    else:
        return tl.make_tensor_descriptor(desc_or_ptr, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK, HEAD_DIM])


@triton.jit
def tma_attention_kernel(desc_q, desc_k, desc_v, desc_o, lse_ptr, seq_len, sm_scale, HEAD_DIM: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                         WARP_SPECIALIZE: tl.constexpr):
    """Your kernel's contract (O and the natural-log LSE), Q, K, V, O seen as (batch·heads·seq_len, HEAD_DIM): each
    given as a descriptor made on the host, or as a pointer that the kernel makes one of."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = tl.num_programs(1) * seq_len
    desc_q = _descriptor(desc_q, rows, HEAD_DIM, BLOCK_M)
    desc_k = _descriptor(desc_k, rows, HEAD_DIM, BLOCK_N)
    desc_v = _descriptor(desc_v, rows, HEAD_DIM, BLOCK_N)
    desc_o = _descriptor(desc_o, rows, HEAD_DIM, BLOCK_M)
    row0 = pid_bh * seq_len  # this (batch, head)'s first row
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = desc_q.load([row0 + pid_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if CAUSAL and not WARP_SPECIALIZE:  # the tiles before the diagonal, then the diagonal's
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, pid_m * BLOCK_M, offs_m, offs_n,
                                   qk_scale, BLOCK_N, False, False)
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, pid_m * BLOCK_M, (pid_m + 1) * BLOCK_M,
                                   offs_m, offs_n, qk_scale, BLOCK_N, True, False)
    elif CAUSAL:  # one loop, masked in every tile: Triton splits one loop a kernel into warp groups, not two
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, (pid_m + 1) * BLOCK_M, offs_m, offs_n,
                                   qk_scale, BLOCK_N, True, True)
    else:
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, seq_len, offs_m, offs_n, qk_scale,
                                   BLOCK_N, False, WARP_SPECIALIZE)
    acc = acc / l_i[:, None]
    desc_o.store([row0 + pid_m * BLOCK_M, 0], acc.to(q.dtype))
    tl.store(lse_ptr + pid_bh * seq_len + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)


def tma_attention(q, k, v, causal=False, block_n=None, stages=None, warp_specialize=True, block_m=128, warps=None):
    """(O, LSE, the compiled kernel) by tma_attention_kernel: contiguous q, k, v, seq_len a multiple of block_m.
    warp_specialize=False: descriptors made here, on the host; default tiles at head_dim 128 are 128 x 64 with 4 warps
    in 2 stages (Triton's own tutorial's choice: 255 registers and 96 KiB, two programs an SM), at head_dim 64 128 x 64
    with 8 warps in 4 stages. warp_specialize=True: descriptors made in the kernel, from pointers, as Triton's tutorial
    does on Hopper (a host descriptor's block is fixed, and the compiler splits the 128-row tile between two consumer
    warp groups of 64 rows each, which needs blocks of its own); 128 x 128 tiles, 4 warps a group, 2 stages (Triton
    3.6's warp-specialized loop with 3 stages computed NaNs at head_dim 64 on an H200). Tiles from the H200 sweeps of
    docs/GPU-RUNS.md (twenty-sixth, twenty-seventh and thirtieth sessions)."""
    batch, heads, seq_len, head_dim = q.shape
    block_n = block_n or (128 if warp_specialize else 64)
    warps = warps or (4 if warp_specialize or head_dim == 128 else 8)
    stages = stages or (2 if warp_specialize or head_dim == 128 else 4)
    if seq_len % block_m or block_m % block_n or not all(t.is_contiguous() for t in (q, k, v)):
        raise ValueError("contiguous q, k, v, seq_len a multiple of block_m, block_m of block_n")
    o = torch.empty_like(q)
    lse = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    rows = batch * heads * seq_len
    if warp_specialize:  # the kernel makes its descriptors, in global memory that Triton asks this allocator for
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=q.device))
        desc_q, desc_k, desc_v, desc_o = q, k, v, o
    else:
        desc_q, desc_o = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [block_m, head_dim]) for t in (q, o))
        desc_k, desc_v = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [block_n, head_dim]) for t in (k, v))
    compiled = tma_attention_kernel[(seq_len // block_m, batch * heads)](
        desc_q, desc_k, desc_v, desc_o, lse, seq_len, head_dim**-0.5, HEAD_DIM=head_dim, BLOCK_M=block_m,
        BLOCK_N=block_n, CAUSAL=causal, WARP_SPECIALIZE=warp_specialize, num_warps=warps, num_stages=stages)
    return o, lse.view(batch, heads, seq_len), compiled


def kernel_source() -> str:
    """The kernel, its loop over key tiles and the wrapper, as written above: what the notebook prints."""
    import inspect

    functions = (_tma_tiles, _descriptor, tma_attention_kernel, tma_attention)
    return "\n\n".join(inspect.getsource(getattr(f, "fn", f)) for f in functions)

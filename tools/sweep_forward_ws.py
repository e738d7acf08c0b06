"""Developers only: TMA attention forwards whose key loop Triton splits into warp groups on Hopper (issue 43). Not part
of the course.

ws_attention_kernel (ws1): hopper.py's loop as one loop for every case (the causal mask in every tile), host
descriptors; Triton 3.6.0 and 3.9.0 split it at BLOCK_M 64 with 4 warps (one consumer group, setmaxnreg 40 / 232).
Timed on an H200 (thirtieth session, docs/GPU-RUNS.md): 0.36-0.47x cuDNN warp-specialized, half its speed without.
ws2: the same kernel with its descriptors made in the kernel, as Triton's tutorial does on Hopper;
then BLOCK_M 128 with 4 warps splits too, into two consumer groups of 64 rows (12 warps), which a host descriptor's
fixed 128-row block forbade. At (128, 128, 4 warps, 2 stages), not causal, 0.87-0.96x cuDNN at head_dim 128 (the
best of the course's kernels there): tritoncourse/hopper.py took it. Causal, the mask in every tile costs what the
split gains. Triton 3.6's warp-specialized loop with 3 stages computed NaNs (3.9.0 did not).
ws_persistent_kernel (ws3): ws2 as a persistent kernel (one program an SM, the query tiles in turn): head_dim 128
causal 4096 0.898x cuDNN (ws2 0.839), but lower at 8192 and 16384 and at head_dim 64: not taken.

    python tools/sweep_forward_variants.py --spec 'ws2:128,128,4,2@ws;ws2:128,128,4,2@ws@lpt@causal' --tma '128,64,4,2'
    python tools/sweep_registers.py --kernels ws1          # compiled for sm_90a, no GPU
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _descriptor(desc_or_ptr, rows, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    if isinstance(desc_or_ptr, tl.tensor_descriptor):  # made on the host (ws1)
        return desc_or_ptr
    else:  # a pointer: made here, in the kernel (ws2)
        return tl.make_tensor_descriptor(desc_or_ptr, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK, HEAD_DIM])


@triton.jit
def _key_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, hi, offs_m, offs_n, qk_scale, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """The online softmax over keys 0 .. hi - 1, the causal mask in every tile: the loop Triton splits."""
    for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([row0 + start_n, 0])
        s = tl.dot(q, k.T) * qk_scale
        if CAUSAL:  # every tile: a score of a key after its query gets -1e6 (0 after exp2)
            s = s + tl.where(offs_m[:, None] >= start_n + offs_n[None, :], 0.0, -1.0e6)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        acc = acc * alpha[:, None]
        v = desc_v.load([row0 + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def ws_attention_kernel(desc_q, desc_k, desc_v, desc_o, lse_ptr, seq_len, sm_scale, HEAD_DIM: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                        WARP_SPECIALIZE: tl.constexpr, LPT: tl.constexpr = False):
    """hopper.py's tma_attention_kernel with one loop: O and the natural-log LSE of rows (batch·heads·seq_len).
    Descriptors made on the host (ws1), or pointers whose descriptors are made here (ws2): as Triton's tutorial does
    on Hopper, which lets the compiler re-block them per warp group (BLOCK_M 128 with 4 warps: two consumer groups of
    64 rows), which a host descriptor's fixed block forbids. LPT: the grid is (batch·heads, query tiles), the last
    query tiles (the most keys when causal) first across every head. Compiled for sm_90a (thirtieth session): neither
    a second loop for the causal diagonal, nor the diagonal's tiles unrolled after the loop, nor a branch around the
    mask inside it split any more (Triton 3.6.0 and 3.9.0: the pass fails in WSDataPartition, or leaves the loop
    whole)."""
    if LPT:
        pid_bh = tl.program_id(0)
        pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
        rows = tl.num_programs(0) * seq_len
    else:
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        rows = tl.num_programs(1) * seq_len
    desc_q = _descriptor(desc_q, rows, HEAD_DIM, BLOCK_M)
    desc_k = _descriptor(desc_k, rows, HEAD_DIM, BLOCK_N)
    desc_v = _descriptor(desc_v, rows, HEAD_DIM, BLOCK_N)
    desc_o = _descriptor(desc_o, rows, HEAD_DIM, BLOCK_M)
    row0 = pid_bh * seq_len
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = desc_q.load([row0 + pid_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    hi = (pid_m + 1) * BLOCK_M if CAUSAL else seq_len
    acc, l_i, m_i = _key_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, hi, offs_m, offs_n, qk_scale, BLOCK_N, CAUSAL,
                              WARP_SPECIALIZE)
    acc = acc / l_i[:, None]
    desc_o.store([row0 + pid_m * BLOCK_M, 0], acc.to(q.dtype))
    tl.store(lse_ptr + pid_bh * seq_len + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)


@triton.jit
def ws_persistent_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, seq_len, n_bh, sm_scale, HEAD_DIM: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                         WARP_SPECIALIZE: tl.constexpr, NUM_PROGRAMS: tl.constexpr):
    """ws_attention_kernel (descriptors made in the kernel) as a persistent kernel: NUM_PROGRAMS programs (one an SM)
    take the query tiles in turn, head by head, each head's last query tiles (the most keys when causal) first; only
    the key loop is warp-specialized (Triton 3.6 refuses it on the outer loop for Hopper)."""
    rows = n_bh * seq_len
    desc_q = tl.make_tensor_descriptor(q_ptr, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    desc_k = tl.make_tensor_descriptor(k_ptr, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_v = tl.make_tensor_descriptor(v_ptr, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_o = tl.make_tensor_descriptor(o_ptr, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    n_m = seq_len // BLOCK_M
    qk_scale = sm_scale * 1.4426950408889634
    offs_n = tl.arange(0, BLOCK_N)
    for tile in range(tl.program_id(0), n_m * n_bh, NUM_PROGRAMS):
        pid_bh = tile // n_m
        pid_m = n_m - 1 - tile % n_m
        row0 = pid_bh * seq_len
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        q = desc_q.load([row0 + pid_m * BLOCK_M, 0])
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        hi = (pid_m + 1) * BLOCK_M if CAUSAL else seq_len
        acc, l_i, m_i = _key_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, hi, offs_m, offs_n, qk_scale, BLOCK_N,
                                  CAUSAL, WARP_SPECIALIZE)
        acc = acc / l_i[:, None]
        desc_o.store([row0 + pid_m * BLOCK_M, 0], acc.to(q.dtype))
        tl.store(lse_ptr + pid_bh * seq_len + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)


def ws3_runner(q, k, v, causal, cfg, maxnreg=None, tags=()):
    """ws2_runner for ws_persistent_kernel: one program an SM, two with the tag x2 (ws: the key loop
    warp-specialized)."""
    import torch

    bm, bn, warps, stages = cfg
    batch, heads, seq_len, head_dim = q.shape
    if seq_len % bm or seq_len % bn or not all(t.is_contiguous() for t in (q, k, v)):
        raise ValueError("contiguous q, k, v, seq_len a multiple of BLOCK_M and of BLOCK_N")
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=q.device))
    programs = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
    programs *= 2 if "x2" in tags else 1  # two programs an SM (head_dim 64: half the shared memory)
    o = torch.empty_like(q)
    lse = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    args = (q, k, v, o, lse, seq_len, batch * heads, head_dim**-0.5)
    kw = dict(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, WARP_SPECIALIZE="ws" in tags,
              NUM_PROGRAMS=programs, num_warps=warps, num_stages=stages, **({"maxnreg": maxnreg} if maxnreg else {}))

    def run():
        ws_persistent_kernel[(programs,)](*args, **kw)
        return o
    run.lse = lse.view(batch, heads, seq_len)
    run.compiled = lambda: ws_persistent_kernel.warmup(*args, grid=(1,), **kw)
    return run

def ws2_runner(q, k, v, causal, cfg, maxnreg=None, tags=()):
    """ws1_runner with pointers for descriptors made in the kernel (a global-memory allocator is set); tags ws, lpt:
    the kernel's WARP_SPECIALIZE, LPT."""
    import torch

    bm, bn, warps, stages = cfg
    batch, heads, seq_len, head_dim = q.shape
    if seq_len % bm or seq_len % bn or not all(t.is_contiguous() for t in (q, k, v)):
        raise ValueError("contiguous q, k, v, seq_len a multiple of BLOCK_M and of BLOCK_N")
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    o = torch.empty_like(q)
    lse = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    args = (q, k, v, o, lse, seq_len, head_dim**-0.5)
    lpt = "lpt" in tags
    kw = dict(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, WARP_SPECIALIZE="ws" in tags, LPT=lpt,
              num_warps=warps, num_stages=stages, **({"maxnreg": maxnreg} if maxnreg else {}))
    grid = (batch * heads, seq_len // bm) if lpt else (seq_len // bm, batch * heads)

    def run():
        ws_attention_kernel[grid](*args, **kw)
        return o
    run.lse = lse.view(batch, heads, seq_len)
    run.compiled = lambda: ws_attention_kernel.warmup(*args, grid=(1,), **kw)
    return run


def ws1_runner(q, k, v, causal, cfg, maxnreg=None, tags=()):
    """A launch of ws_attention_kernel as tools/sweep_forward_variants.py times one (``run()`` -> O, ``run.lse``,
    ``run.compiled()``): cfg = (BLOCK_M, BLOCK_N, warps, stages), the tag "ws" turns warp_specialize on; contiguous
    q, k, v, seq_len a multiple of BLOCK_M and of BLOCK_N (BLOCK_N may exceed BLOCK_M: the causal mask is in every
    tile)."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, warps, stages = cfg
    batch, heads, seq_len, head_dim = q.shape
    if seq_len % bm or seq_len % bn or not all(t.is_contiguous() for t in (q, k, v)):
        raise ValueError("contiguous q, k, v, seq_len a multiple of BLOCK_M and of BLOCK_N")
    o = torch.empty_like(q)
    lse = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    rows = batch * heads * seq_len
    desc_q, desc_o = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [bm, head_dim]) for t in (q, o))
    desc_k, desc_v = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [bn, head_dim]) for t in (k, v))
    args = (desc_q, desc_k, desc_v, desc_o, lse, seq_len, head_dim**-0.5)
    kw = dict(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, WARP_SPECIALIZE="ws" in tags,
              num_warps=warps, num_stages=stages, **({"maxnreg": maxnreg} if maxnreg else {}))

    def run():
        ws_attention_kernel[(seq_len // bm, batch * heads)](*args, **kw)
        return o
    run.lse = lse.view(batch, heads, seq_len)
    run.compiled = lambda: ws_attention_kernel.warmup(*args, grid=(1,), **kw)
    return run

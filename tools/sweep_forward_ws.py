"""Developers only: a TMA attention forward whose key loop Triton splits into warp groups on Hopper (issue 43's lead of
the twenty-ninth session, docs/GPU-RUNS.md). Not part of the course.

tritoncourse/hopper.py's kernel runs its causal case as two loops (the tiles before the diagonal unmasked, then the
diagonal's), and Triton 3.6.0 and 3.9.0 refuse warp_specialize on either loop there; at BLOCK_M 128 with 4 warps they
refuse it too, and at 8 warps they never split. This kernel has one loop for every case, the causal mask applied
in each tile (a select per score: the price of the split), and at BLOCK_M 64 with 4 warps both versions compile it
to producer and consumer warp groups (ttg.warp_specialize, setmaxnreg 40 / 232), causal or not:
`python tools/sweep_registers.py --kernels ws1`. Not yet timed on a GPU: `python tools/sweep_forward_variants.py --spec
'ws1:64,64,4,2;ws1:64,64,4,2@ws;ws1:64,128,4,2@ws;ws1:64,64,4,3@ws@d64' --tma '128,64,4,2'` times it beside the
notebook's forward, hopper.py's kernel and SDPA's cuDNN and FlashAttention-2 backends.

    from sweep_forward_ws import ws_attention          # q, k, v (batch, heads, seq_len, head_dim), contiguous
    o, lse = ws_attention(q, k, v, causal, (64, 64, 4, 2), warp_specialize=True)
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def ws_attention_kernel(desc_q, desc_k, desc_v, desc_o, lse_ptr, seq_len, sm_scale, HEAD_DIM: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                        WARP_SPECIALIZE: tl.constexpr):
    """hopper.py's tma_attention_kernel with one loop: O and the natural-log LSE of rows (batch·heads·seq_len)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    row0 = pid_bh * seq_len
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = desc_q.load([row0 + pid_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    hi = (pid_m + 1) * BLOCK_M if CAUSAL else seq_len
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
    acc = acc / l_i[:, None]
    desc_o.store([row0 + pid_m * BLOCK_M, 0], acc.to(q.dtype))
    tl.store(lse_ptr + pid_bh * seq_len + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)


def ws1_runner(q, k, v, causal, cfg, maxnreg=None, tags=()):
    """A launch of ws_attention_kernel as tools/sweep_forward_variants.py times one (``run()`` -> O, ``run.lse``,
    ``run.compiled()``): cfg = (BLOCK_M, BLOCK_N, warps, stages), the tag "ws" turns warp_specialize on; contiguous q, k,
    v, seq_len a multiple of BLOCK_M, BLOCK_M of BLOCK_N."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, warps, stages = cfg
    batch, heads, seq_len, head_dim = q.shape
    if seq_len % bm or bm % bn or not all(t.is_contiguous() for t in (q, k, v)):
        raise ValueError("contiguous q, k, v, seq_len a multiple of BLOCK_M, BLOCK_M of BLOCK_N")
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


def ws_attention(q, k, v, causal, cfg, warp_specialize=True):
    """(O, LSE) by ws_attention_kernel with cfg = (BLOCK_M, BLOCK_N, warps, stages)."""
    run = ws1_runner(q, k, v, causal, cfg, tags=("ws",) if warp_specialize else ())
    return run(), run.lse

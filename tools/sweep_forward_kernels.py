"""The kernels tools/sweep_forward_variants.py measures beside phase 6's reference (issue 43, twenty-seventh session).
Developers only; none of it is graded or imported by the course.

old_attention_kernel: phase 6's reference forward before the twenty-seventh session (K and V pointer blocks carried
    through the key loop, k_ptrs += BLOCK_N * stride_kn). The session's reference computes k_ptrs + start_n * stride_kn
    instead (the sweep's "nb" and "v2").
(Removed in the twenty-eighth session's review, their results in docs/GPU-RUNS.md: v4, a scalar base pointer and int32
offset blocks, and v2r, the reference with causal query tiles in reverse order; both are in git at 93f5a9b.)
pp2_attention_kernel: tools/sweep_forward_pp2.py.
tma2_kernel / tma2_runner: tritoncourse/hopper.py's TMA kernel with switches: REVERSE (causal tiles in reverse order),
    SEQ (seq_len as a constexpr, as Triton's tutorial has N_CTX), and maxnreg.
"""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tritoncourse.hopper import _tma_tiles


@triton.jit
def _old_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, seq_len, qk_scale,
                     lo, hi, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """The online softmax of one query tile over the key tiles from key `lo` to key `hi` (optional helper).

    acc: (BLOCK_M, HEAD_DIM) fp32, Σ_j 2^(s_j - m) v_j over the keys seen so far; l_i, m_i: (BLOCK_M,) fp32,
         the running sum Σ_j 2^(s_j - m) and running maximum m of the scores s_j, in log2 units: s_j is
         q·k_j · qk_scale with qk_scale = sm_scale · log2(e), so that 2^s = exp(q·k_j · sm_scale).
    q: (BLOCK_M, HEAD_DIM) the query tile, as loaded (Q's dtype).
    k_ptrs, v_ptrs: (BLOCK_N, HEAD_DIM) pointers to keys (values) 0 .. BLOCK_N - 1 of this (batch, head).
    stride_kn, stride_vn: elements between two consecutive keys (values).
    offs_m: (BLOCK_M,) this tile's query indices; offs_n: tl.arange(0, BLOCK_N); seq_len: keys per head.
    lo, hi: the keys to visit, from lo (a multiple of BLOCK_N) up to hi (exclusive), BLOCK_N at a time.
    MASKED: mask keys >= seq_len (loads with other=0.0, scores -inf) and, with CAUSAL, keys after their query;
            False: every tile is whole and visible, load and use it without any mask.
    Returns (acc, l_i, m_i) updated with those keys. Stores nothing.
    """
    ### BEGIN SOLUTION
    k_ptrs += lo * stride_kn
    v_ptrs += lo * stride_vn
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < seq_len, other=0.0)
        else:
            k = tl.load(k_ptrs)
        s = tl.dot(q, tl.trans(k))  # BLOCK_M x BLOCK_N, fp32
        if MASKED:
            keep = cols[None, :] < seq_len
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            s = tl.where(keep, s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            s = s - m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if MASKED:
            v = tl.load(v_ptrs, mask=cols[:, None] < seq_len, other=0.0)
        else:
            v = tl.load(v_ptrs)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i
    ### END SOLUTION


@triton.jit
def old_attention_kernel(
    q_ptr, k_ptr, v_ptr,  # pointers to Q, K, V: (batch, heads, seq_len, HEAD_DIM)
    o_ptr,  # pointer to O, like Q
    lse_ptr,  # pointer to the log-sum-exp, (batch * heads, seq_len) fp32, contiguous
    stride_qb, stride_qh, stride_qm, stride_qd,  # Q's strides, in elements
    stride_kb, stride_kh, stride_kn, stride_kd,  # K's strides
    stride_vb, stride_vh, stride_vn, stride_vd,  # V's strides
    stride_ob, stride_oh, stride_om, stride_od,  # O's strides
    n_heads,  # heads per batch: program_id(1) = batch * n_heads + head
    seq_len,  # queries and keys per (batch, head)
    sm_scale,  # the scale of the scores, usually 1 / sqrt(HEAD_DIM)
    HEAD_DIM: tl.constexpr,  # head_dim, a power of two >= 16
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # key rows per loop step; BLOCK_M is a multiple of it
    CAUSAL: tl.constexpr,  # query i sees only keys j <= i
):
    """Program (pid_m, pid_bh) computes rows pid_m * BLOCK_M .. + BLOCK_M - 1 (those < seq_len) of one (batch,
    head), pid_bh = batch * n_heads + head: it stores O[batch, head, row, :] = softmax(Q Kᵀ · sm_scale) V for
    those rows (in O's dtype) and LSE[pid_bh, row], the natural log of Σ_keys exp(q·k · sm_scale) (fp32).
    It writes nothing else, and reads no row >= seq_len without a mask.
    """
    ### BEGIN SOLUTION
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
    k_ptrs = k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp(x) = exp2(x * log2(e))
    if CAUSAL:
        full_end = pid_m * BLOCK_M  # the key tiles before this query tile: no key is after any query
        end = tl.minimum((pid_m + 1) * BLOCK_M, seq_len)  # the tiles after it are skipped
    else:
        full_end = (seq_len // BLOCK_N) * BLOCK_N  # every whole tile
        end = seq_len
    acc, l_i, m_i = _old_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n,
                                     seq_len, qk_scale, 0, full_end, BLOCK_N, False, CAUSAL)
    acc, l_i, m_i = _old_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n,
                                     seq_len, qk_scale, full_end, end, BLOCK_N, True, CAUSAL)
    acc = acc / l_i[:, None]
    o_ptrs = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # natural log of sum(exp(scale * q.k))
    tl.store(lse_ptr + pid_bh.to(tl.int64) * seq_len + offs_m, lse, mask=offs_m < seq_len)
    ### END SOLUTION


@triton.jit
def tma2_kernel(desc_q, desc_k, desc_v, desc_o, lse_ptr, seq_len, SEQ: tl.constexpr, sm_scale, HEAD_DIM: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, REVERSE: tl.constexpr):
    if SEQ > 0:
        seq_len = SEQ
    pid_m = tl.program_id(0)
    if REVERSE:
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    row0 = pid_bh * seq_len
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = desc_q.load([row0 + pid_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if CAUSAL:
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, pid_m * BLOCK_M, offs_m, offs_n,
                                   qk_scale, BLOCK_N, False, False)
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, pid_m * BLOCK_M, (pid_m + 1) * BLOCK_M,
                                   offs_m, offs_n, qk_scale, BLOCK_N, True, False)
    else:
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, seq_len, offs_m, offs_n, qk_scale,
                                   BLOCK_N, False, False)
    acc = acc / l_i[:, None]
    desc_o.store([row0 + pid_m * BLOCK_M, 0], acc.to(q.dtype))
    tl.store(lse_ptr + pid_bh * seq_len + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)


def tma2_runner(q, k, v, causal, cfg, maxnreg, tags):
    block_m, block_n, warps, stages = cfg
    batch, heads, seq_len, head_dim = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    rows = batch * heads * seq_len
    desc_q, desc_o = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [block_m, head_dim]) for t in (q, o))
    desc_k, desc_v = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [block_n, head_dim]) for t in (k, v))
    extra = {"maxnreg": maxnreg} if maxnreg else {}
    args = (desc_q, desc_k, desc_v, desc_o, lse, seq_len, seq_len if "const" in tags else 0, head_dim ** -0.5)
    kw = dict(HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal, REVERSE=causal and "rev" in tags,
              num_warps=warps, num_stages=stages, **extra)

    def run():
        tma2_kernel[(seq_len // block_m, batch * heads)](*args, **kw)
        return o
    run.compiled = lambda: tma2_kernel.warmup(*args, grid=(1,), **kw)
    return run

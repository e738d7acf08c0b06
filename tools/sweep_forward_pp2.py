"""A kernel tools/sweep_forward_variants.py (spec name pp2) and tools/sweep_registers.py measure beside phase 6's
reference (issue 43). Developers only; none of it is graded or imported by the course.

pp2_attention_kernel: two query tiles a program (BLOCK_M rows as two halves of BLOCK_M / 2, each with its own
running max, sum and accumulator), K and V loaded once a step for both, the products of both halves issued
before either's softmax: the order of FlashAttention-3's intra-warpgroup overlap (one half's softmax while the
other's QKᵀ runs on the tensor cores), if Triton's asynchronous wgmma waits as late as that allows (twenty-eighth
session). Same arguments, grid and stores as the reference.
"""
import triton
import triton.language as tl


@triton.jit
def _pp2_tiles(acc_a, l_a, m_a, acc_b, l_b, m_b, q_a, q_b, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_a, offs_b,
               offs_n, seq_len, qk_scale, lo, hi, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
               CAUSAL: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASKED:
            k = tl.load(k_ptrs + start_n * stride_kn, mask=cols[:, None] < seq_len, other=0.0)
        else:
            k = tl.load(k_ptrs + start_n * stride_kn)
        kt = tl.trans(k)
        s_a = tl.dot(q_a, kt)
        s_b = tl.dot(q_b, kt)
        if MASKED:
            v = tl.load(v_ptrs + start_n * stride_vn, mask=cols[:, None] < seq_len, other=0.0)
        else:
            v = tl.load(v_ptrs + start_n * stride_vn)
        # half a: its softmax while s_b's product may still run
        if MASKED:
            keep = cols[None, :] < seq_len
            if CAUSAL:
                keep = keep & (offs_a[:, None] >= cols[None, :])
            s_a = tl.where(keep, s_a * qk_scale, float("-inf"))
            m_new = tl.maximum(m_a, tl.max(s_a, 1))
            s_a = s_a - m_new[:, None]
        else:
            m_new = tl.maximum(m_a, tl.max(s_a, 1) * qk_scale)
            s_a = s_a * qk_scale - m_new[:, None]
        p_a = tl.math.exp2(s_a)
        alpha = tl.math.exp2(m_a - m_new)
        l_a = l_a * alpha + tl.sum(p_a, 1)
        acc_a = tl.dot(p_a.to(v.dtype), v, acc_a * alpha[:, None])
        m_a = m_new
        # half b: its softmax while a's PV product may still run
        if MASKED:
            keep = cols[None, :] < seq_len
            if CAUSAL:
                keep = keep & (offs_b[:, None] >= cols[None, :])
            s_b = tl.where(keep, s_b * qk_scale, float("-inf"))
            m_new = tl.maximum(m_b, tl.max(s_b, 1))
            s_b = s_b - m_new[:, None]
        else:
            m_new = tl.maximum(m_b, tl.max(s_b, 1) * qk_scale)
            s_b = s_b * qk_scale - m_new[:, None]
        p_b = tl.math.exp2(s_b)
        alpha = tl.math.exp2(m_b - m_new)
        l_b = l_b * alpha + tl.sum(p_b, 1)
        acc_b = tl.dot(p_b.to(v.dtype), v, acc_b * alpha[:, None])
        m_b = m_new
    return acc_a, l_a, m_a, acc_b, l_b, m_b


@triton.jit
def pp2_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh, stride_om, stride_od,
    n_heads, seq_len, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    HALF: tl.constexpr = BLOCK_M // 2
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    offs_a = pid_m * BLOCK_M + tl.arange(0, HALF)
    offs_b = offs_a + HALF
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + b * stride_qb + h * stride_qh + offs_d[None, :] * stride_qd
    k_ptrs = k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
    q_a = tl.load(q_base + offs_a[:, None] * stride_qm, mask=offs_a[:, None] < seq_len, other=0.0)
    q_b = tl.load(q_base + offs_b[:, None] * stride_qm, mask=offs_b[:, None] < seq_len, other=0.0)
    m_a = tl.full([HALF], float("-inf"), dtype=tl.float32)
    m_b = tl.full([HALF], float("-inf"), dtype=tl.float32)
    l_a = tl.zeros([HALF], dtype=tl.float32)
    l_b = tl.zeros([HALF], dtype=tl.float32)
    acc_a = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    acc_b = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if CAUSAL:
        full_end = pid_m * BLOCK_M
        end = tl.minimum((pid_m + 1) * BLOCK_M, seq_len)
    else:
        full_end = (seq_len // BLOCK_N) * BLOCK_N
        end = seq_len
    acc_a, l_a, m_a, acc_b, l_b, m_b = _pp2_tiles(
        acc_a, l_a, m_a, acc_b, l_b, m_b, q_a, q_b, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_a, offs_b, offs_n,
        seq_len, qk_scale, 0, full_end, BLOCK_N, False, CAUSAL)
    acc_a, l_a, m_a, acc_b, l_b, m_b = _pp2_tiles(
        acc_a, l_a, m_a, acc_b, l_b, m_b, q_a, q_b, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_a, offs_b, offs_n,
        seq_len, qk_scale, full_end, end, BLOCK_N, True, CAUSAL)
    o_base = o_ptr + b * stride_ob + h * stride_oh + offs_d[None, :] * stride_od
    tl.store(o_base + offs_a[:, None] * stride_om, (acc_a / l_a[:, None]).to(o_ptr.dtype.element_ty),
             mask=offs_a[:, None] < seq_len)
    tl.store(o_base + offs_b[:, None] * stride_om, (acc_b / l_b[:, None]).to(o_ptr.dtype.element_ty),
             mask=offs_b[:, None] < seq_len)
    lse_row = lse_ptr + pid_bh.to(tl.int64) * seq_len
    tl.store(lse_row + offs_a, (m_a + tl.math.log2(l_a)) * 0.6931471805599453, mask=offs_a < seq_len)
    tl.store(lse_row + offs_b, (m_b + tl.math.log2(l_b)) * 0.6931471805599453, mask=offs_b < seq_len)

# The reference's two loops, but K's pointers are never advanced: every key tile's scores are those of the first
# tile (V's pointers do move on). Right while a single key tile holds the sequence.
# expect-fail: test_attention_full_tiles test_attention_ragged_seq test_attention_causal test_attention_causal_ragged test_attention_large_scores test_attention_fp16 test_attention_strides test_attention_scale_and_sum
# expect-message: K's pointers
# replaces: attention_kernel
# other-solutions: source
@triton.jit
def _attention_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, seq_len, qk_scale,
                     lo, hi, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    # The key tiles from lo to hi (lo a multiple of BLOCK_N). MASKED: the tiles may run past seq_len or be
    # crossed by the causal diagonal; the others are loaded and used without any mask.
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
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


@triton.jit
def triton_attention_kernel(
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
    acc, l_i, m_i = _attention_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n,
                                     seq_len, qk_scale, 0, full_end, BLOCK_N, False, CAUSAL)
    acc, l_i, m_i = _attention_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n,
                                     seq_len, qk_scale, full_end, end, BLOCK_N, True, CAUSAL)
    acc = acc / l_i[:, None]
    o_ptrs = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # natural log of sum(exp(scale * q.k))
    tl.store(lse_ptr + pid_bh.to(tl.int64) * seq_len + offs_m, lse, mask=offs_m < seq_len)
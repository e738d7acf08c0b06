# Block pointers, as correct_block_pointers, but O's tile stored without boundary_check: the last query tile's rows
# past seq_len are written outside O.
# expect-fail: test_attention_ragged_seq test_attention_causal_ragged
# expect-message: boundary_check=(0,)
# replaces: attention_kernel
# other-solutions: source
@triton.jit
def triton_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    n_heads, seq_len, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    q_block = tl.make_block_ptr(q_ptr + b * stride_qb + h * stride_qh, shape=(seq_len, HEAD_DIM),
                                strides=(stride_qm, stride_qd), offsets=(start_m, 0), block_shape=(BLOCK_M, HEAD_DIM),
                                order=(1, 0))
    kt_block = tl.make_block_ptr(k_ptr + b * stride_kb + h * stride_kh, shape=(HEAD_DIM, seq_len),
                                 strides=(stride_kd, stride_kn), offsets=(0, 0), block_shape=(HEAD_DIM, BLOCK_N),
                                 order=(0, 1))
    v_block = tl.make_block_ptr(v_ptr + b * stride_vb + h * stride_vh, shape=(seq_len, HEAD_DIM),
                                strides=(stride_vn, stride_vd), offsets=(0, 0), block_shape=(BLOCK_N, HEAD_DIM),
                                order=(1, 0))
    q = tl.load(q_block, boundary_check=(0,), padding_option="zero")
    offs_m = start_m + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    end = tl.minimum(start_m + BLOCK_M, seq_len) if CAUSAL else seq_len
    for start_n in range(0, end, BLOCK_N):
        kt = tl.load(kt_block, boundary_check=(1,), padding_option="zero")
        s = tl.dot(q, kt) * qk_scale
        cols = start_n + tl.arange(0, BLOCK_N)
        keep = cols[None, :] < seq_len
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_block, boundary_check=(0,), padding_option="zero")
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
        kt_block = tl.advance(kt_block, (0, BLOCK_N))
        v_block = tl.advance(v_block, (BLOCK_N, 0))
    o_block = tl.make_block_ptr(o_ptr + b * stride_ob + h * stride_oh, shape=(seq_len, HEAD_DIM),
                                strides=(stride_om, stride_od), offsets=(start_m, 0), block_shape=(BLOCK_M, HEAD_DIM),
                                order=(1, 0))
    tl.store(o_block, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty))
    lse = (m_i + tl.math.log2(l_i)) / 1.4426950408889634
    tl.store(lse_ptr + pid_bh.to(tl.int64) * seq_len + offs_m, lse, mask=offs_m < seq_len)

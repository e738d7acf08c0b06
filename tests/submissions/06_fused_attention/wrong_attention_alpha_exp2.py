# p = exp(s - m_new) in natural units, but the rescale alpha = exp2(m_old - m_new): the old terms are shrunk by
# 2^(m_new - m_old) instead of e^(m_new - m_old). O is wrong wherever a later key tile raises a row's maximum;
# before, the diagnosis named nothing (or blamed the strides). test_attention_large_scores (written for the maximum's subtraction) catches it only where a
# later key tile raises a row's maximum by a few units: its scores of hundreds make the old terms' weight negligible
# in either base otherwise (its three cases passed 23, 102 and 20 of 400 seeds on the interpreter, never all three
# with one seed, yet a fresh-clone run's grading passed it once): it may pass; the other seven fail on every draw.
# may-pass: test_attention_large_scores
# expect-fail: test_attention_full_tiles test_attention_ragged_seq test_attention_causal test_attention_causal_ragged test_attention_large_scores test_attention_scale_and_sum test_attention_strides test_attention_fp16
# expect-message: alpha and p use different exponentials
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
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = (pid_bh // n_heads).to(tl.int64)
    head = (pid_bh % n_heads).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + batch * stride_qb + head * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                mask=rows[:, None] < seq_len, other=0.0)
    m = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = seq_len
    if CAUSAL:
        hi = tl.minimum(seq_len, (pid_m + 1) * BLOCK_M)
    for start in range(0, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + batch * stride_kb + head * stride_kh + cols[None, :] * stride_kn + dims[:, None] * stride_kd,
                     mask=cols[None, :] < seq_len, other=0.0)  # K transposed: HEAD_DIM x BLOCK_N
        s = tl.dot(q, kt) * sm_scale
        valid = cols[None, :] < seq_len
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        scale = tl.exp2(m - m_new)
        l = l * scale + tl.sum(p, axis=1)
        v = tl.load(v_ptr + batch * stride_vb + head * stride_vh + cols[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=cols[:, None] < seq_len, other=0.0)
        acc = acc * scale[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    out = acc / l[:, None]
    tl.store(o_ptr + batch * stride_ob + head * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=rows[:, None] < seq_len)
    tl.store(lse_ptr + pid_bh * seq_len + rows, m + tl.log(l), mask=rows < seq_len)

# dQ stored without its mask: the last query tile writes rows past seq_len.
# expect-fail: test_attention_bwd_dq test_attention_bwd_dq_causal test_attention_function_gradients test_attention_compiled_block test_attention_training_step
# expect-message: mask its tl.store with rows < seq_len
# replaces: attention_bwd_dq_kernel
# other-solutions: source
@triton.jit
def triton_attention_bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr,  # pointers to Q, K, V: (batch, heads, seq_len, HEAD_DIM)
    do_ptr,  # pointer to dO, like Q
    lse_ptr,  # pointer to the forward's log-sum-exp, (batch * heads, seq_len) fp32, contiguous
    delta_ptr,  # pointer to D = rowsum(dO * O), (batch * heads, seq_len) fp32, contiguous
    dq_ptr,  # pointer to dQ, like Q (Q's dtype)
    stride_qb, stride_qh, stride_qm, stride_qd,  # Q's strides, in elements
    stride_kb, stride_kh, stride_kn, stride_kd,  # K's strides
    stride_vb, stride_vh, stride_vn, stride_vd,  # V's strides
    stride_dob, stride_doh, stride_dom, stride_dod,  # dO's strides
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,  # dQ's strides
    n_heads,  # heads per batch: program_id(1) = batch * n_heads + head
    seq_len,  # queries and keys per (batch, head)
    sm_scale,  # the forward's scale of the scores
    HEAD_DIM: tl.constexpr,  # head_dim, a power of two >= 16
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # key rows per loop step
    CAUSAL: tl.constexpr,  # query i sees only keys j <= i
):
    """Program (pid_m, pid_bh) stores dQ = sm_scale · dS K for queries pid_m * BLOCK_M .. + BLOCK_M - 1 (those
    < seq_len) of one (batch, head), summed over every key tile they see. It writes nothing else."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] < seq_len
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=rows, other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :] * stride_dod, mask=rows, other=0.0)
    row0 = pid_bh.to(tl.int64) * seq_len
    lse = tl.load(lse_ptr + row0 + offs_m, mask=offs_m < seq_len, other=0.0) * 1.4426950408889634
    delta = tl.load(delta_ptr + row0 + offs_m, mask=offs_m < seq_len, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    hi = tl.minimum((pid_m + 1) * BLOCK_M, seq_len) if CAUSAL else seq_len  # later keys see no query here
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        in_seq = cols < seq_len
        k = tl.load(k_ptr + b * stride_kb + h * stride_kh + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                    mask=in_seq[:, None], other=0.0)
        v = tl.load(v_ptr + b * stride_vb + h * stride_vh + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=in_seq[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        keep = rows & in_seq[None, :]
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= cols[None, :])
        p = tl.where(keep, tl.math.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    tl.store(dq_ptr + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :] * stride_dqd,
             (dq * sm_scale).to(dq_ptr.dtype.element_ty))

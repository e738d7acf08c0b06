# dK and dV accumulated in fp16: in fp32 tests the error is fp16's rounding (the fp16 test's own tolerance is
# that wide, so only it passes). On a GPU fp32 is judged at tf32's tolerance, as wide: there the fp32 case whose dO
# passes fp16's range (the accumulators overflow) is what fails it (H200, 2026-11-28).
# gpu-may-pass: test_attention_bwd_dkdv_ragged test_attention_bwd_dkdv_causal test_attention_bwd_atomic_dq test_attention_bwd_strides test_attention_bwd_scores_and_scale test_attention_function_gradients test_attention_compiled_block test_attention_training_step
# expect-fail: test_attention_bwd_dkdv_full_tiles test_attention_bwd_dkdv_ragged test_attention_bwd_dkdv_causal test_attention_bwd_atomic_dq test_attention_bwd_strides test_attention_bwd_scores_and_scale test_attention_function_gradients test_attention_compiled_block test_attention_training_step
# expect-message: keep the accumulators in fp32
# replaces: attention_bwd_dkdv_kernel
# other-solutions: source
@triton.jit
def triton_attention_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr,  # pointers to Q, K, V: (batch, heads, seq_len, HEAD_DIM)
    do_ptr,  # pointer to dO, like Q
    lse_ptr,  # pointer to the forward's log-sum-exp, (batch * heads, seq_len) fp32, contiguous
    delta_ptr,  # pointer to D = rowsum(dO * O), (batch * heads, seq_len) fp32, contiguous
    dk_ptr, dv_ptr,  # pointers to dK, dV, like K and V (K's dtype)
    dq_ptr,  # pointer to dQ in fp32, like Q, zeroed by the caller: used only with ATOMIC_DQ
    stride_qb, stride_qh, stride_qm, stride_qd,  # Q's strides, in elements
    stride_kb, stride_kh, stride_kn, stride_kd,  # K's strides
    stride_vb, stride_vh, stride_vn, stride_vd,  # V's strides
    stride_dob, stride_doh, stride_dom, stride_dod,  # dO's strides
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,  # dK's strides
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,  # dV's strides
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,  # dQ's strides
    n_heads,  # heads per batch: program_id(1) = batch * n_heads + head
    seq_len,  # queries and keys per (batch, head)
    sm_scale,  # the forward's scale of the scores
    HEAD_DIM: tl.constexpr,  # head_dim, a power of two >= 16
    BLOCK_M: tl.constexpr,  # query rows per loop step
    BLOCK_N: tl.constexpr,  # key rows per program
    CAUSAL: tl.constexpr,  # query i sees only keys j <= i
    ATOMIC_DQ: tl.constexpr,  # also add this key tile's part of dQ into dq_ptr with tl.atomic_add
):
    """Program (pid_n, pid_bh) stores dK and dV for keys pid_n * BLOCK_N .. + BLOCK_N - 1 (those < seq_len) of one
    (batch, head), summed over every query tile that sees them; with ATOMIC_DQ it also adds, for each of those
    query tiles, sm_scale · dS K of its keys into dQ (fp32) with tl.atomic_add. It writes nothing else."""
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    keys = offs_n[:, None] < seq_len
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=keys, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=keys, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float16)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float16)
    qk_scale = sm_scale * 1.4426950408889634  # exp(x) = exp2(x * log2(e))
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0  # no query before the tile's first key sees it
    row0 = pid_bh.to(tl.int64) * seq_len
    for start_m in range(lo, seq_len, BLOCK_M):
        rows = start_m + offs_m
        in_seq = rows < seq_len
        q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                    mask=in_seq[:, None], other=0.0)
        do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_dom
                     + offs_d[None, :] * stride_dod, mask=in_seq[:, None], other=0.0)
        lse = tl.load(lse_ptr + row0 + rows, mask=in_seq, other=0.0) * 1.4426950408889634
        delta = tl.load(delta_ptr + row0 + rows, mask=in_seq, other=0.0)
        s_t = tl.dot(k, tl.trans(q)) * qk_scale  # (BLOCK_N, BLOCK_M): Sᵀ in log2 units
        keep = (offs_n[:, None] < seq_len) & in_seq[None, :]
        if CAUSAL:
            keep = keep & (rows[None, :] >= offs_n[:, None])
        p_t = tl.where(keep, tl.math.exp2(s_t - lse[None, :]), 0.0)  # Pᵀ, the forward's probabilities
        dv += tl.dot(p_t.to(do.dtype), do).to(tl.float16)
        dp_t = tl.dot(v, tl.trans(do))  # (dO Vᵀ)ᵀ
        ds_t = p_t * (dp_t - delta[None, :])  # dSᵀ
        dk += tl.dot(ds_t.to(q.dtype), q).to(tl.float16)
        if ATOMIC_DQ:
            dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k) * sm_scale
            tl.atomic_add(dq_ptr + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqm
                          + offs_d[None, :] * stride_dqd, dq, mask=in_seq[:, None])
    tl.store(dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd,
             (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=keys)
    tl.store(dv_ptr + b * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :] * stride_dvd,
             dv.to(dv_ptr.dtype.element_ty), mask=keys)

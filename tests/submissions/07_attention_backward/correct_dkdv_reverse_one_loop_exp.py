# dK and dV in one loop over every query tile, the last first, each masked (no causal tile skipped), in
# natural units (exp of S - LSE as stored), P kept (BLOCK_M, BLOCK_N) and transposed for tl.dot, sm_scale
# folded into dS: slower than the reference on a GPU, just as correct.
# expect-all-pass
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
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = (pid_bh // n_heads).to(tl.int64)
    head = (pid_bh % n_heads).to(tl.int64)
    keys = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    key_ok = keys < seq_len
    k = tl.load(k_ptr + batch * stride_kb + head * stride_kh + keys[:, None] * stride_kn + dims[None, :] * stride_kd,
                mask=key_ok[:, None], other=0.0)
    v = tl.load(v_ptr + batch * stride_vb + head * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                mask=key_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    n_query_tiles = tl.cdiv(seq_len, BLOCK_M)
    for i in range(0, n_query_tiles):
        rows = (n_query_tiles - 1 - i) * BLOCK_M + tl.arange(0, BLOCK_M)  # the last query tile first
        row_ok = rows < seq_len
        q = tl.load(q_ptr + batch * stride_qb + head * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                    mask=row_ok[:, None], other=0.0)
        do = tl.load(do_ptr + batch * stride_dob + head * stride_doh + rows[:, None] * stride_dom
                     + dims[None, :] * stride_dod, mask=row_ok[:, None], other=0.0)
        lse = tl.load(lse_ptr + pid_bh * seq_len + rows, mask=row_ok, other=0.0)
        delta = tl.load(delta_ptr + pid_bh * seq_len + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N), natural units
        keep = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            keep = keep & (rows[:, None] >= keys[None, :])
        p = tl.exp(tl.where(keep, s - lse[:, None], float("-inf")))
        dv += tl.dot(tl.trans(p).to(do.dtype), do)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None]) * sm_scale
        dk += tl.dot(tl.trans(ds).to(q.dtype), q)
        if ATOMIC_DQ:
            tl.atomic_add(dq_ptr + batch * stride_dqb + head * stride_dqh + rows[:, None] * stride_dqm
                          + dims[None, :] * stride_dqd, tl.dot(ds.to(k.dtype), k), mask=row_ok[:, None])
    tl.store(dk_ptr + batch * stride_dkb + head * stride_dkh + keys[:, None] * stride_dkn + dims[None, :] * stride_dkd,
             dk.to(dk_ptr.dtype.element_ty), mask=key_ok[:, None])
    tl.store(dv_ptr + batch * stride_dvb + head * stride_dvh + keys[:, None] * stride_dvn + dims[None, :] * stride_dvd,
             dv.to(dv_ptr.dtype.element_ty), mask=key_ok[:, None])

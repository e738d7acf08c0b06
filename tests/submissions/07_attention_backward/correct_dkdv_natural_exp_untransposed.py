# A correct dK/dV kernel written differently: scores as Q Kᵀ (BLOCK_M x BLOCK_N, not transposed), natural exp with
# the LSE as stored, block pointers built per step, and a causal loop that starts at query 0 (no tile skipped: every
# tile masked; slower, still right).
# expect-all-pass
# replaces: attention_bwd_dkdv_kernel
# other-solutions: source
@triton.jit
def triton_attention_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    n_heads, seq_len, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    ATOMIC_DQ: tl.constexpr,
):
    pid_bh = tl.program_id(1)
    batch = (pid_bh // n_heads).to(tl.int64)
    head = (pid_bh % n_heads).to(tl.int64)
    keys = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    key_ok = keys < seq_len
    k = tl.load(k_ptr + batch * stride_kb + head * stride_kh + keys[:, None] * stride_kn + dims[None, :] * stride_kd,
                mask=key_ok[:, None], other=0.0)
    v = tl.load(v_ptr + batch * stride_vb + head * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                mask=key_ok[:, None], other=0.0)
    dk_acc = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv_acc = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    rows_base = pid_bh.to(tl.int64) * seq_len
    for start in range(0, seq_len, BLOCK_M):
        queries = start + tl.arange(0, BLOCK_M)
        q_ok = queries < seq_len
        q = tl.load(q_ptr + batch * stride_qb + head * stride_qh + queries[:, None] * stride_qm
                    + dims[None, :] * stride_qd, mask=q_ok[:, None], other=0.0)
        do = tl.load(do_ptr + batch * stride_dob + head * stride_doh + queries[:, None] * stride_dom
                     + dims[None, :] * stride_dod, mask=q_ok[:, None], other=0.0)
        lse = tl.load(lse_ptr + rows_base + queries, mask=q_ok, other=0.0)
        delta = tl.load(delta_ptr + rows_base + queries, mask=q_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale  # BLOCK_M x BLOCK_N
        valid = q_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            valid = valid & (queries[:, None] >= keys[None, :])
        p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
        dv_acc += tl.dot(tl.trans(p.to(do.dtype)), do)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dk_acc += tl.dot(tl.trans(ds.to(q.dtype)), q)
        if ATOMIC_DQ:
            part = tl.dot(ds.to(k.dtype), k) * sm_scale
            tl.atomic_add(dq_ptr + batch * stride_dqb + head * stride_dqh + queries[:, None] * stride_dqm
                          + dims[None, :] * stride_dqd, part, mask=q_ok[:, None])
    tl.store(dk_ptr + batch * stride_dkb + head * stride_dkh + keys[:, None] * stride_dkn + dims[None, :] * stride_dkd,
             (dk_acc * sm_scale).to(dk_ptr.dtype.element_ty), mask=key_ok[:, None])
    tl.store(dv_ptr + batch * stride_dvb + head * stride_dvh + keys[:, None] * stride_dvn + dims[None, :] * stride_dvd,
             dv_acc.to(dv_ptr.dtype.element_ty), mask=key_ok[:, None])

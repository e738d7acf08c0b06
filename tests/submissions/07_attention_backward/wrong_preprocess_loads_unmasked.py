# O and dO loaded without their masks in D's kernel (the store still masked): rows past seq_len are read, never
# stored, so D is right and only the fenced run of the preprocess test (inputs ending where readable memory
# ends) catches it; the whole-path tests, on unguarded tensors, pass.
# expect-fail: test_attention_bwd_preprocess
# expect-message: an unmasked load
# replaces: attention_bwd_preprocess_kernel
# other-solutions: source
@triton.jit
def triton_attention_bwd_preprocess_kernel(
    o_ptr,  # pointer to the forward's output O: (batch, heads, seq_len, HEAD_DIM)
    do_ptr,  # pointer to the incoming gradient dO, like O (strides of its own)
    delta_ptr,  # pointer to D, (batch * heads, seq_len) fp32, contiguous
    stride_ob, stride_oh, stride_om, stride_od,  # O's strides, in elements
    stride_dob, stride_doh, stride_dom, stride_dod,  # dO's strides
    n_heads,  # heads per batch: program_id(1) = batch * n_heads + head
    seq_len,  # queries per (batch, head)
    HEAD_DIM: tl.constexpr,  # head_dim, a power of two >= 16
    BLOCK_M: tl.constexpr,  # rows per program
):
    """Program (pid_m, pid_bh) stores D[pid_bh, row] = Σ_d dO[b, h, row, d] · O[b, h, row, d] (fp32) for its rows
    pid_m * BLOCK_M .. + BLOCK_M - 1 that are < seq_len. Nothing else."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] < seq_len
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om
                + offs_d[None, :] * stride_od).to(tl.float32)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :] * stride_dod).to(tl.float32)
    tl.store(delta_ptr + pid_bh.to(tl.int64) * seq_len + offs_m, tl.sum(o * do, axis=1), mask=offs_m < seq_len)

# The dK/dV kernel is left unwritten, and a new cell redefines AttentionFunction and the custom op with torch's own
# gradients (SDPA through autograd): the notebook's own demo then trains as SDPA does, but the tests launch the
# kernels themselves (with their own copy of the function, the op and the block, in the grader's process): a class
# or op the learner defines never reaches them, and the unwritten kernel fails every test that launches it.
# expect-fail: test_attention_bwd_dkdv_full_tiles test_attention_bwd_dkdv_ragged test_attention_bwd_dkdv_causal test_attention_bwd_atomic_dq test_attention_bwd_fp16 test_attention_bwd_strides test_attention_bwd_scores_and_scale test_attention_function_gradients test_attention_compiled_block test_attention_training_step
# expect-message: not written yet
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
    # YOUR CODE HERE
    raise NotImplementedError()

# %% append
class AttentionFunction(torch.autograd.Function):
    """Forged: torch computes the gradients, no kernel of mine runs in the backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, sm_scale=None, dq_mode="kernel"):
        ctx.save_for_backward(q, k, v)
        ctx.causal = causal
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    @staticmethod
    def backward(ctx, do):
        q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors)
        with torch.enable_grad():
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=ctx.causal)
            dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
        return dq, dk, dv, None, None, None


def op_attend(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

# The kernel is left unwritten and the wrapper is redefined with torch's scaled_dot_product_attention: the
# notebook's own comparison passes, but the tests launch the kernel itself.
# expect-fail: test_attention_full_tiles test_attention_ragged_seq test_attention_causal test_attention_causal_ragged test_attention_large_scores test_attention_fp16 test_attention_strides test_attention_scale_and_sum
# expect-message: not written yet
# replaces: attention_kernel
# other-solutions: source
@triton.jit
def _attention_tiles(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, seq_len, qk_scale,
                     lo, hi, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    # YOUR CODE HERE
    raise NotImplementedError()


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
    # YOUR CODE HERE
    raise NotImplementedError()

# %% append
def attention(q, k, v, causal=False, sm_scale=None, block_m=None, block_n=None):
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
    s = (q.float() @ k.float().transpose(-2, -1)) * (sm_scale or q.shape[-1] ** -0.5)
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


q, k, v = (torch.randn(1, 2, 50, 16) for _ in range(3))
print(compare(attention(q, k, v)[0], attention_ref(q, k, v)[0], atol=1e-4, rtol=1e-4, name="O")[1])

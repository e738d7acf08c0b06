# Masks computed once outside the loop for rows and columns, K handled with tl.where on the loaded tiles
# (masked loads still guard memory), and the store through a precomputed pointer block.
# expect-all-pass
@triton.jit
def triton_matmul_relu_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    m_in = m[:, None] < M
    n_in = n[None, :] < N
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    steps = (K + BLOCK_K - 1) // BLOCK_K
    for step in range(steps):
        k = step * BLOCK_K + kk
        a = tl.load(a_ptr + m[:, None] * stride_am + k[None, :] * stride_ak, mask=m_in & (k[None, :] < K))
        b = tl.load(b_ptr + k[:, None] * stride_bk + n[None, :] * stride_bn, mask=(k[:, None] < K) & n_in)
        a = tl.where(k[None, :] < K, a, 0.0)
        b = tl.where(k[:, None] < K, b, 0.0)
        total += tl.dot(a, b)
    c_ptrs = c_ptr + m[:, None] * stride_cm + n[None, :] * stride_cn
    tl.store(c_ptrs, tl.where(total > 0.0, total, 0.0).to(tl.float16), mask=m_in & n_in)

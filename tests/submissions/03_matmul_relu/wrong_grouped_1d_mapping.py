# Triton's matmul tutorial's grouped tile order kept as written for its 1-D grid: only tl.program_id(0) is read as
# the linear tile id, but the course launches a 2-D grid, so only the first cdiv(M, BLOCK_M) tiles of the grouped
# order are computed (each by every column of programs) and the others never written.
# expect-fail: test_matmul_relu_full_tiles test_matmul_relu_ragged_mn test_matmul_relu_ragged_k test_matmul_relu_small_k test_matmul_relu_relu_after_loop test_matmul_relu_negative_outputs test_matmul_relu_strides test_matmul_relu_tall_and_wide test_matmul_relu_block_sizes test_matmul_relu_larger
# expect-message: written for a 1-D grid
@triton.jit
def triton_matmul_relu_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    GROUP_SIZE_M: tl.constexpr = 8
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_idx = k * BLOCK_K + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + k_idx[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (k_idx[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k_idx[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(k_idx[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    c = tl.maximum(acc, 0.0)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

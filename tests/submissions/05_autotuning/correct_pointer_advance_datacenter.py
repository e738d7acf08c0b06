# Pointers advanced along K each step with int64 row offsets; the key in another order; one config flagged as
# datacenter-only (144 KB); softmax and vector add with num_stages set and other sizes.
# programs_per_sm as a dict of limits and the register allocation in warps.
# expect-all-pass
# replaces: programs_per_sm
MATMUL_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s)
    for bm, bn, bk, w, s in [
        (128, 128, 32, 4, 4),
        (128, 64, 32, 4, 4),
        (64, 128, 32, 4, 4),
        (64, 32, 32, 2, 5),
        (32, 64, 32, 2, 5),
    ]
]
MATMUL_DATACENTER_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
]


@triton.autotune(configs=MATMUL_CONFIGS + MATMUL_DATACENTER_CONFIGS, key=["K", "N", "M"])
@triton.jit
def triton_autotuned_matmul_relu_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, tl.maximum(acc, 0.0).to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


SOFTMAX_CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=w, num_stages=1)
                   for b in (128, 512, 2048) for w in (1, 8)]


@triton.autotune(configs=SOFTMAX_CONFIGS, key=["n_cols", "n_rows", "input_row_stride"])
@triton.jit
def triton_autotuned_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows,
                                           n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    in_row = input_ptr + row * input_row_stride
    out_row = output_ptr + row * output_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    m_i = tl.max(tl.full((BLOCK_SIZE,), -float("inf"), tl.float32), axis=0)
    l_i = tl.sum(tl.zeros((BLOCK_SIZE,), tl.float32), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(in_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m_i, tl.max(x, axis=0))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m_i = m_new
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(in_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_row + start + cols, tl.exp(x - m_i) / l_i, mask=mask)


VECTOR_ADD_CONFIGS = [
    triton.Config({"BLOCK_SIZE": 64}, num_warps=1, num_stages=1),
    triton.Config({"BLOCK_SIZE": 1024}, num_warps=8, num_stages=2),
]


@triton.autotune(configs=VECTOR_ADD_CONFIGS, key=["n_elements"])
@triton.jit
def triton_autotuned_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def programs_per_sm(registers, num_warps, shared_bytes, gpu=None):
    warps_of_registers = gpu["registers_per_sm"] // (-(-registers * 32 // 256) * 256)  # whole warps' worth
    limits = {"threads": gpu["threads_per_sm"] // (32 * num_warps), "registers": warps_of_registers // num_warps,
              "shared": gpu["shared_per_sm"] // (shared_bytes + 1024), "slots": gpu["programs_per_sm"]}
    return min(limits.values())

# The matmul's configs come from a nested comprehension filtered by the shared-memory budget; the key has an extra
# stride; the grouped order is computed in a @triton.jit helper with tl.minimum; no datacenter list at all.
# expect-all-pass
# replaces: autotuned_matmul_relu_kernel
# other-solutions: source
MATMUL_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g}, num_warps=w, num_stages=s)
    for bm in (32, 128) for bn in (64, 128) for bk in (32, 64) for g in (4,) for w in (4,) for s in (3, 4)
    if s * (bm * bk + bk * bn) * 2 <= 99 * 1024 and bm * bn <= 64 * 128
]


@triton.jit
def _tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * num_pid_n)
    first = group * GROUP_M
    rows = tl.minimum(num_pid_m - first, GROUP_M)
    local = pid - group * GROUP_M * num_pid_n
    return first + local % rows, local // rows


@triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K", "stride_am"])
@triton.jit
def triton_autotuned_matmul_relu_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
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
    c = tl.maximum(acc, 0.0).to(tl.float16)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

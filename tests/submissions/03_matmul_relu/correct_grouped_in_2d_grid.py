# Grouped tile order inside the 2-D grid (the linear id remapped by a @triton.jit helper), loads upcast to
# fp32 before tl.dot; scratch cells with warnings, stderr output and a plain helper function follow.
# expect-all-pass
@triton.jit
def _relu(x):
    return tl.maximum(x, 0.0)


@triton.jit
def triton_matmul_relu_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(1) * num_pid_m + tl.program_id(0)
    group = 2
    first_m = (pid // (group * num_pid_n)) * group
    size_m = min(num_pid_m - first_m, group)
    pid_m = first_m + (pid % (group * num_pid_n)) % size_m
    pid_n = (pid % (group * num_pid_n)) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        offs_k = k * BLOCK_K + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0).to(tl.float32)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, _relu(acc).to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
# %% append
import sys, warnings
warnings.warn("a learner's own warning")
print("scratch output", file=sys.stderr)
def helper_not_jit(a):
    return a

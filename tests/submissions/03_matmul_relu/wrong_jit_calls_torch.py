# A cheat: a @triton.jit function whose body calls torch (which a Triton kernel cannot do).
# expect-fail: test_matmul_relu_full_tiles test_matmul_relu_ragged_mn test_matmul_relu_ragged_k test_matmul_relu_small_k test_matmul_relu_relu_after_loop test_matmul_relu_negative_outputs test_matmul_relu_strides test_matmul_relu_tall_and_wide test_matmul_relu_block_sizes test_matmul_relu_larger
# expect-message: `torch` is not defined for the kernel
@triton.jit
def triton_matmul_relu_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    c_ptr.copy_(torch.relu(a_ptr.float() @ b_ptr.float()).half())

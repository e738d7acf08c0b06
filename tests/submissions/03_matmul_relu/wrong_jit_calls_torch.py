# A cheat: a @triton.jit function whose body calls torch (which a Triton kernel cannot do).
@triton.jit
def triton_matmul_relu_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    c_ptr.copy_(torch.relu(a_ptr.float() @ b_ptr.float()).half())

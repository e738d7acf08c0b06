# A cheat: an object that looks like a kernel (kernel[grid](...)) but computes relu(a @ b) with torch.
# expect-fail: test_matmul_relu_full_tiles test_matmul_relu_ragged_mn test_matmul_relu_ragged_k test_matmul_relu_small_k test_matmul_relu_relu_after_loop test_matmul_relu_negative_outputs test_matmul_relu_strides test_matmul_relu_tall_and_wide test_matmul_relu_block_sizes test_matmul_relu_larger
# expect-message: no @triton.jit function
class _Fake:
    def __getitem__(self, grid):
        def run(a, b, c, *args, **kwargs):
            c.copy_(torch.relu(a.float() @ b.float()).half())
        return run


triton_matmul_relu_kernel = _Fake()

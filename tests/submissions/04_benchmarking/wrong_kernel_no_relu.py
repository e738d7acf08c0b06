# The kernel forgets the ReLU: (x + bias) * scale.
# expect-fail: test_add_relu_mul_full_blocks test_add_relu_mul_ragged_sizes test_add_relu_mul_negative_scale test_add_relu_mul_fp16
# expect-message: there is no ReLU
# replaces: add_relu_mul_kernel
# other-solutions: source
@triton.jit
def triton_add_relu_mul_kernel(x_ptr, bias_ptr, output_ptr, scale, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements

    x = tl.load(x_ptr + offsets, mask=mask)
    bias = tl.load(bias_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, (x + bias) * scale, mask=mask)

# The scale is applied to x before the bias is added.
# expect-fail: test_add_relu_mul_full_blocks test_add_relu_mul_ragged_sizes test_add_relu_mul_negative_scale test_add_relu_mul_fp16
# expect-message: scale is applied before the bias
# replaces: add_relu_mul_kernel
# other-solutions: source
@triton.jit
def triton_add_relu_mul_kernel(x_ptr, bias_ptr, output_ptr, scale, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements

    x = tl.load(x_ptr + offsets, mask=mask)
    bias = tl.load(bias_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, tl.maximum(x * scale + bias, 0.0), mask=mask)

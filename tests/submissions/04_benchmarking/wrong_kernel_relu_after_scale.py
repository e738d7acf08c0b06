# The ReLU after the scale: relu((x + bias) * scale), right only for scales >= 0.
# expect-fail: test_add_relu_mul_negative_scale test_add_relu_mul_fp16
# expect-message: the ReLU comes after the scale
# replaces: add_relu_mul_kernel
# other-solutions: source
@triton.jit
def triton_add_relu_mul_kernel(x_ptr, bias_ptr, output_ptr, scale, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements

    x = tl.load(x_ptr + offsets, mask=mask)
    bias = tl.load(bias_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, tl.maximum((x + bias) * scale, 0.0), mask=mask)

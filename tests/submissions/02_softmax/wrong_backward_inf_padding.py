# Masked lanes of y and dy loaded as -inf (copied from the forward): the sum is NaN.
# expect-fail: test_softmax_backward_values test_softmax_backward_strided_rows
# expect-message: padded with something other than 0
# replaces: softmax_backward_kernel
# other-solutions: source
@triton.jit
def triton_softmax_backward_kernel(grad_input_ptr, output_ptr, grad_output_ptr, grad_input_row_stride,
                                   output_row_stride, grad_output_row_stride, n_rows, n_cols,
                                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    y = tl.load(output_ptr + row * output_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    dy = tl.load(grad_output_ptr + row * grad_output_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    tl.store(grad_input_ptr + row * grad_input_row_stride + cols, y * (dy - tl.sum(y * dy, axis=0)), mask=mask)

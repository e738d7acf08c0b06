# Masked lanes loaded as 0 instead of -inf: they count in the max and the sum.
# expect-fail: test_softmax_ragged_rows
# expect-message: padded with 0 instead of -inf
# replaces: softmax_kernel
# other-solutions: source
@triton.jit
def triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    tl.store(output_ptr + row * output_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=mask)

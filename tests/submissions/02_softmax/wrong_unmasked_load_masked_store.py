# The load has no mask: lanes past the row read the next row (or the guard) into the max and sum.
# expect-fail: test_softmax_ragged_rows
# expect-message: tl.load is not masked
# replaces: softmax_kernel
# other-solutions: source
@triton.jit
def triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(input_ptr + row * input_row_stride + cols, ).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    tl.store(output_ptr + row * output_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=mask)

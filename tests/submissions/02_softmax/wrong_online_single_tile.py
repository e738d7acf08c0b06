# The one-block kernel submitted as the online one: right only when the row fits in one tile.
# expect-fail: test_online_softmax_many_tiles test_online_softmax_large_values test_online_softmax_layouts
# expect-message: only the first tile of each row was written
# replaces: online_softmax_kernel
# other-solutions: source
@triton.jit
def triton_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                                 BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    tl.store(output_ptr + row * output_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=mask)

# Loops over n_cols // BLOCK_SIZE tiles: the last, partial tile is left out.
# expect-fail: test_online_softmax_many_tiles test_online_softmax_short_rows
# expect-message: last, partial tile is left out
# replaces: online_softmax_kernel
# other-solutions: source
@triton.jit
def triton_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                                 BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols // BLOCK_SIZE * BLOCK_SIZE, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(input_ptr + row * input_row_stride + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, n_cols // BLOCK_SIZE * BLOCK_SIZE, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(input_ptr + row * input_row_stride + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(output_ptr + row * output_row_stride + start + cols, tl.exp(x - m) / s, mask=mask)

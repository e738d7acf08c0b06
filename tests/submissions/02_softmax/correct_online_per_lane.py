# Per-lane running maxima and sums (started at a large finite negative number, so a lane masked in
# every tile stays harmless), combined across lanes at the end.
# expect-all-pass
# replaces: online_softmax_kernel
# other-solutions: source
@triton.jit
def triton_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                                 BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    m = tl.full((BLOCK_SIZE,), -1.0e30, tl.float32)
    s = tl.zeros((BLOCK_SIZE,), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(input_ptr + row * input_row_stride + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(s * tl.exp(m - m_row), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(input_ptr + row * input_row_stride + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(output_ptr + row * output_row_stride + start + cols, tl.exp(x - m_row) / s_row, mask=mask)

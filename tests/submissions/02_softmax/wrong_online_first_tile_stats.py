# The max and the sum come from the first tile; every tile is written.
# expect-fail: test_online_softmax_many_tiles test_online_softmax_large_values test_online_softmax_layouts
# expect-message: first tile only
# replaces: softmax_backward_kernel
@triton.jit
def triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    tl.store(output_ptr + row * output_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


@triton.jit
def triton_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                                 BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    m = -float("inf")
    s = 0.0
    for start in range(0, 1):
        mask = start + cols < n_cols
        x = tl.load(input_ptr + row * input_row_stride + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(input_ptr + row * input_row_stride + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(output_ptr + row * output_row_stride + start + cols, tl.exp(x - m) / s, mask=mask)


@triton.jit
def triton_softmax_backward_kernel(grad_input_ptr, output_ptr, grad_output_ptr, grad_input_row_stride,
                                   output_row_stride, grad_output_row_stride, n_rows, n_cols,
                                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    y = tl.load(output_ptr + row * output_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(grad_output_ptr + row * grad_output_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(grad_input_ptr + row * grad_input_row_stride + cols, y * (dy - tl.sum(y * dy, axis=0)), mask=mask)

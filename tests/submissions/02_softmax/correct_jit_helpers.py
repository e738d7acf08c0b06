# @triton.jit helpers shared by the kernels: a row-pointer helper, a tile update returning two values,
# and the backward's sum kept as a (1,)-shaped tensor with keep_dims.
# expect-all-pass
# replaces: softmax_backward_kernel
@triton.jit
def _row_start(ptr, row, stride):
    return ptr + row * stride


@triton.jit
def _update(m, s, x):
    m_new = tl.maximum(m, tl.max(x, axis=0))
    return m_new, s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)


@triton.jit
def triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                          BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(_row_start(input_ptr, tl.program_id(0), input_row_stride) + cols, mask=mask,
                other=-float("inf")).to(tl.float32)
    m, s = _update(-float("inf"), 0.0, x)
    tl.store(_row_start(output_ptr, tl.program_id(0), output_row_stride) + cols, tl.exp(x - m) / s, mask=mask)


@triton.jit
def triton_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                                 BLOCK_SIZE: tl.constexpr):
    in_row = _row_start(input_ptr, tl.program_id(0), input_row_stride)
    out_row = _row_start(output_ptr, tl.program_id(0), output_row_stride)
    cols = tl.arange(0, BLOCK_SIZE)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        x = tl.load(in_row + start + cols, mask=start + cols < n_cols, other=-float("inf")).to(tl.float32)
        m, s = _update(m, s, x)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(in_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_row + start + cols, tl.exp(x - m) / s, mask=mask)


@triton.jit
def triton_softmax_backward_kernel(grad_input_ptr, output_ptr, grad_output_ptr, grad_input_row_stride,
                                   output_row_stride, grad_output_row_stride, n_rows, n_cols,
                                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    y = tl.load(_row_start(output_ptr, row, output_row_stride) + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(_row_start(grad_output_ptr, row, grad_output_row_stride) + cols, mask=mask, other=0.0)
    y_dy = y * dy.to(tl.float32)
    total = tl.sum(y_dy, axis=0, keep_dims=True)
    tl.store(_row_start(grad_input_ptr, row, grad_input_row_stride) + cols, y_dy - y * total, mask=mask)

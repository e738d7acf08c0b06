# exp2 with log2(e), and several passes: the forward loads its row three times, the online kernel
# walks the row three times (max, sum, write), the backward rearranges dx = y*dy - y*sum(y*dy).
# expect-all-pass
# replaces: softmax_backward_kernel
@triton.jit
def triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                          BLOCK_SIZE: tl.constexpr):
    LOG2E: tl.constexpr = 1.4426950408889634
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    ptrs = input_ptr + row * input_row_stride + cols
    m = tl.max(tl.load(ptrs, mask=mask, other=-float("inf")).to(tl.float32), axis=0)
    s = tl.sum(tl.exp2((tl.load(ptrs, mask=mask, other=-float("inf")).to(tl.float32) - m) * LOG2E), axis=0)
    x = tl.load(ptrs, mask=mask, other=-float("inf")).to(tl.float32)
    tl.store(output_ptr + row * output_row_stride + cols, tl.exp2((x - m) * LOG2E) / s, mask=mask)


@triton.jit
def triton_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                                 BLOCK_SIZE: tl.constexpr):
    LOG2E: tl.constexpr = 1.4426950408889634
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    in_row = input_ptr + row * input_row_stride
    m = -float("inf")
    for start in range(0, n_cols, BLOCK_SIZE):
        x = tl.load(in_row + start + cols, mask=start + cols < n_cols, other=-float("inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(x, axis=0))
    s = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        x = tl.load(in_row + start + cols, mask=start + cols < n_cols, other=-float("inf")).to(tl.float32)
        s += tl.sum(tl.exp2((x - m) * LOG2E), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(in_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(output_ptr + row * output_row_stride + start + cols, tl.exp2((x - m) * LOG2E) / s, mask=mask)


@triton.jit
def triton_softmax_backward_kernel(grad_input_ptr, output_ptr, grad_output_ptr, grad_input_row_stride,
                                   output_row_stride, grad_output_row_stride, n_rows, n_cols,
                                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    y = tl.load(output_ptr + row * output_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(grad_output_ptr + row * grad_output_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    y_dy = y * dy
    tl.store(grad_input_ptr + row * grad_input_row_stride + cols, y_dy - y * tl.sum(y_dy, axis=0), mask=mask)

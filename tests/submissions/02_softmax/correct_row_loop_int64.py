# Each program loops over rows pid, pid + num_programs, ... (with the grid (n_rows,) that is one row),
# with int64 row offsets (the loop starts at an int64 program id; on the interpreter the loop
# variable is a Python int, so row.to(tl.int64) inside the loop would fail there).
# expect-all-pass
# replaces: softmax_backward_kernel
@triton.jit
def triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                          BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in range(tl.program_id(0).to(tl.int64), n_rows, tl.num_programs(0)):
        x = tl.load(input_ptr + row * input_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(output_ptr + row * output_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def triton_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                                 BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    for row in range(tl.program_id(0).to(tl.int64), n_rows, tl.num_programs(0)):
        in_row = input_ptr + row * input_row_stride
        out_row = output_ptr + row * output_row_stride
        m = -float("inf")
        s = 0.0
        for start in range(0, n_cols, BLOCK_SIZE):
            x = tl.load(in_row + start + cols, mask=start + cols < n_cols, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        for start in range(0, n_cols, BLOCK_SIZE):
            mask = start + cols < n_cols
            x = tl.load(in_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            tl.store(out_row + start + cols, tl.exp(x - m) / s, mask=mask)


@triton.jit
def triton_softmax_backward_kernel(grad_input_ptr, output_ptr, grad_output_ptr, grad_input_row_stride,
                                   output_row_stride, grad_output_row_stride, n_rows, n_cols,
                                   BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in range(tl.program_id(0).to(tl.int64), n_rows, tl.num_programs(0)):
        y = tl.load(output_ptr + row * output_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(grad_output_ptr + row * grad_output_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(grad_input_ptr + row * grad_input_row_stride + cols, y * (dy - tl.sum(y * dy, axis=0)), mask=mask)

# c1 and c2 divided by BLOCK_SIZE instead of n_cols: right where n_cols fills the block (the fp16 test), wrong on
# ragged rows. Before, the message gave the whole formula without naming the term.
# expect-fail: test_layer_norm_backward_dx test_layer_norm_backward_dw_db
# expect-message: divided by BLOCK_SIZE
# replaces: layer_norm_backward_kernel
# other-solutions: source
@triton.jit
def triton_layer_norm_backward_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_partial_ptr, db_partial_ptr,
    stride_row, n_rows, n_cols,
    ROWS_PER_PROGRAM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    db = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for i in range(ROWS_PER_PROGRAM):
        row = pid * ROWS_PER_PROGRAM + i
        if row < n_rows:
            x = tl.load(x_ptr + row * stride_row + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * stride_row + cols, mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(mean_ptr + row)
            rstd = tl.load(rstd_ptr + row)
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            wdy = w * dy
            c1 = tl.sum(xhat * wdy, axis=0) / BLOCK_SIZE
            c2 = tl.sum(wdy, axis=0) / BLOCK_SIZE
            dx = (wdy - (xhat * c1 + c2)) * rstd
            tl.store(dx_ptr + row * stride_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            dw += dy * xhat
            db += dy
    tl.store(dw_partial_ptr + pid * n_cols + cols, dw, mask=mask)
    tl.store(db_partial_ptr + pid * n_cols + cols, db, mask=mask)

# The kernel is left unwritten and the wrapper is redefined with torch.softmax: the tests launch the kernel.
# expect-fail: test_softmax_full_rows test_softmax_ragged_rows test_softmax_large_values test_softmax_strided_rows test_softmax_fp16
# expect-message: not written yet
# replaces: softmax_kernel
# other-solutions: source
@triton.jit
def triton_softmax_kernel(
    output_ptr,  # pointer to the output matrix (n_rows, n_cols)
    input_ptr,  # pointer to the input matrix (n_rows, n_cols)
    input_row_stride,  # elements between the starts of two input rows
    output_row_stride,  # elements between the starts of two output rows
    n_rows,  # number of rows (the grid has one program per row)
    n_cols,  # number of columns: the row length
    BLOCK_SIZE: tl.constexpr,  # a power of two >= n_cols: one block holds the whole row
):
    # YOUR CODE HERE
    raise NotImplementedError()


# %% append
def softmax(x):
    return torch.softmax(x, dim=-1)


print(softmax(torch.randn(2, 3)))

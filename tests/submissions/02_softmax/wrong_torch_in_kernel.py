# torch called inside a @triton.jit kernel: refused before anything runs.
# expect-fail: test_softmax_full_rows test_softmax_ragged_rows test_softmax_large_values test_softmax_strided_rows test_softmax_fp16
# expect-message: not defined for the kernel
# replaces: softmax_kernel
# other-solutions: source
@triton.jit
def triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                          BLOCK_SIZE: tl.constexpr):
    output_ptr.copy_(torch.softmax(input_ptr, dim=-1))

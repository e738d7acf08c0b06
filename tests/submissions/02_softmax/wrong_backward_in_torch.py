# The backward kernel is left unwritten and the autograd Function's backward is redefined with torch ops.
# expect-fail: test_softmax_backward_values test_softmax_backward_strided_rows
# expect-message: not written yet
# replaces: softmax_backward_kernel
# other-solutions: source
@triton.jit
def triton_softmax_backward_kernel(grad_input_ptr, output_ptr, grad_output_ptr, grad_input_row_stride,
                                   output_row_stride, grad_output_row_stride, n_rows, n_cols,
                                   BLOCK_SIZE: tl.constexpr):
    # YOUR CODE HERE
    raise NotImplementedError()


# %% append
class SoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = softmax(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return y * (dy - (y * dy).sum(dim=-1, keepdim=True))

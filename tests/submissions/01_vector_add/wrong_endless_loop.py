# The last program loops (practically) forever on fp16 inputs; every other launch is right, so only
# test_vector_add_fp16 (ragged, fp16) hangs: one test proves the limit stops it and costs only that test (each test
# that hangs waits for its whole scaled limit, so a fixture hanging in every ragged test cost four limits and the
# notebook's example cell, twice, in every class grading). The loop runs in fp32 (in fp16, `acc * 1.0000001` is
# `acc * 1.0` and a GPU compiler folds the loop away), changes the value every step by an fp32 multiply-add no
# compiler can fold (v -> v / 2 + 1: it settles at 2.0, but only by running), and the stored value depends on it.
# expect-fail: test_vector_add_fp16
# expect-message: did not finish
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    total = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    if output_ptr.dtype.element_ty == tl.float16:
        if (pid + 1) * BLOCK_SIZE > n_elements:
            acc32 = total.to(tl.float32)
            for i in range(0, 1 << 40):
                acc32 = acc32 * 0.5 + 1.0
            total = acc32.to(output_ptr.dtype.element_ty)
    tl.store(output_ptr + offsets, total, mask=mask)

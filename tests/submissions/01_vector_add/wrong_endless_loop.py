# The last program loops (practically) forever; the others are right. The loop changes the stored
# value, so a GPU compiler cannot drop it.
# expect-fail: test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
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
    acc = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    if (pid + 1) * BLOCK_SIZE > n_elements:
        for i in range(0, 1 << 40):
            acc = acc * 1.0000001
    tl.store(output_ptr + offsets, acc, mask=mask)

# Masked loads with other=0.0 and the mask inlined.
# expect-all-pass
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)
    y = tl.load(y_ptr + offsets, mask=offsets < n_elements, other=0.0)
    tl.store(output_ptr + offsets, x + y, mask=offsets < n_elements)

# int64 offsets (safe past 2**31 elements) and a @triton.jit helper for the sum.
# expect-all-pass
@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    block_start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(output_ptr + offsets, _add(tl.load(x_ptr + offsets, mask=mask), tl.load(y_ptr + offsets, mask=mask)),
             mask=mask)

# Reads far outside any tensor in ragged launches: the process dies (segfault on the interpreter; compute-sanitizer
# reports the invalid reads on a GPU). Both name an unmasked load.
# expect-fail: test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: unmasked load
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
    wild = offsets + (offsets >= n_elements).to(tl.int64) * (1 << 40)
    x = tl.load(x_ptr + wild)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)

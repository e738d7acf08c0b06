# The vector add's key is empty: tuned once, for the first size only.
# expect-fail: test_autotuned_vector_add_key
# expect-message: leaves out n_elements
# replaces: autotuned_vector_add_kernel
# other-solutions: source
VECTOR_ADD_CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b in (64, 256, 1024) for w in (1, 4, 8)]


@triton.autotune(configs=VECTOR_ADD_CONFIGS, key=[])
@triton.jit
def triton_autotuned_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)

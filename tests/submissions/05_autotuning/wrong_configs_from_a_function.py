# The configs come from a helper function: the grader takes only plain values (literals, comprehensions,
# triton.Config), so the list is missing when the kernels are checked.
# expect-fail: test_autotuned_vector_add_configs test_autotuned_vector_add_key test_autotuned_vector_add_every_config
# expect-message: VECTOR_ADD_CONFIGS
# replaces: autotuned_vector_add_kernel
# other-solutions: source
def vector_add_configs():
    return [triton.Config({"BLOCK_SIZE": b}, num_warps=4) for b in (128, 1024)]


VECTOR_ADD_CONFIGS = vector_add_configs()


@triton.autotune(configs=VECTOR_ADD_CONFIGS, key=["n_elements"])
@triton.jit
def triton_autotuned_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)

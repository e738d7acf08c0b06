# A right kernel beside a lint-clean module-level value of a million floats that the kernel names (in a branch that
# never runs): the runner sends every value the kernel uses to the judge, here 15 MB of JSON per test. Before issue 42
# the judge (outside the sandbox, unbounded) allocated and decoded whatever a runner sent, so one such line made each
# judge hold hundreds of MB and kept full marks; now the judge takes only what it asked for, within its bounds, and
# each test fails with the bound's message (tests/judged/test_judge_bounds.py (d) does it through run_test).
# expect-fail: test_vector_add_full_blocks test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: Your kernels' process sent
BLOCK_SIZES = [0.5] * 1_000_000


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
    mask = offsets < n_elements
    if n_elements < 0:
        output_ptr = output_ptr + BLOCK_SIZES[0]
    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)
# %% after-kernel
print(f"HOSTILE-RAN judge_memory: a value of {len(BLOCK_SIZES)} floats named by the kernel")

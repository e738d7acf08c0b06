# A right kernel that reads `torch` (in a branch that never runs), beside `torch = torch` in its solution cell: a
# decoy (issue 42). Before, the lint took `torch` for the learner's own configuration value and let the kernel
# through, while the grader's module gave it the real torch: the kernel reached a module the whitelist forbids, a
# lint walked around (full marks here: the kernel is right). Now a learner's definition named like a module or a name
# the grader provides is never taken, and a test whose definitions use it is refused, naming it: every test fails.
# The lint is the same code under either grader: graded by plain nbgrader only (LINT_REFUSED in tests/support/hostile_class.py).
# expect-fail: test_vector_add_full_blocks test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: `torch` is a name the grader provides (the module torch); rename your variable
torch = torch


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
        t = torch
    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)
# %% after-kernel
print("HOSTILE-RAN decoy_torch: `torch = torch`, and the kernel names torch")

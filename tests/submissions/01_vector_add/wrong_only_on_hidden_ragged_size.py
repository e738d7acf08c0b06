# Right on every size but one that only a hidden case uses (9973 elements, of test_vector_add_ragged_sizes), where
# it stores its size in every element: a message that quoted its values ("got 9973") or the case
# ("n_elements=9973") would show the learner that hidden input. Its feedback names the kind of case and the likely
# cause, and no number of the case (checking.Case; before, it showed "n_elements=9973, BLOCK_SIZE=128" and
# "got 9973"). tests/units/test_hidden_messages.py checks the absence.
# expect-fail: test_vector_add_ragged_sizes
# expect-message: Wrong values (a hidden case: a size that is not a multiple of BLOCK_SIZE
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
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = tl.where(n_elements == 9973, x * 0.0 + n_elements, x + y)
    tl.store(output_ptr + offsets, output, mask=mask)

"""Learner definitions the grader's own tests hand to the judge and the runner directly (not through a notebook):
a correct phase-1 kernel, and the test body that launches it, one copy for every tier that needs them."""
import textwrap

CORRECT_VECTOR_ADD = textwrap.dedent('''
    @triton.jit
    def triton_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                 mask=mask)
''')
LAUNCH_VECTOR_ADD = textwrap.dedent('''
    """Full blocks."""
    from tritoncourse.checks.vector_add import check_vector_add

    check_vector_add(triton_vector_add_kernel, n=1024, block_size=256)
''')

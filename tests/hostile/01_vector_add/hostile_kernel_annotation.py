# An empty kernel whose annotation of BLOCK_SIZE, run when the grader loads the kernel, patches Triton in the
# checking process so that every launch of a kernel adds x and y with torch instead of running it: the judge's
# checks would see right outputs. The lint reads the whole definition: an annotation may only name a member of
# triton.language.
# expect-fail: test_vector_add_full_blocks test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: the annotation of `BLOCK_SIZE` may only be a member of triton.language
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: exec(
        "import os\n"
        "if os.path.exists('{{course}}/gradebook.db'):\n"
        "    raise RuntimeError('UNSANDBOXED: the course is visible, so this hostile annotation does nothing')\n"
        "print('HOSTILE-RAN kernel_annotation: every launch now adds with torch', flush=True)\n"
        "from triton.runtime import interpreter, jit\n"
        "def launcher(kernel, grid):\n"
        "    return lambda x, y, out, n, *args, **kwargs: out.copy_(x + y)\n"
        "interpreter.InterpretedFunction.__getitem__ = jit.JITFunction.__getitem__ = launcher\n"
    ) or tl.constexpr,
):
    pass

# An empty kernel whose default value of BLOCK_SIZE, run when the grader loads the kernel, patches Triton in the
# checking process so that every launch of a kernel adds x and y with torch instead of running it: the judge's
# checks would see right outputs. The lint reads the whole definition: a default value must be a constant.
# expect-fail: test_vector_add_full_blocks test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: the default value of `BLOCK_SIZE` must be a constant
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr = exec(
        "import os\n"
        "if os.path.exists('{{course}}/gradebook.db'):\n"
        "    raise RuntimeError('UNSANDBOXED: the course is visible, so this hostile default does nothing')\n"
        "print('HOSTILE-RAN kernel_default: every launch now adds with torch', flush=True)\n"
        "from triton.runtime import interpreter, jit\n"
        "def launcher(kernel, grid):\n"
        "    return lambda x, y, out, n, *args, **kwargs: out.copy_(x + y)\n"
        "interpreter.InterpretedFunction.__getitem__ = jit.JITFunction.__getitem__ = launcher\n"
    ) or 1024,
):
    pass

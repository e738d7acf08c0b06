# An empty kernel decorated with `@jit`, a plain function of the same cell: run when the grader loads the kernel,
# it reaches Python's builtins through `torch.sys` and patches Triton in the checking process so that every launch
# of a kernel adds x and y with torch instead of running it, then returns triton.jit(fn). The lint reads the
# decorators too (exactly `@triton.jit`, under at most `@triton.autotune` with literal arguments), and a graded
# function may not reach a module other than math, statistics, torch and triton.language.
# expect-fail: test_vector_add_full_blocks test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: write the decorator right above `def` as `@triton.jit` (found `@jit`)
def jit(fn):
    python = torch.sys.modules["builtins"]
    python.exec(
        "import os\n"
        "if os.path.exists('{{course}}/gradebook.db'):\n"
        "    raise RuntimeError('UNSANDBOXED: the course is visible, so this hostile decorator does nothing')\n"
        "print('HOSTILE-RAN kernel_decorator: every launch now adds with torch', flush=True)\n"
        "from triton.runtime import interpreter, jit\n"
        "def launcher(kernel, grid):\n"
        "    return lambda x, y, out, n, *args, **kwargs: out.copy_(x + y)\n"
        "interpreter.InterpretedFunction.__getitem__ = jit.JITFunction.__getitem__ = launcher\n"
    )
    return triton.jit(fn)


@jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    pass

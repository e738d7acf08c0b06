"""Taking kernels from a notebook: only @triton.jit functions, solution cells first, linted."""
import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from tritoncourse.grading.isolated import PROVIDED, parse_cell
from tritoncourse.grading.source import assemble, kernels_from_notebook

KERNEL = '''@triton.jit
def triton_k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, _helper(offs), mask=offs < n)
'''
HELPER = '''@triton.jit
def _helper(v):
    return v * 2
'''


def _nb(*cells):
    nb = new_notebook()
    for src, solution in cells:
        c = new_code_cell(src)
        if solution:
            c.metadata["nbgrader"] = {"solution": True, "grade_id": "k"}
        nb.cells.append(c)
    return nb


def test_kernel_and_its_helpers_are_taken_in_dependency_order():
    kernels, plain = kernels_from_notebook(_nb((HELPER, False), ("import os\nx = 1\n" + KERNEL, True)))
    asm = assemble("check(triton_k)", kernels, plain, PROVIDED | {"check"})
    assert asm.problems == []
    assert asm.kernels == ["_helper", "triton_k"]
    assert "import os" not in asm.source and "x = 1" not in asm.source


def test_solution_cell_wins_over_a_later_scratch_cell():
    scratch = KERNEL.replace("v * 2", "v").replace("offs < n", "offs <= n")
    kernels, _ = kernels_from_notebook(_nb((KERNEL, True), (scratch, False), (HELPER, False)))
    assert "offs < n" in kernels["triton_k"].source


def test_missing_or_plain_function_is_reported():
    """A `triton_<op>_kernel` must be a @triton.jit function; a missing name is named."""
    kernels, plain = kernels_from_notebook(_nb(("def triton_k_kernel(x):\n    return x\n", True)))
    asm = assemble("triton_k_kernel", kernels, plain, PROVIDED)
    assert "without @triton.jit" in asm.problems[0]
    asm = assemble("triton_other_kernel", kernels, plain, PROVIDED)
    assert "no @triton.jit function named `triton_other_kernel`" in asm.problems[0]


def test_plain_functions_and_configs_come_from_solution_cells_only():
    """Graded Python functions and autotune configs are taken from solution cells, linted, in order."""
    sol = ("CONFIGS = [triton.Config({'BLOCK': b}, num_warps=w) for b in (64, 128) for w in (1, 2)]\n"
           "@triton.autotune(configs=CONFIGS, key=['n'])\n" + KERNEL.replace("_helper(offs)", "offs") +
           "def gbps(n_bytes, ms):\n    return n_bytes / (ms * 1e-3) / 1e9\n")
    kernels, plain = kernels_from_notebook(_nb((sol, True), ("def scratch(x):\n    return x\n", False)))
    assert kernels["CONFIGS"].kind == "value" and kernels["gbps"].kind == "function"
    assert "scratch" not in kernels
    asm = assemble("check(triton_k, gbps)", kernels, plain, PROVIDED | {"check"})
    assert asm.problems == [] and asm.kernels.index("CONFIGS") < asm.kernels.index("triton_k")
    assert "scratch" in assemble("scratch", kernels, plain, PROVIDED).problems[0]


def test_lint_rejects_tampering_plain_functions_and_configs():
    bad = {
        "def f():\n    import os\n": "Import",
        "def f():\n    torch.allclose = None\n": "assigning to `torch.allclose`",
        "def f():\n    return open('x')\n": "builtin `open`",
        "def f():\n    return torch.__dict__\n": "__dict__",
    }
    for src, expected in bad.items():
        kernels, plain = kernels_from_notebook(_nb((src, True)))
        problems = assemble("f", kernels, plain, PROVIDED).problems
        assert problems and expected in problems[0], (src, problems)
    tampering = "CONFIGS = __import__('os').system('true')\n"
    kernels, plain = kernels_from_notebook(_nb((tampering, True)))
    assert "CONFIGS" not in kernels


def test_lint_rejects_escapes_from_the_kernel():
    """Imports, dunder attributes, Python globals and deep tl attributes are refused before running."""
    bad = {
        "import os": "Import",
        "y = __import__('os')": "__import__",
        "y = x_ptr.__class__": "__class__",
        "y = tl.core.builtins": "not part of triton.language",
        "y = some_global": "not defined for the kernel",
        "y = [i for i in range(3)]": "ListComp",
        "y = open('f')": "builtin `open`",
    }
    for line, expected in bad.items():
        src = f"@triton.jit\ndef triton_k(x_ptr):\n    {line}\n"
        kernels, plain = kernels_from_notebook(_nb((src, True)))
        problems = assemble("triton_k", kernels, plain, PROVIDED).problems
        assert problems and expected in problems[0], (line, problems)


def test_lint_accepts_ordinary_kernels():
    src = ("@triton.jit\ndef triton_k(x_ptr, n, B: tl.constexpr):\n"
           "    acc = tl.zeros((B,), dtype=tl.float32)\n"
           "    for i in range(0, n, B):\n"
           "        acc += tl.load(x_ptr + i + tl.arange(0, B), mask=i + tl.arange(0, B) < n, other=0.0)\n"
           "    y = tl.math.exp2(acc.to(tl.float32)) + math.pi\n"
           "    tl.store(x_ptr + tl.arange(0, B), tl.maximum(y, 0.0))\n")
    kernels, plain = kernels_from_notebook(_nb((src, True)))
    assert assemble("triton_k", kernels, plain, PROVIDED).problems == []


def test_untouched_stub_says_not_written():
    src = "@triton.jit\ndef triton_k(x_ptr):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
    kernels, plain = kernels_from_notebook(_nb((src, True)))
    assert "not written yet" in assemble("triton_k", kernels, plain, PROVIDED).problems[0]


def test_magic_lines_and_unparsable_cells_are_skipped():
    kernels, _ = kernels_from_notebook(_nb(("%matplotlib inline\n" + KERNEL, True), ("def broken(:", False)))
    assert "triton_k" in kernels


def test_parse_cell_reads_timeout():
    assert parse_cell("%%kernel_test --timeout 30\nx = 1\n") == ({"timeout": 30.0}, "x = 1\n")
    assert parse_cell("x = 1") is None
    restored = "# This cell was missing from the submission.\n\n%%kernel_test\nx = 1\n"
    assert parse_cell(restored) == ({"timeout": 120.0}, "x = 1\n")

"""The lint decides alone: no decoys (issue 42). A learner's definition named like a module the kernel header imports,
a builtin, a dunder name or a name the grader provides (whitelist.shadowing) made the lint read a name one way and
the grader run it another: `torch = torch` in a solution cell was taken as the learner's configuration value, so a
kernel could name `torch` and pass the lint, while the grader's module (never replaced) gave it the real torch; a
function named `range` or `abs` that a graded function used was assembled, and so stood for the builtin in the
judge's namespace, where the test cell runs. Each is refused now, naming the definition and what the name is; every
source solution and correct fixture still passes (test_source's test_reference_solutions_pass_the_lint and
test_correct_fixtures_pass_the_lint).
"""
from __future__ import annotations

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tritoncourse.grading.processes.isolated import PROVIDED
from tritoncourse.grading.lint.source import assemble, kernels_from_notebook
from tritoncourse.grading.lint.whitelist import shadowing


def _assemble(src: str, name: str):
    nb = new_notebook()
    cell = new_code_cell(src)
    cell.metadata["nbgrader"] = {"solution": True, "grade_id": "k"}
    nb.cells.append(cell)
    kernels, plain = kernels_from_notebook(nb)
    return assemble(name, kernels, plain, PROVIDED)


def _kernel(line: str, args: str = "x_ptr, n, BLOCK: tl.constexpr") -> str:
    return (f"@triton.jit\ndef triton_k({args}):\n    {line}\n"
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
            "    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)\n")


GRADED = "def gbps(n_bytes, ms):\n    {line}\n    return n_bytes / (ms * 1e-3) / 1e9\n"

# (a top-level definition, the graded definition that uses it, its name, the words of the refusal)
TOP_LEVEL = {
    "torch value in a kernel": ("torch = torch\n" + _kernel("t = torch"), "triton_k",
                                "`torch` is a name the grader provides (the module torch); rename your variable"),
    "tl function": ("def tl(x):\n    return x\n" + _kernel("pass"), "triton_k",
                    "`tl` is a name the grader provides (the module triton.language); rename your function"),
    "math kernel": ("@triton.jit\ndef math(x):\n    return x\n" + _kernel("y = math.pi"), "triton_k",
                    "`math` is a name the grader provides (the module math); rename your kernel"),
    "DEVICE value": ("DEVICE = 'cpu'\n" + _kernel("y = DEVICE"), "triton_k",
                     "`DEVICE` is a name the grader provides (the device the tests run on); rename your variable"),
    "len value in a kernel": ("len = 4\n" + _kernel("y = len(x_ptr.shape)"), "triton_k",
                              "`len` is a Python builtin; rename your variable"),
    "range function in a graded function": ("def range(*a):\n    return []\n" +
                                            GRADED.format(line="r = [1 for _ in range(3)]"), "gbps",
                                            "`range` is a Python builtin; rename your function"),
    "abs function in a graded function": ("def abs(x):\n    return 0\n" + GRADED.format(line="r = abs(ms)"),
                                          "gbps", "`abs` is a Python builtin; rename your function"),
    "getattr value in a kernel": ("getattr = 1\n" + _kernel("y = getattr"), "triton_k",
                                  "`getattr` is a builtin the grader forbids; rename your variable"),
    "statistics value in a graded function": ("statistics = [1]\n" + GRADED.format(line="r = statistics"), "gbps",
                                              "`statistics` is a name the grader provides (the module statistics)"),
}


@pytest.mark.parametrize("src,name,words", TOP_LEVEL.values(), ids=TOP_LEVEL.keys())
def test_a_top_level_decoy_is_refused_and_never_taken(src, name, words):
    """Before: each of these assembled without a problem (the decoy taken, or known to the lint as the learner's
    while the grader ran its own module)."""
    asm = _assemble(src, name)
    assert any(words in p and "which your notebook defines" in p for p in asm.problems), asm.problems
    decoy = words.split("`")[1]
    assert decoy not in asm.kernels and f"def {decoy}(" not in asm.source and f"{decoy} = " not in asm.source


def test_a_decoy_nothing_graded_uses_costs_nothing():
    """A definition of such a name that no graded definition reaches changes nothing the grader runs."""
    asm = _assemble("def max(a, b):\n    return a\n" + _kernel("y = tl.maximum(x_ptr, 0)"), "triton_k")
    assert asm.problems == [] and asm.kernels == ["triton_k"]


# Inside a kernel: every place a kernel binds a name (assignment targets, loop targets, arguments).
KERNEL_BINDINGS = {
    "assign torch": (_kernel("torch = x_ptr"), "`torch` cannot be assigned inside a Triton kernel"),
    "assign DEVICE": (_kernel("DEVICE = 0"), "`DEVICE` cannot be assigned"),
    "augmented": (_kernel("max = 0\n    max += 1"), "`max` cannot be assigned inside a Triton kernel: it is a Python "
                                                    "builtin; rename your variable"),
    "annotated": (_kernel("getattr: tl.constexpr = 1"), "`getattr` cannot be assigned"),
    "tuple target": (_kernel("a, statistics = 1, 2"), "`statistics` cannot be assigned"),
    "loop target": (_kernel("for len in range(3):\n        pass"), "`len` cannot be assigned"),
    "dunder": (_kernel("__builtins__ = 0"), "`__builtins__` cannot be assigned"),
    "argument": (_kernel("pass", "x_ptr, n, torch, BLOCK: tl.constexpr"), "an argument cannot be called `torch`"),
    "builtin argument": (_kernel("pass", "x_ptr, n, range, BLOCK: tl.constexpr"),
                         "an argument cannot be called `range`: it is a Python builtin; rename it"),
}


@pytest.mark.parametrize("src,words", KERNEL_BINDINGS.values(), ids=KERNEL_BINDINGS.keys())
def test_a_kernel_binds_no_name_the_grader_provides(src, words):
    asm = _assemble(src, "triton_k")
    assert any(words in p for p in asm.problems), asm.problems


# Inside a graded function: every scope and every way Python binds a name.
FUNCTION_BINDINGS = {
    "assign": "DEVICE = 0",
    "loop": "for sum in (1,):\n        pass",
    "with": "with ms as torch:\n        pass",
    "walrus": "r = (len := 3)",
    "comprehension": "r = [math for math in (1,)]",
    "lambda argument": "g = lambda range: range",
    "nested def": "def abs(v):\n        return v",
    "except name": "try:\n        pass\n    except ValueError as tl:\n        pass",
    "argument": None,
}


@pytest.mark.parametrize("line", FUNCTION_BINDINGS.values(), ids=FUNCTION_BINDINGS.keys())
def test_a_graded_function_binds_no_name_the_grader_provides(line):
    src = "def gbps(n_bytes, ms, min=1):\n    return n_bytes\n" if line is None else GRADED.format(line=line)
    asm = _assemble(src, "gbps")
    assert any("cannot name a variable or an argument in a graded function: it is " in p and "rename it" in p
               for p in asm.problems), asm.problems


def test_shadowing_names_what_each_name_is():
    assert shadowing("torch") == "a name the grader provides (the module torch)"
    assert shadowing("check", provided={"check"}) == "a name the grader provides"
    assert shadowing("__name__") == "a name Python itself defines"
    assert shadowing("open") == "a builtin the grader forbids" and shadowing("zip") == "a Python builtin"
    assert shadowing("row_max") is None and shadowing("BLOCK_SIZE") is None and shadowing("DEVICE_ID") is None

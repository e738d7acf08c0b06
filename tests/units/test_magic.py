"""The learner's %%kernel_test in the notebook takes what the grader takes, and an unfilled stub reads the same
on the CPU and on a GPU (issue 29's traps)."""
from __future__ import annotations

import ast

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell
from triton import CompilationError
from triton.compiler.errors import UnsupportedLanguageConstruct

from tritoncourse.checks.common.launch import explain_launch_error
from tritoncourse.learner import magic

SOLUTION = "@triton.jit\ndef triton_k_kernel(x_ptr, n):\n    tl.store(x_ptr, 1.0)\n"
SCRATCH = "@triton.jit\ndef triton_k_kernel(x_ptr, n):\n    tl.store(x_ptr, 2.0)\n"
STUB = "@triton.jit\ndef triton_k_kernel(x_ptr, n):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"


@pytest.fixture
def release(tmp_path):
    """A released notebook: a solution cell `k-cell` (grade_id k_kernel) and a scratch cell."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(STUB, id="k-cell", metadata={"nbgrader": {"solution": True, "grade": False,
                                                                          "grade_id": "k_kernel"}}),
        nbformat.v4.new_code_cell("", id="scratch"),
        nbformat.v4.new_code_cell("%%kernel_test\ntriton_k_kernel", id="test-k")])
    (tmp_path / "01_k").mkdir()
    nbformat.write(nb, tmp_path / "01_k" / "01_k.ipynb")
    return tmp_path


def test_a_kernel_redefined_in_a_scratch_cell_is_tested_from_its_solution_cell_with_a_warning(release):
    """A fix made in a scratch cell is not what the grader takes: the notebook's test takes the solution cell's
    definition too, and says so loudly."""
    kernels, _, warnings = magic.kernels_as_graded(["", SOLUTION, SCRATCH], {1: "k-cell", 2: "scratch"}, release)
    assert "1.0" in kernels["triton_k_kernel"].source and kernels["triton_k_kernel"].cell == "k_kernel"
    assert "solution cell `k_kernel`" in warnings["triton_k_kernel"], warnings


def test_the_solution_cell_run_last_gives_no_warning(release):
    kernels, _, warnings = magic.kernels_as_graded(["", SCRATCH, SOLUTION], {1: "scratch", 2: "k-cell"}, release)
    assert "1.0" in kernels["triton_k_kernel"].source and warnings == {}


def test_a_kernel_run_only_from_a_scratch_cell_is_flagged(release):
    kernels, _, warnings = magic.kernels_as_graded(["", SCRATCH], {1: "scratch"}, release)
    assert "not its solution cell" in warnings["triton_k_kernel"]


def test_without_cell_ids_the_last_definition_wins_as_before(release):
    kernels, _, warnings = magic.kernels_as_graded(["", SOLUTION, SCRATCH], {}, release)
    assert "2.0" in kernels["triton_k_kernel"].source and warnings == {}


def test_the_shell_records_which_cell_each_input_came_from():
    ip = InteractiveShell.instance()
    magic.register(ip)
    ip.run_cell("x_recorded = 1", store_history=True, cell_id="the-cell")
    index = ip.history_manager.input_hist_raw.index("x_recorded = 1")
    assert magic._CELL_IDS[index] == "the-cell"


def _compile_error_of_the_stub() -> CompilationError:
    """What Triton's compiler raises on a GPU for an unfilled stub (built here, on the CPU): triton 3.6 raises the
    subclass UnsupportedLanguageConstruct (seen on an H200)."""
    node = next(n for n in ast.walk(ast.parse(STUB)) if isinstance(n, ast.Raise))
    return UnsupportedLanguageConstruct(STUB, node, "unsupported AST node type: Raise")


def _cpu_error_of_the_stub() -> NotImplementedError:
    namespace = {}
    exec(compile("def triton_k_kernel(x_ptr, n):\n    raise NotImplementedError()\n", "<ipython-input-1>", "exec"),
         namespace)
    try:
        namespace["triton_k_kernel"](None, 1)
    except NotImplementedError as err:
        return err


def test_an_unfilled_stub_reads_the_same_on_the_cpu_and_on_a_gpu(monkeypatch):
    """The learner sees one NotImplementedError line, whether the interpreter ran the stub or Triton's compiler
    refused it."""
    ip = InteractiveShell.instance()
    shown = []
    monkeypatch.setattr(ip, "_showtraceback", lambda etype, value, stb: shown.append((etype, str(value), stb)))
    for err in (_cpu_error_of_the_stub(), _compile_error_of_the_stub()):
        magic._stub_handler(ip, type(err), err, err.__traceback__)
    assert len(shown) == 2 and shown[0] == shown[1], shown
    assert shown[0][0] is NotImplementedError and "`triton_k_kernel` is not written yet" in shown[0][2][0]


def test_a_stub_run_in_the_shell_shows_its_line_and_stops_run_all(capsys):
    """Through IPython itself: the line is shown (IPython does not show what a handler returns) and the cell
    still fails, so Run All stops there as before."""
    ip = InteractiveShell.instance()
    magic.register(ip)
    result = ip.run_cell("def triton_k_kernel():\n    raise NotImplementedError()\ntriton_k_kernel()")
    assert isinstance(result.error_in_exec, NotImplementedError)
    assert "`triton_k_kernel` is not written yet" in capsys.readouterr().out
    result = ip.run_cell("raise NotImplementedError('an op torch lacks')")
    out = capsys.readouterr().out
    assert "an op torch lacks" in out and "not written yet" not in out, out


def test_other_errors_keep_their_traceback():
    """torch's own NotImplementedError (an unsupported op) and other compile errors are not a stub."""
    assert magic.stub_name(NotImplementedError("aten::foo is not implemented for 'CUDA'")) is None
    node = ast.parse("x = 1").body[0]
    assert magic.stub_name(CompilationError("def f():\n    x = 1\n", node, "unsupported AST node type: While")) is None


def test_the_checks_say_not_written_for_the_gpus_compile_error():
    message = str(explain_launch_error(_compile_error_of_the_stub(), "triton_k_kernel", "triton_k_kernel(x_ptr, n)",
                                       "n = 1"))
    assert "not written yet" in message, message


def test_the_notebooks_test_runs_the_solution_cells_kernel_and_warns(capsys):
    """Phase 1 in a shell, as JupyterLab runs it (cell ids sent): the reference kernel in its solution cell, then
    a broken copy in a scratch cell. The test runs the solution cell's kernel (and passes, as the grader's would)
    and says loudly that the kernel last run is not the one graded."""
    source = nbformat.read(magic.ROOT / "source" / "01_vector_add" / "01_vector_add.ipynb", as_version=4)
    kernel = next(c.source for c in source.cells if c.get("id") == "vector-add-kernel")
    ip = InteractiveShell.instance()
    magic.register(ip)
    ip.run_cell("import triton\nimport triton.language as tl", store_history=True, cell_id="setup")
    reference = "".join(line for line in kernel.splitlines(keepends=True) if "### " not in line)
    ip.run_cell(reference, store_history=True, cell_id="vector-add-kernel")
    broken = kernel.split("### BEGIN SOLUTION")[0].rstrip() + "\n    pass\n"
    ip.run_cell(broken, store_history=True, cell_id="a-scratch-cell-of-mine")
    capsys.readouterr()
    result = ip.run_cell("%%kernel_test\nfrom tritoncourse.checks.vector_add import check_vector_add\n"
                         "check_vector_add(triton_vector_add_kernel, n=33, block_size=32)\n",
                         store_history=True, cell_id="test-vector-add-ragged-sizes")
    out = capsys.readouterr().out
    assert result.error_in_exec is None, out
    assert "WARNING: the grader will not test what you last ran" in out and "`vector_add_kernel`" in out, out


def _gpu() -> bool:
    import os

    import torch
    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


@pytest.mark.skipif(not _gpu(), reason="needs a GPU with Triton compiling (the CPU's case is the test above)")
def test_a_real_stub_launched_on_a_gpu_shows_the_same_line(capsys):
    """On a GPU, Triton's own compiler refuses the stub's `raise`: the learner still reads the CPU's line."""
    ip = InteractiveShell.instance()
    magic.register(ip)
    result = ip.run_cell("import torch, triton, triton.language as tl\n" + STUB +
                         "triton_k_kernel[(1,)](torch.zeros(1, device='cuda'), 1)\n")
    assert result.error_in_exec is not None, "the cell must still fail, so Run All stops there"
    assert "`triton_k_kernel` is not written yet" in capsys.readouterr().out


def test_a_practice_check_says_it_has_no_points_when_graded(monkeypatch, capsys):
    """Graded test cells never reach the learner's kernel during grading (the grader replaces them); one that does
    is a practice check (phase 6's step 1) and says so, rather than promising a verdict that never comes."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    magic.kernel_test("", "test_step_one")
    out = capsys.readouterr().out
    assert "practice check without points" in out and "verdict" not in out, out

"""Phase 2's checks, in-process and fast: guard buffers with strided rows, the references, and whether
each known mistake of tests/submissions/02_softmax/ is named by its first failing test.

The real grader (fresh processes, nbgrader) judges the same submissions in test_grading.py; here the
kernels run in this process, so the fixtures that must crash it (unmasked loads caught by the fence)
and the ones refused before running (lint) are left to test_grading.py.
"""
import importlib.util
import math

import matplotlib
import nbformat
import pytest
import torch
import triton
import triton.language as tl

from course import ROOT, fixtures
from tritoncourse.checking import KernelCheckError
from tritoncourse.checks.softmax import (UNWRITTEN, Rows, check_online_softmax, check_softmax,
                                         check_softmax_backward, softmax_backward_ref)
from tritoncourse.grading.processes.isolated import KERNEL_HEADER, PROVIDED, parse_cell
from tritoncourse.grading.lint.source import assemble, kernels_from_notebook

matplotlib.use("Agg")
ASSIGNMENT = "02_softmax"
SOURCE = ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
# Fixtures that only a fresh process can judge: they crash it on purpose, or never run.
NEEDS_PROCESS = {"wrong_unmasked_load_where", "wrong_torch_in_kernel", "wrong_wrapper_in_torch",
                 "wrong_backward_in_torch"}


def test_rows_place_strided_rows_inside_a_guard():
    """Rows are `stride` apart; the gaps and both ends are guard; a stray store is found and described."""
    rows = Rows(3, 4, stride=6, dtype=torch.float32, device="cpu", fill=-1.0, pad_before=2, pad_after=3)
    assert rows.view.stride() == (6, 1)
    assert (rows.view == UNWRITTEN).all()
    assert rows.stray() == []
    rows.buffer[2 + 4] = 0.0  # just right of row 0, in the gap
    rows.buffer[2 + 2 * 6 + 4] = 0.0  # just right of the last row
    rows.buffer[0] = 0.0  # two elements before row 0
    assert rows.stray() == [-2, 4, 16]
    assert [rows.where(o) for o in rows.stray()] == ["2 elements before row 0", "row 0, column 4",
                                                     "row 2, column 4"]
    contiguous = Rows(2, 3, stride=3, dtype=torch.float32, device="cpu", fill=-1.0)
    assert contiguous.where(6) == "just past the end of the last row"


def test_rows_read_replays_a_kernel_with_another_stride():
    """What a kernel using n_cols as the stride would load: row 1 starts in the NaN gap after row 0."""
    x = torch.arange(12.0).reshape(3, 4)
    rows = Rows.copy_of(x, stride=5, device="cpu")
    assert torch.equal(rows.read(5, 4), x.double())
    nan = float("nan")
    expected = torch.tensor([[0, 1, 2, 3], [nan, 4, 5, 6], [7, nan, 8, 9]], dtype=torch.float64)
    assert torch.allclose(rows.read(4, 4), expected, equal_nan=True)


def test_backward_reference_is_torch_autograd():
    """The backward's reference equals torch.autograd through torch.softmax."""
    x = torch.randn(5, 17, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(5, 17, dtype=torch.float64)
    y = torch.softmax(x, dim=-1)
    (dx,) = torch.autograd.grad(y, x, dy)
    assert torch.allclose(softmax_backward_ref(y.detach(), dy), dx, atol=1e-12, rtol=1e-12)


def _load_kernels(nb, test_source, tmp_path, name):
    kernels, plain = kernels_from_notebook(nb)
    asm = assemble(test_source, kernels, plain, PROVIDED)
    assert asm.problems == [], asm.problems
    path = tmp_path / f"{name}.py"
    path.write_text(KERNEL_HEADER + asm.source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {k: getattr(module, k) for k in asm.kernels}


def _test_cells():
    nb = nbformat.read(SOURCE, as_version=4)
    return {c.metadata.nbgrader["grade_id"]: parse_cell(c.source)[1] for c in nb.cells
            if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")
            and parse_cell(c.source)}


def test_reference_kernels_pass_small_checks(tmp_path):
    """The notebook's own kernels pass one small check of each kind."""
    nb = nbformat.read(SOURCE, as_version=4)
    names = "triton_softmax_kernel, triton_online_softmax_kernel, triton_softmax_backward_kernel"
    k = _load_kernels(nb, names, tmp_path, "reference")
    check_softmax(k["triton_softmax_kernel"], 3, 37, data="negative")
    check_softmax(k["triton_softmax_kernel"], 3, 64, dtype=torch.float16, strided=True)
    check_online_softmax(k["triton_online_softmax_kernel"], 2, 100, 32, data="plus1000")
    check_online_softmax(k["triton_online_softmax_kernel"], 2, 5, 16, strided=True)
    check_softmax_backward(k["triton_softmax_backward_kernel"], 3, 50, strided=True)


def _wrong_fixtures():
    return [pytest.param(fx, id=fx.name) for fx in fixtures(ASSIGNMENT)
            if not fx.all_pass and fx.name not in NEEDS_PROCESS]


@pytest.mark.parametrize("fixture", _wrong_fixtures())
def test_first_failing_test_names_the_mistake(fixture, tmp_path):
    """The first test a known-wrong submission must fail does fail, with the expected likely cause."""
    cells = _test_cells()
    first = next(t for t in cells if t in fixture.expect_fail)
    # The reference notebook with the fixture's cell in place of the reference's.
    source = nbformat.read(SOURCE, as_version=4)
    nb = fixture.notebook(source, source)
    ns = {"torch": torch, "triton": triton, "tl": tl, "math": math, "DEVICE": "cpu"}
    ns.update(_load_kernels(nb, cells[first], tmp_path, fixture.name))
    with pytest.raises(KernelCheckError) as err:
        exec(compile(cells[first], first, "exec"), ns)
    assert fixture.expect_message.lower() in str(err.value).lower(), str(err.value)
    assert "seed" in str(err.value)


def test_widget_replays_the_online_softmax():
    """The widget's steps end with log(s) + m = logsumexp(row), and the picture draws for short rows."""
    from tritoncourse.widgets.softmax import draw_online_softmax, online_softmax_steps, sample_row, steps_table

    row = sample_row("increasing (the max grows in every tile)", 37)
    steps = online_softmax_steps(row, 8)
    assert len(steps) == 5 and steps[-1]["masked"] == 3
    assert all(st["scale"] < 1 for st in steps[1:])  # the max grows in every tile: every tile rescales
    assert math.isclose(math.log(steps[-1]["s"]) + steps[-1]["m"], torch.logsumexp(row, 0).item(), rel_tol=1e-12)
    assert "running sum" in steps_table(steps)
    draw_online_softmax(sample_row("all negative", 3), 8)

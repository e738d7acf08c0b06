"""ResilientExecute on notebooks whose code never ends: a cell that ignores the interrupt (as a process waiting
inside a GPU kernel that never ends does) stops the notebook there instead of costing every later cell its
own time limit."""
from __future__ import annotations

import time

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from tritoncourse.grading.autograde.nbgrader_plugin import ResilientExecute


def _run(*sources: str):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    ex = ResilientExecute(timeout=4, probe_timeout=4)
    resources = {}
    start = time.time()
    nb, resources = ex.preprocess(nb, resources)
    return nb, resources, time.time() - start


def _enames(cell):
    return [o.get("ename") for o in cell.outputs if o.output_type == "error"]


def test_interruptible_endless_cell_lets_later_cells_run():
    nb, resources, _ = _run("print('before')", "while True:\n    pass", "print('after')")
    assert "CellTimeoutError" in _enames(nb.cells[1])
    assert "UnresponsiveKernel" not in _enames(nb.cells[1])
    assert any("after" in o.get("text", "") for o in nb.cells[2].outputs), nb.cells[2].outputs
    assert "kernel_died_at" not in resources.get("tritoncourse", {})


def test_uninterruptible_endless_cell_stops_the_notebook():
    stuck = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    nb, resources, seconds = _run("print('before')", stuck, "print('after')", "print('later')")
    assert "UnresponsiveKernel" in _enames(nb.cells[1]), nb.cells[1].outputs
    assert nb.cells[2].outputs == [] and nb.cells[3].outputs == []
    assert resources["tritoncourse"]["kernel_died_at"] == 1
    assert seconds < 60, f"took {seconds:.0f} s: later cells waited out their time limits"

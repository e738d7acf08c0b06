"""The ``%%kernel_test`` cell magic: a test cell that runs in a fresh process.

In the learner's notebook the magic takes the kernels from the session's input history (the cells as
last run, parsed the way the grader parses the saved file) and runs the cell's test against them in a fresh process: a crash or an endless loop in a
kernel never takes the notebook down. During ``nbgrader autograde`` it does nothing: the course's
preprocessor runs the same test outside the notebook, on the kernels of the submitted file.
"""
from __future__ import annotations

import os

from ..grading.isolated import MAGIC, run_cell
from ..grading.source import kernels_from_history


class KernelTestFailed(Exception):
    """Raised in the notebook when a kernel test fails; shows the message without a traceback."""

    def _render_traceback_(self):
        return ["\x1b[0;31mKernelTestFailed\x1b[0m: " + str(self)]


def kernel_test(line: str, cell: str) -> None:
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        print("Graded in a fresh process outside this notebook (see the verdict in your feedback).")
        return
    from IPython import get_ipython

    # The definitions as last run: the session's raw input history, oldest first.
    kernels, plain = kernels_from_history(get_ipython().history_manager.input_hist_raw)
    outcome = run_cell(f"{MAGIC} {line}\n{cell}", kernels, plain)
    if outcome.ok:
        print(outcome.report())
    else:
        raise KernelTestFailed(outcome.report())


def register(ip) -> None:
    ip.register_magic_function(kernel_test, magic_kind="cell", magic_name=MAGIC.lstrip("%"))

"""The ``%%kernel_test`` cell magic: a test cell that runs in a fresh process.

In the learner's notebook the magic takes the kernels from the notebook's namespace (the cells as
last run) and runs the cell's test against them in a fresh process: a crash or an endless loop in a
kernel never takes the notebook down. During ``nbgrader autograde`` it does nothing: the course's
preprocessor runs the same test outside the notebook, on the kernels of the submitted file.
"""
from __future__ import annotations

import os

from .isolated import MAGIC, run_cell
from .source import kernels_from_namespace


class KernelTestFailed(Exception):
    """Raised in the notebook when a kernel test fails; shows the message without a traceback."""

    def _render_traceback_(self):
        return ["\x1b[0;31mKernelTestFailed\x1b[0m: " + str(self)]


def kernel_test(line: str, cell: str) -> None:
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        print("Graded in a fresh process outside this notebook (see the verdict in your feedback).")
        return
    from IPython import get_ipython

    kernels, plain = kernels_from_namespace(get_ipython().user_ns)
    outcome = run_cell(f"{MAGIC} {line}\n{cell}", kernels, plain)
    if outcome.ok:
        print(outcome.report())
    else:
        raise KernelTestFailed(outcome.report())


def register(ip) -> None:
    ip.register_magic_function(kernel_test, magic_kind="cell", magic_name=MAGIC.lstrip("%"))

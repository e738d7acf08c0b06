"""Where private gradings run: the seam between the grading loop (``grader.Grader``) and its executors.

An executor's ``submit`` returns a ``concurrent.futures.Future`` of a ``RunResult`` whose private course lies in the
grader's work folder, ready for ``Grader.merge``, which only the grading process calls. :class:`LocalExecutor`
runs them in threads of this process; ``distributed.DaskExecutor`` on a Dask cluster.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .tasks import Task

class GradingStopped(Exception):
    """Grading cannot go on (its cluster is gone for good): it stops as on Ctrl-C, and a rerun goes on."""


class LocalExecutor:
    """Where private gradings run by default: ``jobs`` threads of this process, each running
    :meth:`Grader.run_one` (a private ``nbgrader autograde`` on this machine).

    The seam for other executors (``distributed.DaskExecutor``): ``submit`` returns a ``concurrent.futures.Future``
    of a :class:`RunResult` whose private course lies in the grader's work folder, ready for :meth:`Grader.merge`,
    which only the grading process calls."""

    poll_seconds: float | None = None  # how often the grading loop calls check() while it waits

    def __init__(self, grader):  # a grader.Grader
        self.grader = grader
        self._pool: ThreadPoolExecutor | None = None

    def describe(self) -> str:
        return f"{self.grader.jobs} at a time ({self.grader.test_workers} test process(es) each)"

    def slots(self, busy: bool = False) -> int:
        """Gradings in flight at once (``busy``: those that can run right now, for the time left)."""
        return self.grader.jobs

    def __enter__(self):
        self._pool = ThreadPoolExecutor(self.grader.jobs)
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True)

    def submit(self, task: Task, template: Path):
        return self._pool.submit(self.grader.run_one, task, template)

    def check(self) -> None:
        pass

    def merged(self, seconds: float) -> None:
        """A result was merged and recorded in ``seconds`` (the coordinator's own work)."""

    def stop(self) -> None:
        self.grader.stop()

    def report(self, say) -> None:
        pass


def default_jobs() -> int:
    """Notebooks graded at once: one per core, at most one per 2 GiB of memory (a kernel and a test
    process with torch each take a few hundred MB)."""
    cores = os.cpu_count() or 1
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = 2.0 * cores
    return max(1, min(cores, int(mem // 2)))

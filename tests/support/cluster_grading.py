"""The class that tests/workflows/test_distributed.py and tests/workflows/test_distributed_faults.py grade past one
machine, and what they watch: learners of the session's serial baseline (tests/support/baseline.py) handed in to a
course of their own with one seed (``baseline_course``) and the baseline's rows for them; the rows a gradebook holds;
the `grade` command; the nbgrader gradings running under a worker; a command's output read line by line (``Output``).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from baseline import CELL_TIMEOUT, TIMEOUT_FACTOR, Baseline
from conftest import DEVICE
from course import BIN, SUBMISSIONS, Course, Fixture, gradebook_rows

A = "01_vector_add"
SEED = "20261125"
# The Dask class: learners of the baseline's class (tests/support/baseline.py), each a different verdict; the fault and
# Slurm classes are its first three (2026-11-29: five and four before; the faults need three: one merged before the
# scheduler is lost, one after, one left for the rerun).
DASK_CLASS = ("reference", "wrong_no_mask", "correct_other_zero", "wrong_compile_error", "segfault_kernel",
              "untouched")
CLASS_SIZE = len(DASK_CLASS)
FAULT_CLASS = 3
SLURM_CLASS = 3
# `--cluster local --gpu` grades this many learners twice (serial nbgrader, then Dask) under compute-sanitizer: a GPU
# machine's call is at most 600 s, and 4 learners twice did not finish in 490 s beside another suite (2026-11-25)
GPU_CLASS = 2


# ------------------------------------------------------------------------------------------ the class

def _env(course: Path, **extra) -> dict:
    """Every process imports the course package from the course folder's frozen copy, with one seed."""
    # The frozen copy first; a PYTHONPATH already set (a GPU machine's carried packages) stays after it.
    path = os.pathsep.join(p for p in (str(course), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=path,
               TRITONCOURSE_SEED=SEED)
    env.pop("TRITONCOURSE_DB_URL", None)
    env.update(extra)
    return env


def gpu_fixtures() -> list[Fixture]:
    """The GPU run's learners (it grades its own serial reference: the session's baseline is the CPU's)."""
    every = [Fixture.load(p) for p in sorted((SUBMISSIONS / A).glob("*.py"))]
    return [fx for fx in every if fx.name != "wrong_endless_loop"][:GPU_CLASS]


def _new_course(path: Path, notebooks: dict[str, object], db_url: str | None = None) -> Course:
    """A course folder with the frozen package and ``notebooks`` (learner -> a notebook, the path of one, or a
    fixture) handed in; its gradebook created by nbgrader (on ``db_url`` if given)."""
    env = _env(path, **({"TRITONCOURSE_DB_URL": db_url} if db_url else {}))
    # Scaled down as the serial baseline's course (tests/support/course.py); the package frozen for the Dask workers.
    c = Course(path, [A], scaled_down=True, frozen_package=True, env=env)
    release, source = c.release_notebook(A), c.source_notebook(A)
    for student, nb in notebooks.items():
        if isinstance(nb, Fixture):
            nb = nb.notebook(release, source)
        c.submit(student, A, nb.read_text() if isinstance(nb, Path) else nb)
    return c


def baseline_course(path: Path, baseline: Baseline, learners: int = CLASS_SIZE, db_url: str | None = None) -> Course:
    """A course with the first ``learners`` of the Dask class, each handing in the very file the baseline graded."""
    return _new_course(path, {s: baseline.notebook(s) for s in DASK_CLASS[:learners]}, db_url)


def baseline_rows(baseline: Baseline, learners: int = CLASS_SIZE) -> dict:
    """The baseline's gradebook values of the first ``learners`` of the Dask class."""
    rows = gradebook_rows(baseline.url())
    return {(A, s): rows[(A, s)] for s in DASK_CLASS[:learners]}


def expected_counts(rows: dict) -> dict[str, int]:
    """The rows a gradebook holding exactly ``rows`` (one notebook per learner) has in each table."""
    nbs = [nb for row in rows.values() for nb in row["notebooks"].values()]
    return {"student": len(rows), "submitted_assignment": len(rows), "submitted_notebook": len(nbs),
            "grade": sum(len(nb["grades"]) for nb in nbs), "comment": sum(len(nb["comments"]) for nb in nbs)}


def row_counts(url: str) -> dict[str, int]:
    """How many rows each table of submissions holds: a learner graded twice or lost shows here."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as con:
        counts = {t: con.execute(text(f"SELECT count(*) FROM {t}")).scalar()
                  for t in ("student", "submitted_assignment", "submitted_notebook", "grade", "comment")}
    engine.dispose()
    return counts


def sqlite_url(c: Course) -> str:
    return f"sqlite:///{c.path / 'gradebook.db'}"


def state(c: Course) -> dict:
    import json

    return json.loads((c.path / "autograded" / ".classroom" / "state.json").read_text())["entries"]


def grade_cmd(c: Course, *flags: str) -> list[str]:
    """`course grade` of ``c`` with ``flags``; on the CPU under the limits the serial baseline graded with
    (tests/support/baseline.py), whose grades it is compared with. Without them a notebook cell had 120 s: one
    learner's example cell (its unmasked kernel reading past its tensors, run in the notebook) once took all of them
    in a Slurm job (2026-11-28; 7-15 s in every other grading of it), the Slurm test 149 s instead of 24-29 s."""
    limits = ["--timeout-factor", str(TIMEOUT_FACTOR), "--cell-timeout", str(CELL_TIMEOUT)] if DEVICE == "cpu" else []
    return [sys.executable, "-m", "tritoncourse", "grade", "--course", str(c.path), *limits, *flags]


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def gradings(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The nbgrader autograde processes among ``procs`` (a worker's grading of one learner): fresh ones by their
    command line, those its judge zygote forked by their name (zygote.py's ``_nbgrader``)."""
    out = []
    for p in procs:
        try:
            cmd = p.cmdline()
            if ("nbgrader" in cmd and "autograde" in cmd) or p.name() == "nbgrader":
                out.append(p)
        except psutil.Error:
            continue
    return out


def worker_of(grading: psutil.Process) -> psutil.Process | None:
    """The process that started a grading: its parent, or the parent of the zygote that forked it."""
    parent = grading.parent()
    if parent is not None and any(arg.endswith("zygote.py") for arg in parent.cmdline()):
        parent = parent.parent()
    return parent


def running_gradings(pid: int, older_than: float) -> list[psutil.Process]:
    """The gradings under ``pid`` that have run for more than ``older_than`` seconds. A grading may end at any
    moment (psutil then raises NoSuchProcess): such a one is left out."""
    out = []
    for g in gradings(descendants(pid)):
        try:
            if time.time() - g.create_time() > older_than:
                out.append(g)
        except psutil.Error:
            continue
    return out


def student_of(proc: psutil.Process) -> str:
    """A grading's learner: from its command line, or (forked by a zygote) from its private folder's name
    (``<assignment>__<student>`` on this machine, ``tritoncourse-<assignment>__<student>-XXXXXXXX/work`` on a Dask
    worker)."""
    cmd = proc.cmdline()
    if "--student" in cmd:
        return cmd[cmd.index("--student") + 1]
    cwd = Path(proc.cwd())
    if cwd.name == "work":
        return cwd.parent.name.split("__", 1)[1].rsplit("-", 1)[0]
    return cwd.name.split("__", 1)[1]


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.2)
    return False


class Output:
    """A command's output read line by line in a thread; the test waits for lines that match."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines, self.ended, self._cv = proc, [], False, threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line)
                self._cv.notify_all()
        with self._cv:
            self.ended = True
            self._cv.notify_all()

    def wait_for(self, pattern: str, timeout: float = 900, start: int = 0) -> int:
        """Index of the first line from ``start`` on that matches; fails if the output ends first."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for i in range(start, len(self.lines)):
                    if re.search(pattern, self.lines[i]):
                        return i
                if self.ended or time.monotonic() > deadline:
                    raise AssertionError(f"no line matching {pattern!r}:\n{self.text[-6000:]}")
                self._cv.wait(timeout=1)

    @property
    def text(self) -> str:
        return "".join(self.lines)

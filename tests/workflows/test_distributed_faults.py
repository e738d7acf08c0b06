"""Every fault at once (docs/INSTRUCTORS.md, "Grading on a cluster", Faults): three learners of the session's serial
baseline graded by ``python -m tritoncourse grade --scheduler`` on a Dask scheduler and workers of their own
(separate processes, as on a cluster), through a worker killed mid-grading that never comes back, the scheduler
killed and restarted with a new worker, and the coordinator killed and run again. Every learner must be graded
exactly once, every gradebook value equal to the baseline's, no grading left running. The class and its helpers:
tests/support/cluster_grading.py; the other cluster gradings: tests/workflows/test_distributed.py.
"""
from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from cluster_grading import (A, DASK_CLASS, FAULT_CLASS, Output, _env, baseline_course, baseline_rows, descendants,
                             expected_counts, grade_cmd, gradings, row_counts, running_gradings, sqlite_url, state)
from course import BIN, Course, gradebook_rows
from postgres import free_port


class DaskProcesses:
    """A scheduler and workers as separate processes (what `dask scheduler` / `dask worker` run on a cluster),
    each in a folder of its own; workers without a nanny, so that a killed one never comes back."""

    def __init__(self, folder: Path, env: dict):
        self.folder, self.env, self.port = folder, env, free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        where = self.folder / name
        where.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([str(BIN / "dask"), *args], cwd=where, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=open(where / "log", "ab"))
        self.procs[name] = proc
        return proc

    def scheduler(self, name: str) -> subprocess.Popen:
        proc = self._start(name, ["scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return proc
            time.sleep(0.2)
        raise AssertionError((self.folder / name / "log").read_text())

    def worker(self, name: str) -> subprocess.Popen:
        return self._start(name, ["worker", self.address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                  "--name", name, "--local-directory", str(self.folder / name)])

    def wait_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=30, set_as_default=False) as client:
            client.wait_for_workers(n, timeout=120)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@dataclass
class FaultRun:
    course: Course
    first: str
    second: str
    returncode: int
    lingering: list[int]


@pytest.fixture(scope="module")
def faults(tmp_path_factory, serial_baseline) -> FaultRun:
    """`grade --scheduler`: worker "a" killed mid-grading (never back); the scheduler killed after the first
    learner and started again with a new worker "c"; the coordinator killed after its next learner, then run
    again."""
    base = tmp_path_factory.mktemp("faults")
    c = baseline_course(base / "course", serial_baseline, FAULT_CLASS)
    env = _env(c.path)
    dask = DaskProcesses(base / "dask", env)
    flags = ["--scheduler", dask.address, "--reconnect-wait", "120", "--worker-wait", "300"]
    killed_gradings = []
    try:
        dask.scheduler("scheduler1")
        dask.worker("a")
        dask.worker("b")
        dask.wait_workers(2)
        first = subprocess.Popen(grade_cmd(c, *flags), cwd=c.path, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        out = Output(first)
        # 1. worker "a" killed in the middle of a grading; it never comes back
        deadline, victim = time.monotonic() + 300, None
        while victim is None and time.monotonic() < deadline:
            running = running_gradings(dask.procs["a"].pid, 3)
            victim = running[0] if running else None
            time.sleep(0.2)
        assert victim is not None, out.text
        killed_gradings.append(victim.pid)
        dask.procs["a"].kill()
        # 2. the scheduler killed once a learner is merged, then started again (with worker "c"; worker "b" shuts
        #    itself down when its scheduler goes, as Dask workers do, and its grading goes with it)
        out.wait_for(r"^\[1/")
        killed_gradings += [g.pid for g in gradings(descendants(dask.procs["b"].pid))]
        dask.procs["scheduler1"].kill()
        out.wait_for("lost the connection to the scheduler")
        dask.scheduler("scheduler2")
        dask.worker("c")
        back = out.wait_for("connected to the scheduler at .* again", timeout=300)
        # 3. the coordinator killed (SIGKILL: no chance to tidy up) after its next learner, then run again
        out.wait_for(r"^\[\d+/", start=back)
        first.kill()
        first.wait()
        second = subprocess.run(grade_cmd(c, *flags), cwd=c.path, env=env, capture_output=True, text=True,
                                timeout=1800)
        lingering = [p for p in killed_gradings if psutil.pid_exists(p)
                     and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    finally:
        dask.close()
    return FaultRun(c, out.text, second.stdout + second.stderr, second.returncode, lingering)


@pytest.mark.slow
def test_every_fault_at_once_still_grades_each_learner_exactly_once(faults, serial_baseline):
    """A worker killed for good, the scheduler lost and restarted, the coordinator killed and rerun: are all
    learners graded, once, with plain serial nbgrader's grades?"""
    f = faults
    assert f.returncode == 0, f.first[-4000:] + "\n----\n" + f.second[-4000:]
    assert not f.lingering, f"gradings outlived their killed worker: {f.lingering}"
    m = re.search(r"(\d+) notebook\(s\) to grade, (\d+) already done", f.second)
    assert m and int(m.group(2)) >= 2 and int(m.group(1)) >= 1, f.second  # the rerun did only what was left
    names = DASK_CLASS[:FAULT_CLASS]
    entries = state(f.course)
    assert sorted(k for k in entries) == sorted(f"{A}/{n}" for n in names)
    assert all(entries[f"{A}/{n}"]["status"] == "graded" for n in names), entries
    assert not list((f.course.path / "autograded").glob(f"*/.{A}.*")), "a half-moved autograded folder"
    rows = gradebook_rows(sqlite_url(f.course))
    reference = baseline_rows(serial_baseline, FAULT_CLASS)
    assert rows == reference, {k: (rows.get(k), reference[k]) for k in reference if rows.get(k) != reference[k]}
    assert row_counts(sqlite_url(f.course)) == expected_counts(reference)  # nothing lost or doubled

"""One private grading: one learner's assignment graded by plain ``nbgrader autograde`` in a course copy of its own.

Local grading (``grader.Grader.run_one``) and a Dask worker (``distributed.grade_on_worker``) both call
:func:`grade_privately`: it lays out the copy (the course's configuration rooted in the copy, the assignment's
non-notebook files from ``source/``, the learner's submitted files and a SQLite gradebook that starts from the real
one's rows), starts nbgrader there with its output in a log, and kills it with everything it started when it runs
past its time limit. The copy's gradebook is the only one it writes; the grading process merges it afterwards.
On the CPU interpreter every private grading of one process uses one shared judge zygote, started on first use
(``grading/processes/zygote_server.py``): torch and the checks are imported once a process, not once a learner.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

WORKER_CONFIG = '''\
# Written by `python -m tritoncourse grade`: the course's own configuration, rooted in this private copy.
import os
_course_config = {config!r}
exec(compile(open(_course_config).read(), _course_config, "exec"), dict(globals(), __file__=_course_config))
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.db_url = "sqlite:///" + os.path.join({root!r}, "gradebook.db")
'''


def nbgrader_env() -> dict:
    """nbgrader runs alembic and jupyter as commands: this Python's bin/ first on PATH."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def kill_tree(proc: subprocess.Popen) -> None:
    """Kill a process and everything it started (nbgrader's kernels run in their own sessions)."""
    try:
        import psutil

        try:
            parent = psutil.Process(proc.pid)
            procs = [parent] + parent.children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(procs, timeout=10)
    except ImportError:  # pragma: no cover
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def source_files(folder: Path) -> dict[str, Path]:
    """The files of an assignment's ``source/`` folder that a private grading needs: every file but the notebooks
    (nbgrader's autograde copies those over the submission's; the notebooks' tests come from the gradebook)."""
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix != ".ipynb" and ".ipynb_checkpoints" not in p.parts}


@dataclass
class PrivateCourse:
    """What a private course copy holds, as paths on this machine or bytes sent from elsewhere."""
    assignment: str
    student: str
    config: Path  # the course's nbgrader_config.py, which the copy's configuration runs
    gradebook: Path | bytes  # the SQLite gradebook the grading starts from
    submission: dict[str, Path | bytes]  # name in submitted/<student>/<assignment>/ -> content
    source: dict[str, Path | bytes] = field(default_factory=dict)  # name in source/<assignment>/ -> content


def write_files(base: Path, files: dict[str, Path | bytes]) -> None:
    for name, content in files.items():
        path = (base / name).resolve()
        if not path.is_relative_to(base.resolve()):
            raise ValueError(f"refusing to write {name!r} outside {base}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else Path(content).read_bytes())


def lay_out(work: Path, private: PrivateCourse) -> None:
    """The private course folder ``work`` of one grading (its folders are created; what is in them is replaced)."""
    sub = work / "submitted" / private.student / private.assignment
    sub.mkdir(parents=True, exist_ok=True)
    write_files(sub, private.submission)
    source = work / "source" / private.assignment
    source.mkdir(parents=True, exist_ok=True)
    write_files(source, private.source)
    write_files(work, {"gradebook.db": private.gradebook})
    (work / "nbgrader_config.py").write_text(WORKER_CONFIG.format(config=str(private.config), root=str(work)))


class Running:
    """The private gradings this process runs, by key: :meth:`stop` kills them all, and none starts after it."""

    def __init__(self, stopping: threading.Event | None = None):
        self.stopping = stopping or threading.Event()
        self._procs: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()

    def start(self, key: str, cmd: list[str], fork=None, **popen) -> subprocess.Popen | None:
        """``cmd`` started (``fork()``'s process instead where it gives one), or None once stopped."""
        with self._lock:  # stop() either sees this process or this call sees the stop
            if self.stopping.is_set():
                return None
            proc = (fork and fork()) or subprocess.Popen(cmd, **popen)
            self._procs[key] = proc
            return proc

    def forget(self, key: str) -> None:
        with self._lock:
            self._procs.pop(key, None)

    def kill(self, keys: list[str] | None = None) -> int:
        """Kill these gradings (all when ``keys`` is None); how many were running."""
        with self._lock:
            procs = [p for k, p in self._procs.items() if keys is None or k in keys]
        for proc in procs:
            kill_tree(proc)
        return len(procs)

    def stop(self) -> None:
        with self._lock:
            self.stopping.set()
        self.kill()


@dataclass
class Finished:
    returncode: int
    seconds: float
    timed_out: bool


def grade_privately(work: Path, private: PrivateCourse, argv: list[str], log: Path, *, timeout: float,
                    running: Running, key: str, env: dict | None = None, launcher: list[str] | None = None
                    ) -> Finished | None:
    """Lay out ``work``, run ``python ARGV`` (nbgrader autograde) there with its output in ``log``, and kill it with
    everything it started past ``timeout`` seconds. ``launcher``: arguments put between the interpreter and ARGV
    where nbgrader is a fresh process (a Dask worker's die-with-parent wrapper); on the CPU interpreter it is forked
    by the shared judge zygote instead (zygote_server.forked_nbgrader). None when ``running`` was stopped before it
    started."""
    from ..grading.processes.zygote_server import forked_nbgrader, shared_judge_env

    lay_out(work, private)
    env = shared_judge_env(nbgrader_env() if env is None else env)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    timed_out = False
    with open(log, "wb") as fh:
        fh.write(("$ " + " ".join([sys.executable, *argv]) + "\n").encode())
        fh.flush()
        # Forked by the shared judge zygote, nbgrader already imported, where it can be (it dies with the zygote,
        # which ends with this process: as the launcher's die-with-parent would have it)
        proc = running.start(key, [sys.executable, *(launcher or []), *argv], cwd=work,
                             fork=lambda: forked_nbgrader(argv, work, env, log, private.config),
                             env=env, stdin=subprocess.DEVNULL, stdout=fh,
                             stderr=subprocess.STDOUT, start_new_session=True)
        if proc is None:
            return None
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc)
        finally:
            running.forget(key)
    return Finished(proc.returncode, time.monotonic() - start, timed_out)

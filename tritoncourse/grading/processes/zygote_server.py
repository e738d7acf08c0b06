"""One warm judge zygote shared by every private grading a process runs (``zygote.py --socket PATH``).

``course grade`` (or a Dask worker) runs each learner's grading as a private ``nbgrader autograde`` process; each
used to start its own judge zygote, importing torch, triton and the checks again (~1.9 s of CPU a grading). Here
the grading process starts one zygote serving a Unix socket (:func:`shared_judge_env`, on the CPU interpreter
only) and names it to every private nbgrader in ``TRITONCOURSE_JUDGE_ZYGOTE``; their ``_warm_zygote("judge")``
connects to it (``zygote_client._SharedZygote``) instead of starting one. Each connection is one client of
zygote.py's line protocol, its ids its own. A closed connection (its nbgrader ended, or was killed at its time
limit) has its children still running killed with their sessions; the zygote and all its children end when the
process that started it closes its stdin (at exit, or when it dies).

The grading process forks each private ``nbgrader autograde`` from the same zygote (:func:`forked_nbgrader`), which
imported nbgrader and the course's grading steps once (about 1.8 s of CPU a grading otherwise), where its environment
is the zygote's; :class:`ForkedNbgrader` stands for the ``subprocess.Popen`` that private.grade_privately would
otherwise start.

Why this opens no path to a learner: the judge never runs learner code (it imports the course's modules and forks;
each child runs the test's checks, which talk to the sandboxed runner through a channel of their own). The socket
lies in a 0700 folder of the grader's temporary directory, and the server refuses a connection from any other
uid (SO_PEERCRED): learners' code runs sandboxed under other uids and sees neither. The requests (env, workdir,
out, an nbgrader's argv) come from the grading process and its private nbgrader processes, which run no learner
code either (the notebook's kernel is sandboxed; a forked nbgrader closes every connection of the zygote's). Graded
unsandboxed (the instructor's explicit opt-out), learners' code runs as the grader and could use the socket, but
could then do anything the grader can anyway.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .zygote_client import SHARED_JUDGE_ENV as ENV  # the socket of the shared judge zygote, set for private gradings
from .zygote_client import ZYGOTE, _SharedZygote
OPT_OUT_ENV = "TRITONCOURSE_SHARED_JUDGE"  # "0": each private grading starts its own judge zygote, as before
FORK_NBGRADER_ENV = "TRITONCOURSE_FORK_NBGRADER"  # "0": each private grading's nbgrader is a fresh process


class SharedJudge:
    """The shared judge zygote of this process: started on first use, ended at exit (or by :meth:`close`)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.folder: str | None = None
        self.env: dict | None = None  # the environment it was started with (without ENV)

    def socket_for(self, env: dict) -> str | None:
        """The socket of the running zygote (started with ``env`` if none runs), or None where it cannot start."""
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                return str(Path(self.folder, "judge.sock"))
            self._close()
            self.folder = tempfile.mkdtemp(prefix="tritoncourse-shared-judge-")  # 0700, the grader's own
            path = str(Path(self.folder, "judge.sock"))
            env = {k: v for k, v in env.items() if k != ENV}
            self.env = env
            try:
                self.proc = subprocess.Popen([sys.executable, "-I", "-B", str(ZYGOTE), "--socket", path],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, env=env, start_new_session=True)
                if self.proc.stdout.readline().strip() != b'{"listening": true}':
                    raise RuntimeError("the shared judge zygote did not start")
            except (OSError, RuntimeError):
                self._close()
                return None
            return path

    def close(self) -> None:
        with self.lock:
            self._close()

    def _close(self) -> None:
        """Kill the zygote (its children die with its stdin's end, killed with their sessions) and wait for it."""
        if self.proc is not None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.close()
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=5)
            with contextlib.suppress(Exception):
                self.proc.kill()
                self.proc.wait(timeout=10)
            with contextlib.suppress(Exception):
                self.proc.stdout.close()
            self.proc = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


_shared = SharedJudge()
_owner = os.getpid()


@atexit.register
def close_shared_judge() -> None:
    """This process's shared judge ends with it (a forked child must not end its parent's)."""
    if os.getpid() == _owner:
        _shared.close()


def shared_judge_env(env: dict) -> dict:
    """``env`` for a private grading, naming this process's shared judge zygote where the gradings use a judge
    zygote at all: on the CPU interpreter (``TRITONCOURSE_ZYGOTE`` not "0"), unless ``TRITONCOURSE_SHARED_JUDGE=0``.
    On a GPU, or where the zygote cannot start, ``env`` as it is."""
    env = dict(env)
    env.pop(ENV, None)
    if env.get("TRITONCOURSE_ZYGOTE", "1") == "0" or env.get(OPT_OUT_ENV, "1") == "0" or not _on_interpreter(env):
        return env
    path = _shared.socket_for(env)
    if path is not None:
        env[ENV] = path
    return env


def forked_nbgrader(argv: list[str], cwd: Path, env: dict, log: Path, config: Path) -> ForkedNbgrader | None:
    """``python ARGV`` (``-m nbgrader ...``) as a child forked by this process's shared zygote, which imported
    nbgrader and the course's grading steps once (about 1.8 s of CPU a private grading otherwise); None where a fresh
    process must run it: no shared zygote in ``env`` (shared_judge_env's), ``TRITONCOURSE_FORK_NBGRADER=0``, an
    environment other than the zygote's (what its modules read when imported could differ), a course whose
    configuration would import another copy of the course's package, or a zygote that cannot fork nbgrader."""
    path = env.get(ENV)
    if not path or env.get(FORK_NBGRADER_ENV, "1") == "0" or argv[:2] != ["-m", "nbgrader"]:
        return None
    with _shared.lock:
        same = _shared.env is not None and _shared.env == {k: v for k, v in env.items() if k != ENV}
    package = Path(__file__).resolve().parents[2]
    theirs = Path(config).resolve().parent / package.name
    if not same or (theirs.exists() and theirs.resolve() != package):
        return None
    try:
        return ForkedNbgrader(path, argv[2:], cwd, env, log)
    except (OSError, RuntimeError, ValueError):
        return None


class ForkedNbgrader:
    """A private grading's ``nbgrader`` forked by the shared zygote (zygote.py's ``nbgrader`` entry), for
    private.grade_privately as a ``subprocess.Popen`` would be: ``pid`` (its session's: the child calls setsid),
    ``wait``, ``poll``, ``returncode``. Its output is appended to ``log``. Its connection to the zygote is its own:
    closed (or the grading process gone), the zygote kills the child's session, as a killed parent's Popen child
    would be by its caller."""

    def __init__(self, path: str, args: list[str], cwd: Path, env: dict, log: Path):
        self.args = ["nbgrader", *args]
        self.returncode: int | None = None
        self.zygote = _SharedZygote(path)
        try:
            if "nbgrader" not in self.zygote.ready.get("entries", ()):
                raise RuntimeError("the shared zygote forks judges only")
            self.rid = self.zygote.start(str(cwd), env, str(log), entry="nbgrader", argv=args)
            with self.zygote.changed:
                self.zygote.changed.wait_for(lambda: self._reply().keys() & {"pid", "exit"}
                                             or "dead" in self.zygote.replies, timeout=30)
            self.pid = self._reply().get("pid")
            if not self.pid:
                raise RuntimeError("the shared zygote did not fork nbgrader")
        except BaseException:
            self.zygote.close()
            raise

    def _reply(self) -> dict:
        return self.zygote.replies.get(self.rid, {})

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self.zygote.poll(self.rid)
            if code == "lost":  # the zygote died under it: its session killed, as the zygote would have
                self.zygote._kill_session(self.pid)
                code = -signal.SIGKILL
            if code is not None:
                self.returncode = code
                self.zygote.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self.zygote.changed:
            ended = self.zygote.changed.wait_for(lambda: "exit" in self._reply() or "dead" in self.zygote.replies,
                                                 timeout=timeout)
        if not ended:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.poll()

    def kill(self) -> None:
        self.zygote.kill(self.rid)


def _on_interpreter(env: dict) -> bool:
    """Whether the private gradings will run their tests on the CPU interpreter (device.infer_device's answer,
    without importing torch: with a GPU's device nodes present, only when the interpreter is asked for)."""
    from ...device import _TRUTHY, _gpu_device_nodes

    return env.get("TRITON_INTERPRET", "").strip().lower() in _TRUTHY or not _gpu_device_nodes()

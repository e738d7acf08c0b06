"""What a Dask worker runs for ``python -m tritoncourse grade --cluster/--scheduler`` (``distributed.py``): one
learner's grading from a task's bytes, through the same ``private.grade_privately`` as local grading, in a
temporary folder; it sends back the autograded files, the private gradebook and the log.

A worker refuses a task when its grading code differs from the coordinator's (``code_fingerprint``) or when it
cannot sandbox learners' code; its nbgrader dies with it when the worker is killed (parent-death signal).
"""
from __future__ import annotations

import functools
import hashlib
import os
import socket
import sys
import tempfile
from pathlib import Path

from .private import PrivateCourse, Running, grade_privately, nbgrader_env

PACKAGE = Path(__file__).resolve().parent.parent  # tritoncourse/
LOG_LIMIT = 4 << 20  # bytes of a worker's nbgrader log sent back (the end of it)
# Environment variables of the coordinator that a task takes to its worker: the seed that reproduces a grading,
# and the instructor's explicit opt-out of the grading sandbox (grade --unsandboxed-learners-can-forge-grades).
SHIPPED_ENV = ("TRITONCOURSE_SEED", "TRITONCOURSE_UNSANDBOXED_GRADING")


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """The grading code this process runs: the tritoncourse package's Python files and nbgrader's version. A
    worker with another version would grade differently, silently: its tasks fail with the reason instead."""
    import nbgrader

    h = hashlib.sha256(f"nbgrader {nbgrader.__version__}\0".encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# The worker's nbgrader is started through this: it asks Linux to kill it when its parent (the worker) dies, so
# that a worker killed mid-task leaves no grading behind (the sandbox's processes die with their parent too).
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG
    "os.getppid() == int(sys.argv[1]) or os._exit(137)\n"
    "os.execv(sys.executable, [sys.executable] + sys.argv[2:])\n")

_RUNNING = Running()  # in a worker: the gradings it runs, by task key


def _read_files(base: Path) -> dict[str, bytes]:
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()} \
        if base.is_dir() else {}


def private_of(bundle: dict, course_config: Path, gradebook: bytes | None = None) -> PrivateCourse:
    """The private course a task's bytes describe (its own gradebook, or ``gradebook`` in its place)."""
    return PrivateCourse(bundle["assignment"], bundle["student"], course_config,
                         bundle["gradebook"] if gradebook is None else gradebook, bundle["submission"],
                         bundle["source"])


def _worker_label() -> str:
    try:
        from distributed import get_worker

        w = get_worker()
    except (ImportError, ValueError):
        return socket.gethostname()
    address = w.address.split("://", 1)[-1]
    return address if str(w.name) == w.address else f"{w.name}@{address}"


def _test_workers() -> int:
    """Kernel-test processes per grading on this worker: its cores shared among the tasks it runs at once."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cores = os.cpu_count() or 1
    try:
        from distributed import get_worker

        slots = get_worker().state.nthreads
    except (ImportError, ValueError):
        slots = 1
    return max(1, cores // max(1, slots))


def grade_on_worker(bundle: dict) -> dict:
    """A Dask task: grade one learner's assignment in a temporary private course; return what came out."""
    label = _worker_label()
    if bundle["fingerprint"] != code_fingerprint():
        raise RuntimeError(f"worker {label} runs other grading code (tritoncourse/nbgrader fingerprint "
                           f"{code_fingerprint()}, the coordinator's {bundle['fingerprint']}): install the "
                           "course's version there (same commit, same requirements/lock.txt)")
    from ..grading import sandbox

    try:  # as on the coordinator: learners' code runs sandboxed, or the instructor opted out loudly
        sandbox.require(dict(os.environ, **bundle.get("env", {})))
    except sandbox.SandboxUnavailable as err:
        raise RuntimeError(f"worker {label} cannot sandbox learners' code: {err}") from None
    with tempfile.TemporaryDirectory(prefix=f"tritoncourse-{bundle['assignment']}__{bundle['student']}-") as tmp:
        tmp = Path(tmp)
        config = tmp / "course" / "nbgrader_config.py"
        config.parent.mkdir()
        config.write_bytes(bundle["config"])
        work = tmp / "work"
        argv = [a if not a.startswith("--IsolatedKernelTests.workers=") or bundle["test_workers"]
                else f"--IsolatedKernelTests.workers={_test_workers()}" for a in bundle["argv"]]
        env = nbgrader_env()
        env.pop("PYTHONHASHSEED", None)  # the nanny sets one for its workers; the local grading has none
        for name in SHIPPED_ENV:  # the coordinator's, not the worker's
            env.pop(name, None)
        env.update(bundle["env"])
        launcher = ["-c", _DIE_WITH_PARENT, str(os.getpid())] if sys.platform.startswith("linux") else []
        end = grade_privately(work, private_of(bundle, config), argv, tmp / "autograde.log",
                              timeout=bundle["notebook_timeout"], running=_RUNNING, key=bundle["key"], env=env,
                              launcher=launcher)
        text = (tmp / "autograde.log").read_bytes()
        return {"returncode": end.returncode, "timed_out": end.timed_out, "seconds": end.seconds, "worker": label,
                "log": text if len(text) <= LOG_LIMIT else b"[... cut ...]\n" + text[-LOG_LIMIT:],
                "autograded": _read_files(work / "autograded" / bundle["student"] / bundle["assignment"]),
                "gradebook": (work / "gradebook.db").read_bytes()}


def kill_gradings(keys: list[str]) -> int:
    """Run on every worker (``Client.run``) when the coordinator stops: end these tasks' nbgrader processes."""
    return _RUNNING.kill(keys)

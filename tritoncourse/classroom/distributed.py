"""Grading a class on a Dask cluster: ``python -m tritoncourse grade --cluster local|slurm|... / --scheduler ADDRESS``.

Why Dask (``dask.distributed``): it is the Python ecosystem's general task scheduler; one API reaches a
``LocalCluster`` on one machine, a university's Slurm/PBS/SGE/LSF/HTCondor queue (``dask-jobqueue``), Kubernetes
(``dask-kubernetes``) or any running scheduler by its address; it reschedules the tasks of a worker that dies,
matches tasks to worker resources (one GPU each) and shows a dashboard. Nothing here is a scheduler of our own.

What a task is: one learner's one assignment, graded on a worker (``worker.grade_on_worker``) by the same
``private.grade_privately`` that grades it on this machine (``Grader.run_one``): plain ``nbgrader autograde
ASSIGNMENT --student NAME`` in a private copy of the course with this course's configuration (so the grading
sandbox, ``grading/sandbox/``, applies on the worker as here). No shared file system is assumed: the task carries
the bytes of that private copy (``Grader.private_course``, its gradebook cut down to that learner's rows of that
assignment, ``database.learner_copy``) and brings back the autograded files, the private gradebook and the log.
This process (the coordinator) alone writes the real gradebook, through the same :meth:`Grader.merge` as local
grading, one learner at a time, and records each learner in ``state.json`` only after merging.

Faults, and why every learner ends up graded exactly once:
- a worker killed mid-task (or one that never comes back): the scheduler hands its task to another worker
  (a task whose workers die ``distributed.scheduler.allowed-failures`` + 1 times counts as one failed
  attempt of that learner, like a crash); the killed worker's nbgrader dies with it (parent-death signal);
- the scheduler connection lost (a network cut, a scheduler restarted): Dask cancels every task of this
  client; they are submitted again as soon as the client is connected again (``--reconnect-wait``, default
  10 min, then grading stops as on Ctrl-C, state saved);
- no worker at all for ``--worker-wait`` seconds (default 1 h: a batch queue may be slow): grading stops;
- the coordinator stopped (Ctrl-C, SIGTERM, a crash) and run again: ``state.json`` says who is merged; the
  rest is graded again. A task result is merged at most once per run, and a merge writes the same rows
  however often it runs (nbgrader's update-or-create), so nothing is doubled.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import Future as LocalFuture
from dataclasses import dataclass
from pathlib import Path

from .clusters import CLUSTERS, ClusterOptions, local_gpu_cluster_spec, start_cluster, visible_gpus  # noqa: F401
from .database import learner_copy
from .executors import GradingStopped
from .private import lay_out, write_files
from .tasks import RunResult, Task
from .worker import SHIPPED_ENV, code_fingerprint, grade_on_worker, kill_gradings, private_of  # noqa: F401


def _as_bytes(files: dict[str, Path | bytes]) -> dict[str, bytes]:
    return {name: c if isinstance(c, bytes) else c.read_bytes() for name, c in files.items()}


# ------------------------------------------------------------------------------------------ the coordinator

@dataclass
class _Pending:
    task: Task
    bundle: dict
    result: LocalFuture
    future: object = None  # the Dask future
    done: bool = False
    submitted: int = 0  # how often it was submitted (connection losses resubmit)
    pack_seconds: float = 0.0  # packing its bytes, here (the grading loop's thread)
    unpack_seconds: float = 0.0  # laying out its result, here (Dask's callback thread)


class DaskExecutor:
    """The Grader's executor (see ``executors.LocalExecutor``) on a Dask cluster."""

    poll_seconds = 1.0

    def __init__(self, grader, options: ClusterOptions):
        self.grader = grader
        self.options = options
        self.client = None
        self.cluster = None
        self.address = ""
        self._pending: dict[str, _Pending] = {}  # Dask key -> the task it grades
        self._resubmit: list[_Pending] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._lost_since: float | None = None
        self._no_worker_since: float | None = None
        self._slots = options.workers
        self._last_info = 0.0
        self._config = b""
        self.per_worker: Counter = Counter()
        self.merge_seconds: list[float] = []  # per result: merging into the gradebook and recording it
        self.pack_seconds: list[float] = []  # per task: packing its bytes (the learner's gradebook copy included)
        self.unpack_seconds: list[float] = []  # per task: laying out its result in the work folder
        self.reconnects = 0
        self.resubmitted = 0

    # ---- set-up
    def describe(self) -> str:
        o = self.options
        if o.scheduler:
            return f"on the Dask scheduler at {o.scheduler}"
        what = "GPU worker(s)" if o.gpu else "worker process(es)"
        return f"on a Dask {o.cluster} cluster of {o.workers} {what}"

    def _connect(self, timeout: float):
        from distributed import Client

        o = self.options
        if o.scheduler and Path(o.scheduler).is_file():
            return Client(scheduler_file=o.scheduler, timeout=timeout, set_as_default=False)
        return Client(self.address, timeout=timeout, set_as_default=False)

    def __enter__(self):
        import dask

        o = self.options
        # A task whose workers keep dying is a failed attempt, not an endless loop.
        dask.config.set({"distributed.scheduler.allowed-failures": dask.config.get(
            "distributed.scheduler.allowed-failures", 3)})
        if o.scheduler:
            self.address = o.scheduler
            try:
                self.client = self._connect(timeout=30)
            except OSError as err:
                raise GradingStopped(f"cannot reach the Dask scheduler at {o.scheduler} ({err}).") from None
        else:
            self.cluster = start_cluster(o)
            from distributed import Client

            self.client = Client(self.cluster, set_as_default=False)
            self.address = self.cluster.scheduler_address
        self._config = (self.grader.course.root / "nbgrader_config.py").read_bytes()
        info = self._info()
        workers = info.get("workers", {})
        served = "dashboard" in info.get("services", {})
        if served and self.cluster is not None and importlib.util.find_spec("bokeh") is None:
            served = False  # the scheduler here answers on the port, but without bokeh it shows no dashboard
        dash = f"; dashboard: {self.client.dashboard_link}" if served else "; no dashboard (pip install bokeh for one)"
        self.grader._print(f"Dask: scheduler {self.address}, {len(workers)} worker(s) now, "
                           f"{self._count_slots(workers)} grading(s) at a time{dash}")
        return self

    def __exit__(self, *exc) -> None:
        with contextlib.suppress(Exception):
            if self.client is not None:
                self.client.close(timeout=10)
        with contextlib.suppress(Exception):
            if self.cluster is not None:
                self.cluster.close(timeout=30)

    # ---- capacity
    def _info(self) -> dict:
        try:
            info = self.client.scheduler_info(n_workers=-1)
        except Exception:
            return {}
        self._last_info = time.monotonic()
        return info

    def _count_slots(self, workers: dict) -> int:
        if self.options.gpu:
            return int(sum(w.get("resources", {}).get("GPU", 0) for w in workers.values()))
        return int(sum(w.get("nthreads", 1) for w in workers.values()))

    def slots(self, busy: bool = False) -> int:
        """Gradings the cluster runs at once (``busy``); twice that in flight, so that no worker waits for us."""
        return max(1, self._slots) if busy else max(2, 2 * self._slots)

    # ---- tasks
    def bundle(self, task: Task, template: Path) -> dict:
        """A task's bytes: what its worker lays out (``private.PrivateCourse``) and how it grades there."""
        g = self.grader
        private = g.private_course(task, learner_copy(template, task.assignment, task.student))
        return {
            "key": f"grade-{task.assignment}-{task.student}-{uuid.uuid4().hex[:10]}",
            "assignment": task.assignment, "student": task.student, "attempt": task.attempt,
            "config": self._config, "fingerprint": code_fingerprint(), "source": _as_bytes(private.source),
            "submission": _as_bytes(private.submission), "gradebook": private.gradebook,
            "argv": g.autograde_argv(task, self.options.test_workers or 1),
            "test_workers": self.options.test_workers, "notebook_timeout": g.notebook_timeout,
            "env": {k: os.environ[k] for k in SHIPPED_ENV if k in os.environ},
        }

    def submit(self, task: Task, template: Path) -> LocalFuture:
        start = time.perf_counter()
        p = _Pending(task, self.bundle(task, template), LocalFuture())
        self._send(p)
        p.pack_seconds += time.perf_counter() - start
        return p.result

    def _send(self, p: _Pending) -> None:
        p.bundle["key"] = f"grade-{p.task.assignment}-{p.task.student}-{uuid.uuid4().hex[:10]}"
        p.submitted += 1
        kwargs = {"resources": {"GPU": 1}} if self.options.gpu else {}
        fut = self.client.submit(grade_on_worker, p.bundle, key=p.bundle["key"], pure=False, retries=0, **kwargs)
        p.future = fut
        with self._lock:
            self._pending[p.bundle["key"]] = p
        fut.add_done_callback(functools.partial(self._finished, p))

    def _finished(self, p: _Pending, fut) -> None:
        """Dask's callback thread: turn a finished task into the RunResult the grading loop merges."""
        try:
            with self._lock:
                if p.done or self._stopping or p.future is not fut:
                    return
            status = fut.status
            if status == "finished":
                payload = fut.result()
                start = time.perf_counter()
                result = self.unpack(p.task, payload)
                p.unpack_seconds += time.perf_counter() - start
            elif status == "cancelled":  # the connection to the scheduler was lost: send it again once back
                with self._lock:
                    self._resubmit.append(p)
                return
            else:
                err = fut.exception()
                if type(err).__name__ == "KilledWorker":
                    reason = (f"the Dask worker grading it died, {self._allowed_failures() + 1} times "
                              "(distributed.scheduler.allowed-failures)")
                else:
                    reason = f"the Dask task failed: {type(err).__name__}: {str(err)[:400]}"
                result = self._failed(p, reason)
        except Exception as err:  # the result could not be fetched: the connection went; send it again
            if self.client is None or self.client.status != "running":
                with self._lock:
                    self._resubmit.append(p)
                return
            result = self._failed(p, f"fetching the result failed: {type(err).__name__}: {err}")
        with self._lock:
            if p.done:
                return
            p.done = True
            self._pending.pop(p.bundle["key"], None)
            p.future = None
            self.pack_seconds.append(p.pack_seconds)
            self.unpack_seconds.append(p.unpack_seconds)
            if result.worker:
                self.per_worker[result.worker] += 1
        p.result.set_result(result)

    def _failed(self, p: _Pending, reason: str) -> RunResult:
        """A task that brought back no grading: its private copy laid out here, to grade it again by hand."""
        g = self.grader
        work = g.work_root / f"{p.task.assignment}__{p.task.student}"
        if work.exists():
            shutil.rmtree(work)
        lay_out(work, private_of(p.bundle, g.course.root / "nbgrader_config.py"))
        return RunResult(False, 0.0, reason, work, self._log(p.task, reason.encode() + b"\n"))

    def _allowed_failures(self) -> int:
        import dask

        return int(dask.config.get("distributed.scheduler.allowed-failures", 3))

    def _log(self, task: Task, text: bytes, worker: str = "") -> Path:
        log = self.grader.log_root / task.assignment / f"{task.student}.attempt{task.attempt + 1}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        head = f"# graded on the Dask worker {worker}\n".encode() if worker else b""
        log.write_bytes(head + text)
        return log

    def unpack(self, task: Task, payload: dict) -> RunResult:
        """A worker's result laid out like a local private grading, in the grader's work folder."""
        g = self.grader
        work = g.work_root / f"{task.assignment}__{task.student}"
        if work.exists():
            shutil.rmtree(work)
        write_files(work / "autograded" / task.student / task.assignment, payload["autograded"])
        write_files(work, {"gradebook.db": payload["gradebook"]})
        log = self._log(task, payload["log"], payload["worker"])
        result = g.outcome(task, work, log, payload["returncode"], payload["seconds"], payload["timed_out"])
        result.worker = payload["worker"]
        if not result.ok:  # keep a private copy that grades again here (state.json's reproduce command)
            lay_out(work, g.private_course(task, payload["gradebook"]))
        return result

    # ---- health, called by the grading loop every poll_seconds
    def check(self) -> None:
        now = time.monotonic()
        status = self.client.status if self.client is not None else "closed"
        if status != "running":
            if self._lost_since is None:
                self._lost_since = now
                self.grader._print(f"Dask: lost the connection to the scheduler at {self.address}; waiting up to "
                                   f"{self.options.reconnect_wait:.0f} s for it (--reconnect-wait)")
            if status in ("closed", "closing", "failed") and self.cluster is None:
                with contextlib.suppress(Exception):
                    self.client.close(timeout=2)
                try:
                    self.client = self._connect(timeout=5)
                except Exception:
                    pass
            if now - self._lost_since > self.options.reconnect_wait:
                raise GradingStopped(f"the Dask scheduler at {self.address} was unreachable for "
                                     f"{now - self._lost_since:.0f} s.")
            return
        if self._lost_since is not None:
            self.reconnects += 1
            self.grader._print(f"Dask: connected to the scheduler at {self.address} again after "
                               f"{now - self._lost_since:.0f} s")
            self._lost_since = None
        with self._lock:
            again, self._resubmit = self._resubmit, []
        for p in again:
            if not p.done:
                self.resubmitted += 1
                self._send(p)
        if now - self._last_info >= 5 or again:
            workers = self._info().get("workers", {})
            self._slots = self._count_slots(workers)
            if self._slots:
                self._no_worker_since = None
            elif self._no_worker_since is None:
                self._no_worker_since = now
                self.grader._print(f"Dask: no {'GPU ' if self.options.gpu else ''}worker; waiting up to "
                                   f"{self.options.worker_wait:.0f} s for one (--worker-wait)")
            elif now - self._no_worker_since > self.options.worker_wait:
                raise GradingStopped(f"no Dask worker for {now - self._no_worker_since:.0f} s.")

    def merged(self, seconds: float) -> None:
        self.merge_seconds.append(seconds)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            pending = list(self._pending.values())
        futures = [p.future for p in pending if p.future is not None]
        keys = [p.bundle["key"] for p in pending]
        with contextlib.suppress(Exception):
            if futures:
                self.client.cancel(futures, force=True)
        with contextlib.suppress(Exception):
            if keys and self.client.status == "running":
                self.client.run(kill_gradings, keys, wait=True)

    def report(self, say) -> None:
        if self.per_worker:
            say("Graded per worker: " + ", ".join(f"{w} {n}" for w, n in sorted(self.per_worker.items())))
        if self.merge_seconds and self.pack_seconds:
            def ms(values):
                return 1000 * sum(values) / len(values)

            pack, unpack, merge = ms(self.pack_seconds), ms(self.unpack_seconds), ms(self.merge_seconds)
            say(f"Coordinator: {pack + unpack + merge:.0f} ms per notebook (packing {pack:.0f} ms, unpacking "
                f"{unpack:.0f} ms, merging and recording {merge:.0f} ms)"
                + (f"; {self.resubmitted} task(s) sent again after {self.reconnects} reconnection(s)"
                   if self.resubmitted or self.reconnects else ""))

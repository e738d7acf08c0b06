"""Grading a class: ``python -m tritoncourse grade [ASSIGNMENT ...] [--jobs N] [--students A B ...]``.

How ``grade`` keeps the gradebook whole and still uses every core: each learner's notebook is graded by
plain ``nbgrader autograde ASSIGNMENT --student S`` (so with this course's configuration: resilient
execution, out-of-kernel verdicts, restored test cells) in a private copy of the course that has its own
copy of the gradebook, taken once at the start (``private.py``). Only the main process writes the real gradebook:
after a learner's private run ends it copies that learner's autograde results (scores, the needs-manual-grade
flags, automatic comments, late penalty, timestamp) through ``nbgrader.api.Gradebook`` into the real
one, one learner at a time, and moves the autograded notebook into ``autograded/`` (``results.merge``). A private
run's gradebook starts from the same rows as the real one, so the copied values are those that plain
``nbgrader autograde`` would have written; manual scores and manual comments are never touched.

Every learner's outcome is written to ``autograded/.classroom/state.json`` once merged; a new run skips
what is done (same submission, same assignment source) and grades the rest. A crash, time-out or dead
kernel costs only that learner: it is retried once, then recorded with its reason and its log.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path

from ..grading.processes.zygote_server import close_shared_judge
from ..notebooks import CourseError
from .course import Course
from .database import snapshot
from .private import PrivateCourse, Running, grade_privately, nbgrader_env, source_files
from .refusals import report_lines
from .results import _error_reason, clock, merge, seeds_in_log
from .executors import GradingStopped, LocalExecutor
from .tasks import RunResult, Task, prepare

STATE_VERSION = 1


class Grader:
    """Grades learners in private course copies, merging each result into the real gradebook serially."""

    def __init__(self, course: Course, *, jobs: int = 1, test_workers: int | None = None,
                 notebook_timeout: float = 1800.0, nbgrader_args: list[str] | None = None,
                 out=sys.stdout, executor=None, run_timeout: float = 86400.0):
        self.course = course
        # Where the private gradings run: None, threads on this machine (LocalExecutor); or a Dask cluster
        # (distributed.DaskExecutor). Either way this process alone merges results into the gradebook.
        self.executor = executor
        self.jobs = max(1, jobs)
        self.test_workers = test_workers or max(1, (os.cpu_count() or 1) // self.jobs)
        self.notebook_timeout = notebook_timeout  # one learner's private autograde, then it is killed
        self.run_timeout = run_timeout  # the whole run (0: none), then it stops as on Ctrl-C; a rerun goes on
        self._run_deadline: float | None = None
        self.nbgrader_args = list(nbgrader_args or [])
        self.out = out
        self.state_path = course.state_dir / "state.json"
        self.work_root = course.state_dir / "work"
        self.log_root = course.state_dir / "logs"
        self._stopping = threading.Event()  # set by stop(): no private grading starts after it
        self._running = Running(self._stopping)

    def grading_env(self) -> dict:
        """The private gradings' environment. With several learners (and their kernel tests) at once, each
        process's math libraries get their share of the cores, unless the instructor set it: left alone, torch and
        OpenMP start a thread per core in every process. Seen in the soak on a 16-core machine: 16 phase-1 notebooks
        at once took about 70 s of CPU each; 12 at once with one thread each, about 24 s (docs/GPU-RUNS.md)."""
        env = nbgrader_env()
        share = str(max(1, (os.cpu_count() or 1) // (self.jobs * self.test_workers)))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(name, share)
        return env

    # ---- state
    def load_state(self) -> dict:
        try:
            state = json.loads(self.state_path.read_text())
            if state.get("version") == STATE_VERSION:
                return state
        except (OSError, ValueError):
            pass
        return {"version": STATE_VERSION, "entries": {}}

    def save_state(self, state: dict) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
        os.replace(tmp, self.state_path)

    def is_done(self, entry: dict | None, task: Task, retry_failed: bool) -> bool:
        if not entry or entry.get("submission_hash") != task.submission_hash \
                or entry.get("assignment_hash") != task.assignment_hash:
            return False
        if entry.get("status") == "graded":
            if retry_failed and entry.get("grader_errors"):
                return False
            return (self.course.autograded / task.student / task.assignment).is_dir()
        return entry.get("status") == "failed" and not retry_failed

    # ---- one learner, in a worker thread
    def _snapshot(self) -> Path:
        """A consistent copy of the real gradebook: every private run starts from it."""
        self.work_root.mkdir(parents=True, exist_ok=True)
        return snapshot(self.course.db_url, self.work_root / "gradebook.template.db")

    def private_course(self, task: Task, gradebook: Path | bytes) -> PrivateCourse:
        """What the private copy grading ``task`` holds (laid out here, or sent to a Dask worker as bytes)."""
        return PrivateCourse(task.assignment, task.student, self.course.root / "nbgrader_config.py", gradebook,
                             task.submission(), source_files(self.course.source / task.assignment))

    def run_one(self, task: Task, template: Path) -> RunResult:
        """One learner's private grading on this machine (private.grade_privately)."""
        work = self.work_root / f"{task.assignment}__{task.student}"
        if work.exists():
            shutil.rmtree(work)
        log = self.log_root / task.assignment / f"{task.student}.attempt{task.attempt + 1}.log"
        end = grade_privately(work, self.private_course(task, template), self.autograde_argv(task), log,
                              timeout=self.notebook_timeout, running=self._running, key=task.key,
                              env=self.grading_env())
        if end is None or self._stopping.is_set():
            return RunResult(False, end.seconds if end else 0.0, "stopped", work, log)
        return self.outcome(task, work, log, end.returncode, end.seconds, end.timed_out)

    def outcome(self, task: Task, work: Path, log: Path, returncode: int, seconds: float,
                timed_out: bool) -> RunResult:
        """What a private grading in ``work`` came to (here, or on a Dask worker and sent back)."""
        if timed_out:
            return RunResult(False, seconds, f"grading took longer than {self.notebook_timeout:.0f} s and "
                             "was stopped (--notebook-timeout)", work, log)
        autograded = work / "autograded" / task.student / task.assignment
        wanted = [n for n in task.files if n.endswith(".ipynb") and "/" not in n]
        made = all((autograded / n).exists() for n in wanted)
        if returncode != 0 or not made:
            text = log.read_text(errors="replace")
            what = (f"nbgrader exited with signal {signal.Signals(-returncode).name}"
                    if returncode < 0 else f"nbgrader exited {returncode}")
            return RunResult(False, seconds, f"{what}: {_error_reason(text)}", work, log)
        return RunResult(True, seconds, "", work, log)

    def autograde_argv(self, task: Task, test_workers: int | None = None) -> list[str]:
        """The private grading's command after the Python interpreter (each machine puts its own in front)."""
        return ["-m", "nbgrader", "autograde", task.assignment, "--student", task.student, "--force",
                "--log-level=INFO", f"--IsolatedKernelTests.workers={test_workers or self.test_workers}",
                *self.nbgrader_args]

    def reproduce_command(self, task: Task, seeds: dict[str, int]) -> str:
        """The command that grades this learner again in its kept private copy (with a test's seed, if any)."""
        work = (self.work_root / f"{task.assignment}__{task.student}").relative_to(self.course.root)
        seed = f"TRITONCOURSE_SEED={next(iter(seeds.values()))} " if len(set(seeds.values())) == 1 else ""
        return (f"cd {work} && {seed}nbgrader autograde {task.assignment} --student {task.student} --force "
                + " ".join(self.nbgrader_args)).strip()

    def stop(self) -> None:
        """Kill the private gradings, then the judge zygote they shared (zygote_server.py)."""
        self._running.stop()
        close_shared_judge()

    # ---- the main process only
    def merge(self, task: Task, work: Path) -> dict:
        """Copy one learner's autograde results into the real gradebook and autograded/ (results.merge)."""
        return merge(self.course, task, work)

    def plan(self, assignments: list[str] | None,
             students: list[str] | None) -> tuple[list[tuple[str, str, list[str]]], list[str]]:
        """(assignment, student, notebooks) to consider, after checking every name; CourseError on bad names."""
        released = self.course.released_assignments()
        if assignments:
            for a in assignments:
                self.course.check_assignment(a)
        else:
            assignments = [a for a in released if self.course.submitters(a)]
            if not assignments:
                raise CourseError("Nothing to grade: no submitted/<student>/<assignment>/ folder "
                                  "(collect the notebooks first: python -m tritoncourse collect).")
        pairs = []
        for a in assignments:
            who = self.course.submitters(a)
            if students:
                pairs += [(a, s, released[a]) for s in students if s in who]
            else:
                pairs += [(a, s, released[a]) for s in who]
        if students:
            unknown = [s for s in students if not any(p[1] == s for p in pairs)]
            if unknown:
                names = sorted({s for a in assignments for s in self.course.submitters(a)})
                raise CourseError(f"No submission from {', '.join(unknown)} for {', '.join(assignments)} "
                                  f"(no submitted/<student>/<assignment>/ folder). Learners who submitted: "
                                  f"{', '.join(names) or 'none'}.")
        return pairs, assignments

    def grade(self, assignments: list[str] | None = None, students: list[str] | None = None, *,
              force: bool = False, retry_failed: bool = False) -> int:
        self._run_deadline = time.monotonic() + self.run_timeout if self.run_timeout and self.run_timeout > 0 else None
        pairs, self.assignments = self.plan(assignments, students)
        from ..grading import sandbox

        try:  # every learner's code runs in the grading sandbox: without it, nothing is graded
            sandboxed = sandbox.require()
        except sandbox.SandboxUnavailable as err:
            raise CourseError(str(err)) from None
        self._print(sandbox.status() if sandboxed else "Grading UNSANDBOXED (opted out): learners can forge grades.")
        self.course.state_dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.course.state_dir / "lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CourseError("Another `tritoncourse grade` is running in this course (only one process may "
                              "write the gradebook); wait for it, or stop it.") from None
        try:
            return self._grade(pairs, force=force, retry_failed=retry_failed)
        finally:
            close_shared_judge()  # the run's gradings are over: the judge zygote they shared ends with them
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _wait_seconds(self, poll: float | None) -> float | None:
        """How long the grading loop may wait for a grading to finish: the executor's poll interval, never past the
        run's bound."""
        if self._run_deadline is None:
            return poll
        left = max(0.0, self._run_deadline - time.monotonic())
        return left if poll is None else min(poll, left)

    def _grade(self, pairs, *, force: bool, retry_failed: bool) -> int:
        state = self.load_state()
        entries = state["entries"]
        queue: deque[Task] = deque()
        skipped = bad = 0
        for assignment, student, notebooks in pairs:
            key = f"{assignment}/{student}"
            try:
                task = prepare(self.course, assignment, student, notebooks)
            except CourseError as err:
                prev = entries.get(key, {})
                if prev.get("status") == "failed" and prev.get("reason") == str(err):
                    skipped += 1
                    continue
                entries[key] = {"status": "failed", "reason": str(err), "attempts": 0, "seconds": 0,
                                "graded_at": time.strftime("%Y-%m-%d %H:%M:%S"), "submission_hash": "",
                                "assignment_hash": self.course.assignment_hash(assignment)}
                self._print(f"FAILED  {key}: {err}")
                bad += 1
                continue
            if not force and self.is_done(entries.get(key), task, retry_failed):
                skipped += 1
                continue
            queue.append(task)
        self.save_state(state)
        total = len(queue)
        pool = self.executor if self.executor is not None else LocalExecutor(self)
        self._print(f"{total} notebook(s) to grade, {skipped} already done, {pool.describe()}; state: "
                    f"{self.state_path.relative_to(self.course.root)}")
        if not total:
            return self._summary(state, pairs, 0, 0.0)
        template = self._snapshot()
        done = failures = 0
        times: list[float] = []
        start = time.monotonic()
        running: dict = {}
        old_term = _on_sigterm_interrupt()
        try:
            with pool:
                try:
                    while queue or running:
                        if self._run_deadline is not None and time.monotonic() >= self._run_deadline:
                            raise GradingStopped(f"the run passed its bound of {self.run_timeout:g} s (--run-timeout)"
                                                 "; its gradings were stopped.")
                        while queue and len(running) < pool.slots():
                            task = queue.popleft()
                            running[pool.submit(task, template)] = task
                        finished, _ = wait(running, timeout=self._wait_seconds(pool.poll_seconds),
                                           return_when=FIRST_COMPLETED)
                        pool.check()  # GradingStopped when the cluster is gone for good
                        for fut in finished:
                            task = running.pop(fut)
                            result = fut.result()
                            key = task.key
                            merge_start = time.perf_counter()
                            result, summary = self._merge_result(task, result)
                            if not result.ok and task.attempt == 0:
                                self._print(f"RETRY   {key}: {result.reason} (log: "
                                            f"{result.log.relative_to(self.course.root)})")
                                task.attempt += 1
                                queue.append(task)
                                continue
                            done += 1
                            times.append(result.seconds)
                            failures += not result.ok
                            entry, what = self._entry(task, result, summary)
                            entries[key] = entry
                            self.save_state(state)
                            pool.merged(time.perf_counter() - merge_start)
                            left = len(queue) + len(running)
                            mean = sum(times) / len(times)
                            eta = mean * left / max(1, pool.slots(busy=True))
                            where = f" on {result.worker}" if result.worker else ""
                            self._print(f"[{done}/{total}] {key}: {what} ({result.seconds:.1f} s{where})"
                                        f"{'; ' if task.notes else ''}"
                                        f"{'; '.join(task.notes)} | left {left}, failures {failures + bad}, "
                                        f"elapsed {clock(time.monotonic() - start)}, ~{clock(eta)} to go")
                except (KeyboardInterrupt, GradingStopped) as err:
                    pool.stop()
                    for fut in running:
                        fut.cancel()
                    self.save_state(state)
                    why = f"{err} " if isinstance(err, GradingStopped) else ""
                    self._print(f"Stopped: {why}{done} graded this run, {len(queue) + len(running)} left. "
                                "Run the same command again to go on (what is done is not graded again).")
                    return 130 if isinstance(err, KeyboardInterrupt) else 3
        finally:
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
        wall = time.monotonic() - start
        with contextlib.suppress(FileNotFoundError):
            template.unlink()
        self._print(f"Graded {done} notebook(s) in {clock(wall)} ({wall / max(done, 1):.1f} s per notebook "
                    f"wall, {sum(times) / max(len(times), 1):.1f} s each, {pool.slots(busy=True)} at a time)")
        pool.report(self._print)
        return self._summary(state, pairs, done, wall)

    def _merge_result(self, task: Task, result: RunResult) -> tuple[RunResult, dict]:
        """Merge a finished grading; a broken result, or a first grading where the grader failed, becomes a failure
        (retried once)."""
        if not result.ok:
            return result, {}
        try:
            summary = self.merge(task, result.work)
        except Exception as err:  # a broken private result: retried like a crash
            return RunResult(False, result.seconds, f"merge failed: {type(err).__name__}: {err}", result.work,
                             result.log), {}
        if summary["grader_errors"] and task.attempt == 0:
            return RunResult(False, result.seconds, f"the grader failed on {', '.join(summary['grader_errors'])}",
                             result.work, result.log), summary
        return result, summary

    def _entry(self, task: Task, result: RunResult, summary: dict) -> tuple[dict, str]:
        """The learner's final record in state.json, and what the progress line says of it."""
        entry = {"submission_hash": task.submission_hash, "assignment_hash": task.assignment_hash,
                 "attempts": task.attempt + 1, "seconds": round(result.seconds, 1), "notes": task.notes,
                 "graded_at": time.strftime("%Y-%m-%d %H:%M:%S"), "log": str(result.log.relative_to(self.course.root))}
        if result.worker:
            entry["worker"] = result.worker
        if result.ok:
            entry.update(status="graded", **summary)
            shutil.rmtree(result.work, ignore_errors=True)
            what = f"{summary['score']:g}/{summary['max_score']:g}"
            if summary["failed_tests"]:
                what += f", {len(summary['failed_tests'])} test(s) failed"
            if summary.get("kernel_died_at_cell") is not None:
                what += f", kernel died at cell {summary['kernel_died_at_cell']}"
            if summary["grader_errors"]:
                what += f", GRADER ERROR in {', '.join(summary['grader_errors'])} (twice)"
            return entry, what
        seeds = seeds_in_log(result.log)
        entry.update(status="failed", reason=result.reason, seeds=seeds,
                     work=str(result.work.relative_to(self.course.root)), reproduce=self.reproduce_command(task, seeds))
        what = f"FAILED twice: {result.reason}"
        if seeds:
            what += " (seeds: " + ", ".join(f"{g}={v}" for g, v in seeds.items()) + ")"
        return entry, what

    def _summary(self, state: dict, pairs, done: int, wall: float) -> int:
        failed = [(f"{a}/{s}", state["entries"][f"{a}/{s}"]) for a, s, _ in pairs
                  if state["entries"].get(f"{a}/{s}", {}).get("status") == "failed"]
        for key, entry in failed:
            self._print(f"  failed: {key}: {entry.get('reason')}"
                        + (f" (log: {entry['log']})" if entry.get("log") else ""))
        if failed:
            self._print(f"{len(failed)} learner(s) could not be graded; fix the cause and rerun with "
                        "--retry-failed (or --students NAME --force).")
        unsure = [(f"{a}/{s}", state["entries"][f"{a}/{s}"]) for a, s, _ in pairs
                  if state["entries"].get(f"{a}/{s}", {}).get("grader_errors")]
        for key, entry in unsure:
            self._print(f"  grader error: {key}: {', '.join(entry['grader_errors'])} scored 0 because the grader "
                        f"failed, not the learner (log: {entry.get('log')}); rerun with --retry-failed")
        for line in report_lines(self.course, getattr(self, "assignments", None), state["entries"]):
            self._print(line)  # hand-ins the hub's exchange refused: their learners' fault, not a grading failure
        return 1 if failed or unsure else 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _on_sigterm_interrupt():
    """SIGTERM stops a run like Ctrl-C (children killed, state saved); None outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _interrupt)

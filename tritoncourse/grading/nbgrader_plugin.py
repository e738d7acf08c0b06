"""nbgrader glue: plain ``nbgrader autograde`` in this course directory applies out-of-kernel verdicts.

``nbgrader_config.py`` puts :class:`ResilientExecute` in place of nbgrader's Execute and
:class:`IsolatedKernelTests` right after it. For every ``%%kernel_test`` grade cell the verdict comes
from a fresh process that sees only the instructor's test (restored from the gradebook) and the
learner's @triton.jit kernels parsed from the submitted file, whatever the notebook did at run time.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import stat
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from traitlets import Bool, Float, Integer

from nbgrader.api import Gradebook
from nbgrader.preprocessors import Execute, NbGraderPreprocessor, OverwriteCells
from nbgrader.utils import is_grade, is_solution

from ..checking import fresh_seed
from ..device import infer_device
from . import sandbox
from .isolated import (GRADER_ERROR, Outcome, _Zygote, grader_error_outcome, is_kernel_test, parse_cell, run_cell,
                       test_title)
from .links import MARKER, learner_message, link_target, refusal, refused_reason
from .source import kernels_from_notebook


def _error_output(ename: str, text: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=text.splitlines()[0] if text else "",
                        traceback=[f"{ename}: {text}"])


def _stdout(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stdout", text=text + "\n")


def _verdict(outcome: Outcome) -> dict:
    """One test's entry in the verdicts log."""
    return {"ok": outcome.ok, "kind": outcome.kind, "seed": outcome.seed, "seconds": round(outcome.seconds, 2),
            "message": outcome.message}


def _reproduce(seed: int, notebook: str) -> str:
    return (f"To reproduce (instructor, in the course directory): TRITONCOURSE_SEED={seed} "
            f"python -m tritoncourse check {notebook or '<the autograded notebook>'}")


def _title(cell_source: str) -> str:
    """The test's title (its docstring's first line), or "" when even that cannot be read."""
    try:
        parsed = parse_cell(cell_source)
        return test_title(parsed[1]) if parsed else ""
    except Exception:
        return ""


def grader_error(err: BaseException, seed: int, what: str, notebook: str = "", title: str = "") -> Outcome:
    """The failed verdict of a test that the grader could not judge because it raised ``err``
    (a bug of ours, a crashed runner or zygote, an unreadable cell): a failed test, never a lost notebook."""
    frames = traceback.extract_tb(err.__traceback__) if err.__traceback__ else []
    where = f" ({os.path.basename(frames[-1].filename)}, line {frames[-1].lineno})" if frames else ""
    text = str(err).strip().splitlines()
    outcome = grader_error_outcome(what, f"{type(err).__name__}{': ' + text[0] if text else ''}{where}.", seed,
                                   title)
    outcome.message += "\n" + _reproduce(seed, notebook)
    return outcome


def _any_seed() -> int:
    """fresh_seed(), or a random one when even that fails (a malformed TRITONCOURSE_SEED)."""
    try:
        return fresh_seed()
    except Exception:
        return random.SystemRandom().randrange(1, 2**31)


def _graded_notebook(resources) -> str:
    """The autograded notebook's path relative to the course directory, for reproduction commands."""
    info = resources.get("nbgrader", {}) if isinstance(resources, dict) else {}
    if all(info.get(k) for k in ("student", "assignment", "notebook")):
        return os.path.join("autograded", str(info["student"]), str(info["assignment"]), f"{info['notebook']}.ipynb")
    return ""


def _kernel_test_cells(nb) -> list[tuple[int, NotebookNode]]:
    """(index, cell) of every ``%%kernel_test`` grade cell."""
    return [(index, cell) for index, cell in enumerate(nb.cells)
            if cell.get("cell_type") == "code" and is_grade(cell) and not is_solution(cell)
            and is_kernel_test(cell.get("source", ""))]


def _unresponsive() -> NotebookNode:
    return _error_output(
        "UnresponsiveKernel",
        "This cell never finished, and the notebook's Python process did not answer after it was interrupted "
        "(a GPU kernel that never ends cannot be interrupted). Later cells were not run; the tests were graded "
        "outside the notebook.")


def _course_directory(pre):
    """The nbgrader CourseDirectory of the converter that runs preprocessor ``pre`` (found through its parents: the
    exporter, then the converter), else one made from ``pre``'s configuration (nbgrader_config.py's root)."""
    obj = pre
    for _ in range(8):
        obj = getattr(obj, "parent", None)
        if obj is None:
            break
        coursedir = getattr(obj, "coursedir", None)
        if coursedir is not None:
            return coursedir
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=pre.config)


def _submitted_steps(pre, resources) -> tuple[str, tuple[str, ...]] | None:
    """(submitted/, the steps from it to the submitted notebook) of the notebook being graded, or None when the
    resources do not say which notebook it is."""
    info = resources.get("nbgrader", {}) if isinstance(resources, dict) else {}
    student, assignment, notebook = (info.get(k) for k in ("student", "assignment", "notebook"))
    if not (student and assignment and notebook):
        return None
    coursedir = _course_directory(pre)
    name = f"{notebook}.ipynb"
    if coursedir.directory_structure == os.path.join("{nbgrader_step}", "{student_id}", "{assignment_id}"):
        return os.path.join(coursedir.root, coursedir.submitted_directory), (str(student), str(assignment), name)
    folder = coursedir.format_path(coursedir.submitted_directory, str(student), str(assignment))
    return os.path.dirname(folder), (os.path.basename(folder), name)


def submission_refusal(pre, resources) -> str | None:
    """Why the submitted notebook being graded must not be graded as what it shows (links.refusal: a symbolic link
    on the way from submitted/ to it, a second hard link, not a regular file), or None. A check that fails refuses
    the notebook too: what could not be checked is never graded."""
    try:
        steps = _submitted_steps(pre, resources)
        if steps is None:
            return None
        reason = refusal(steps[0], *steps[1])
        if reason:
            pre.log.warning("Submission refused, %s (%s): graded as 0, its target is not read.", reason,
                            link_target(steps[0], *steps[1]))
        return reason
    except Exception as err:
        pre.log.error("Could not check the submission for links: refused.", exc_info=True)
        return f"the grader could not check the submission's files ({type(err).__name__})"


def _refused_test_source(message: str) -> str:
    return f"# Not graded: the submission was refused.\nraise RuntimeError({message!r})"


def _refused_output(message: str) -> NotebookNode:
    return _error_output("SubmissionRefused", message)


class RestoreDeletedCells(OverwriteCells):
    """nbgrader's OverwriteCells, with deleted grade cells put back where they belong, and never fatal.

    nbgrader 0.9.6's ``add_missing_cells`` fails (KeyError) when the cell before a deleted test in the
    source is a read-only cell, and then that learner's whole notebook goes ungraded. Here each missing
    grade cell goes right after the nearest earlier source cell still in the notebook.

    Like :class:`ResilientExecute`, a failure here (a gradebook that cannot be read, a bug of ours, a cell
    nbgrader chokes on) no longer loses the notebook: it is logged, the notebook keeps every cell as far as
    it was restored, and grading goes on. Each cell is checked on its own and the two restoring passes run
    apart, so one failure costs only what it touches. A test cell that could not be checked against the
    gradebook (the learner may have edited it) is not trusted: it is replaced by one that fails with a
    GRADER ERROR, so that it scores 0 until the instructor regrades, never points the learner did not earn.
    """

    def preprocess(self, nb, resources):
        self._checked = set()  # id() of the cells checked against the gradebook, or put back from it
        self._errors = []
        # A notebook reached through a link (or a hard link) is not graded as its target: nothing of what nbgrader
        # read is kept; every test is restored from the gradebook and fails with the reason (links.py).
        refused = submission_refusal(self, resources) or refused_reason(nb)
        if refused:
            self._refuse(nb, refused)
        try:
            info = resources["nbgrader"]
            self.notebook_id, self.assignment_id, self.db_url = info["notebook"], info["assignment"], info["db_url"]
            self.gradebook = Gradebook(self.db_url)
            with self.gradebook:
                # nbconvert's loop over the cells; preprocess_cell guards each one
                nb, resources = super(OverwriteCells, self).preprocess(nb, resources)
                if self.add_missing_cells or refused:
                    for step in (self.add_missing_grade_cells, self.add_missing_task_cells):
                        try:
                            nb, resources = step(nb, resources)
                        except Exception as err:
                            self._failed(f"{step.__name__} failed", err)
        except Exception as err:
            self._failed("restoring the notebook from the gradebook failed", err)
        if self._errors:
            self._fail_unchecked_tests(nb, self._errors[0])
            try:
                resources.setdefault("tritoncourse", {})["restore_errors"] = list(self._errors)
            except Exception:
                pass
        if refused:
            self._fail_refused_tests(nb, refused)
        return nb, resources

    def _refuse(self, nb, reason: str) -> None:
        """Drop everything nbgrader read from a refused notebook (its target's cells and metadata): a note, the
        marker that tells the autograde step, and the kernelspec the sanitizing steps set."""
        from nbformat.v4 import new_markdown_cell

        kernelspec = nb.get("metadata", {}).get("kernelspec")
        nb.metadata = NotebookNode({MARKER: NotebookNode({"refused": reason})})
        if kernelspec:
            nb.metadata["kernelspec"] = kernelspec
        nb.cells = [new_markdown_cell(f"**{learner_message(reason)}**")]

    def _fail_refused_tests(self, nb, reason: str) -> None:
        """Every test cell of a refused notebook fails with the reason; every answer cell is emptied."""
        message = learner_message(reason)
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if not isinstance(meta, dict) or not (meta.get("grade") or meta.get("solution") or meta.get("task")):
                continue
            if cell.get("cell_type") == "code" and is_grade(cell) and not is_solution(cell):
                cell.source = _refused_test_source(message)
            elif is_solution(cell):
                cell.source = ""
            if cell.get("cell_type") == "code":
                cell.outputs = []

    def preprocess_cell(self, cell, resources, index):
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except Exception as err:
            meta = cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell, dict) else {}
            self._failed(f"cell {index} ({meta.get('grade_id') if isinstance(meta, dict) else None}) "
                         "could not be checked", err)
            return cell, resources
        self._checked.add(id(cell))
        return cell, resources

    def _failed(self, what: str, err: BaseException) -> None:
        self.log.error("RestoreDeletedCells: %s; grading continues.", what, exc_info=err)
        self._errors.append(f"{what}: {type(err).__name__}: {err}")

    def _fail_unchecked_tests(self, nb, why: str) -> None:
        """Every code test cell not checked against the gradebook fails with a GRADER ERROR (must not raise)."""
        try:
            cells = list(nb.cells)
            message = (f"GRADER ERROR: this test could not be checked against the gradebook "
                       f"({(why.splitlines() or ['?'])[0]}), so it counts as failed. This is not a verdict on your "
                       "work: your notebook was kept; ask your instructor to regrade it.")
        except Exception:
            self.log.error("RestoreDeletedCells: could not fail the unchecked test cells", exc_info=True)
            return
        for index, cell in enumerate(cells):
            try:
                if id(cell) in self._checked or cell.get("cell_type") != "code" or not is_grade(cell) \
                        or is_solution(cell):
                    continue
                self.log.error("RestoreDeletedCells: test cell %s (%s) was not checked: it fails.", index,
                               cell.metadata.nbgrader.get("grade_id"))
                cell.source = ("# Not checked against the gradebook: failed by the grader.\n"
                               f"raise RuntimeError({message!r})")
                cell.outputs = []
            except Exception:
                self.log.error("RestoreDeletedCells: could not fail unchecked cell %s", index, exc_info=True)

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        source_cells = {c.name: c for c in source_nb.source_cells}
        order = [c.name for c in source_nb.source_cells]
        grade_cells = {c.name: c for c in source_nb.grade_cells}
        solution_ids = {c.name for c in source_nb.solution_cells}
        for position, grade_id in enumerate(order):
            if grade_id not in grade_cells:
                continue
            present = {c["metadata"]["nbgrader"]["grade_id"]: i for i, c in enumerate(nb.cells)
                       if "grade_id" in c.get("metadata", {}).get("nbgrader", {})}
            if grade_id in present:
                continue
            self.log.warning("Missing grade cell %s encountered, adding it back to the notebook", grade_id)
            cell = self.missing_cell_transform(source_cells[grade_id], grade_cells[grade_id].max_score,
                                               is_solution=grade_id in solution_ids)
            # nbgrader puts a comment first; a cell magic (%%kernel_test) must stay on the first line.
            lines = cell.source.splitlines()
            magic = next((i for i, line in enumerate(lines) if line.startswith("%%")), None)
            if magic:
                cell.source = "\n".join([lines[magic]] + lines[:magic] + lines[magic + 1:])
            before = [present[name] for name in reversed(order[:position]) if name in present]
            nb.cells.insert(before[0] + 1 if before else 0, cell)
            self._checked.add(id(cell))  # straight from the gradebook
        return nb, resources


class _NotebookExpired(BaseException):
    """Raised in the grading thread (by :class:`_Watchdog`'s signal) when a notebook's grading is past its bound and
    the thread is still waiting somewhere: a BaseException, so that no ``except Exception`` on the way swallows it."""


_WAKE = signal.SIGURG  # default action: ignored; so a wake-up that arrives after the watchdog is gone does nothing


class _Watchdog:
    """Bounds one notebook's run in ResilientExecute: its time (``notebook_timeout``), the whole run's time
    (``run_timeout``, :class:`_RunBound`) and the grader's own memory growth while the notebook runs.

    Past a bound it stops the notebook's kernel (its process tree is killed: nbclient then sees a dead kernel within
    a second, and the notebook fails at that cell with the reason). If the grading thread has still not come back
    ``grace`` seconds later (it waits in something that ignores a dead kernel, as ``zmq_ctx_term`` in a garbage
    collector does: pyzmq #1167), the thread is woken by a signal every few seconds, whose handler raises
    :class:`_NotebookExpired` there: every wait returns (EINTR), so that no notebook can keep the grader forever.
    The signal needs the main thread (plain nbgrader grades in it); elsewhere only the kernel is stopped."""

    poll = 0.05

    def __init__(self, stop_kernel, seconds: float, memory_bytes: int, log, grace: float = 10.0):
        self.stop_kernel, self.seconds, self.memory_bytes, self.log, self.grace = \
            stop_kernel, seconds, memory_bytes, log, grace
        self.expired: str | None = None  # "time", "memory" or "run" once a bound is passed
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._main = threading.current_thread() is threading.main_thread()
        self._ident = threading.get_ident()
        self._old_handler = None
        self._thread = threading.Thread(target=self._run, name="tritoncourse-notebook-watchdog", daemon=True)

    def __enter__(self):
        if self._main:
            self._old_handler = signal.signal(_WAKE, self._on_signal)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:  # no wake-up is sent once this is set
            self._done.set()
        self._thread.join(timeout=5)
        if self._main:
            signal.signal(_WAKE, self._old_handler if self._old_handler is not None else signal.SIG_DFL)

    def _on_signal(self, signum, frame):
        if self.expired and not self._done.is_set():
            raise _NotebookExpired(self.expired)

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        start = time.monotonic()
        base = me.memory_info().rss
        expired_at = next_wake = 0.0
        while not self._done.wait(self.poll):
            now = time.monotonic()
            try:
                if self.expired is None:
                    why = ("time" if self.seconds and now - start > self.seconds else
                           "memory" if self.memory_bytes and me.memory_info().rss - base > self.memory_bytes else
                           "run" if _RunBound.passed() else None)
                    if why:
                        self.expired, expired_at, next_wake = why, now, now + self.grace
                        self.log.error("Notebook watchdog: %s bound passed; stopping the notebook's kernel.", why)
                        self.stop_kernel()
                elif now >= next_wake:
                    next_wake = now + 5
                    with self._lock:
                        if not self._done.is_set() and self._main:
                            self.log.error("Notebook watchdog: the grader still waits %.0f s after the %s bound; "
                                           "interrupting it.", now - expired_at, self.expired)
                            signal.pthread_kill(self._ident, _WAKE)
            except Exception:  # the watchdog itself must never stop watching
                self.log.error("Notebook watchdog error", exc_info=True)


def _is_nbgrader_command() -> bool:
    """Whether this process is the ``nbgrader`` command (``nbgrader ...``, ``python -m nbgrader ...``), where one run
    is the whole process; not a Jupyter server running formgrader, a test, or ``tritoncourse check``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return (os.path.basename(sys.argv[0] if sys.argv else "") in ("nbgrader", "jupyter-nbgrader")
            or getattr(spec, "name", "") in ("nbgrader", "nbgrader.__main__"))


class _RunBound:
    """The whole grading run's bound (``ResilientExecute.run_timeout``) in the ``nbgrader`` command, counted from
    the process's start: plain ``nbgrader autograde`` grades every learner in one process. Once past it, the
    notebook being run is stopped (its watchdog sees :meth:`passed`) and ResilientExecute raises KeyboardInterrupt,
    which nbgrader handles as Ctrl-C: the run ends, what was graded stays, a rerun without --force goes on. If the
    process is still there ``grace`` seconds later (stuck outside ResilientExecute), its main thread gets SIGINT;
    ``2 * grace`` seconds later the process kills its own children and exits with status 124. In any other process
    (a Jupyter server, a test) there is no run bound: each notebook still has its own."""

    _thread: threading.Thread | None = None
    _deadline: float | None = None  # time.time() at which the run's bound passes
    _active = 0  # notebooks being run now (their own watchdogs stop them)
    grace = 60.0

    @classmethod
    def start(cls, seconds: float, log) -> None:
        if seconds <= 0 or cls._thread is not None or not _is_nbgrader_command():
            return
        import psutil

        cls._deadline = psutil.Process().create_time() + seconds
        cls._thread = threading.Thread(target=cls._run, args=(seconds, log, threading.main_thread().ident),
                                       name="tritoncourse-run-bound", daemon=True)
        cls._thread.start()

    @classmethod
    def passed(cls) -> bool:
        return cls._deadline is not None and time.time() > cls._deadline

    @classmethod
    def _run(cls, seconds: float, log, main: int) -> None:
        while not cls.passed():
            time.sleep(min(30.0, max(0.1, cls._deadline - time.time())))
        log.error("The grading run passed its bound (ResilientExecute.run_timeout = %s s): it stops; a rerun goes "
                  "on with the learners not graded yet.", seconds)
        time.sleep(cls.grace if cls._active else 1.0)
        with contextlib.suppress(Exception):
            signal.pthread_kill(main, signal.SIGINT)
        time.sleep(2 * cls.grace)
        log.error("The grading run did not stop after SIGINT: its processes are killed.")
        with contextlib.suppress(Exception):
            import psutil

            for child in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
        os._exit(124)


def _sandboxed_kernel_manager_class(base, uid):
    """``base`` (nbclient's AsyncKernelManager) whose connection file the sandbox's user can read."""

    class SandboxedKernelManager(base):
        def write_connection_file(self, **kwargs):
            super().write_connection_file(**kwargs)
            if uid is not None:
                os.chown(self.connection_file, uid, uid)

    return SandboxedKernelManager


class ResilientExecute(Execute):
    """nbgrader's Execute, with the notebook's kernel in the grading sandbox, and resilient.

    Sandboxed (sandbox.py): the kernel runs inside bubblewrap with a private working folder holding a copy
    of the notebook's folder, no network (it talks to nbclient over Unix sockets), no course, a user of its
    own and limits; after every cell each process the cell started is killed, and the sandbox is removed
    when the notebook is done. ``%%kernel_test`` cells are never sent to the kernel: their verdicts come from
    outside it (IsolatedKernelTests), and so the hidden tests never reach the learner's code.

    Resilient: a failed run (dead kernel, a kernel that never started, any other error of the execution
    machinery) no longer loses the whole submission. The cell that was running gets an error output, later
    cells are left unrun, and grading goes on: :class:`IsolatedKernelTests` fails every other grade cell
    left unrun.
    """

    probe_timeout = Integer(20, help="Seconds the kernel has to answer after a cell's time-out.").tag(config=True)
    output_limit = Integer(4 << 20, help="Bytes of output one cell may send the grader; the rest is dropped "
                           "(a cell that prints gigabytes must not fill the grader's memory).").tag(config=True)
    message_limit = Integer(32 << 20, help="Bytes of one message (one frame) the grader accepts from the "
                            "notebook's kernel, enforced as it is received (ZMQ_MAXMSGSIZE on every socket): a cell "
                            "that sends more is stopped there with a message saying so, and the notebook's later "
                            "cells are not run.").tag(config=True)
    memory_limit = Integer(1024 << 20, help="Bytes the grader's own memory may grow while one notebook runs (a "
                           "flood of messages that are each within message_limit): past it the notebook is "
                           "stopped at that cell. 0: no bound.").tag(config=True)
    notebook_timeout = Integer(1200, help="Seconds one notebook's run may take in all (its kernel's start, every "
                               "cell, its shutdown): past it the notebook is stopped at that cell and grading goes "
                               "on; the kernel tests are still graded outside it. 0: no bound.").tag(config=True)
    run_timeout = Integer(86400, help="Seconds a whole run of the nbgrader command may take (counted from its "
                          "start): past it the run stops as on Ctrl-C (what was graded stays; `nbgrader autograde` "
                          "without --force goes on with the rest). Not applied in other processes (a Jupyter server's "
                          "formgrader, tests). 0: no bound.").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._running = self._done = None  # the cell being run, the last cell run
        self._box = self._keep = None
        # What this run makes, ended explicitly by _release (never left to the garbage collector: a zmq context
        # finalized there with an open socket waits forever in zmq_ctx_term, pyzmq #1167 / jupyter_client #482).
        self._contexts, self._monitors = [], []
        self._client = self._manager = self._kernel_proc = None
        self._oversized = False
        resources = resources if resources is not None else {}
        self._drop_linked_copies(resources)
        refused = refused_reason(nb) or submission_refusal(self, resources)
        if refused:  # a link or a hard link (links.py): no kernel, nothing run, every test fails with the reason
            return self._refused(nb, resources, refused)
        # Outside the try: without a sandbox (and no opt-out) this notebook is not graded, loudly.
        if km is None and sandbox.require():
            student = resources.get("nbgrader", {}).get("student", "learner")
            self._box = sandbox.Sandbox(f"kernel-{student}")
        _RunBound.start(self.run_timeout, self.log)
        if _RunBound.passed():  # stuck or slow outside the notebooks: this run ends before another one starts
            if self._box is not None:
                self._box.close()
            raise KeyboardInterrupt(f"the grading run passed its bound of {self.run_timeout} s "
                                    "(ResilientExecute.run_timeout)")
        self._watchdog = _Watchdog(self._stop_kernel, self.notebook_timeout, self.memory_limit, self.log)
        _RunBound._active += 1
        try:
            with self._watchdog:
                try:
                    return super().preprocess(nb, resources, km)
                except (Exception, _NotebookExpired) as err:
                    idx = next((i for i in (self._running, self._done) if i is not None), -1)
                    if isinstance(err, _NotebookExpired):
                        self.log.error("Grading the notebook was interrupted at cell %s (%s bound); grading "
                                       "continues.", idx, err)
                        if self._running is not None:
                            nb.cells[self._running].setdefault("outputs", []).append(self._stopped_output())
                        resources.setdefault("tritoncourse", {})["execution_error"] = self._stopped_text()
                    elif isinstance(err, DeadKernelError):
                        self.log.warning("The notebook's kernel died at cell %s; grading continues.", idx)
                    else:
                        self.log.error("Running the notebook failed at cell %s; grading continues.", idx,
                                       exc_info=True)
                        resources.setdefault("tritoncourse", {})["execution_error"] = f"{type(err).__name__}: {err}"
                    resources.setdefault("tritoncourse", {})["kernel_died_at"] = idx
                    return nb, resources
                finally:
                    self._release()
        finally:
            _RunBound._active -= 1
            if self._watchdog.expired:
                resources.setdefault("tritoncourse", {})["stopped"] = self._stopped_text()
            if self._watchdog.expired == "run" or _RunBound.passed():
                raise KeyboardInterrupt(f"the grading run passed its bound of {self.run_timeout} s "
                                        "(ResilientExecute.run_timeout)")

    # ---- bounds: what stopped a notebook from outside its cells
    _watchdog: _Watchdog | None = None
    _monitors: list = []
    _oversized = False

    def _expired(self) -> str | None:
        return self._watchdog.expired if self._watchdog is not None else None

    def _stopped_text(self) -> str:
        why = self._expired()
        if self._oversized and not why:
            return (f"This cell sent the grader a single message of more than {self.message_limit >> 20} MB (output, "
                    "an image, a widget's data): the grader refuses such messages as they arrive, and stopped the "
                    "notebook here. Later cells were not run; the tests were graded outside the notebook.")
        if why == "memory":
            return (f"This cell sent the grader so much output that the grader's memory grew by more than "
                    f"{self.memory_limit >> 20} MB: the notebook was stopped here. Later cells were not run; the "
                    "tests were graded outside the notebook.")
        if why == "run":
            return ("The grading run passed its time limit while this cell ran: the notebook was stopped here and "
                    "will be graded again when the instructor goes on grading.")
        return (f"Grading this notebook took longer than {self.notebook_timeout} s in all: it was stopped here. "
                "Later cells were not run; the tests were graded outside the notebook.")

    def _stopped_output(self) -> NotebookNode:
        name = "OutputTooLarge" if self._oversized and not self._expired() else {
            "memory": "OutputTooLarge", "run": "GradingStopped"}.get(self._expired(), "NotebookTimeout")
        return _error_output(name, self._stopped_text())

    def _kernel_process(self):
        """The kernel's process (the sandbox's outer process), once started: the Popen nbclient's provisioner made."""
        if self._kernel_proc is None and self._manager is not None:
            self._kernel_proc = getattr(getattr(self._manager, "provisioner", None), "process", None)
        return self._kernel_proc

    def _stop_kernel(self) -> None:
        """Kill the notebook's kernel (its whole process tree): from the watchdog's thread, so only signals."""
        proc = self._kernel_process()
        if proc is not None and proc.poll() is None:
            sandbox.kill_process_tree(proc.pid)

    def _release(self) -> None:
        """End everything this notebook's run made, explicitly and each step bounded, whatever nbclient's own
        clean-up did: the monitor sockets, the client's channels, the manager's control socket, the kernel's
        process (killed if still there, and reaped), our zmq contexts (destroyed with linger 0, so that
        zmq_ctx_term cannot wait), the event loop's leftover tasks, and the sandbox."""

        def attempt(what, fn):
            try:
                fn()
            except (Exception, _NotebookExpired):
                self.log.warning("Clean-up: %s failed", what, exc_info=True)

        for mon in self._monitors[0::2]:
            attempt("closing a monitor socket", lambda mon=mon: mon.close(linger=0))
        if self._client is not None:
            attempt("stopping the kernel client's channels", self._client.stop_channels)
        if self._manager is not None:
            attempt("closing the kernel manager's control socket", self._manager._close_control_socket)
        proc = self._kernel_process()
        if proc is not None:
            attempt("stopping the kernel's processes", lambda: proc.poll() is None
                    and sandbox.kill_process_tree(proc.pid))
            attempt("reaping the kernel's process", lambda: proc.wait(timeout=10))
        for ctx in self._contexts:
            attempt("destroying a zmq context", lambda ctx=ctx: ctx.destroy(linger=0))
        attempt("cancelling the event loop's leftover tasks", self._cancel_leftover_tasks)
        self._contexts, self._monitors = [], []
        self._client = self._manager = self._kernel_proc = None
        if self._box is not None:
            for why in self._box.killed:
                self.log.warning("Sandbox: %s", why)
            attempt("closing the sandbox", self._box.close)
            self._box = None

    def _cancel_leftover_tasks(self) -> None:
        """An interrupted run leaves nbclient's tasks pending in this thread's event loop: cancel them, so that the
        next notebook's run does not wake them."""
        import asyncio

        from jupyter_core.utils import ensure_event_loop

        loop = ensure_event_loop()
        if loop.is_running():
            return
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=5))

    # ---- the kernel and its client: contexts of our own, bounded messages
    def _context(self, cls):
        """A zmq context of this run's own (destroyed by _release): every socket made in it refuses a message
        frame larger than message_limit as it arrives (the peer is disconnected; libzmq checks the size in the frame
        header, before the frame is read into memory)."""
        import zmq

        ctx = cls()
        self._contexts.append(ctx)
        if self.message_limit > 0:
            ctx.setsockopt(zmq.MAXMSGSIZE, int(self.message_limit))
        return ctx

    def _manager_context(self):
        """A context for the kernel manager (its control socket) of the class its ``context`` trait asks for."""
        import zmq

        klass = self.kernel_manager_class.class_traits().get("context")
        klass = getattr(klass, "klass", None)
        return self._context(klass if isinstance(klass, type) and issubclass(klass, zmq.Context) else zmq.Context)

    def create_kernel_manager(self):
        if self._box is None:
            if not self.kernel_name:
                self.kernel_name = self.nb.metadata.get("kernelspec", {}).get("name") or ""
            kw = {"kernel_name": self.kernel_name} if self.kernel_name else {}
            self.km = self.kernel_manager_class(config=self.config, context=self._manager_context(), **kw)
            self._manager = self.km
            return self.km
        from jupyter_client.kernelspec import KernelSpecManager

        box = self._box
        work = box.private_dir("work-")
        self._copy_notebook_folder(work)
        specs = box.root / "kernels"
        (specs / "tritoncourse-sandboxed").mkdir(parents=True)
        # sh stays between the sandbox's init (pid 1) and the kernel, or ipykernel sees its parent gone and quits.
        launch = f"{shlex.quote(sys.executable)} -m ipykernel_launcher -f {{connection_file}}; :"
        spec = {"argv": box.argv(["sh", "-c", launch], cwd=work, extra_env={"NBGRADER_EXECUTION": "autograde"}),
                "display_name": "Python 3 (grading sandbox)", "language": "python", "interrupt_mode": "message",
                "metadata": {}}
        (specs / "tritoncourse-sandboxed" / "kernel.json").write_text(json.dumps(spec))
        manager = _sandboxed_kernel_manager_class(self.kernel_manager_class, box.uid)
        self.km = manager(kernel_name="tritoncourse-sandboxed", config=self.config,
                          kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]), transport="ipc",
                          ip=str(box.shared / "kernel"), connection_file=str(box.shared / "connection.json"),
                          context=self._manager_context())
        self._manager = self.km
        return self.km

    async def async_start_new_kernel(self, **kwargs):
        await super().async_start_new_kernel(**kwargs)
        self._kernel_proc = getattr(getattr(self.km, "provisioner", None), "process", None)

    async def async_start_new_kernel_client(self):
        """nbclient's, with the client in a context of this run's own (bounded messages, destroyed explicitly) and
        a monitor on each socket that carries the kernel's messages (a disconnection there is a refused message)."""
        import zmq
        import zmq.asyncio

        if self._manager is None or self.km is not self._manager:  # a kernel manager we did not make: as nbclient
            self.kc = await super().async_start_new_kernel_client()
            self._client = self.kc
            return self.kc
        client = self.km.client
        self.km.client = lambda **kw: client(context=self._context(zmq.asyncio.Context), **kw)
        try:
            self.kc = await super().async_start_new_kernel_client()
        finally:
            with contextlib.suppress(AttributeError):
                del self.km.client
        self._client = self.kc
        for channel in ("shell_channel", "iopub_channel", "stdin_channel"):
            sock = getattr(getattr(self.kc, channel), "socket", None)
            if sock is not None:
                monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
                # read without the event loop through a shadow; the socket itself is kept (and closed by _release)
                self._monitors += [monitor, zmq.Socket.shadow(monitor.underlying)]
        return self.kc

    start_new_kernel = run_sync(async_start_new_kernel)
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def _refused_message(self) -> bool:
        """Whether the kernel sent a message larger than message_limit (refused as it arrived): one of the client's
        sockets was disconnected from the kernel while the kernel lives on. A kernel that died (its own doing, the
        sandbox's, a bound's) takes its sockets with it: that is not a refused message."""
        import zmq

        if self._oversized:
            return True
        disconnected = False
        for mon in self._monitors[1::2]:  # the shadows
            while True:
                try:
                    mon.recv_multipart(zmq.NOBLOCK)
                except zmq.ZMQError:  # zmq.Again: nothing more
                    break
                disconnected = True
        if not disconnected or self._expired() or (self._box is not None and self._box.killed):
            return False
        proc, until = self._kernel_proc, time.monotonic() + 0.5
        while proc is not None and proc.poll() is None and time.monotonic() < until:
            time.sleep(0.05)  # a dying kernel's sockets go first: give it the time to be seen dead
        self._oversized = proc is not None and proc.poll() is None
        return self._oversized

    async def _async_check_alive(self) -> None:
        # nbclient calls this every second while a cell runs: a refused message stops the cell at once (as a dead
        # kernel does), instead of waiting for outputs that were dropped with it.
        await super()._async_check_alive()
        if self._refused_message():
            raise DeadKernelError("the kernel sent a message larger than the grader accepts")

    def _refused(self, nb, resources, reason: str):
        """A refused notebook (links.py): if the sanitizing step did not already empty it, every cell is emptied
        here; every test cell fails with the reason, and nothing nbgrader copied beside it is kept."""
        message = learner_message(reason)
        marked = refused_reason(nb) is not None
        for cell in nb.cells:
            code = cell.get("cell_type") == "code"
            test = code and is_grade(cell) and not is_solution(cell)
            if not marked:  # what nbgrader read is the target's: none of it stays
                cell.source = _refused_test_source(message) if test else ""
            if code:
                cell.outputs = [_refused_output(message)] if test else []
        nb.setdefault("metadata", NotebookNode())[MARKER] = NotebookNode({"refused": reason})
        resources.setdefault("tritoncourse", {})["refused"] = reason
        self.log.warning("Not graded (0 points): %s", reason)
        self._remove_strays(resources)
        return nb, resources

    def _grading_folder(self, resources) -> str | None:
        """The autograded folder of the notebook being graded, when it is verifiably the one nbgrader made for it:
        ``<course root>/autograded/<student>/<assignment>`` of the configured course, reached without any symbolic
        link below the course root, and holding the graded notebook as a regular file. None otherwise (logged):
        destructive steps act on this folder only, so that a wrong path (a shared folder, a link) loses nothing."""
        try:
            folder = resources.get("metadata", {}).get("path") if isinstance(resources, dict) else None
            info = resources.get("nbgrader", {}) if isinstance(resources, dict) else {}
            student, assignment, notebook = (info.get(k) for k in ("student", "assignment", "notebook"))
            if not (folder and student and assignment and notebook):
                return None
            coursedir = _course_directory(self)
            root = os.path.realpath(coursedir.root)
            expected = os.path.realpath(coursedir.format_path(coursedir.autograded_directory, str(student),
                                                              str(assignment)))
            real = os.path.realpath(folder)
            below = os.path.relpath(expected, root).split(os.sep)
            ok = real == expected and below[0] not in ("..", ".") and len(below) >= 2
            step = root
            for part in below if ok else ():
                step = os.path.join(step, part)
                ok = ok and stat.S_ISDIR(os.lstat(step).st_mode)  # a folder, not a link to one
            notebook_path = os.path.join(real, f"{notebook}.ipynb")
            ok = ok and stat.S_ISREG(os.lstat(notebook_path).st_mode)
            if ok:
                return real
            self.log.error("%s is not this notebook's autograded folder (%s under the course %s, holding %s.ipynb): "
                           "nothing in it is deleted.", folder, os.path.join(*below), root, notebook)
        except Exception:
            self.log.error("Could not verify the notebook's autograded folder: nothing in it is deleted.",
                           exc_info=True)
        return None

    def _drop_linked_copies(self, resources) -> None:
        """nbgrader copies a submission's other files into autograded/ through symlinks: a learner's link to the
        gradebook or into source/ became a copy there, and then in their feedback. Such copies are removed."""
        try:
            build = self._grading_folder(resources)
            steps = _submitted_steps(self, resources)
            if not build or steps is None:
                return
            submitted = os.path.join(steps[0], *steps[1][:-1])
            if os.path.islink(submitted) or not os.path.isdir(submitted):
                return  # a linked submission folder is refused whole (_refused removes every copy)
            for folder, dirs, files in os.walk(submitted):
                for name in dirs + files:
                    path = os.path.join(folder, name)
                    if os.path.islink(path):
                        copy = os.path.join(build, os.path.relpath(path, submitted))
                        self.log.warning("Submission holds a symlink %s: its copy is removed", name)
                        if os.path.isdir(copy) and not os.path.islink(copy):
                            shutil.rmtree(copy, ignore_errors=True)
                        elif os.path.lexists(copy):
                            os.unlink(copy)
        except Exception:
            self.log.error("Could not check the submission for symlinks", exc_info=True)

    def _copy_notebook_folder(self, work) -> None:
        """Nothing of the notebook's folder goes into the sandbox's working folder: the graded notebook there already
        holds the restored tests, hidden ones included (found by tests/test_sandbox.py's hostile_read_secrets), and
        the course's assignments have no other files. Anything else nbgrader copied beside the notebook from the
        submission (where a symlink to source/ or to the gradebook becomes a real copy) is deleted from the
        autograded folder: it never reaches the feedback made from that folder."""
        self._remove_strays(self.resources)

    def _remove_strays(self, resources) -> None:
        """Delete every entry of the notebook's autograded folder that is not a notebook, a verdicts log or
        nbgrader's timestamp or submission secret: only in a folder :meth:`_grading_folder` verified, else nothing."""
        folder = self._grading_folder(resources)
        if folder is None:
            return
        for entry in list(os.scandir(folder)):
            # submission_secret.txt: nbgrader's exchange names the released feedback with it (release_feedback)
            if (entry.name.endswith((".ipynb", ".verdicts.json"))
                    or entry.name in ("timestamp.txt", "submission_secret.txt")) \
                    and entry.is_file(follow_symlinks=False):
                continue
            self.log.warning("Sandbox: %s is not a notebook of the assignment: removed before grading", entry.name)
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)

    def _kernel_pid(self) -> int | None:
        provisioner = getattr(self.km, "provisioner", None)
        process = getattr(provisioner, "process", None)
        return getattr(process, "pid", None)

    def _kill_strays(self) -> None:
        """After a cell: every process in the sandbox but the kernel (and its launchers) is killed."""
        outer = self._kernel_pid()
        if self._box is None or outer is None:
            return
        if self._keep is None:
            import psutil

            self._box.watch(outer)  # the memory and disk watchdog guards the kernel and all its cells start
            keep = {outer}
            for proc in self._box.descendants(outer):
                try:
                    if "ipykernel_launcher" in proc.cmdline():  # python -m ipykernel_launcher, not sh -c "..."
                        keep |= {proc.pid} | {p.pid for p in proc.parents()}
                        break
                except psutil.Error:
                    continue
            self._keep = keep
        for what in self._box.kill_strays(outer, self._keep):
            self.log.info("Sandbox: killed %r, left running by a cell", what)

    def preprocess_cell(self, cell, resources, index):
        if cell.get("cell_type") == "code" and is_grade(cell) and not is_solution(cell) \
                and is_kernel_test(cell.get("source", "")):
            # Graded outside the kernel; its source (the hidden tests) never reaches the learner's code.
            cell.outputs = [_stdout("Graded in a fresh process outside this notebook (see the verdict in your "
                                    "feedback).")]
            return cell, resources
        self._running = index
        if self._box is not None and self._keep is None and self.km is not None:
            self._kill_strays()  # the kernel is up: remember it and its launchers
        try:
            try:
                result = super().preprocess_cell(cell, resources, index)
            except DeadKernelError:
                why = "; ".join(self._box.killed) if self._box is not None and self._box.killed else ""
                if self._expired() or (not why and self._refused_message()):  # a bound stopped it, not its code
                    cell.setdefault("outputs", []).append(self._stopped_output())
                    raise
                cell.outputs.append(_error_output(
                    "DeadKernelError",
                    (f"The grading sandbox stopped the notebook's Python process: {why}." if why else
                     "The notebook's Python process died while running this cell (a crash in a kernel "
                     "launched here?).") + " Later cells were not run; the tests were graded outside the notebook."))
                raise
            except CellTimeoutError:  # no answer even after the interrupt (nbgrader raises on an iopub time-out)
                stopped = self._refused_message() or self._expired()
                cell.setdefault("outputs", []).append(self._stopped_output() if stopped else _unresponsive())
                raise
            except Exception as err:
                cell.setdefault("outputs", []).append(_error_output(
                    "ExecutionFailed",
                    f"The grader could not run this cell ({type(err).__name__}: {err}). Later cells were not run; "
                    "the tests were graded outside the notebook."))
                raise
        finally:
            self._kill_strays()
        if self._refused_message():  # a message refused while the cell still ended: its outputs are not whole
            cell.setdefault("outputs", []).append(self._stopped_output())
            raise DeadKernelError("the kernel sent a message larger than the grader accepts")
        if any(o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError" for o in cell.get("outputs", [])):
            self._stop_if_unresponsive(cell)
        self._running, self._done = None, index
        return result

    def output(self, outs, msg, display_id, cell_index):
        """nbclient's output step, with at most ``output_limit`` bytes kept per cell (counted as sent)."""
        sizes = self.__dict__.setdefault("_output_bytes", {})
        used = sizes.get(cell_index, 0)
        if used > self.output_limit:
            return None
        size = len(json.dumps(msg.get("content", {}), default=str))
        sizes[cell_index] = used + size
        if used + size > self.output_limit:
            notice = _stdout(f"[the grader dropped this cell's output past {self.output_limit >> 20} MB]")
            outs.append(notice)
            return notice
        return super().output(outs, msg, display_id, cell_index)

    def _stop_if_unresponsive(self, cell):
        """After a cell's time-out nbclient interrupts the kernel and goes on. A GPU kernel that never ends
        ignores the interrupt (the process waits inside CUDA), and then every later cell would wait out its
        own time limit: probe the kernel, and if it does not answer, stop the notebook here (the kernel is
        shut down; the tests are graded outside it, and every grade cell left unrun fails)."""
        saved, self.timeout = self.timeout, self.probe_timeout
        try:
            reply = self.wait_for_reply(self.kc.execute("pass", store_history=False, silent=True), None)
        except Exception:
            reply = None
        finally:
            self.timeout = saved
        if reply is None or reply.get("content", {}).get("status") != "ok":
            cell.outputs.append(_unresponsive())
            raise DeadKernelError("the kernel did not answer after a cell's time-out")


class IsolatedKernelTests(NbGraderPreprocessor):
    """Replace the outputs of every ``%%kernel_test`` grade cell with a verdict from a fresh process."""

    enabled = Bool(True).tag(config=True)
    workers = Integer(0, help="Tests run at once (0: one per CPU core).").tag(config=True)
    timeout_factor = Float(1.0, help="Scales every test's time limit (slower or faster graders).").tag(config=True)

    def preprocess(self, nb, resources):
        """Grade every kernel test; whatever goes wrong in the grader fails tests, never the notebook.

        Every checking process runs in a sandbox of this notebook's own (sandbox.py); without one, grading
        stops here with the sandbox's install command (SandboxUnavailable is not caught), unless opted out."""
        self._sandbox = self._zygote = None
        if sandbox.require():
            self._sandbox = sandbox.Sandbox(f"checks-{resources.get('nbgrader', {}).get('student', 'learner')}")
        try:
            return self._grade(nb, resources)
        except Exception as err:  # a bug of ours outside any one test: fail the kernel tests, keep the notebook
            self.log.error("The isolated kernel tests failed as a whole; every kernel test fails.", exc_info=True)
            return self._fail_all(nb, resources, err)
        finally:
            if self._zygote is not None:
                self._zygote.close()
            if self._sandbox is not None:
                self._sandbox.close()

    def _grade(self, nb, resources):
        died_at = resources.get("tritoncourse", {}).get("kernel_died_at")
        why = ("the notebook's kernel died in an earlier cell" if "execution_error" not in resources["tritoncourse"]
               else "running the notebook stopped in an earlier cell") if died_at is not None else ""
        notebook = _graded_notebook(resources)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and is_grade(cell) and not is_solution(cell) \
                    and not is_kernel_test(cell.source) and died_at is not None and index > died_at:
                cell.outputs = [_error_output("NotRun", f"This test was not run: {why}.")]
        tests = [(index, cell, fresh_seed()) for index, cell in _kernel_test_cells(nb)]
        try:
            kernels, plain = kernels_from_notebook(nb)
        except Exception as err:  # the learner's notebook could not be read: every kernel test fails alone
            self.log.error("Taking the kernels from the notebook failed; every kernel test fails.", exc_info=True)
            outcomes = [grader_error(err, seed, "reading the kernels from your notebook", notebook, _title(cell.source))
                        for _, cell, seed in tests]
        else:
            if self._sandbox is not None and tests and infer_device() == "cpu":
                try:  # one warm process in the sandbox forks every test (torch and triton imported once)
                    self._zygote = _Zygote(self._sandbox)
                except (OSError, RuntimeError, ValueError):
                    self.log.warning("No zygote in the sandbox: every test starts its own process.", exc_info=True)
            workers = self.workers or os.cpu_count() or 1
            with ThreadPoolExecutor(max_workers=workers) as pool:
                outcomes = list(pool.map(lambda item: self._run_one(item[1], item[2], kernels, plain, notebook),
                                         tests))
        verdicts = {}
        for (index, cell, _), outcome in zip(tests, outcomes):
            grade_id = cell.metadata.nbgrader.get("grade_id", f"cell-{index}")
            self.log.info("%s: %s (%.1f s, seed %s)", grade_id, outcome.kind, outcome.seconds, outcome.seed)
            if outcome.ok:
                cell.outputs = [_stdout(outcome.report())]
            else:
                cell.outputs = [_error_output("KernelTestFailed", outcome.report())]
            verdicts[grade_id] = _verdict(outcome)
        resources.setdefault("tritoncourse", {})["verdicts"] = verdicts
        self._write_log(resources, verdicts)
        return nb, resources

    _sandbox = _zygote = None

    def _run_one(self, cell, seed: int, kernels, plain, notebook: str) -> Outcome:
        """One test's verdict; an exception anywhere in the grader becomes this test's grader-error verdict."""
        try:
            outcome = run_cell(cell.source, kernels, plain, seed=seed, timeout_factor=self.timeout_factor,
                               sandbox=self._sandbox, zygote=self._zygote)
            if outcome is None:
                raise ValueError("the cell starts with %%kernel_test but could not be read as a kernel test")
            if outcome.kind == GRADER_ERROR:
                outcome.message += "\n" + _reproduce(seed, notebook)
            return outcome
        except Exception as err:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "?")
            self.log.error("%s: grader error (seed %s)", grade_id, seed, exc_info=True)
            return grader_error(err, seed, "running this test", notebook, _title(cell.source))

    def _fail_all(self, nb, resources, err: BaseException):
        """Every kernel test cell gets a grader-error verdict (the last resort: this must not raise)."""
        notebook = _graded_notebook(resources)
        verdicts = {}
        for index, cell in _kernel_test_cells(nb):
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", f"cell-{index}")
            try:
                outcome = grader_error(err, _any_seed(), "grading this notebook", notebook, _title(cell.source))
                cell.outputs = [_error_output("KernelTestFailed", outcome.report())]
                verdicts[grade_id] = _verdict(outcome)
            except Exception:  # never leave the magic's "graded outside" output: it would pass
                cell.outputs = [_error_output("KernelTestFailed", "GRADER ERROR: the grader itself failed on "
                                              "this notebook; ask your instructor to regrade it.")]
        resources.setdefault("tritoncourse", {})["verdicts"] = verdicts
        self._write_log(resources, verdicts)
        return nb, resources

    def _write_log(self, resources, verdicts) -> None:
        """Keep the verdicts (with seeds) beside the autograded notebook, for appeals and regrades.

        Best effort: the verdicts are in the notebook's outputs already, a log that cannot be written
        costs nothing else."""
        try:
            # The notebook's own folder (autograded/<student>/<assignment>/); nbconvert's output_files_dir is
            # a relative "<name>_files" that does not exist.
            dirs = [resources.get("metadata", {}).get("path"), resources.get("output_files_dir")]
            build_dir = next((d for d in dirs if d and os.path.isdir(d)), None)
            name = resources.get("unique_key", "notebook")
            if not build_dir:
                return
            with open(os.path.join(build_dir, f"{name}.verdicts.json"), "w") as f:
                json.dump(verdicts, f, indent=1)
        except Exception:
            self.log.error("Could not write the verdicts log.", exc_info=True)


class RestoreCellMetadata(NbGraderPreprocessor):
    """First sanitizing step of autograde: every cell's nbgrader metadata as the gradebook has it.

    nbgrader 0.9.6 restores a locked cell's source, points and lock, but not its grade/solution flags: a
    learner who flips them, renames a grade_id, duplicates a test cell, writes points that are not a
    number or a newer schema_version, makes nbgrader fail on the whole notebook (and a SchemaTooNewError
    stops plain ``nbgrader autograde`` for every later learner). Here a cell whose grade_id the gradebook
    knows gets exactly the released metadata (the last copy of a duplicate wins, as in nbgrader's
    DeduplicateIds); any other nbgrader metadata is dropped, so that cell is ungraded and the original
    cell, now missing, is restored and graded. An edit costs at most that cell's points.
    """

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook, MissingEntry

        info = resources.get("nbgrader", {})
        with Gradebook(info["db_url"]) as gb:
            try:
                notebook = gb.find_notebook(info["notebook"], info["assignment"])
            except MissingEntry:
                return nb, resources
            source = {c.name: (c.cell_type, bool(c.locked)) for c in notebook.source_cells}
            grades = {c.name: float(c.max_score) for c in notebook.grade_cells}
            solutions = {c.name for c in notebook.solution_cells}
            tasks = {c.name: float(c.max_score) for c in notebook.task_cells}
        known = set(grades) | solutions | set(tasks) | {n for n, (_, locked) in source.items() if locked}
        last = {}
        for i, cell in enumerate(nb.cells):
            meta = cell.get("metadata", {}).get("nbgrader")
            gid = meta.get("grade_id") if isinstance(meta, dict) else None
            if isinstance(gid, str) and gid in known and gid in source:
                last[gid] = i
        for i, cell in enumerate(nb.cells):
            metadata = cell.setdefault("metadata", {})
            if "nbgrader" not in metadata:
                continue
            meta = metadata["nbgrader"]
            gid = meta.get("grade_id") if isinstance(meta, dict) else None
            if last.get(gid) != i:
                if not isinstance(meta, dict) or any(meta.get(k) for k in ("grade", "solution", "locked", "task")):
                    self.log.warning("Cell %s: nbgrader metadata for %r is not in the gradebook: dropped", i, gid)
                del metadata["nbgrader"]
                continue
            new = {"grade": gid in grades, "grade_id": gid, "locked": source[gid][1], "schema_version": 3,
                   "solution": gid in solutions, "task": gid in tasks}
            if gid in grades or gid in tasks:
                new["points"] = grades.get(gid, tasks.get(gid))
            if "checksum" in meta:
                new["checksum"] = meta["checksum"]
            if {k: meta.get(k) for k in new} != new:
                self.log.warning("Cell %s (%s): nbgrader metadata restored from the gradebook", i, gid)
            metadata["nbgrader"] = new
        return nb, resources

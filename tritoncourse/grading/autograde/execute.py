"""ResilientExecute: nbgrader's Execute with the notebook's kernel in the grading sandbox, bounded, and resilient.

Its parts: the kernel and its client (notebook_kernel.py), the files around the graded notebook
(autograded_folder.py), the bounds of a notebook's and a run's time (notebook_bounds.py). ``nbgrader_config.py``
installs it through ``nbgrader_plugin``, which re-exports it (traitlets names such as ``ResilientExecute.timeout``
are this class's).
"""
from __future__ import annotations

import json

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from traitlets import Integer, default

from nbgrader.preprocessors import Execute
from nbgrader.utils import is_grade, is_solution

from .. import sandbox
from .autograded_folder import AutogradedFolder
from ..processes.isolated import is_kernel_test
from .links import refused_reason
from .notebook_bounds import _NotebookExpired, _RunBound, _Watchdog
from .notebook_kernel import LOST, SandboxedKernel
from .submission import _error_output, _stdout, submission_refusal


def _unresponsive() -> NotebookNode:
    return _error_output(
        "UnresponsiveKernel",
        "This cell never finished, and the notebook's Python process did not answer after it was interrupted "
        "(a GPU kernel that never ends cannot be interrupted). Later cells were not run; the tests were graded "
        "outside the notebook.")


class ResilientExecute(SandboxedKernel, AutogradedFolder, Execute):
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

    @default("shutdown_kernel")
    def _kill_the_kernel_when_done(self):
        """The notebook's kernel is killed once its last cell has answered, not asked to shut down: every output is
        in by then, and a graceful shutdown would have the kernel run the learner's exit handlers and tear its
        Python down (torch's modules freed one by one: about 0.5 s of CPU a notebook, for nothing) while the
        grader waits."""
        return "immediate"

    def preprocess(self, nb, resources=None, km=None):
        self._running = self._done = None  # the cell being run, the last cell run
        self._box = self._keep = None
        # What this run makes, ended explicitly by _release (never left to the garbage collector: a zmq context
        # finalized there with an open socket waits forever in zmq_ctx_term, pyzmq #1167 / jupyter_client #482).
        self._contexts, self._monitors = [], []
        self._client = self._manager = self._kernel_proc = None
        self._oversized = self._lost = False
        self._socket_inodes = {}
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
        if self._lost and not why:
            return ("The notebook's Python process closed or replaced its connection to the grader during this cell "
                    "(one of its kernel's sockets): the grader never connects to a notebook's kernel again, so the "
                    "notebook was stopped here. Later cells were not run; the tests were graded outside the notebook.")
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
        if self._lost and not self._expired():
            return _error_output("KernelConnectionLost", self._stopped_text())
        name = "OutputTooLarge" if self._oversized and not self._expired() else {
            "memory": "OutputTooLarge", "run": "GradingStopped"}.get(self._expired(), "NotebookTimeout")
        return _error_output(name, self._stopped_text())

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
        # Stopped from outside while the cell still ended: a message refused (its outputs are not whole), or a bound
        # that passed after the kernel had answered (nbclient read the reply before the watchdog's kill).
        expired = self._expired()
        stopped = ((LOST if self._lost else "the kernel sent a message larger than the grader accepts")
                   if self._refused_message() else
                   f"the notebook's {expired} bound passed during this cell" if expired else "")
        if stopped:
            cell.setdefault("outputs", []).append(self._stopped_output())
            raise DeadKernelError(stopped)
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

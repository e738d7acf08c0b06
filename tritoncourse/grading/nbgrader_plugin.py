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
import stat
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

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
    def preprocess(self, nb, resources=None, km=None):
        self._running = self._done = None  # the cell being run, the last cell run
        self._box = self._keep = None
        resources = resources if resources is not None else {}
        self._drop_linked_copies(resources)
        refused = refused_reason(nb) or submission_refusal(self, resources)
        if refused:  # a link or a hard link (links.py): no kernel, nothing run, every test fails with the reason
            return self._refused(nb, resources, refused)
        # Outside the try: without a sandbox (and no opt-out) this notebook is not graded, loudly.
        if km is None and sandbox.require():
            student = resources.get("nbgrader", {}).get("student", "learner")
            self._box = sandbox.Sandbox(f"kernel-{student}")
        try:
            return super().preprocess(nb, resources, km)
        except Exception as err:
            idx = next((i for i in (self._running, self._done) if i is not None), -1)
            if isinstance(err, DeadKernelError):
                self.log.warning("The notebook's kernel died at cell %s; grading continues.", idx)
            else:
                self.log.error("Running the notebook failed at cell %s; grading continues.", idx, exc_info=True)
                resources.setdefault("tritoncourse", {})["execution_error"] = f"{type(err).__name__}: {err}"
            resources.setdefault("tritoncourse", {})["kernel_died_at"] = idx
            return nb, resources
        finally:
            if self._box is not None:
                for why in self._box.killed:
                    self.log.warning("Sandbox: %s", why)
                self._box.close()
                self._box = None

    # ---- the kernel inside the sandbox
    def create_kernel_manager(self):
        if self._box is None:
            return super().create_kernel_manager()
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
                          ip=str(box.shared / "kernel"), connection_file=str(box.shared / "connection.json"))
        return self.km

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
        nbgrader's timestamp: only in a folder :meth:`_grading_folder` verified, else nothing."""
        folder = self._grading_folder(resources)
        if folder is None:
            return
        for entry in list(os.scandir(folder)):
            if (entry.name.endswith((".ipynb", ".verdicts.json")) or entry.name == "timestamp.txt") \
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
                cell.outputs.append(_error_output(
                    "DeadKernelError",
                    (f"The grading sandbox stopped the notebook's Python process: {why}." if why else
                     "The notebook's Python process died while running this cell (a crash in a kernel "
                     "launched here?).") + " Later cells were not run; the tests were graded outside the notebook."))
                raise
            except CellTimeoutError:  # no answer even after the interrupt (nbgrader raises on an iopub time-out)
                cell.setdefault("outputs", []).append(_unresponsive())
                raise
            except Exception as err:
                cell.setdefault("outputs", []).append(_error_output(
                    "ExecutionFailed",
                    f"The grader could not run this cell ({type(err).__name__}: {err}). Later cells were not run; "
                    "the tests were graded outside the notebook."))
                raise
        finally:
            self._kill_strays()
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

"""nbgrader glue: plain ``nbgrader autograde`` in this course directory applies out-of-kernel verdicts.

``nbgrader_config.py`` puts :class:`ResilientExecute` in place of nbgrader's Execute and
:class:`IsolatedKernelTests` right after it. For every ``%%kernel_test`` grade cell the verdict comes
from a fresh process that sees only the instructor's test (restored from the gradebook) and the
learner's @triton.jit kernels parsed from the submitted file, whatever the notebook did at run time.

The steps live in modules of their own, re-exported here for ``nbgrader_config.py``: RestoreCellMetadata and
RestoreDeletedCells (restore.py), ResilientExecute (execute.py, with notebook_kernel.py, autograded_folder.py and
notebook_bounds.py), the refusal of linked submissions (submission.py, links.py); this module holds
IsolatedKernelTests.
"""
from __future__ import annotations

import json
import os
import random
import traceback
from concurrent.futures import ThreadPoolExecutor

from nbformat.notebooknode import NotebookNode
from traitlets import Bool, Float, Integer

from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution

from ...seeds import fresh_seed
from ...device import infer_device
from .. import sandbox
from .execute import ResilientExecute
from ..processes.isolated import (GRADER_ERROR, Outcome, grader_error_outcome, is_kernel_test, parse_cell, run_cell,
                                  runs_a_runner, test_title)
from ..processes.zygote_client import _Zygote
from .notebook_bounds import _WAKE, _Watchdog
from .restore import RestoreCellMetadata, RestoreDeletedCells
from ..lint.source import PARSE_LOCK, kernels_from_notebook
from .submission import _error_output, _stdout, submission_refusal

# The course's nbgrader steps, by the names nbgrader_config.py and the tests import from here.
__all__ = ["IsolatedKernelTests", "ResilientExecute", "RestoreCellMetadata", "RestoreDeletedCells", "grader_error",
           "submission_refusal", "_WAKE", "_Watchdog"]


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


def _any_runs_a_runner(tests, kernels, plain) -> bool:
    """Whether any of ``tests`` will run the learner's definitions in a runner (isolated.runs_a_runner): where none
    will (an untouched notebook's stubs, definitions the lint refuses), the sandbox's zygote is not started, ~1.5 s of
    CPU a notebook. Where that cannot be told, True: the zygote is started as before."""
    try:
        return any(runs_a_runner(cell.source, kernels, plain) for _, cell, _ in tests)
    except Exception:
        return True


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
            if self._sandbox is not None and infer_device() == "cpu" and _any_runs_a_runner(tests, kernels, plain):
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
            with PARSE_LOCK:  # formatting a traceback parses on 3.11: never beside another test's parse (source.py)
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

"""nbgrader glue: plain ``nbgrader autograde`` in this course directory applies out-of-kernel verdicts.

``nbgrader_config.py`` puts :class:`ResilientExecute` in place of nbgrader's Execute and
:class:`IsolatedKernelTests` right after it. For every ``%%kernel_test`` grade cell the verdict comes
from a fresh process that sees only the instructor's test (restored from the gradebook) and the
learner's @triton.jit kernels parsed from the submitted file, whatever the notebook did at run time.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from nbclient.exceptions import DeadKernelError
from nbformat.notebooknode import NotebookNode
from traitlets import Bool, Float, Integer

from nbgrader.preprocessors import Execute, NbGraderPreprocessor, OverwriteCells
from nbgrader.utils import is_grade, is_solution

from .isolated import parse_cell, run_cell
from .source import kernels_from_notebook


def _error_output(ename: str, text: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=text.splitlines()[0] if text else "",
                        traceback=[f"{ename}: {text}"])


def _stdout(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stdout", text=text + "\n")


class RestoreDeletedCells(OverwriteCells):
    """nbgrader's OverwriteCells, with deleted grade cells put back where they belong.

    nbgrader 0.9.6's ``add_missing_cells`` fails (KeyError) when the cell before a deleted test in the
    source is a read-only cell, and then that learner's whole notebook goes ungraded. Here each missing
    grade cell goes right after the nearest earlier source cell still in the notebook.
    """

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
        return nb, resources


class ResilientExecute(Execute):
    """nbgrader's Execute, but a dead kernel (segfault, OOM) no longer loses the whole submission.

    The cell that killed the kernel gets an error output, later cells are left unrun, and grading
    goes on: the course's test verdicts come from outside the kernel anyway.
    """

    def preprocess(self, nb, resources=None, km=None):
        self._dead_at = None
        try:
            return super().preprocess(nb, resources, km)
        except DeadKernelError:
            idx = self._dead_at if self._dead_at is not None else -1
            self.log.warning("The notebook's kernel died at cell %s; grading continues.", idx)
            resources.setdefault("tritoncourse", {})["kernel_died_at"] = idx
            return nb, resources

    def preprocess_cell(self, cell, resources, index):
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._dead_at = index
            cell.outputs.append(_error_output(
                "DeadKernelError",
                "The notebook's Python process died while running this cell (a crash in a kernel "
                "launched here?). Later cells were not run; the tests were graded outside the notebook."))
            raise


class IsolatedKernelTests(NbGraderPreprocessor):
    """Replace the outputs of every ``%%kernel_test`` grade cell with a verdict from a fresh process."""

    enabled = Bool(True).tag(config=True)
    workers = Integer(0, help="Tests run at once (0: one per CPU core).").tag(config=True)
    timeout_factor = Float(1.0, help="Scales every test's time limit (slower or faster graders).").tag(config=True)

    def preprocess(self, nb, resources):
        kernels, plain = kernels_from_notebook(nb)
        died_at = resources.get("tritoncourse", {}).get("kernel_died_at")
        tests = []
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or not is_grade(cell) or is_solution(cell):
                continue
            if parse_cell(cell.source) is not None:
                tests.append((index, cell))
            elif died_at is not None and index > died_at:
                cell.outputs = [_error_output("NotRun", "This test was not run: the notebook's kernel "
                                              "died in an earlier cell.")]
        workers = self.workers or os.cpu_count() or 1
        with ThreadPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(
                lambda item: run_cell(item[1].source, kernels, plain, timeout_factor=self.timeout_factor),
                tests))
        verdicts = {}
        for (index, cell), outcome in zip(tests, outcomes):
            grade_id = cell.metadata.nbgrader.get("grade_id", f"cell-{index}")
            self.log.info("%s: %s (%.1f s, seed %s)", grade_id, outcome.kind, outcome.seconds, outcome.seed)
            if outcome.ok:
                cell.outputs = [_stdout(outcome.report())]
            else:
                cell.outputs = [_error_output("KernelTestFailed", outcome.report())]
            verdicts[grade_id] = {"ok": outcome.ok, "kind": outcome.kind, "seed": outcome.seed,
                                  "seconds": round(outcome.seconds, 2), "message": outcome.message}
        resources.setdefault("tritoncourse", {})["verdicts"] = verdicts
        self._write_log(resources, verdicts)
        return nb, resources

    def _write_log(self, resources, verdicts) -> None:
        """Keep the verdicts (with seeds) beside the autograded notebook, for appeals and regrades."""
        build_dir = resources.get("output_files_dir") or resources.get("metadata", {}).get("path")
        name = resources.get("unique_key", "notebook")
        if not build_dir or not os.path.isdir(build_dir):
            return
        with open(os.path.join(build_dir, f"{name}.verdicts.json"), "w") as f:
            json.dump(verdicts, f, indent=1)

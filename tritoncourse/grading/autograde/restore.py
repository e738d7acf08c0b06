"""The sanitizing steps of autograde that put a submission's cells back as the gradebook has them.

:class:`RestoreDeletedCells` (nbgrader's OverwriteCells, never fatal, deleted test cells put back in place, refused
submissions emptied) and :class:`RestoreCellMetadata` (every cell's nbgrader metadata from the gradebook).
``nbgrader_config.py`` installs both through ``nbgrader_plugin``, which re-exports them.
"""
from __future__ import annotations

from nbformat.notebooknode import NotebookNode
from traitlets import Bool

from nbgrader.api import Gradebook
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from nbgrader.utils import is_grade, is_solution

from .links import MARKER, learner_message, refused_reason
from .submission import _refused_test_source, submission_refusal


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

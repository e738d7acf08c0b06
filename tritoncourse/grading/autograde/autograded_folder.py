"""What ResilientExecute does to the files around the notebook it grades: a refused notebook emptied and failed,
links a submission held never copied into ``autograded/``, and nothing but the assignment's notebooks left beside
it, each step only in the folder verified to be that notebook's own.

:class:`AutogradedFolder` is a part of :class:`execute.ResilientExecute` (a mixin before nbgrader's Execute).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat

from nbformat.notebooknode import NotebookNode
from nbgrader.utils import is_grade, is_solution

from .links import MARKER, learner_message, refused_reason
from .submission import _course_directory, _refused_output, _refused_test_source, _submitted_steps


class AutogradedFolder:
    """ResilientExecute's steps on the notebook's autograded folder and on refused notebooks."""

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
        holds the restored tests, hidden ones included (found by tests/workflows/test_sandbox_hostile.py's
        hostile_read_secrets), and the course's assignments have no other files. Anything else nbgrader copied beside
        the notebook from the submission (where a symlink to source/ or to the gradebook becomes a real copy) is deleted
        from the autograded folder: it never reaches the feedback made from that folder."""
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

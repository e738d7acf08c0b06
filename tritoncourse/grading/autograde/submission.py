"""The submission under autograde, as the course's nbgrader steps see it: where it lies in the course directory,
whether it must be refused (links.py's rules on the path from ``submitted/``), and the error and stdout outputs the
steps write into its cells.
"""
from __future__ import annotations

import os

from nbformat.notebooknode import NotebookNode

from .links import link_target, refusal


def _error_output(ename: str, text: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=text.splitlines()[0] if text else "",
                        traceback=[f"{ename}: {text}"])


def _stdout(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stdout", text=text + "\n")


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

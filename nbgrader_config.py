"""nbgrader configuration of the Triton kernels course (the repository root is the course directory)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nbgrader.converters import Autograde  # noqa: E402
from nbgrader.preprocessors import Execute  # noqa: E402

from nbgrader.preprocessors import OverwriteCells  # noqa: E402

from tritoncourse.grading.nbgrader_plugin import (IsolatedKernelTests, ResilientExecute,  # noqa: E402
                                                  RestoreDeletedCells)

c = get_config()  # noqa: F821

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "triton-kernels"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db")

# Every kernel test runs in its own process with its own time limit; cells run in the notebook only
# show examples and pictures, but the interpreter is slow: give each cell two minutes.
c.Execute.timeout = 120
c.ResilientExecute.timeout = 120

# Deleted test cells come back from the gradebook and are graded (with nbgrader's placement bug fixed).
_sanitize = list(Autograde.class_traits()["sanitize_preprocessors"].default())
_sanitize[_sanitize.index(OverwriteCells)] = RestoreDeletedCells
c.Autograde.sanitize_preprocessors = _sanitize
c.RestoreDeletedCells.add_missing_cells = True

# Out-of-kernel verdicts: replace Execute, and run the isolated tests right after it, before the
# scores are saved. Anything else stays nbgrader's default.
_steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
_steps[_steps.index(Execute)] = ResilientExecute
_steps.insert(_steps.index(ResilientExecute) + 1, IsolatedKernelTests)
c.Autograde.autograde_preprocessors = _steps

# Warnings printed by correct code (numpy on the interpreter, deprecations) never cost points.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(Warning|warn)"

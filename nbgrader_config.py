"""nbgrader configuration of the Triton kernels course (the repository root is the course directory)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nbgrader.converters import Autograde  # noqa: E402
from nbgrader.preprocessors import Execute  # noqa: E402

from nbgrader.preprocessors import OverwriteCells  # noqa: E402

# The course's grading steps. nbgrader only logs an error in this file and then grades with its defaults,
# which would run learners' code unsandboxed with in-kernel verdicts: if the import fails, the steps are named
# by their dotted paths instead, so that autograde itself fails loudly on the same import.
try:
    from tritoncourse.grading.autograde.nbgrader_plugin import (IsolatedKernelTests, ResilientExecute,  # noqa: E402
                                                                RestoreDeletedCells)
except Exception as _err:  # pragma: no cover
    print(f"nbgrader_config.py: the course's grading steps are not importable ({_err!r}); autograde will fail "
          "rather than grade unsandboxed.", file=sys.stderr)
    IsolatedKernelTests = "tritoncourse.grading.autograde.nbgrader_plugin.IsolatedKernelTests"
    ResilientExecute = "tritoncourse.grading.autograde.nbgrader_plugin.ResilientExecute"
    RestoreDeletedCells = "tritoncourse.grading.autograde.nbgrader_plugin.RestoreDeletedCells"

c = get_config()  # noqa: F821

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "triton-kernels"
# The gradebook: SQLite in the course directory, or the database TRITONCOURSE_DB_URL names, e.g. PostgreSQL:
# postgresql+psycopg://grader@db.example.edu/triton_kernels (docs/INSTRUCTORS.md, "The gradebook on PostgreSQL").
c.CourseDirectory.db_url = (os.environ.get("TRITONCOURSE_DB_URL")
                            or "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db"))

# Grading sandbox (tritoncourse/grading/sandbox/, docs/INSTRUCTORS.md "Threat model"): the notebook's kernel and
# every checking process run inside bubblewrap; without it autograde refuses to grade (sudo apt-get install -y
# bubblewrap), unless TRITONCOURSE_UNSANDBOXED_GRADING=i-accept-that-learners-can-forge-grades is set.

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

# ---- Instructor's workflow (issue 8; tritoncourse/classroom/) -------------------
# Feedback: nbgrader generate_feedback would show the hidden tests (#917). HideHiddenTests puts back each
# test cell's released source and blanks hidden test lines in tracebacks; every verdict stays.
# Guarded like the step below; if the import fails, the step is named by its dotted path, so that
# generate_feedback fails loudly instead of writing feedback that shows the hidden tests.
from nbgrader.converters import GenerateFeedback  # noqa: E402

try:
    from tritoncourse.classroom.feedback import HideHiddenTests  # noqa: E402
except Exception as _err:  # pragma: no cover
    print(f"nbgrader_config.py: HideHiddenTests not importable ({_err!r})", file=sys.stderr)
    HideHiddenTests = "tritoncourse.classroom.feedback.HideHiddenTests"
c.GenerateFeedback.preprocessors = [HideHiddenTests] + [
    p for p in GenerateFeedback.class_traits()["preprocessors"].default() if p is not HideHiddenTests]
c.HideHiddenTests.release_directory = os.path.join(c.CourseDirectory.root, "release")
# The verdict logs beside autograded notebooks quote test code in tracebacks: nbgrader copies every other
# file of autograded/<learner>/<assignment>/ into feedback/ unless it is ignored.
from nbgrader.coursedir import CourseDirectory  # noqa: E402

c.CourseDirectory.ignore = list(CourseDirectory.class_traits()["ignore"].default()) + ["*.verdicts.json"]

# LMS downloads: `nbgrader zip_collect ASSIGNMENT` reads downloaded/ASSIGNMENT/archive/*.zip; every file named
# <student>__<assignment>.ipynb (what `python -m tritoncourse submit` writes; any folder, with "(1)", "-2"
# or "-Copy1" appended by a browser or an LMS) goes to submitted/<student>/<assignment>/<assignment>.ipynb.
c.FileNameCollectorPlugin.named_regexp = (
    r"^.*/(?P<student_id>[A-Za-z0-9](?:[A-Za-z0-9.@-]|_(?=[A-Za-z0-9.@-])){0,63})"
    r"__(?P<file_id>[0-9]{2}_[A-Za-z0-9_]*[A-Za-z0-9])(?:\s*\(\d+\)|-\d+|-Copy\d+)?\.ipynb$")
c.ZipCollectApp.strict = True  # a notebook whose name is not the assignment's is reported, not collected

# Edited nbgrader metadata (flipped grade/solution flags, renamed or duplicated grade_ids, bad points or
# schema_version) would fail the learner's whole notebook, or stop plain autograde for everyone after them:
# restore every cell's metadata from the gradebook first. Guarded: a mistake here must never cost the
# steps configured above (nbgrader only logs a failing config file, then grades with its defaults).
try:
    from tritoncourse.grading.autograde.nbgrader_plugin import RestoreCellMetadata  # noqa: E402

    _sanitize = [p for p in c.Autograde.sanitize_preprocessors if p is not RestoreCellMetadata]
    _sanitize.insert(1 if _sanitize and _sanitize[0].__name__ == "ClearOutput" else 0, RestoreCellMetadata)
    c.Autograde.sanitize_preprocessors = _sanitize
except Exception as _err:  # pragma: no cover
    print(f"nbgrader_config.py: RestoreCellMetadata not installed ({_err!r})", file=sys.stderr)
# ---- end of the instructor's workflow section ----------------------------------------------------------

# ---- Inert learner markup in the instructor's pages (issue 31; tritoncourse/classroom/sanitize.py) -------------
# Formgrader's submission pages and `nbgrader generate_feedback` both render notebooks with nbconvert's
# HTMLExporter, configured here. A learner's outputs and markdown would otherwise run as script in the
# instructor's browser (Formgrader is served by the instructor's own Jupyter server). InertLearnerContent drops
# scripts, widgets and unknown mimetypes from outputs and cleans their metadata; the markdown2html and clean_html
# filters sanitize every rendered markdown cell, markdown output and HTML output (an allow-list: no script,
# event handler, javascript: link, iframe, object, form, style sheet, or image that is not data:); and the
# course's templates/*/mathjax.html.j2 give both pages a Content-Security-Policy. Guarded like the steps above:
# if the import fails, everything is named by its dotted path, so that Formgrader and generate_feedback fail
# instead of rendering learner markup live.
try:
    from tritoncourse.classroom.sanitize import FILTERS as _inert_filters  # noqa: E402
    from tritoncourse.classroom.sanitize import TEMPLATE_BASEDIR as _inert_templates  # noqa: E402
    from tritoncourse.classroom.sanitize import InertLearnerContent  # noqa: E402
except Exception as _err:  # pragma: no cover
    print(f"nbgrader_config.py: the inert-page steps are not importable ({_err!r}); Formgrader and "
          "generate_feedback will fail rather than show learner markup live.", file=sys.stderr)
    InertLearnerContent = "tritoncourse.classroom.sanitize.InertLearnerContent"
    _inert_filters = {"markdown2html": "tritoncourse.classroom.sanitize.SafeMarkdown2HTML",
                      "clean_html": "tritoncourse.classroom.sanitize.clean_html",
                      "inert_head": "tritoncourse.classroom.sanitize.inert_head"}
    _inert_templates = os.path.join(c.CourseDirectory.root, "tritoncourse", "classroom", "templates")
import nbgrader as _nbgrader  # noqa: E402

c.HTMLExporter.preprocessors = [InertLearnerContent]
c.HTMLExporter.sanitize_html = True  # nbconvert's classic blocks: no JavaScript or widget outputs, clean_html on HTML
c.HTMLExporter.filters = dict(_inert_filters)
# The course's templates first (their mathjax.html.j2 writes the CSP), then nbgrader's formgrade/ and feedback/.
c.HTMLExporter.extra_template_basedirs = [
    _inert_templates, os.path.join(os.path.dirname(_nbgrader.__file__), "server_extensions", "formgrader", "templates")]
# ---- end of the inert-pages section ------------------------------------------------------------------------------

"""The instructor's workflow without JupyterHub: collect the notebooks, grade everyone, export the grades.

    python -m tritoncourse collect 01_vector_add DIR           # DIR/<student>__01_vector_add.ipynb -> submitted/
    python -m tritoncourse grade [ASSIGNMENT ...] [--jobs N] [--students A B ...]
    python -m tritoncourse export [ASSIGNMENT ...] [-o grades.csv]
    python -m tritoncourse feedback 01_vector_add               # feedback/ without hidden tests (feedback.py)

Each concern has its module; this one gathers their public names, which scripts and tests import from here:

- ``course``: the course directory, its gradebook's assignments and learners;
- ``collect``: hand-ins named ``<student>__<assignment>.ipynb`` into ``submitted/``;
- ``tasks``: what one learner's grading grades (``prepare``), and how it ended;
- ``private``: one private grading (a course copy, plain ``nbgrader autograde``, its time limit), which local
  grading and Dask workers share;
- ``results``: reading a private grading's log and verdicts, and merging it into the real gradebook;
- ``executors`` and ``grader``: the grading loop (parallel, restartable, one writer of the gradebook);
- ``export``: grades as CSV; ``handout``: what learners may have, and solutions after the deadline.
"""
from __future__ import annotations

from ..notebooks import STUDENT_RE, CourseError, nbgrader_ids, read_notebook, valid_student
from .collect import FILENAME_RE, SUFFIX_RE, Collected, collect, identify, print_collected, released_ids
from .course import ROOT, Course
from .executors import GradingStopped, LocalExecutor, default_jobs
from .export import export_csv
from .grader import STATE_VERSION, Grader
from .handout import HANDOUT_EXCLUDE, handout_problems, learner_secrets, make_handout, make_solutions
from .private import WORKER_CONFIG, kill_tree, nbgrader_env
from .results import LOG_SEED_RE, SEED_RE, merge, seeds_in_log, verdicts_of
from .tasks import RunResult, Task, prepare

__all__ = [
    "STUDENT_RE", "CourseError", "nbgrader_ids", "read_notebook", "valid_student",
    "FILENAME_RE", "SUFFIX_RE", "Collected", "collect", "identify", "print_collected", "released_ids",
    "ROOT", "Course", "GradingStopped", "LocalExecutor", "default_jobs", "export_csv", "STATE_VERSION", "Grader",
    "HANDOUT_EXCLUDE", "handout_problems", "learner_secrets", "make_handout", "make_solutions",
    "WORKER_CONFIG", "kill_tree", "nbgrader_env", "LOG_SEED_RE", "SEED_RE", "merge", "seeds_in_log", "verdicts_of",
    "RunResult", "Task", "prepare",
]

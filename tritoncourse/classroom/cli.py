"""The instructor's terminal commands (docs/INSTRUCTORS.md), run through ``python -m tritoncourse``:

    python -m tritoncourse collect 01_vector_add DIR             # DIR/NAME__01_vector_add.ipynb -> submitted/
    python -m tritoncourse grade [ASSIGNMENT ...] [--jobs N]     # everyone, sandboxed, restartable
    python -m tritoncourse grade --cluster local|slurm|... / --scheduler ADDRESS   # the same on Dask
    python -m tritoncourse export [-o grades.csv]                # grades with a column per test
    python -m tritoncourse feedback 01_vector_add                # feedback/ without hidden tests
    python -m tritoncourse solutions 01_vector_add               # after the deadline: solution/
    python -m tritoncourse handout DIR                           # what learners may have, checked
"""
from __future__ import annotations

from pathlib import Path

from .executors import default_jobs

ROOT = Path(__file__).resolve().parent.parent.parent


def add_commands(sub) -> None:
    """The instructor's subcommands (the learner's are tritoncourse.learner.cli's)."""

    def course_option(p):
        p.add_argument("--course", type=Path, help="the course directory (default: the current directory "
                       "when it holds nbgrader_config.py and source/ or gradebook.db, else this clone)")

    p = sub.add_parser("collect", help="copy returned notebooks (NAME__ASSIGNMENT.ipynb) into submitted/")
    course_option(p)
    p.add_argument("assignment")
    p.add_argument("folder", type=Path)
    p.add_argument("--add-students", action="store_true", help="accept learners missing from the gradebook")
    p.add_argument("--timestamps", choices=["none", "mtime"], default="none",
                   help="mtime: the file's modification time is the submission time (late penalties)")
    p.add_argument("--dry-run", action="store_true")

    p = sub.add_parser("grade", help="autograde every learner (parallel, restartable)")
    course_option(p)
    p.add_argument("assignments", nargs="*", help="default: every released assignment with submissions")
    p.add_argument("--students", nargs="+", metavar="STUDENT")
    p.add_argument("--jobs", "-j", type=int, default=default_jobs(),
                   help=f"notebooks graded at once (default here: {default_jobs()})")
    p.add_argument("--force", action="store_true", help="grade again what is already done")
    p.add_argument("--retry-failed", action="store_true", help="grade again the learners recorded as failed")
    p.add_argument("--notebook-timeout", type=float, default=1800.0,
                   help="seconds one learner's autograde may take before it is stopped (default 1800)")
    p.add_argument("--run-timeout", type=float, default=86400.0,
                   help="seconds the whole run may take: then it stops as on Ctrl-C and a rerun goes on (default "
                        "86400; 0: no bound)")
    p.add_argument("--timeout-factor", type=float, help="scales every test's time limit "
                   "(--IsolatedKernelTests.timeout_factor)")
    p.add_argument("--cell-timeout", type=float, help="seconds a notebook cell may run (--ResilientExecute.timeout)")
    p.add_argument("--unsandboxed-learners-can-forge-grades", dest="unsandboxed", action="store_true",
                   help="grade without the bubblewrap sandbox (a learner's code then runs with your rights: it can "
                   "read the hidden tests and rewrite grades); for machines where it cannot be installed")
    p.add_argument("--nbgrader", action="append", default=[], metavar="=--FLAG",
                   help="extra flag for nbgrader autograde, e.g. --nbgrader=--ExecutePreprocessor.startup_timeout=120")
    dask = p.add_argument_group("on a Dask cluster (docs/INSTRUCTORS.md, 'Grading on a cluster')")
    where = dask.add_mutually_exclusive_group()
    where.add_argument("--cluster", choices=["local", "slurm", "pbs", "sge", "lsf", "htcondor", "kubernetes"],
                       help="start a Dask cluster of --jobs workers: local (worker processes on this machine), "
                       "a batch queue (dask-jobqueue) or Kubernetes (dask-kubernetes), set up by Dask's configuration")
    where.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler (tcp://host:8786, or "
                       "its scheduler file)")
    dask.add_argument("--gpu", action="store_true", help="each grading takes one GPU: workers advertise "
                      "--resources GPU=1 (--cluster local: one worker per GPU of this machine)")
    dask.add_argument("--test-workers", type=int, help="kernel-test processes per grading (default: the "
                      "worker's cores divided by the gradings it runs at once)")
    dask.add_argument("--worker-wait", type=float, default=3600.0,
                      help="seconds without any worker before grading stops (default 3600)")
    dask.add_argument("--reconnect-wait", type=float, default=600.0,
                      help="seconds without the scheduler before grading stops (default 600)")

    p = sub.add_parser("export", help="grades as CSV, one column per test")
    course_option(p)
    p.add_argument("assignments", nargs="*")
    p.add_argument("-o", "--output", type=Path, default=Path("grades.csv"))

    p = sub.add_parser("feedback", help="nbgrader generate_feedback, checked free of hidden tests")
    course_option(p)
    p.add_argument("assignment")
    p.add_argument("--students", nargs="+", metavar="STUDENT")

    p = sub.add_parser("solutions", help="solution/<assignment>/: solutions without hidden tests")
    course_option(p)
    p.add_argument("assignment")

    p = sub.add_parser("handout", help="copy what learners may have to a new folder, checked")
    course_option(p)
    p.add_argument("folder", type=Path)


def _course_root(given: Path | None) -> Path:
    if given:
        return given
    here = Path.cwd()
    if (here / "nbgrader_config.py").exists() and ((here / "source").is_dir() or (here / "gradebook.db").exists()):
        return here
    return ROOT


def run_command(args) -> int:
    from .workflow import Course, CourseError, Grader, GradingStopped, collect, export_csv, make_handout, \
        make_solutions, print_collected

    course = Course(_course_root(args.course))
    try:
        if args.command == "collect":
            results = collect(course, args.assignment, args.folder, add_students=args.add_students,
                              timestamps=args.timestamps, dry_run=args.dry_run)
            return print_collected(results, args.assignment, args.folder)
        if args.command == "grade":
            if args.unsandboxed:
                import os

                from ..grading.sandbox import OPT_OUT_ENV, OPT_OUT_VALUE

                os.environ[OPT_OUT_ENV] = OPT_OUT_VALUE  # for this process and every nbgrader it starts
            extra = list(args.nbgrader)
            if args.timeout_factor:
                extra.append(f"--IsolatedKernelTests.timeout_factor={args.timeout_factor}")
            if args.cell_timeout:
                extra.append(f"--ResilientExecute.timeout={args.cell_timeout:g}")
            grader = Grader(course, jobs=args.jobs, notebook_timeout=args.notebook_timeout, nbgrader_args=extra,
                            run_timeout=args.run_timeout)
            if args.cluster or args.scheduler:
                from .distributed import ClusterOptions, DaskExecutor

                test_workers = args.test_workers or (grader.test_workers if args.cluster == "local" else None)
                grader.executor = DaskExecutor(grader, ClusterOptions(
                    cluster=args.cluster, scheduler=args.scheduler, workers=args.jobs, gpu=args.gpu,
                    test_workers=test_workers, worker_wait=args.worker_wait, reconnect_wait=args.reconnect_wait))
            elif args.gpu or args.test_workers:
                print("--gpu and --test-workers go with --cluster or --scheduler.")
                return 2
            return grader.grade(args.assignments or None, args.students, force=args.force,
                                retry_failed=args.retry_failed)
        if args.command == "export":
            return export_csv(course, args.output, args.assignments or None)
        if args.command == "feedback":
            from .feedback import generate_feedback

            return generate_feedback(course.root, args.assignment, args.students)
        if args.command == "solutions":
            return make_solutions(course, args.assignment)
        if args.command == "handout":
            return make_handout(course, args.folder)
    except CourseError as err:
        print(err)
        if args.command == "grade":  # e.g. nothing to grade because the hub's exchange refused every hand-in
            from .refusals import report_lines

            for line in report_lines(course, args.assignments or None, {}):
                print(line)
        return 2
    except GradingStopped as err:
        print(f"Stopped: {err}")
        return 3
    raise AssertionError(args.command)

"""The course's terminal commands.

Learners:
    python -m tritoncourse check notebooks/01_vector_add.ipynb   # exit code 0: every test passed
    python -m tritoncourse reset 01_vector_add                   # back up, then restore the release
    python -m tritoncourse submit 01_vector_add --student NAME   # check, then submissions/NAME__01_vector_add.ipynb
Instructors (docs/INSTRUCTORS.md):
    python -m tritoncourse collect 01_vector_add DIR             # DIR/NAME__01_vector_add.ipynb -> submitted/
    python -m tritoncourse grade [ASSIGNMENT ...] [--jobs N]     # everyone, restartable
    python -m tritoncourse export [-o grades.csv]                # grades with a column per test
    python -m tritoncourse feedback 01_vector_add                # feedback/ without hidden tests
    python -m tritoncourse solutions 01_vector_add               # after the deadline: solution/
    python -m tritoncourse handout DIR                           # what learners may have, checked
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import nbformat

from .isolated import run_cell
from .source import kernels_from_notebook

ROOT = Path(__file__).resolve().parent.parent.parent


def check_notebook(path: Path) -> int:
    """Run every ``%%kernel_test`` cell of a saved notebook in fresh processes; 0 when all pass."""
    try:
        nb = nbformat.read(str(path), as_version=4)
    except FileNotFoundError:
        print(f"{path}: no such notebook. Start with `make lab`, which creates it from release/.")
        return 2
    except Exception as err:  # not JSON, not a notebook
        print(f"{path} is not a readable notebook ({type(err).__name__}: {err}).\n"
              f"Restore it with `make reset PHASE={path.stem}` (your copy is backed up first).")
        return 2
    kernels, plain = kernels_from_notebook(nb)
    failed = passed = hidden = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outcome = run_cell(cell.source, kernels, plain)
        if outcome is None:
            continue
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        print(f"[{grade_id}] " + outcome.report().replace("\n", "\n    "), flush=True)
        hidden += outcome.kind == "hidden"
        passed += outcome.ok and outcome.kind != "hidden"
        failed += not outcome.ok
    print(f"{passed} passed, {failed} failed" + (f" ({hidden} hidden, run when graded)" if hidden else ""))
    return 0 if failed == 0 and passed > 0 else 1


def reset_notebook(phase: str, workspace: Path = ROOT / "notebooks", release: Path = ROOT / "release") -> int:
    """Back up ``notebooks/<phase>.ipynb`` to ``notebooks/backups/`` and copy the released version back."""
    src = release / phase / f"{phase}.ipynb"
    if not src.exists():
        known = sorted(p.name for p in release.iterdir() if p.is_dir())
        print(f"Unknown phase '{phase}'. Phases: {', '.join(known)}")
        return 2
    dest = workspace / f"{phase}.ipynb"
    if dest.exists():
        backups = workspace / "backups"
        backups.mkdir(parents=True, exist_ok=True)
        backup = backups / f"{phase}.{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
        shutil.copy2(dest, backup)
        print(f"Your notebook was backed up to {backup}")
    shutil.copy2(src, dest)
    print(f"{dest} is the released version again.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritoncourse")
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser("check", help="run a notebook's tests in fresh processes")
    p_check.add_argument("notebook", type=Path)
    p_reset = sub.add_parser("reset", help="back up a notebook and restore its released version")
    p_reset.add_argument("phase")
    _add_classroom_commands(sub)
    args = parser.parse_args(argv)
    if args.command == "check":
        return check_notebook(args.notebook)
    if args.command == "reset":
        return reset_notebook(args.phase)
    return _run_classroom_command(args)


def _add_classroom_commands(sub) -> None:
    from .classroom import default_jobs

    def course_option(p):
        p.add_argument("--course", type=Path, help="the course directory (default: the current directory "
                       "when it holds nbgrader_config.py and source/ or gradebook.db, else this clone)")

    p = sub.add_parser("submit", help="check your notebook and write the file to hand in")
    course_option(p)
    p.add_argument("assignment")
    p.add_argument("--student", required=True, help="your learner id, as your instructor gave it")
    p.add_argument("--notebook", type=Path, help="default: notebooks/<assignment>.ipynb")
    p.add_argument("--out", type=Path, help="default: submissions/")
    p.add_argument("--no-check", action="store_true", help="do not run the tests first")

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
    p.add_argument("--timeout-factor", type=float, help="scales every test's time limit "
                   "(--IsolatedKernelTests.timeout_factor)")
    p.add_argument("--cell-timeout", type=float, help="seconds a notebook cell may run (--ResilientExecute.timeout)")
    p.add_argument("--nbgrader", action="append", default=[], metavar="=--FLAG",
                   help="extra flag for nbgrader autograde, e.g. --nbgrader=--ExecutePreprocessor.startup_timeout=120")

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


def _run_classroom_command(args) -> int:
    from .classroom import Course, CourseError, Grader, collect, export_csv, make_handout, make_solutions, \
        print_collected

    course = Course(_course_root(args.course))
    try:
        if args.command == "submit":
            from .submit import submit

            return submit(args.assignment, args.student, notebook=args.notebook, out=args.out,
                          run_checks=not args.no_check, root=course.root)
        if args.command == "collect":
            results = collect(course, args.assignment, args.folder, add_students=args.add_students,
                              timestamps=args.timestamps, dry_run=args.dry_run)
            return print_collected(results, args.assignment, args.folder)
        if args.command == "grade":
            extra = list(args.nbgrader)
            if args.timeout_factor:
                extra.append(f"--IsolatedKernelTests.timeout_factor={args.timeout_factor}")
            if args.cell_timeout:
                extra.append(f"--ResilientExecute.timeout={args.cell_timeout:g}")
            grader = Grader(course, jobs=args.jobs, notebook_timeout=args.notebook_timeout, nbgrader_args=extra)
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
        return 2
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())

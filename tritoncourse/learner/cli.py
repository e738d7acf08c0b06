"""The learner's terminal commands, dispatched here and nowhere else:

    python -m tritoncourse check notebooks/01_vector_add.ipynb   # exit code 0: every test passed
    python -m tritoncourse reset 01_vector_add                   # back up, then restore the release
    python -m tritoncourse submit 01_vector_add --student NAME   # check, then submissions/NAME__01_vector_add.ipynb

Importing this module loads nothing of the instructor's tools (``tritoncourse.classroom``) nor of the grader
(``tritoncourse.grading``); ``check`` (and ``submit``, which checks first) loads only the test runner it needs, when
it runs. ``tests/units/test_learner_cli.py`` holds it to that.
"""
from __future__ import annotations

import argparse
from pathlib import Path

COMMANDS = ("check", "reset", "submit")
ROOT = Path(__file__).resolve().parent.parent.parent  # the course this package belongs to


def add_commands(sub) -> None:
    """The learner's subcommands, on an ``argparse`` subparsers object."""
    p = sub.add_parser("check", help="run a notebook's tests in fresh processes")
    p.add_argument("notebook", type=Path)
    p = sub.add_parser("reset", help="back up a notebook and restore its released version")
    p.add_argument("phase")
    p = sub.add_parser("submit", help="check your notebook and write the file to hand in")
    p.add_argument("assignment")
    p.add_argument("--student", required=True, help="your learner id, as your instructor gave it")
    p.add_argument("--notebook", type=Path, help="default: notebooks/<assignment>.ipynb of the course")
    p.add_argument("--out", type=Path, help="default: submissions/ of the course")
    p.add_argument("--no-check", action="store_true", help="do not run the tests first")
    p.add_argument("--course", type=Path, default=ROOT, help="the course folder (default: the one this "
                   "package is in)")


def run_command(args) -> int:
    if args.command == "check":
        from .check import check_notebook

        return check_notebook(args.notebook)
    if args.command == "reset":
        from .check import reset_notebook

        return reset_notebook(args.phase)
    from .submit import submit

    return submit(args.assignment, args.student, notebook=args.notebook, out=args.out,
                  run_checks=not args.no_check, root=args.course.resolve())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritoncourse")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run_command(parser.parse_args(argv))

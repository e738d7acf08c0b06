"""The course's terminal commands: ``python -m tritoncourse COMMAND``.

Learners (``tritoncourse.learner``; nothing of the instructor's workflow is imported for these):
    python -m tritoncourse check notebooks/01_vector_add.ipynb   # exit code 0: every test passed
    python -m tritoncourse reset 01_vector_add                   # back up, then restore the release
    python -m tritoncourse submit 01_vector_add --student NAME   # check, then submissions/NAME__01_vector_add.ipynb
Instructors (``tritoncourse.classroom``, docs/INSTRUCTORS.md):
    collect, grade, export, feedback, solutions, handout         # see python -m tritoncourse --help
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

LEARNER_COMMANDS = ("check", "reset")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m tritoncourse")
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser("check", help="run a notebook's tests in fresh processes")
    p_check.add_argument("notebook", type=Path)
    p_reset = sub.add_parser("reset", help="back up a notebook and restore its released version")
    p_reset.add_argument("phase")
    learner_only = bool(argv) and argv[0] in LEARNER_COMMANDS
    if not learner_only:  # the instructor's commands (and submit) are only imported when asked for
        from .classroom.cli import add_commands

        add_commands(sub)
    args = parser.parse_args(argv)
    if args.command in LEARNER_COMMANDS:
        from .learner.check import check_notebook, reset_notebook

        return check_notebook(args.notebook) if args.command == "check" else reset_notebook(args.phase)
    from .classroom.cli import run_command

    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())

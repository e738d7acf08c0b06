"""The course's terminal commands: ``python -m tritoncourse COMMAND``.

Learners (``tritoncourse.learner.cli``, which dispatches them; nothing of the instructor's tools or of the grader is
imported for these but the test runner that ``check`` and ``submit`` run):
    python -m tritoncourse check notebooks/01_vector_add.ipynb   # exit code 0: every test passed
    python -m tritoncourse reset 01_vector_add                   # back up, then restore the release
    python -m tritoncourse submit 01_vector_add --student NAME   # check, then submissions/NAME__01_vector_add.ipynb
Instructors (``tritoncourse.classroom.cli``, docs/INSTRUCTORS.md):
    collect, grade, export, feedback, solutions, handout         # see python -m tritoncourse --help
"""
from __future__ import annotations

import argparse
import sys

from .learner.cli import COMMANDS as LEARNER_COMMANDS


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in LEARNER_COMMANDS:
        from .learner.cli import main as learner_main

        return learner_main(argv)
    # Help, an instructor's command or a mistake: the whole list (the instructor's commands are imported only here).
    from .classroom.cli import add_commands, run_command
    from .learner.cli import add_commands as add_learner_commands

    parser = argparse.ArgumentParser(prog="python -m tritoncourse")
    sub = parser.add_subparsers(dest="command", required=True)
    add_learner_commands(sub)
    add_commands(sub)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

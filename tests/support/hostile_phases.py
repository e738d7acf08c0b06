"""The hostile learners of the phases after the first (tests/hostile/<assignment>/, phase 7's today), handed in to
tests/workflows/test_grading.py's own run of that phase: in the course of its reference (the correct learner), graded
by the same one `nbgrader autograde` (tests/workflows/test_hostile_phases.py asks the questions). Phase 1's hostile
learners are a class of their own (tests/support/hostile_class.py): its sandbox's limits, kills and leaks.

What is read back: the outputs of the learner's own cells (where its hostile cell prints ``HOSTILE-RAN``) and the
paths its forger says it wrote; each course's files before grading (hostile_class.digest) to compare after it.
"""
from __future__ import annotations

import ast
import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course import Course, Fixture
from hostile_class import digest

HOSTILE_DIR = Path(__file__).resolve().parents[1] / "hostile"
# The phases whose hostile learners test_grading's run grades (phase 1's: the hostile class).
GRADED_WITH_THE_PHASE = ["07_attention_backward"]
# Where a sandbox's HOME lies (tritoncourse/grading/sandbox: <temp>/tritoncourse-sandbox-<name>-<random>/shared/home).
SANDBOX_HOME = re.compile(r"/tritoncourse-sandbox-[^/]+/shared/home/")


def hostile_fixtures(assignment: str) -> list[Fixture]:
    """The hostile learners of ``assignment`` that test_grading grades (none for the others)."""
    if assignment not in GRADED_WITH_THE_PHASE:
        return []
    return [Fixture.load(p) for p in sorted((HOSTILE_DIR / assignment).glob("hostile_*.py"))]


@dataclass
class HostileSubmissions:
    """The hostile learners handed in to one phase's grading: who, where, and each course's files before it."""

    marker: str = field(default_factory=lambda: "m" + secrets.token_hex(8))
    fixtures: list[Fixture] = field(default_factory=list)
    courses: dict[str, Course] = field(default_factory=dict)  # learner -> the course that grades it
    before: dict[Path, dict[str, str]] = field(default_factory=dict)  # course folder -> digest before grading

    def submit(self, course: Course, assignment: str, release, source) -> None:
        """Hand in every hostile learner of ``assignment`` to ``course``, its placeholders filled
        (tests/hostile/01_vector_add/README.md: only ``{{course}}`` and ``{{marker}}`` are used after phase 1)."""
        for fx in hostile_fixtures(assignment):
            nb = fx.notebook(release, source)
            for cell in nb.cells:
                cell.source = cell.source.replace("{{course}}", str(course.path)).replace("{{marker}}", self.marker)
                assert "{{" not in cell.source, f"{fx.name}: a placeholder this grading does not fill"
            course.submit(fx.name, assignment, nb)
            self.fixtures.append(fx)
            self.courses[fx.name] = course

    def record(self) -> None:
        """Each course's files as handed in, before grading (called once every learner is in)."""
        for course in set(self.courses.values()):
            self.before[course.path] = digest(course.path)


def own_outputs(course: Course, assignment: str, student: str) -> str:
    """The outputs of the learner's own cells (not the graded tests) of its autograded notebook, as JSON text."""
    nb = nbformat.read(course.path / "autograded" / student / assignment / f"{assignment}.ipynb", as_version=4)
    return json.dumps([c.get("outputs", []) for c in nb.cells
                       if not c.get("metadata", {}).get("nbgrader", {}).get("grade")])


def forged_paths(outputs: str, name: str) -> list[str] | None:
    """The paths the forger of ``name`` printed it wrote (``forged [...]``), or None when it printed none."""
    text = "".join(out.get("text", "") for cell in json.loads(outputs) for out in cell)
    found = re.search(rf"HOSTILE-RAN {re.escape(name)}: .*forged (\[.*?\])", text)
    return ast.literal_eval(found.group(1)) if found else None

"""The hostile learners of the phases after the first (tests/hostile/07_attention_backward/: an autograd.Function that
forges its backward and patches the checks, a custom op under the judge's own name whose fake registration forges
the gradebook and leaves files), graded by real `nbgrader autograde`: handed in to tests/workflows/test_grading.py's
own run of their phase, in the course of its reference (tests/support/hostile_phases.py), so that they cost only
their own notebooks (no course, no nbgrader start, no class of their own: tests/workflows/test_sandbox_hostile.py's
class grades phase 1's). Then: each scores 0 on every kernel test with its header's message; its hostile cell ran
where the notebook runs, inside the grading sandbox; nothing it forged reached the course, the gradebook or a HOME
outside the sandbox, and the reference graded beside it keeps full marks.
"""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from hostile_class import digest
from hostile_phases import GRADED_WITH_THE_PHASE, SANDBOX_HOME, forged_paths, hostile_fixtures, own_outputs
from test_grading import REFERENCE, STANDARD, graded, hostile_chosen  # noqa: F401  (graded: the fixture)

pytestmark = pytest.mark.skipif(not hostile_chosen(), reason="TRITONCOURSE_GRADING_FIXTURES names no `hostile`")


def _params():
    # parametrized by `assignment`, as test_grading's tests: the same phase's grading on the same worker
    return [pytest.param(a, fx, id=f"{a}/{fx.name}") for a in GRADED_WITH_THE_PHASE for fx in hostile_fixtures(a)]


@pytest.mark.parametrize("assignment,fixture", _params())
def test_hostile_learner_scores_zero_on_every_kernel_test(graded, assignment, fixture):
    """Does a notebook that forges the course's autograd.Function, patches the checks or registers the judge's op
    score 0 on every kernel test, each failing with its header's message and a seed? (The tests are graded outside
    the notebook, on its definitions alone: its empty kernels.)"""
    g = graded(assignment)
    assert fixture.expect_fail == set(g.kernel_tests), "the header's expect-fail must name every kernel test"
    scores, feedback = g.scores(fixture.name), g.feedback(fixture.name)
    for t in g.kernel_tests:
        assert scores[t] == 0, f"{t} scored {scores[t]}:\n{feedback[t]}"
        assert fixture.expect_message.lower() in feedback[t].lower() and "seed" in feedback[t], feedback[t]


@pytest.mark.parametrize("assignment,fixture", _params())
def test_hostile_cell_ran_inside_the_notebooks_sandbox(graded, assignment, fixture):
    """Did the hostile cell run where the notebook runs (it prints HOSTILE-RAN there), and did the forger's
    file land only in the grading sandbox's own HOME, gone with it?"""
    g = graded(assignment)
    course = g.hostile.courses[fixture.name]
    name = fixture.name.removeprefix("hostile_")
    outputs = own_outputs(course, assignment, fixture.name)
    assert f"HOSTILE-RAN {name}" in outputs, outputs[-3000:]
    if "forged_backward" in name:  # its patches took in the notebook's kernel: the checks' modules are there
        patched = re.search(r"(\d+) names patched in the notebook's kernel", outputs)
        assert patched and int(patched.group(1)) > 0, outputs[-3000:]
    if "custom_op" in name:
        assert "registered True" in outputs, outputs[-3000:]
        paths = forged_paths(outputs, name)
        wanted = f"forged_{g.hostile.marker}.txt"
        assert paths and all(SANDBOX_HOME.search(p) and p.endswith(wanted) for p in paths), paths
        assert not [p for p in paths if Path(p).exists()], "the sandbox's HOME outlived grading"


@pytest.mark.parametrize("assignment", GRADED_WITH_THE_PHASE)
def test_hostile_learners_change_no_course_file_and_no_grade(graded, assignment):
    """After grading: every file of the course as handed in; no manual score or extra credit in the gradebook,
    nothing of the forger's in it; no forged file in the grader's HOME or /tmp; the reference, graded in the same
    run and gradebook, has every point."""
    g = graded(assignment)
    assert g.hostile.before, "no hostile learner was handed in"
    marker = g.hostile.marker
    for path, before in g.hostile.before.items():
        after = digest(path)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        assert not changed, changed
        with sqlite3.connect(path / "gradebook.db") as con:
            dump = "\n".join(con.iterdump())
            forged = con.execute("SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL "
                                 "OR extra_credit IS NOT NULL").fetchone()[0]
        assert forged == 0 and marker not in dump, f"{forged} forged grades"
    left = [str(p) for folder in (Path.home(), Path("/tmp")) for p in folder.glob(f"*{marker}*")]
    assert not left, left
    if STANDARD:
        assert g.courses[REFERENCE].path in g.hostile.before, "the reference is graded in another course"
        scores = g.scores(REFERENCE)
        assert all(scores[t] > 0 for t in g.kernel_tests), scores

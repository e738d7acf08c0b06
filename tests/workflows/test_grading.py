"""Real `nbgrader autograde` on every phase: the three standard learners (the reference handed in as the filled
release with its tests deleted, the untouched release with its tests edited, a broken file) and the fixtures of
tests/submissions/<assignment>/ that nbgrader's own run can change (NBGRADER_FIXTURES: every autograded cell is a
kernel test scored outside the notebook, so the notebook-level cheats, and one stray access a phase for nbgrader's
feedback; phase 1's crash, endless loop, monkeypatching and broken unrelated cell are graded through nbgrader in
tests/workflows/test_classroom.py's class, CLASS_FIXTURES).

Every fixture's verdict is proved below this, in tests/judged/test_verdicts.py, through the grader's own judge and
sandboxed runner without nbgrader; here nbgrader's part is proved (restored tests, scores, feedback).
TRITONCOURSE_GRADING_FIXTURES=all grades every fixture through nbgrader too (a GPU run, a release check).
Phase 7's hostile learners are handed in to the same run, in the reference's course (tests/support/hostile_phases.py;
their questions: tests/workflows/test_hostile_phases.py), unless TRITONCOURSE_GRADING_FIXTURES names others only.

Each phase is graded once (all its submissions, one gradebook); the tests then ask the gradebook and the
autograded notebooks questions.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import DEVICE
from baseline import CELL_TIMEOUT, TIMEOUT_FACTOR
from course import (CLASS_FIXTURES, NBGRADER_FIXTURES, SCALED_DOWN, SUBMISSIONS, Course, fill_solution_regions,
                    fixtures, graded_test_ids)
from hostile_phases import HostileSubmissions, hostile_fixtures

ASSIGNMENTS = sorted(p.name for p in SUBMISSIONS.iterdir() if p.is_dir())
# Endless-loop submissions wait for the time limit: grade with limits scaled down (the slowest correct
# test of any phase takes a few seconds here, far below the scaled limits).
# TRITONCOURSE_GRADING_FLAGS (e.g. a GPU run's own limits) replaces these flag by flag (traitlets takes each once).
_GIVEN = dict(flag.split("=", 1) for flag in os.environ.get("TRITONCOURSE_GRADING_FLAGS", "").split())
_FLAGS = {"--IsolatedKernelTests.timeout_factor": "0.5", "--ResilientExecute.timeout": "60", **_GIVEN}
FLAGS = tuple(f"{key}={value}" for key, value in _FLAGS.items())
# An endless loop waits for every limit it meets (the notebook's cell that runs the kernel, then each failing test),
# spinning a core all the while: its learner is graded in a course copy of its own, at the same time as the others,
# with phase 1's largest sizes scaled down (tests/support/course.py SCALED_DOWN, as the classroom's class) and the
# classroom's limits (tests/support/baseline.py: 0.12 of each test's, 14.4 s, and a 15 s cell limit): the same verdicts
# ("did not finish", 0 points for those tests; its full-blocks test, under a second at the scaled sizes, passes) much
# sooner (0.15 and 20 s at the real sizes before, whose full-blocks test took 3-9 s on a loaded 2-core machine). On a
# GPU (compute-sanitizer: ~10 s a correct test) and wherever TRITONCOURSE_GRADING_FLAGS says, the usual limits and
# sizes.
ENDLESS_SCALED = DEVICE == "cpu" and not _GIVEN
ENDLESS_FLAGS = FLAGS if not ENDLESS_SCALED else tuple(f"{key}={value}" for key, value in {
    **_FLAGS, "--IsolatedKernelTests.timeout_factor": str(TIMEOUT_FACTOR),
    "--ResilientExecute.timeout": str(CELL_TIMEOUT)}.items())
# TRITONCOURSE_GRADING_FIXTURES=name,name grades only those fixtures (and the three standard learners): a GPU run
# with little device time picks the submissions that matter; =all grades every fixture; unset, NBGRADER_FIXTURES.
_ONLY = os.environ.get("TRITONCOURSE_GRADING_FIXTURES", "")
ONLY = {name for name in _ONLY.split(",") if name and _ONLY != "all"}


def chosen(assignment: str, name: str) -> bool:
    """Whether fixture ``name`` of ``assignment`` is graded through nbgrader in this run."""
    if _ONLY == "all":
        return True
    return name in ONLY if ONLY else name in NBGRADER_FIXTURES.get(assignment, set())


def hostile_chosen() -> bool:
    """Whether the phases' hostile learners (tests/support/hostile_phases.py) are graded in this run: unless
    TRITONCOURSE_GRADING_FIXTURES names fixtures and not `hostile`."""
    return _ONLY == "all" or not ONLY or "hostile" in ONLY


# TRITONCOURSE_GRADING_STANDARD=0 leaves out the three standard learners (their tests are skipped, saying so): a GPU
# run that has already graded them spends its time on fixtures alone.
STANDARD = os.environ.get("TRITONCOURSE_GRADING_STANDARD", "1") != "0"

needs_standard = pytest.mark.skipif(not STANDARD, reason="TRITONCOURSE_GRADING_STANDARD=0: the three standard "
                                                         "learners are not graded in this run")


def _kernel_tests(nb) -> list[str]:
    return [c.metadata.nbgrader["grade_id"] for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade") and c.cell_type == "code"
            and not c.metadata.nbgrader.get("solution") and c.source.lstrip().startswith("%%kernel_test")]


# Submissions are split over a few course copies (each its own gradebook) graded at the same time: one a core this
# pytest process has (the cores over pytest-xdist's workers), up to 4. On CI's 2 cores under `make test` (two workers)
# one: a second copy there bought no speed (the other worker keeps the other core busy) and cost its course's
# generation and an nbgrader process (~4 s of CPU a phase).
_CORES = (os.cpu_count() or 1) // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
SHARDS = int(os.environ.get("TRITONCOURSE_GRADING_SHARDS", 0)) or max(1, min(4, _CORES))


class Graded:
    def __init__(self, courses: dict[str, Course], assignment: str, procs, hostile: HostileSubmissions):
        self.courses, self.assignment, self.procs = courses, assignment, procs
        self.hostile = hostile  # the phase's hostile learners (tests/workflows/test_hostile_phases.py)
        any_course = next(iter(courses.values()))
        self.tests = graded_test_ids(any_course.source_notebook(assignment))
        self.kernel_tests = _kernel_tests(any_course.source_notebook(assignment))
        self.log = "\n".join(p.stdout + p.stderr for p in procs)

    def scores(self, student):
        return self.courses[student].scores(self.assignment, student)

    def feedback(self, student):
        return self.courses[student].feedback_text(self.assignment, student)


def submit_standard(submit, course: Course, assignment: str, release, source):
    """The three standard learners: the instructor's solution as a learner hands it in (the release's stubs filled
    with the source's solution regions) with every test cell deleted; the untouched release with every test cell
    replaced by `pass`; a file that is not a notebook.

    Each of the first two carries proofs that still fail apart: full marks for the reference's kernels, for a
    release whose stubs can be filled in place, and for deleted tests restored and graded (a failing kernel, a stub
    that breaks or a test left unrestored loses points); an empty kernel's zero and edited tests restored (an edit
    that survived would score its points). The source notebook itself is not handed in: its kernels and every cell
    around them are the filled release's (tests/README.md)."""
    untouched = course.release_notebook(assignment)
    for c in untouched.cells:
        if c.get("metadata", {}).get("nbgrader", {}).get("locked") and c.cell_type == "code" \
                and c.metadata.nbgrader.get("grade"):
            c.source = "pass"
    submit("untouched_tests_edited", untouched)
    filled = fill_solution_regions(release, source)
    filled.cells = [c for c in filled.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade") is not True
                    or c.metadata.nbgrader.get("solution")]
    submit(REFERENCE, filled)
    submit("not_json", "{ this is not a notebook")


# The instructor's solution as a learner hands it in (see submit_standard).
REFERENCE = "filled_release_tests_deleted"
# Standard learners whose grading runs no kernel of theirs (stubs and edited tests; not a notebook): cheap.
RUN_NO_KERNEL = {"untouched_tests_edited", "not_json"}


_cache: dict[str, Graded] = {}


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    def grade(assignment: str) -> Graded:
        if assignment not in _cache:
            shards = [Course(tmp_path_factory.mktemp(f"{assignment}-{i}"), [assignment]) for i in range(SHARDS)]
            endless: list[Course] = []  # the endless loops' own course copy, made when one is graded
            courses: dict[str, Course] = {}
            load = [0] * SHARDS  # learners whose kernels each shard's run will judge

            def submit(student, nb):
                if "endless" in student:
                    if not endless:
                        endless.append(Course(tmp_path_factory.mktemp(f"{assignment}-endless"), [assignment],
                                              scaled_down=ENDLESS_SCALED and assignment in SCALED_DOWN))
                    courses[student] = endless[0]
                else:  # the least loaded shard: the runs end together (the reference brings the hostile learners)
                    i = load.index(min(load))
                    load[i] += student not in RUN_NO_KERNEL
                    if student == REFERENCE and hostile_chosen():
                        load[i] += len(hostile_fixtures(assignment))
                    courses[student] = shards[i]
                courses[student].submit(student, assignment, nb)

            release = shards[0].release_notebook(assignment)
            source = shards[0].source_notebook(assignment)
            if STANDARD:
                submit_standard(submit, shards[0], assignment, release, source)
            for fx in fixtures(assignment):
                if chosen(assignment, fx.name):
                    submit(fx.name, fx.notebook(release, source))
            # the phase's hostile learners (tests/support/hostile_phases.py), beside the reference: its gradebook
            hostile = HostileSubmissions()
            if hostile_chosen():
                hostile.submit(courses.get(REFERENCE, shards[0]), assignment, release, source)
                courses.update(hostile.courses)
                hostile.record()
            runs = [(c, FLAGS) for c in shards] + [(c, ENDLESS_FLAGS) for c in endless]
            with ThreadPoolExecutor(len(runs)) as pool:
                procs = list(pool.map(lambda run: run[0].autograde(assignment, *run[1]), runs))
            _cache[assignment] = Graded(courses, assignment, procs, hostile)
        return _cache[assignment]

    return grade


@needs_standard
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_reference_gets_full_marks(graded, assignment):
    """Does the instructor's own solution, as a learner hands it in (the release's stubs filled with it, every test
    cell deleted), score every autograded point? Catches a reference kernel that fails its tests, stubs that cannot be
    filled in place (a cell that then fails to parse, a name left undefined) and a deleted test that is not restored."""
    g = graded(assignment)
    assert g.kernel_tests, "the notebook has no %%kernel_test cells"
    scores = g.scores(REFERENCE)
    lost = {t: scores.get(t) for t in g.tests if not scores.get(t)}
    assert not lost, (f"the reference, handed in as the filled release with its test cells deleted, lost points: "
                      f"{lost}\n" + "\n".join(g.feedback(REFERENCE).get(t, "") for t in lost))


@needs_standard
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_release_scores_zero_and_edited_tests_are_restored(graded, assignment):
    """Does the untouched release score 0 on every kernel test, its test cells replaced by `pass` (an edit that
    survived the restore would score that test's points)?"""
    g = graded(assignment)
    scores = g.scores("untouched_tests_edited")
    assert all(scores[t] == 0 for t in g.kernel_tests), scores


@needs_standard
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_broken_submission_does_not_stop_the_others(graded, assignment):
    """A file that is not a notebook fails alone; every other learner is graded."""
    g = graded(assignment)
    assert "not_json" in g.log
    assert g.scores(REFERENCE)


def _fixture_params():
    return [pytest.param(a, fx, id=f"{a}/{fx.name}") for a in ASSIGNMENTS for fx in fixtures(a) if chosen(a, fx.name)]


def test_every_chosen_fixture_exists():
    """NBGRADER_FIXTURES and CLASS_FIXTURES name real fixtures (a renamed file must not silently drop out of
    nbgrader's tier)."""
    for assignment, names in [*NBGRADER_FIXTURES.items(), *CLASS_FIXTURES.items()]:
        missing = names - {fx.name for fx in fixtures(assignment)}
        assert not missing, f"{assignment}: no such fixtures {missing}"


@pytest.mark.parametrize("assignment,fixture", _fixture_params())
def test_submission_is_judged_right(graded, assignment, fixture):
    """Does each known-wrong submission lose exactly its tests' points, with a message naming the cause,
    and does each correct-but-different one get full marks?"""
    g = graded(assignment)
    scores = g.scores(fixture.name)
    feedback = g.feedback(fixture.name)
    if fixture.all_pass:
        lost = {t: scores[t] for t in g.tests if scores[t] == 0}
        assert not lost, f"a correct kernel lost points: {lost}\n" + "\n".join(feedback[t] for t in lost)
        return
    unknown = fixture.expect_fail - set(g.tests)
    assert not unknown, f"fixture names unknown tests {unknown}"
    on_gpu = DEVICE == "cuda"
    for t in g.tests:
        if t in fixture.expect_fail and fixture.may_keep(t, on_gpu):
            continue  # the GPU's tf32 tolerance, or a draw of inputs, may let this one through; the others catch it
        if t in fixture.expect_fail:
            assert scores[t] == 0, f"{t} should fail but scored {scores[t]}:\n{feedback[t]}"
        else:
            assert scores[t] > 0, f"{t} should pass (the mistake costs only its own tests):\n{feedback[t]}"
    first = next(t for t in g.tests if t in fixture.expect_fail and not fixture.may_keep(t, on_gpu))
    assert fixture.expect_message.lower() in feedback[first].lower(), feedback[first]
    assert "seed" in feedback[first]

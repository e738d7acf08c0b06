"""The instructor's workflow on a class (docs/INSTRUCTORS.md): one class (tests/support/baseline.py) graded in parallel
by `python -m tritoncourse grade` (stopped after its first learner and restarted) and compared with the session's serial
baseline, the same class graded by plain `nbgrader autograde` (conftest.py); the class mixes good learners with every
kind of trouble a learner can cause. The tests check that each trouble costs only its own points, that parallel
grades equal serial grades, export and feedback, and write the reliability table of docs/INSTRUCTORS.md
(`TRITONCOURSE_UPDATE_DOCS=1 pytest tests/workflows/test_classroom.py`). Speed is measured apart, by
tools/grading_speed.py. The commands on a generated course, without a class: tests/workflows/test_classroom_commands.py
and tests/workflows/test_classroom_handouts.py.
"""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from baseline import (A, CELL_TIMEOUT, RETAKE, TIMEOUT_FACTOR, Learner, build_class, ids, nbgrader_frozen,
                      new_class_course, submit_class)
from course import CLASS_FIXTURES, ROOT, Course, gradebook_rows, graded_test_ids
from course_cli import _env, tc
from tritoncourse.grading.processes.zygote import FORKED_NBGRADER

DOCS = ROOT / "docs" / "INSTRUCTORS.md"
JOBS = 2


@dataclass
class Graded:
    parallel: Course
    serial: Course | None
    learners: list[Learner]
    first_run: subprocess.CompletedProcess
    second_run: subprocess.CompletedProcess
    parallel_seconds: float
    serial_seconds: float = 0.0

    def state(self) -> dict:
        return json.loads((self.parallel.path / "autograded" / ".classroom" / "state.json").read_text())["entries"]

    def scores(self, student, assignment=A):
        return self.parallel.scores(assignment, student)


_graded: dict[str, Graded] = {}


def _grade_flags(jobs: int = JOBS) -> list[str]:
    return ["--jobs", str(jobs), "--timeout-factor", str(TIMEOUT_FACTOR), "--cell-timeout", str(CELL_TIMEOUT)]


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> Graded:
    """The class graded in parallel by the script, stopped after its first learner and restarted."""
    if "parallel" not in _graded:
        parallel = new_class_course(tmp_path_factory.mktemp("class-parallel") / "course")
        learners = build_class(parallel)
        submit_class(parallel, learners)
        start = time.monotonic()
        # First run: stopped (SIGTERM) once its first learner is graded, one at a time. The queue (sorted) starts
        # correct_other_zero, endless_kernel: two at a time, the stop killed the endless learner's grading after the
        # first's seconds of spinning, and the second run graded it again whole; one at a time, the stop kills only
        # the grading that has just started.
        proc = subprocess.Popen([sys.executable, "-m", "tritoncourse", "grade", "--course", str(parallel.path),
                                 *_grade_flags(jobs=1)], cwd=parallel.path, env=_env(parallel.path),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("[1/"):
                proc.send_signal(signal.SIGTERM)
                break
        rest, _ = proc.communicate(timeout=120)
        first = subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + rest, "")
        second = tc("grade", "--course", str(parallel.path), *_grade_flags(), timeout=3 * 3600,
                    frozen=parallel.path)
        seconds = time.monotonic() - start
        _graded["parallel"] = Graded(parallel, None, learners, first, second, seconds)
    return _graded["parallel"]


@pytest.fixture(scope="module")
def serial_class(graded_class, serial_baseline) -> Graded:
    """The same class (what plain nbgrader can read) graded by plain serial `nbgrader autograde`: the session's
    serial baseline (tests/support/baseline.py), which the Dask, Slurm and container tests compare with too."""
    graded_class.serial = serial_baseline.course
    graded_class.serial_seconds = serial_baseline.seconds
    return graded_class


@pytest.mark.slow
def test_grading_can_be_stopped_and_restarted(graded_class):
    g = graded_class
    assert g.first_run.returncode == 130, g.first_run.stdout[-3000:]
    assert "Stopped:" in g.first_run.stdout
    m = re.search(r"(\d+) notebook\(s\) to grade, (\d+) already done", g.second_run.stdout)
    assert m and int(m.group(2)) >= 1, g.second_run.stdout[:2000]
    done_first = {k for k in re.findall(r"^\[\d+/\d+\] (\S+):", g.first_run.stdout, re.M)}
    regraded = set(re.findall(r"^\[\d+/\d+\] (\S+):", g.second_run.stdout, re.M))
    assert done_first and not done_first & regraded, (done_first, regraded)
    # A third run has nothing left to do and leaves the gradebook as it is.
    rows = gradebook_rows(f"sqlite:///{g.parallel.path / 'gradebook.db'}")
    third = tc("grade", "--course", str(g.parallel.path), *_grade_flags(), frozen=g.parallel.path)
    assert "0 notebook(s) to grade" in third.stdout, third.stdout
    assert gradebook_rows(f"sqlite:///{g.parallel.path / 'gradebook.db'}") == rows


@pytest.mark.slow
def test_every_learner_is_graded_or_has_a_recorded_reason(graded_class):
    g = graded_class
    state = g.state()
    for learner in g.learners:
        entry = state[f"{A}/{learner.name}"]
        if learner.precheck_error:
            assert entry["status"] == "failed" and learner.precheck_error in entry["reason"], entry
        else:
            assert entry["status"] == "graded", (learner.name, entry)
            for gid, failure in entry["failed_tests"].items():
                assert isinstance(failure["seed"], int), (learner.name, gid, failure)  # reproducible
    assert "renamed notebook" in " ".join(state[f"{A}/others_outputs"]["notes"])
    # Each private grading's nbgrader was forked by the grading process's zygote (nbgrader imported there once)
    logs = sorted((g.parallel.path / "autograded" / ".classroom" / "logs").rglob("*.log"))
    forked = [p.name for p in logs if FORKED_NBGRADER in p.read_text(errors="replace")]
    assert len(forked) >= sum(not learner.precheck_error for learner in g.learners), (forked, logs)
    assert g.second_run.returncode == 1  # the two unreadable submissions are reported
    assert "not_json" in g.second_run.stdout and "empty" in g.second_run.stdout


@pytest.mark.slow
def test_each_trouble_costs_only_its_own_points(graded_class):
    """Every learner gets exactly what their kernel earns, whatever else their notebook does, and the
    retake (another assignment) of the troublemakers gets full marks."""
    g = graded_class
    tests = graded_test_ids(g.parallel.source_notebook(A))
    wrong = []
    for learner in g.learners:
        if learner.precheck_error:
            continue
        scores = g.scores(learner.name)
        lost = {t for t in tests if scores[t] == 0}
        if lost != learner.lose:
            wrong.append((learner.name, sorted(lost ^ learner.lose)))
        if learner.retake:
            retake = g.scores(learner.name, RETAKE)
            if any(retake[t] == 0 for t in tests):
                wrong.append((learner.name, "retake", _why_lost(g, learner.name, retake)))
    for learner in g.learners:  # the unreadable ones: nothing graded, the retake is
        if learner.precheck_error and learner.retake:
            retake = g.scores(learner.name, RETAKE)
            if any(retake[t] == 0 for t in tests):
                wrong.append((learner.name, "retake", _why_lost(g, learner.name, retake)))
    assert not wrong, wrong
    _write_docs_table(g)


def _why_lost(g: Graded, student: str, scores: dict) -> dict:
    """The verdicts (kind, message, seconds) of the retake's tests that scored 0: a timeout under load reads
    differently from a wrong grade."""
    from tritoncourse.classroom.results import verdicts_of

    verdicts = verdicts_of(g.parallel.path / "autograded" / student / RETAKE / f"{RETAKE}.ipynb")
    return {t: verdicts.get(t, "no verdict") for t, s in scores.items() if s == 0}


@pytest.mark.slow
def test_each_fixture_learner_is_told_its_cause_and_seed(serial_class):
    """Does each learner who hands in a fixture of tests/submissions/ read, under its first failing test, the cause
    that fixture names and the seed, in both gradings (`course grade`, and plain serial nbgrader for those it can
    read)? The fixtures of CLASS_FIXTURES are graded through nbgrader here only (tests/support/course.py)."""
    g = serial_class
    tests = graded_test_ids(g.parallel.source_notebook(A))
    handed_in = {learner.fixture.name for learner in g.learners if learner.fixture}
    assert CLASS_FIXTURES[A] <= handed_in, f"not in the class: {CLASS_FIXTURES[A] - handed_in}"
    wrong = []
    for learner in g.learners:
        fx = learner.fixture
        if fx is None or fx.all_pass:
            continue
        first = next(t for t in tests if t in fx.expect_fail)
        for course in [g.parallel] + ([g.serial] if learner.serial else []):
            text = course.feedback_text(A, learner.name)[first]
            if fx.expect_message.lower() not in text.lower() or "seed" not in text:
                wrong.append((learner.name, course.path.parent.name, fx.expect_message, text[-600:]))
    assert not wrong, wrong


@pytest.mark.slow
def test_parallel_grades_equal_serial_grades(serial_class):
    g = serial_class
    parallel = gradebook_rows(f"sqlite:///{g.parallel.path / 'gradebook.db'}")
    serial = gradebook_rows(f"sqlite:///{g.serial.path / 'gradebook.db'}")
    compared = [k for k in serial if k in parallel]
    assert len(compared) == len(serial) >= 10, (sorted(compared), sorted(serial))  # every serial grade compared
    diffs = {k: (parallel[k], serial[k]) for k in compared if parallel[k] != serial[k]}
    assert not diffs, diffs
    # Only what the serial class leaves out is missing there: the renamed notebook (plain nbgrader cannot
    # grade it), the retake of the learner whose other notebook is not JSON, the endless kernel (minutes), and the
    # troubles graded by `course grade` only (tests/support/baseline.py's build_class: serial=False).
    parallel_only = {(A, learner.name) for learner in g.learners if not learner.serial and not learner.precheck_error}
    assert set(parallel) - set(serial) == parallel_only | {(RETAKE, "not_json"), (RETAKE, "endless_kernel")}, \
        set(parallel) ^ set(serial)
    print(f"{len(compared)} grades compared; parallel run {g.parallel_seconds:.0f} s, serial {g.serial_seconds:.0f} s")


@pytest.mark.slow
def test_export_has_a_column_per_test_and_the_failures_seeds(graded_class, tmp_path):
    g = graded_class
    out = tmp_path / "grades.csv"
    r = tc("export", "--course", str(g.parallel.path), "-o", str(out), frozen=g.parallel.path)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {(row["assignment"], row["student"]): row for row in csv.DictReader(out.open())}
    header = next(csv.reader(out.open()))
    tests = graded_test_ids(g.parallel.source_notebook(A))
    assert all(f"{A}:{t}" in header for t in tests), header
    assert float(rows[(A, "reference")]["score"]) == 10
    nomask = rows[(A, "wrong_no_mask")]
    assert float(nomask[f"{A}:test_vector_add_full_blocks"]) == 2
    assert re.search(r"test_vector_add_ragged_sizes\(seed=\d+\)", nomask["failed_tests"]), nomask
    assert rows[(A, "not_json")]["status"] == "failed" and "not JSON" in rows[(A, "not_json")]["reason"]
    assert rows[(RETAKE, "not_json")]["status"] == "graded"


@pytest.mark.slow
def test_feedback_shows_verdicts_but_no_hidden_test(graded_class):
    from tritoncourse.classroom.feedback import hidden_secrets, html_text

    g = graded_class
    who = ["wrong_compile_error", "wrong_no_mask", "tests_deleted_and_edited", "endless_kernel"]
    r = tc("feedback", A, "--course", str(g.parallel.path), "--students", *who, frozen=g.parallel.path)
    assert r.returncode == 0, r.stdout + r.stderr
    secrets = hidden_secrets(g.parallel.path / "source", g.parallel.path / "release", A)[A]
    assert len(secrets) >= 5
    for student in who:
        text = html_text(g.parallel.path / "feedback" / student / A / f"{A}.html")
        assert not [s for s in secrets if s in text], student
        if student == "tests_deleted_and_edited":  # its tests were restored and pass
            assert text.count("PASSED") == 5, student
        else:
            assert "FAILED" in text and "seed" in text, student
            assert "Likely cause" in text or "did not finish" in text, student
    # Plain nbgrader with nbgrader's own feedback steps would show them: the check is not vacuous.
    plain = nbgrader_frozen("generate_feedback", A, "--force", "--student", "wrong_no_mask",
                            "--GenerateFeedback.preprocessors=['nbgrader.preprocessors.GetGrades']",
                            "--CourseDirectory.feedback_directory=plain_feedback", cwd=g.parallel.path)
    leaked = g.parallel.path / "plain_feedback" / "wrong_no_mask" / A / f"{A}.html"
    assert leaked.exists(), plain.stderr
    assert [s for s in secrets if s in html_text(leaked)]


# ------------------------------------------------------------------------------------------ docs

BEGIN_TABLE, END_TABLE = "<!-- reliability-table:begin -->", "<!-- reliability-table:end -->"


def _replace(marker_begin: str, marker_end: str, text: str) -> None:
    if os.environ.get("TRITONCOURSE_UPDATE_DOCS") != "1" or not DOCS.exists():
        print(text)
        return
    doc = DOCS.read_text()
    i, j = doc.index(marker_begin) + len(marker_begin), doc.index(marker_end)
    DOCS.write_text(doc[:i] + "\n" + text.rstrip() + "\n" + doc[j:])


def _write_docs_table(g: Graded) -> None:
    tests = graded_test_ids(g.parallel.source_notebook(A))
    short = {t: t.replace("test_vector_add_", "") for t in tests}
    state = g.state()
    lines = ["| learner | what the submission does | lost (its own points) | kept | retake (other assignment) "
             "| seconds |", "|---|---|---|---|---|---|"]
    for learner in g.learners:
        if not learner.case:
            continue
        entry = state[f"{A}/{learner.name}"]
        if learner.precheck_error:
            lost, kept = "not graded: " + entry["reason"].split(": ", 1)[-1], "every other learner"
        else:
            scores = g.scores(learner.name)
            lost_t = [t for t in tests if scores[t] == 0]
            lost = (", ".join(short[t] for t in lost_t) + f" ({sum(_points(g, t) for t in lost_t):g} pts)") \
                if lost_t else "nothing"
            kept_t = [t for t in tests if scores[t] > 0]
            kept = (", ".join(short[t] for t in kept_t) + f" ({sum(scores[t] for t in kept_t):g} pts)") \
                if kept_t else "-"
            if entry.get("kernel_died_at_cell") is not None:
                lost += f"; kernel died at cell {entry['kernel_died_at_cell']}"
        retake = ""
        if learner.retake:
            r = g.scores(learner.name, RETAKE)
            retake = f"{sum(r[t] for t in tests):g}/10"
        lines.append(f"| `{learner.name}` | {learner.case} | {lost} | {kept} | {retake} | {entry.get('seconds', 0):g} |")
    good = [learner for learner in g.learners if not learner.case]
    lines.append("")
    lines.append(f"The {len(good)} ordinary learners graded beside them ({', '.join(l.name for l in good)}) got "
                 "exactly their fixtures' grades. Generated by `tests/workflows/test_classroom.py` on "
                 f"{time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores, `--jobs {JOBS}`, "
                 f"`--timeout-factor {TIMEOUT_FACTOR}`, `--cell-timeout {CELL_TIMEOUT}`, phase 1's largest test sizes "
                 "scaled down: tests/support/course.py's SCALED_DOWN).")
    _replace(BEGIN_TABLE, END_TABLE, "\n".join(lines))


def _points(g: Graded, gid: str) -> float:
    source = g.parallel.source_notebook(A)
    return float(source.cells[ids(source)[gid]].metadata.nbgrader["points"])

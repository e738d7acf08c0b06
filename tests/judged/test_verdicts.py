"""Every wrong and correct kernel of tests/submissions/ judged as grading judges it, without nbgrader (those that
real nbgrader grades in tests/workflows/test_grading.py, NBGRADER_FIXTURES, or in the classroom's class, CLASS_FIXTURES,
are judged there instead).

The bottom of the test pyramid (tests/README.md): for each fixture, every ``%%kernel_test`` cell of the source
notebook (hidden cases included) runs through the grader's own path, :func:`isolated.run_cell`: the judge
outside, the runner in a grading sandbox, forked by a zygote inside it, with grading's time limits scaled down.
Each fixture must lose exactly its tests, with the failing test's message naming the cause and the seed; each
correct-but-different kernel must pass every test. Real `nbgrader autograde` of the same files is
tests/workflows/test_grading.py's (one fixture per failure class and the standard learners).

A test is run once per runner code: most fixtures change one kernel of a phase, and every test whose runner would
get the very code an earlier fixture's passing run of that test got (the same definitions, byte for byte, at the same
limits) takes that pass instead of running again (``Judged.passed``; the judge and the test's cell are the same, only
the seed would differ). ``TRITONCOURSE_VERDICT_REUSE=0`` runs every test of every fixture.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import nbformat
import pytest

from conftest import DEVICE
from course import ROOT, SUBMISSIONS, fixtures, graded_through_nbgrader
from tritoncourse.grading import sandbox
from tritoncourse.grading.processes.isolated import PROVIDED, is_kernel_test, parse_cell, run_cell
from tritoncourse.grading.processes.zygote_client import _Zygote
from tritoncourse.grading.lint.source import assemble, kernels_from_notebook

ASSIGNMENTS = sorted(p.name for p in SUBMISSIONS.iterdir() if p.is_dir())
# Grading's time limits, scaled as test_grading scales them (phase 5's every-config tests take tens of seconds on
# a loaded machine); an endless loop, which waits for its limit, gets a tenth of it.
TIMEOUT_FACTOR = float(os.environ.get("TRITONCOURSE_VERDICT_TIMEOUT_FACTOR", "0.5"))
ENDLESS_FACTOR = 0.1 if DEVICE == "cpu" else TIMEOUT_FACTOR  # under compute-sanitizer a correct test takes ~10 s
# One test per core on the CPU; on a GPU two at a time, as grading there (each test holds two CUDA contexts, and
# three phases at once with one test per core made CUDA refuse new contexts on an H200).
WORKERS = max(2, os.cpu_count() or 1) if DEVICE == "cpu" else 2
# TRITONCOURSE_VERDICT_FIXTURES=name,name judges only those fixtures (a GPU run short of device time).
ONLY = {n for n in os.environ.get("TRITONCOURSE_VERDICT_FIXTURES", "").split(",") if n}
REUSE = os.environ.get("TRITONCOURSE_VERDICT_REUSE", "1") != "0"


def _notebook(folder: str, assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / folder / assignment / f"{assignment}.ipynb", as_version=4)


def kernel_test_cells(source: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(grade_id, source) of every %%kernel_test grade cell, hidden cases included."""
    return [(c.metadata.nbgrader["grade_id"], c.source) for c in source.cells
            if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")
            and not c.metadata.nbgrader.get("solution") and is_kernel_test(c.source)]


class Judged:
    """One phase's sandbox and in-sandbox zygote, shared by its fixtures (as one grader's threads share them)."""

    def __init__(self, assignment: str):
        self.assignment = assignment
        self.source = _notebook("source", assignment)
        self.release = _notebook("release", assignment)
        self.cells = kernel_test_cells(self.source)
        self.box = sandbox.Sandbox(f"verdicts-{assignment}")
        self.zygote = _Zygote(self.box) if DEVICE == "cpu" else None
        # (test, limit factor, the runner's definitions and their names) -> that test's passing outcome
        self.passed: dict[tuple, object] = {}

    def outcomes(self, nb: nbformat.NotebookNode, factor: float = TIMEOUT_FACTOR) -> dict:
        kernels, plain = kernels_from_notebook(nb)
        keys = {gid: runner_key(gid, cell, kernels, plain, factor) for gid, cell in self.cells}
        known = {gid: self.passed[key] for gid, key in keys.items() if REUSE and key in self.passed}
        todo = [(gid, cell) for gid, cell in self.cells if gid not in known]
        with ThreadPoolExecutor(WORKERS) as pool:
            results = pool.map(lambda cell: run_cell(cell[1], kernels, plain, timeout_factor=factor,
                                                     sandbox=self.box, zygote=self.zygote), todo)
            ran = {gid: outcome for (gid, _), outcome in zip(todo, results)}
        for gid, outcome in ran.items():
            if outcome.ok and keys[gid] is not None:
                self.passed[keys[gid]] = outcome
        return {gid: known.get(gid) or ran[gid] for gid, _ in self.cells}

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
        self.box.close()


def runner_key(gid: str, cell: str, kernels, plain, factor: float) -> tuple | None:
    """What the runner of test ``gid`` gets from this notebook (run_cell's own assembly: the definitions the test
    uses, in order, and their names) with its limit factor; None where the cell cannot be assembled."""
    parsed = parse_cell(cell)
    if parsed is None:
        return None
    assembly = assemble(parsed[1], kernels, plain, PROVIDED)
    if assembly.problems:
        return None
    return gid, factor, assembly.source, tuple(assembly.kernels)


@pytest.fixture(scope="module")
def judged():
    assert sandbox.problem() is None, f"the grading sandbox cannot run here: {sandbox.problem()}"
    made: dict[str, Judged] = {}

    def get(assignment: str) -> Judged:
        if assignment not in made:
            made[assignment] = Judged(assignment)
        return made[assignment]

    yield get
    for j in made.values():
        j.close()


def _params():
    """Every fixture but those real nbgrader grades in test_grading or the classroom's class (the same verdicts,
    asked of nbgrader's gradebook and feedback there), unless TRITONCOURSE_VERDICT_FIXTURES names them."""
    return [pytest.param(a, fx, id=f"{a}/{fx.name}") for a in ASSIGNMENTS for fx in fixtures(a)
            if (fx.name in ONLY if ONLY else fx.name not in graded_through_nbgrader(a))]


@pytest.mark.parametrize("assignment,fixture", _params())
def test_fixture_verdict(judged, assignment, fixture):
    """Does each known-wrong kernel lose exactly its kernel tests, with its cause named, and each correct one
    none? (The judge never runs the learner's code: each launch goes to the sandboxed runner.)"""
    j = judged(assignment)
    outcomes = j.outcomes(fixture.notebook(j.release, j.source),
                          ENDLESS_FACTOR if "endless" in fixture.name else TIMEOUT_FACTOR)
    reports = {gid: o.report() for gid, o in outcomes.items()}
    if fixture.all_pass:
        lost = {gid: reports[gid] for gid, o in outcomes.items() if not o.ok}
        assert not lost, f"a correct kernel lost tests:\n" + "\n".join(lost.values())
        return
    unknown = fixture.expect_fail - {gid for gid, _ in j.cells}
    kernel_fail = fixture.expect_fail - unknown
    for gid, outcome in outcomes.items():
        if gid in kernel_fail and fixture.may_keep(gid, DEVICE == "cuda"):
            continue
        if gid in kernel_fail:
            assert not outcome.ok, f"{gid} should fail but passed"
        else:
            assert outcome.ok, f"{gid} should pass (the mistake costs only its own tests):\n{reports[gid]}"
    if kernel_fail:
        first = next(gid for gid, _ in j.cells if gid in kernel_fail and not fixture.may_keep(gid, DEVICE == "cuda"))
        assert fixture.expect_message.lower() in reports[first].lower(), reports[first]
        assert "seed" in reports[first]

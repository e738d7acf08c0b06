"""The submission fixtures' format (tests/support/course.py): is each fixture's notebook the one its header says?"""
from __future__ import annotations

import nbformat
import pytest

from course import ROOT, SUBMISSIONS, Fixture, fixtures, reference_solution

ASSIGNMENTS = sorted(p.name for p in SUBMISSIONS.iterdir() if p.is_dir())


def _notebooks(assignment: str):
    read = lambda folder: nbformat.read(ROOT / folder / assignment / f"{assignment}.ipynb", as_version=4)  # noqa: E731
    return read("release"), read("source")


def _solutions(nb) -> dict[str, str]:
    return {c.metadata.nbgrader["grade_id"]: c.source for c in nb.cells
            if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_fixture_replaces_a_solution_cell_of_its_notebook(assignment):
    release, source = _notebooks(assignment)
    for fx in fixtures(assignment):
        nb = fx.notebook(release, source)
        cells = _solutions(nb)
        target = fx.replaces or next(iter(_solutions(release)))
        assert target in cells, f"{fx.name}: no solution cell {target}"
        assert cells[target] == fx.chunks[0][1], fx.name


def test_other_solutions_come_from_the_source_without_solution_markers():
    """With `# other-solutions: source`, every other solution cell is the reference's, as a learner has it."""
    release, source = _notebooks("04_benchmarking")
    fx = Fixture.load(SUBMISSIONS / "04_benchmarking" / "wrong_gbps_gib.py")
    assert fx.other_solutions == "source" and fx.replaces == "rates"
    cells = _solutions(fx.notebook(release, source))
    reference = _solutions(source)
    assert "2**30" in cells["rates"]
    for gid in set(cells) - {"rates"}:
        assert cells[gid] == reference_solution(reference[gid]), gid
        assert "BEGIN SOLUTION" not in cells[gid] and "NotImplementedError" not in cells[gid]
    with pytest.raises(ValueError, match="source"):
        fx.notebook(release)


def test_other_solutions_stay_the_stubs_by_default():
    release, source = _notebooks("02_softmax")
    fx = Fixture.load(SUBMISSIONS / "02_softmax" / "correct_jit_helpers.py")
    assert fx.other_solutions == "release"
    cells = _solutions(fx.notebook(release, source))
    assert "NotImplementedError" in cells["softmax_kernel"] and "NotImplementedError" in cells["online_softmax_kernel"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_fixture_that_may_pass_a_test_still_fails_others(assignment):
    """``# may-pass:`` and ``# gpu-may-pass:`` name expected failures only, and leave at least one test that must fail
    on every draw and device (it carries the fixture's message)."""
    for fx in fixtures(assignment):
        loose = fx.may_pass | fx.gpu_may_pass
        assert loose <= fx.expect_fail, f"{fx.name}: may pass tests it need not fail: {loose - fx.expect_fail}"
        if loose:
            assert fx.expect_fail - loose, f"{fx.name}: every expected failure may pass"


def test_may_pass_is_read_from_the_header():
    fx = Fixture.load(SUBMISSIONS / "06_fused_attention" / "wrong_attention_alpha_exp2.py")
    assert fx.may_pass == {"test_attention_large_scores"} and fx.may_keep("test_attention_large_scores", False)
    assert not fx.may_keep("test_attention_full_tiles", True)
    assert "may-pass" not in fx.chunks[0][1]

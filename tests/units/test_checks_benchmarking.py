"""Phase 4's checks, fast and in-process: the reference's plain functions pass every function test of the
notebook (hidden parts included), and each function fixture of tests/submissions/04_benchmarking/ fails
exactly its tests with its message. The kernel tests, and the real grader, are left to test_grading.py.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import nbformat
import pytest
import torch
import triton

from course import ROOT, fixtures
from tritoncourse.checking import KernelCheckError
from tritoncourse.grading.processes.isolated import PROVIDED, parse_cell
from tritoncourse.grading.lint.source import _kernels_in_text, assemble, kernels_from_notebook

ASSIGNMENT = "04_benchmarking"
NOTEBOOK = ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"


def _notebook():
    return nbformat.read(NOTEBOOK, as_version=4)


def _function_tests() -> dict[str, str]:
    """grade_id -> test body, for the tests of plain functions (those that launch no kernel)."""
    tests = {}
    for cell in _notebook().cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        parsed = parse_cell(cell.source) if cell.cell_type == "code" and meta.get("grade") else None
        if parsed and "triton_add_relu_mul_kernel" not in cell.source:
            tests[meta["grade_id"]] = parsed[1]
    return tests


def _run(body: str, kernels, plain) -> tuple[bool, str]:
    """The test body in this process, with the plain functions it needs: (passed, message)."""
    asm = assemble(body, kernels, plain, PROVIDED)
    if asm.problems:
        return False, "\n".join(asm.problems)
    ns = {"math": math, "torch": torch, "triton": triton, "__name__": "learner"}
    functions = [n for n in asm.kernels if kernels[n].kind != "jit"]
    exec(compile("\n\n".join(kernels[n].source for n in functions), "learner_kernels.py", "exec"), ns)
    scope = {"torch": torch, "triton": triton, "math": math, "DEVICE": "cpu"}
    scope.update({n: ns[n] for n in functions})
    try:
        exec(compile(body, "test_cell.py", "exec"), scope)
    except KernelCheckError as err:
        return False, str(err)
    return True, ""


def _reference():
    kernels, plain = kernels_from_notebook(_notebook())
    return {n: k for n, k in kernels.items() if k.kind != "jit"}, plain


@pytest.mark.parametrize("test_id", sorted(_function_tests()))
def test_reference_functions_pass(test_id, monkeypatch):
    """Do the notebook's reference functions pass each function test, hidden parts included?"""
    monkeypatch.setenv("TRITONCOURSE_SEED", "12345")
    kernels, plain = _reference()
    ok, message = _run(_function_tests()[test_id], kernels, plain)
    assert ok, message


FUNCTION_FIXTURES = [fx for fx in fixtures(ASSIGNMENT)
                     if not any(t.startswith("test_add_relu_mul_") and "cost" not in t for t in fx.expect_fail)]


@pytest.mark.parametrize("fixture", FUNCTION_FIXTURES, ids=lambda fx: fx.name)
def test_function_fixture_fails_exactly_its_tests(fixture, monkeypatch):
    """Does each function fixture fail exactly its expect-fail tests, the first with its message?"""
    kernels, plain = _reference()
    found, names = _kernels_in_text(fixture.chunks[0][1], fixture.name, True)
    kernels.update({n: k for n, k in found.items() if k.kind != "jit"})
    plain |= names
    results = {}
    for seed in ("7", "99991"):
        monkeypatch.setenv("TRITONCOURSE_SEED", seed)
        results = {t: _run(body, kernels, plain) for t, body in _function_tests().items()}
        failing = {t for t, (ok, _) in results.items() if not ok}
        expected = set() if fixture.all_pass else fixture.expect_fail
        assert failing == expected, {t: results[t][1] for t in failing ^ expected}
    if not fixture.all_pass:
        first = next(t for t in _function_tests() if t in fixture.expect_fail)
        assert fixture.expect_message.lower() in results[first][1].lower(), results[first][1]


def test_fake_timer_catches_a_timer_given_the_provider_itself():
    """A provider handed to the timer without its inputs is named as such, not as a crash."""
    from tritoncourse.checks.benchmarking import check_run_benchmark_times

    def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
        expected = reference(*inputs)
        times = {name: [] for name in providers}
        for _ in range(repeats):
            for name, fn in providers.items():
                times[name].append(timer(fn))
        return times, {}

    with pytest.raises(KernelCheckError, match=r"timer\(lambda: fn\(\*inputs\)\)"):
        check_run_benchmark_times(run_benchmark, seed=3)


def test_median_of_ratios_differs_from_the_usual_mistakes():
    """Are the table's made-up times such that every speedup mistake gives another number?"""
    from tritoncourse.checks.benchmarking import _table_times
    from tritoncourse.checking import generator

    times = _table_times(generator(5), ("triton", "eager"), 4, 1.0)
    ratios = [e / t for e, t in zip(times["eager"], times["triton"])]
    med = statistics.median(ratios)
    for wrong in (statistics.median(times["eager"]) / statistics.median(times["triton"]),
                  statistics.fmean(ratios), 1 / med):
        assert abs(wrong - med) > 1e-3 * med
    assert Path(NOTEBOOK).exists()

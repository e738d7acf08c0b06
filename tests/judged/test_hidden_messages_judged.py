"""What a learner is told about a hidden case names none of its inputs, through the grader's own path (issue 42; slow:
each test runs the judge outside and the runner in a grading sandbox). Two fixtures of tests/submissions/ that are
wrong on hidden cases only (a kernel that stores the hidden size it was given, a function that returns a string
spelling its hidden inputs), run through run_cell: the report names the kind of case or value and the cause, and
nothing of the case. A function whose reply is sized by its input, refused by the judge's bounds: on a hidden case
no byte count. The same checks in-process, for every phase, are tests/units/test_hidden_messages.py's.
"""
from __future__ import annotations

import re

import pytest

from hidden_leaks import SEED, _absent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def graded():
    """A grading sandbox and, on the CPU, its zygote (a GPU's runner is a process of its own), for the slow tests."""
    from tritoncourse.device import infer_device
    from tritoncourse.grading import sandbox
    from tritoncourse.grading.processes.zygote_client import _Zygote

    assert sandbox.problem() is None, f"the grading sandbox cannot run here: {sandbox.problem()}"
    box = sandbox.Sandbox("hidden-messages")
    zygote = _Zygote(box) if infer_device() == "cpu" else None
    yield box, zygote
    if zygote is not None:
        zygote.close()
    box.close()


@pytest.mark.parametrize("assignment, name, test, says, leaks", [
    ("01_vector_add", "wrong_only_on_hidden_ragged_size", "test_vector_add_ragged_sizes",
     "Wrong values (a hidden case: a size that is not a multiple of BLOCK_SIZE", (9973, 9972, 128, 9856, 117)),
    ("04_benchmarking", "wrong_rates_encode_inputs", "test_gbps_units", "`gbps(...)` is a str, not a number",
     ("SIZES",)),
])
def test_a_submission_wrong_only_on_hidden_cases_is_told_without_them(graded, assignment, name, test, says, leaks):
    """The fixture's first failing test through run_cell (the judge outside, the runner in a grading sandbox): it
    fails on a hidden case, and the report names the kind of case (or of value) and the cause, and nothing of that
    case: none of ``leaks``, no other number of four digits or more than the seed."""
    import nbformat

    from course import ROOT, SUBMISSIONS, Fixture
    from tritoncourse.grading.processes.isolated import run_cell
    from tritoncourse.grading.lint.source import kernels_from_notebook

    box, zygote = graded
    source = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    release = nbformat.read(ROOT / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    fixture = Fixture.load(SUBMISSIONS / assignment / f"{name}.py")
    kernels, plain = kernels_from_notebook(fixture.notebook(release, source))
    cell = next(c.source for c in source.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == test)
    report = run_cell(cell, kernels, plain, seed=SEED, sandbox=box, zygote=zygote).report()
    assert fixture.expect_message.lower() in report.lower() and says in report and "Likely cause:" in report, report
    _absent(report, *leaks)
    assert not re.search(r"\d{4,}", report.replace(str(SEED), "")), report


# A learner's function whose reply is sized by its input: the judge refuses it (rpc's bounds), and its message on a
# hidden case names no byte count (the runner chooses it, so it can spell the hidden size).
SIZED_REPLY = "def f(x):\n    return [0.5] * (x.numel() * 10)\n"
SIZED_TEST = ('"""A reply sized by its input."""\nimport torch\nfrom tritoncourse.checks.common.functions import call\n\n'
              'call(f, "f", torch.zeros(7))\n{hidden}call(f, "f", torch.zeros(100003))\n{end}')


def test_a_reply_sized_by_a_hidden_input_is_refused_without_its_size(graded):
    from tritoncourse.grading.processes.isolated import Assembly, run_test

    box, zygote = graded
    runs = {where: run_test(SIZED_TEST.format(hidden=marks[0], end=marks[1]), Assembly(SIZED_REPLY, ["f"], []),
                            timeout=60, seed=SEED, sandbox=box, zygote=zygote)
            for where, marks in (("visible", ("", "")),
                                 ("hidden", ("### BEGIN HIDDEN TESTS\n", "### END HIDDEN TESTS\n")))}
    visible, hidden = runs["visible"], runs["hidden"]
    assert not visible.ok and re.search(r"sent \d+ bytes", visible.message), visible.report()
    assert not hidden.ok and "on a hidden case of this test" in hidden.message, hidden.report()
    assert "Likely cause: a value far larger than the test needs" in hidden.message, hidden.report()
    assert not re.search(r"\d{3}", hidden.message), hidden.report()

"""Hidden inputs never leak through a crash or a failure (grading/judge/hidden_cases.py, issue 42): what a learner is told
about a test never quotes the learner's own output or error text from a hidden case, and never says what a hidden
case that crashed ran on; it says so in words and names the seed.

Fast: which lines are hidden, the stage file's mark, a learner's error text taken out of a check's message, the
verdict read from what a crashed runner left. Slow (marked one by one): the fixture
`tests/submissions/01_vector_add/wrong_prints_sizes_then_crashes.py` (prints the size it was given, crashes on one
only a hidden case uses) judged through the grader's own path; a learner's function whose error quotes its input's
size, raised straight through the judge and through a check's message, on a hidden and on a visible case.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from course import ROOT, SUBMISSIONS, Fixture
from tritoncourse.grading.judge import hidden_cases
from tritoncourse.grading.judge.hidden_cases import MARK, NOT_SHOWN, hidden_lines, read_stage, scrub
from tritoncourse.grading.judge.verdict import _outcome

CELL = textwrap.dedent('''\
    """A test with a visible and a hidden part."""
    probe("visible")
    ### BEGIN HIDDEN TESTS
    for n in (1, 2):
        probe("hidden")
    ### END HIDDEN TESTS
    probe("after")
    ''')


@pytest.fixture
def judge_dir(tmp_path, monkeypatch):
    """A judge's folder as isolated.py lays it out (test_cell.py beside stage.txt), with fresh module state."""
    monkeypatch.setenv("TRITONCOURSE_STAGE_FILE", str(tmp_path / "stage.txt"))
    monkeypatch.setattr(hidden_cases, "_hidden_lines", {})
    monkeypatch.setattr(hidden_cases, "_hidden_began", False)
    (tmp_path / "test_cell.py").write_text(CELL)
    return tmp_path


def _run_cell(judge_dir: Path, probe) -> None:
    path = judge_dir / "test_cell.py"
    exec(compile(path.read_text(), str(path), "exec"), {"probe": probe})


def test_hidden_lines_are_those_between_the_markers():
    assert hidden_lines(CELL) == {3, 4, 5, 6}
    assert hidden_lines("check(1)\n") == frozenset()


def test_the_stage_file_says_when_a_hidden_case_runs_and_after(judge_dir):
    from tritoncourse.checking import stage

    seen = []

    def probe(where):
        stage(f"running on {where}")
        seen.append((where, read_stage((judge_dir / "stage.txt").read_text())))

    _run_cell(judge_dir, probe)
    assert seen == [("visible", ("running on visible", "")), ("hidden", ("running on hidden", "now")),
                    ("hidden", ("running on hidden", "now")), ("after", ("running on after", "ran"))]


def test_a_checks_message_quotes_no_learner_error_on_a_hidden_case(judge_dir):
    """A KernelCheckError written while handling the learner's error: its text kept on a visible case, taken out on
    a hidden one (the check's own words stay)."""
    from tritoncourse.checking import KernelCheckError

    messages = {}

    def probe(where):
        try:
            raise ValueError(f"SIZES torch.Size([100003]) seen {where}")
        except ValueError as err:
            messages[where] = str(KernelCheckError(f"`add(x, y)` raised {type(err).__name__}: {err}\nLikely cause: "
                                                   "read the error above."))

    def rewritten(where):  # a check that rewrites its own message (softmax's fp16 hint) keeps its words
        try:
            probe(where)
            raise KernelCheckError(messages[where])
        except KernelCheckError as err:
            messages[where] = str(KernelCheckError(str(err).split("\nLikely cause:")[0] + "\nLikely cause: fp32."))

    _run_cell(judge_dir, rewritten)
    assert "SIZES torch.Size([100003]) seen visible" in messages["visible"]
    assert messages["hidden"].endswith("Likely cause: fp32.")
    assert "100003" not in messages["hidden"] and NOT_SHOWN in messages["hidden"], messages["hidden"]
    assert messages["hidden"].startswith("`add(x, y)` raised ValueError: ") and "Likely cause" in messages["hidden"]


def test_scrub_takes_out_cut_short_quotes_class_names_and_reported_lines():
    class Size100003Error(Exception):
        where = '  File "learner_kernels.py", line 3, in add\n    raise Size100003Error(x.shape)\n'

    err = Size100003Error("torch.Size([100003]) " + "x" * 3000)
    message = f"raised {type(err).__name__}: {str(err)[:1500]} ...\n{err.where}"
    out = scrub(message, err)
    assert "100003" not in out and "an error" in out, out


def _left(tmp_path: Path, stage: str, output: str, runner_code=-11):
    rdir, jdir = tmp_path / "r", tmp_path / "j"
    rdir.mkdir(parents=True)
    jdir.mkdir()
    (rdir / "out.txt").write_text(output)
    (jdir / "stage.txt").write_text(stage)
    (jdir / "result.json").write_text(json.dumps({"ok": False, "kind": "runner-lost", "message": ""}))
    return _outcome(runner_code, 1, rdir, jdir, [], 10.0, 1234, 1.0, "Ragged sizes")


def test_a_crash_quotes_the_output_only_before_any_hidden_case(tmp_path):
    visible = _left(tmp_path / "v", "running `k` (n=1000, block_size=128)", "SIZES [1000]\n")
    assert "while running `k` (n=1000" in visible.message and "SIZES [1000]" in visible.message
    hidden = _left(tmp_path / "h", f"running `k` (n=100003, block_size=128){MARK}now",
                   "SIZES [1000]\nSIZES [100003]\n")
    report = hidden.report()
    assert "100003" not in report and "SIZES" not in report, report
    assert "segmentation fault (SIGSEGV) on a hidden case" in report and "TRITONCOURSE_SEED=1234" in report
    after = _left(tmp_path / "a", f"running `k` (n=1000, block_size=128){MARK}ran", "SIZES [100003]\n")
    assert "100003" not in after.message and "while running `k` (n=1000" in after.message
    code = _left(tmp_path / "c", f"running `k` (n=100003){MARK}now", "", runner_code=163)  # exit(100003 % 256)
    assert "163" not in code.message and "100003" not in code.message and "exit code unknown" in code.message


def test_compute_sanitizers_report_is_quoted_only_before_any_hidden_case():
    """On a GPU (exit code 86): its own lines only, never the learner's output; none once a hidden case began."""
    from tritoncourse.grading.judge.verdict import _sanitizer_message

    log = ("SIZES [100003]\n========= Invalid __global__ write of size 4 bytes\n=========     by thread (3,0,0) in "
           "block (781,0,0)\n========= ERROR SUMMARY: 100 errors\n")
    visible = _sanitizer_message(log, "", "running `k` (n=1000)", "")
    assert "Invalid __global__ write" in visible and "SIZES" not in visible, visible
    for hidden, stage in (("now", "running `k` (n=100003)"), ("ran", "running `k` (n=1000)")):  # "ran": a visible one
        text = _sanitizer_message(log, "", stage, hidden)
        assert not any(s in text for s in ("100003", "SIZES", "Invalid __global__", "781", "100 errors")), text
        assert "unmasked store" in text
    assert "on a hidden case of this test" in _sanitizer_message(log, "", "running `k` (n=100003)", "now")


# ------------------------------------------------------------------------------------ through the grader's path
@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A sandbox and, on the CPU, its zygote, as one notebook's checks get them."""
    from tritoncourse.device import infer_device
    from tritoncourse.grading import sandbox
    from tritoncourse.grading.processes.zygote_client import _Zygote

    assert sandbox.problem() is None, f"the grading sandbox cannot run here: {sandbox.problem()}"
    box = sandbox.Sandbox("hidden-cases")
    zygote = _Zygote(box) if infer_device() == "cpu" else None
    yield box, zygote
    if zygote is not None:
        zygote.close()
    box.close()


@pytest.mark.slow
def test_a_kernel_that_prints_its_sizes_and_crashes_on_a_hidden_one_is_told_in_words(graded):
    """The fixture through run_cell (judge outside, runner in the sandbox): it fails its ragged test, says that it
    crashed on a hidden case and names the seed, and nothing of its output or of that case's size is shown."""
    import nbformat

    from tritoncourse.grading.processes.isolated import run_cell
    from tritoncourse.grading.lint.source import kernels_from_notebook

    box, zygote = graded
    source = nbformat.read(ROOT / "source" / "01_vector_add" / "01_vector_add.ipynb", as_version=4)
    release = nbformat.read(ROOT / "release" / "01_vector_add" / "01_vector_add.ipynb", as_version=4)
    fixture = Fixture.load(SUBMISSIONS / "01_vector_add" / "wrong_prints_sizes_then_crashes.py")
    kernels, plain = kernels_from_notebook(fixture.notebook(release, source))
    cell = next(c.source for c in source.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                == "test_vector_add_ragged_sizes")
    outcome = run_cell(cell, kernels, plain, seed=4242, sandbox=box, zygote=zygote)
    report = outcome.report()
    assert not outcome.ok and outcome.kind in ("crash", "fail"), report  # a GPU: compute-sanitizer's "fail"
    assert "on a hidden case of this test" in report and "TRITONCOURSE_SEED=4242" in report, report
    assert "crashed" in report or "compute-sanitizer" in report, report
    for leak in ("100003", "100_003", "SIZES", "Last output"):
        assert leak not in report, report


# A learner's function that puts its input's size in its error (the runner is assumed to run any Python, so the
# definition is handed over as assembled, without the lint).
RAISER = "def add(x):\n    raise ValueError(f'SIZES {tuple(x.shape)}')\n"
DIRECT = ('"""Direct."""\nimport torch\n\n{visible}add(torch.zeros(7))\n'
          '### BEGIN HIDDEN TESTS\nadd(torch.zeros(100003))\n### END HIDDEN TESTS\n')
WRAPPED = ('"""Wrapped."""\nimport torch\nfrom tritoncourse.checking import KernelCheckError\n\n'
           'def call(x):\n    try:\n        add(x)\n    except Exception as err:\n'
           '        raise KernelCheckError(f"`add` raised {type(err).__name__}: {err}") from None\n\n'
           '{visible}call(torch.zeros(7))\n### BEGIN HIDDEN TESTS\ncall(torch.zeros(100003))\n### END HIDDEN TESTS\n')


@pytest.mark.slow
@pytest.mark.parametrize("template", [DIRECT, WRAPPED], ids=["judge", "check"])
def test_a_learner_error_quoting_a_hidden_size_is_not_shown(graded, template):
    """The judge's error path (the learner's error raised straight through) and a check's message (quoting it):
    the text shown on a visible case, not on a hidden one."""
    from tritoncourse.grading.processes.isolated import Assembly, run_test

    box, zygote = graded
    assembly = Assembly(RAISER, ["add"], [])
    visible = run_test(template.replace("{visible}", ""), assembly, timeout=60, seed=7, sandbox=box, zygote=zygote)
    assert not visible.ok and "SIZES (7,)" in visible.message, visible.report()
    hidden = run_test(template.replace("{visible}", "# "), assembly, timeout=60, seed=7, sandbox=box, zygote=zygote)
    report = hidden.report()
    assert not hidden.ok and "100003" not in report and "SIZES" not in report, report
    assert ("on a hidden case" in report if template is DIRECT else NOT_SHOWN in report), report

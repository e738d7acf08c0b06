"""Does a failure of the grader itself cost only the tests it touches, never the learner's notebook?

nbgrader deletes a learner's autograded notebook when an exception escapes a preprocessor. Failures are
injected here by monkeypatching the grader's own functions in this process: each must become a failed
verdict that says it is a grader error, with the seed and how to reproduce, while the other tests are
still graded.
"""
from __future__ import annotations

import io
import json
import subprocess
import threading
from pathlib import Path

import pytest
from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from nbgrader.preprocessors import Execute

from tritoncourse.grading.processes import isolated, zygote_client
from tritoncourse.grading.autograde import nbgrader_plugin
from tritoncourse.grading.processes.isolated import Outcome
from tritoncourse.grading.autograde.nbgrader_plugin import IsolatedKernelTests, ResilientExecute

KERNEL = '''@triton.jit
def triton_double_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
'''


def _test_cell(grade_id: str, body: str = "", magic: str = "%%kernel_test") -> dict:
    cell = new_code_cell(f'{magic}\n"""Checks {grade_id}."""\n{body or "triton_double_kernel"}\n')
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": grade_id,
                                 "points": 1}
    cell.outputs = [{"output_type": "stream", "name": "stdout",
                     "text": "Graded in a fresh process outside this notebook (see the verdict in your feedback).\n"}]
    return cell


def _notebook(*tests) -> dict:
    nb = new_notebook()
    kernel = new_code_cell(KERNEL)
    kernel.metadata["nbgrader"] = {"solution": True, "grade": False, "locked": False, "grade_id": "kernel"}
    plain_test = new_code_cell("assert True")
    plain_test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": "plain",
                                       "points": 1}
    nb.cells = [new_markdown_cell("# A phase"), kernel, *tests, plain_test]
    return nb


def _grade(nb, tmp_path):
    resources = {"metadata": {"path": str(tmp_path)}, "unique_key": "phase",
                 "nbgrader": {"student": "alice", "assignment": "phase", "notebook": "phase"}}
    nb, resources = IsolatedKernelTests(workers=2).preprocess(nb, resources)
    outputs = {c.metadata["nbgrader"]["grade_id"]: c.outputs for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade")}
    return outputs, resources["tritoncourse"]["verdicts"], json.loads((tmp_path / "phase.verdicts.json").read_text())


def _passing(body, assembly, *, timeout=0, seed=None, device=None, sandbox=None, zygote=None):
    return Outcome(True, "pass", "", seed, 0.1, "")


def _text(outputs) -> str:
    return "\n".join(o.get("text", "") + "\n".join(o.get("traceback", [])) for o in outputs)


def _assert_grader_error(outputs, verdict):
    text = _text(outputs)
    assert outputs[0]["output_type"] == "error", text
    assert "GRADER ERROR" in text and "not a verdict on your kernel" in text
    assert f"TRITONCOURSE_SEED={verdict['seed']}" in text
    assert "python -m tritoncourse check autograded/alice/phase/phase.ipynb" in text
    assert verdict["ok"] is False and verdict["kind"] == "grader-error"


def test_a_test_whose_grading_raises_fails_alone(monkeypatch, tmp_path):
    """A bug of ours while running one test: that test fails as a grader error, the others pass."""
    real = nbgrader_plugin.run_cell

    def run_cell(source, *args, **kwargs):
        if "test_b" in source:
            raise RuntimeError("injected bug")
        return real(source, *args, **kwargs)

    monkeypatch.setattr(isolated, "run_test", _passing)
    monkeypatch.setattr(nbgrader_plugin, "run_cell", run_cell)
    outputs, verdicts, logged = _grade(_notebook(_test_cell("test_a"), _test_cell("test_b"), _test_cell("test_c")),
                                       tmp_path)
    _assert_grader_error(outputs["test_b"], verdicts["test_b"])
    assert "RuntimeError: injected bug" in _text(outputs["test_b"])
    assert "FAILED: Checks test_b." in _text(outputs["test_b"])  # the test's title, as for any verdict
    assert verdicts["test_a"]["ok"] and verdicts["test_c"]["ok"]
    assert "PASSED" in _text(outputs["test_a"]) and "PASSED" in _text(outputs["test_c"])
    assert logged == verdicts


def test_a_test_cell_that_does_not_parse_fails_alone(monkeypatch, tmp_path):
    """A %%kernel_test line the grader cannot read (a bad --timeout, an open quote) fails only its cell."""
    monkeypatch.setattr(isolated, "run_test", _passing)
    nb = _notebook(_test_cell("test_a"), _test_cell("test_b", magic="%%kernel_test --timeout soon"),
                   _test_cell("test_c", magic='%%kernel_test "'))
    outputs, verdicts, _ = _grade(nb, tmp_path)
    assert verdicts["test_a"]["ok"]
    for gid in ("test_b", "test_c"):
        _assert_grader_error(outputs[gid], verdicts[gid])
    assert "ValueError" in verdicts["test_b"]["message"]


def test_unreadable_notebook_fails_every_kernel_test_but_keeps_the_notebook(monkeypatch, tmp_path):
    """Taking the learner's kernels raises: every kernel test fails as a grader error, nothing escapes."""
    def broken(nb):
        raise RecursionError("injected: the notebook could not be parsed")

    monkeypatch.setattr(nbgrader_plugin, "kernels_from_notebook", broken)
    outputs, verdicts, _ = _grade(_notebook(_test_cell("test_a"), _test_cell("test_b")), tmp_path)
    assert set(verdicts) == {"test_a", "test_b"}
    for gid in verdicts:
        _assert_grader_error(outputs[gid], verdicts[gid])
        assert "reading the kernels from your notebook" in verdicts[gid]["message"]
    assert outputs["plain"] == []  # not a kernel test: left to nbgrader


def test_a_bug_outside_any_test_fails_the_kernel_tests_only(monkeypatch, tmp_path):
    """A bug of ours after the tests ran (writing outputs): the kernel tests fail, the notebook is kept,
    and no test keeps the magic's 'graded outside' output, which would score as a pass."""
    def broken(text):
        raise TypeError("injected bug while writing outputs")

    monkeypatch.setattr(isolated, "run_test", _passing)
    monkeypatch.setattr(nbgrader_plugin, "_stdout", broken)
    outputs, verdicts, _ = _grade(_notebook(_test_cell("test_a"), _test_cell("test_b")), tmp_path)
    for gid in ("test_a", "test_b"):
        _assert_grader_error(outputs[gid], verdicts[gid])
        assert "grading this notebook" in verdicts[gid]["message"]


def test_an_unwritable_verdict_log_costs_nothing(monkeypatch, tmp_path):
    """The verdicts log is best effort: the verdicts are in the notebook's outputs already."""
    monkeypatch.setattr(isolated, "run_test", _passing)
    nb = _notebook(_test_cell("test_a"))
    resources = {"output_files_dir": str(tmp_path)}
    (tmp_path / "notebook.verdicts.json").mkdir()  # open(..., "w") raises IsADirectoryError
    nb, resources = IsolatedKernelTests(workers=1).preprocess(nb, resources)
    assert resources["tritoncourse"]["verdicts"]["test_a"]["ok"]


class _DeadZygote:
    def start(self, *args):
        raise BrokenPipeError("the zygote is gone")


def test_a_dead_zygote_falls_back_to_fresh_processes(monkeypatch):
    """The warm zygotes die (a broken pipe): the judge and the runner run as plain fresh processes instead."""
    monkeypatch.setattr(isolated, "_warm_zygote", lambda entry="runner": _DeadZygote())
    started = []
    real = isolated.subprocess.Popen

    def popen(cmd, *args, **kwargs):
        started.append(cmd)
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(isolated.subprocess, "Popen", popen)
    assembly = isolated.Assembly("", [], [])
    outcome = isolated.run_test('"""Checks."""\nassert True\n', assembly, seed=7, device="cpu")
    assert outcome.ok, outcome.message
    assert {Path(cmd[-2]).name for cmd in started} == {"judge.py", "runner.py"}


def _pair(runs, calls):
    """A stand-in for run_test's judge and runner: each run writes the runner's output and the judge's verdict."""
    def run_pair(jcmd, jenv, jdir, judge_zygote, rcmd, renv, rdir, zygote, sandbox, timeout):
        runner_code, output, verdict, judge_code = runs[len(calls)]
        calls.append(rcmd)
        (rdir / "out.txt").write_text(output)
        if verdict is not None:
            (jdir / "result.json").write_text(json.dumps(verdict))
        return runner_code, judge_code
    return run_pair


def test_a_judge_that_exits_without_a_verdict_is_a_grader_error(monkeypatch):
    """The judge is the grader's own: exiting without a verdict is our failure, not a crash blamed on the
    learner's kernel."""
    monkeypatch.setattr(isolated, "_run_pair", _pair([(0, "", None, 1)], []))
    outcome = isolated.run_test('"""Checks."""\nassert True\n', isolated.Assembly("", [], []), seed=7, device="cpu")
    assert not outcome.ok and outcome.kind == "grader-error"
    assert "exited with code 1" in outcome.message
    assert "Your kernel crashed" not in outcome.message


def test_a_runner_that_dies_is_the_kernels_crash(monkeypatch):
    """The runner (the learner's kernels) dies by a signal while the judge waits: a crash, named with the stage."""
    lost = {"ok": False, "kind": "runner-lost", "message": ""}
    monkeypatch.setattr(isolated, "_run_pair", _pair([(-11, "", lost, 1)], []))
    outcome = isolated.run_test('"""Checks."""\nassert True\n', isolated.Assembly("", [], []), seed=7, device="cpu")
    assert not outcome.ok and outcome.kind == "crash" and "segmentation fault" in outcome.message


def test_a_passing_judge_is_not_overruled_by_a_runner_exit_code(monkeypatch):
    """Only the judge's verdict passes a test; the runner's exit code can fail one (the sanitizer's 86) but a
    runner that claims success proves nothing: its code 0 with a failing verdict still fails."""
    fail = {"ok": False, "kind": "fail", "message": "Wrong values"}
    monkeypatch.setattr(isolated, "_run_pair", _pair([(0, "", fail, 1)], []))
    outcome = isolated.run_test('"""Checks."""\nassert True\n', isolated.Assembly("", [], []), seed=7, device="cpu")
    assert not outcome.ok and outcome.message == "Wrong values"


def test_a_zygote_that_talks_nonsense_is_given_up():
    """A zygote whose replies cannot be read is stopped and counts as dead at once: no test waits for its
    time limit, and run_test falls back to a fresh process."""
    zygote = object.__new__(zygote_client._Zygote)  # its state, around a stand-in process
    zygote.proc = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    zygote.lock = threading.Lock()
    zygote.changed = threading.Condition(zygote.lock)
    zygote.next_id, zygote.replies = 0, {}
    try:
        zygote.proc.stdout = io.BytesIO(b"not json\n")
        with pytest.raises(ValueError):
            zygote._read()
        assert not zygote.alive()
        with pytest.raises((RuntimeError, OSError)):
            zygote.start("/nonexistent", {}, "/dev/null")
    finally:
        zygote.proc.kill()
        zygote.proc.wait()


# ---- ResilientExecute: the notebook's own run ----------------------------------------------------------

def _fake_run(fail_at: int, error: BaseException):
    """Stands in for nbclient's run of the whole notebook: calls preprocess_cell on each cell in turn."""
    def preprocess(self, nb, resources=None, km=None):
        for index, cell in enumerate(nb.cells):
            nb.cells[index], resources = self.preprocess_cell(cell, resources, index)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if index == fail_at:
            raise error
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade_id") == "plain":
            cell.outputs = []  # ran, and passed
        return cell, resources
    return preprocess, preprocess_cell


@pytest.mark.parametrize("error", [DeadKernelError("kernel died"), RuntimeError("kernel_info timed out"),
                                   TimeoutError("no reply")], ids=["dead-kernel", "other-error", "timeout"])
def test_a_failed_notebook_run_keeps_the_notebook(monkeypatch, tmp_path, error):
    """Any error of the notebook's run: the cell gets an error output, later grade cells that are not
    kernel tests fail as not run, and the kernel tests are still graded. (The run fails in the solution cell:
    kernel test cells are never sent to the learner's kernel.)"""
    preprocess, preprocess_cell = _fake_run(1, error)
    monkeypatch.setattr(Execute, "preprocess", preprocess)
    monkeypatch.setattr(Execute, "preprocess_cell", preprocess_cell)
    monkeypatch.setattr(isolated, "run_test", _passing)
    nb = _notebook(_test_cell("test_a"), _test_cell("test_b"))
    nb, resources = ResilientExecute().preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert resources["tritoncourse"]["kernel_died_at"] == 1
    assert nb.cells[1].outputs[-1]["output_type"] == "error"
    nb, resources = IsolatedKernelTests(workers=1).preprocess(nb, resources)
    plain = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "plain")
    assert plain.outputs[0]["ename"] == "NotRun"
    assert all(v["ok"] for v in resources["tritoncourse"]["verdicts"].values())


def test_a_kernel_that_never_starts_keeps_the_notebook(monkeypatch, tmp_path):
    """The run fails before any cell: every grade cell that is not a kernel test fails as not run."""
    def preprocess(self, nb, resources=None, km=None):
        raise RuntimeError("Kernel didn't respond in 60 seconds")

    monkeypatch.setattr(Execute, "preprocess", preprocess)
    monkeypatch.setattr(isolated, "run_test", _passing)
    nb, resources = ResilientExecute().preprocess(_notebook(_test_cell("test_a")), {})
    assert resources["tritoncourse"]["kernel_died_at"] == -1
    nb, resources = IsolatedKernelTests(workers=1).preprocess(nb, resources)
    plain = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "plain")
    assert plain.outputs[0]["ename"] == "NotRun" and "stopped" in plain.outputs[0]["traceback"][0]
    assert resources["tritoncourse"]["verdicts"]["test_a"]["ok"]


# ---- Real nbgrader: the same failures injected through the course's nbgrader_config.py ------------------

INJECTION = '''
# Test-only faults (tests/test_grader_errors.py): a bug in one test's grading, and a notebook whose kernels
# cannot be taken.
import tritoncourse.grading.autograde.nbgrader_plugin as _plugin

_real_run_cell, _real_kernels = _plugin.run_cell, _plugin.kernels_from_notebook


def _faulty_run_cell(source, *args, **kwargs):
    if "fp16 inputs" in source:
        raise RuntimeError("injected grader bug")
    return _real_run_cell(source, *args, **kwargs)


def _faulty_kernels(nb):
    if any("INJECT-GRADER-FAULT" in cell.source for cell in nb.cells):
        raise RuntimeError("injected notebook fault")
    return _real_kernels(nb)


_plugin.run_cell, _plugin.kernels_from_notebook = _faulty_run_cell, _faulty_kernels
'''


@pytest.mark.slow
def test_real_autograde_keeps_every_notebook_when_the_grader_fails(tmp_path):
    """Does plain `nbgrader autograde` keep both notebooks, fail only the tests the faults touch, and say
    that the grader failed?"""
    from nbformat.v4 import new_code_cell as code

    from course import Course

    assignment = "01_vector_add"
    course = Course(tmp_path, [assignment], scaled_down=True)
    with open(tmp_path / "nbgrader_config.py", "a") as f:
        f.write(INJECTION)
    source = course.source_notebook(assignment)
    course.submit("one_test_fault", assignment, source)
    marked = course.source_notebook(assignment)
    marked.cells.append(code("# INJECT-GRADER-FAULT"))
    marked.cells[-1]["id"] = "inject-fault"
    course.submit("notebook_fault", assignment, marked)
    proc = course.autograde(assignment, "--IsolatedKernelTests.timeout_factor=0.5", "--ResilientExecute.timeout=60")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]

    scores = course.scores(assignment, "one_test_fault")
    feedback = course.feedback_text(assignment, "one_test_fault")
    assert scores["test_vector_add_fp16"] == 0
    assert "GRADER ERROR" in feedback["test_vector_add_fp16"]
    assert "injected grader bug" in feedback["test_vector_add_fp16"]
    assert "TRITONCOURSE_SEED=" in feedback["test_vector_add_fp16"]
    assert all(s > 0 for t, s in scores.items() if t.startswith("test_") and t != "test_vector_add_fp16"), scores
    log = json.loads((tmp_path / "autograded" / "one_test_fault" / assignment
                      / f"{assignment}.verdicts.json").read_text())
    assert log["test_vector_add_fp16"]["kind"] == "grader-error"

    scores = course.scores(assignment, "notebook_fault")
    feedback = course.feedback_text(assignment, "notebook_fault")
    tests = [t for t in scores if t.startswith("test_")]
    assert tests and all(scores[t] == 0 for t in tests), scores
    assert all("GRADER ERROR" in feedback[t] and "injected notebook fault" in feedback[t] for t in tests)


def _sanitized(monkeypatch, runs):
    """run_test on the GPU path (compute-sanitizer on), each judge-and-runner run answered by the next of `runs`:
    (runner's exit code, runner's output, judge's verdict)."""
    calls = []
    lost = {"ok": False, "kind": "runner-lost", "message": ""}
    full = [(code, out, verdict if verdict is not None else lost, 0 if verdict and verdict.get("ok") else 1)
            for code, out, verdict in runs]
    monkeypatch.setattr(isolated, "sanitizer_enabled", lambda env=None: True)
    monkeypatch.setattr(isolated.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(isolated, "_run_pair", _pair(full, calls))
    outcome = isolated.run_test('"""Checks."""\nassert True\n', isolated.Assembly("", [], []), seed=7, device="cuda")
    return outcome, calls


PASS = {"ok": True, "kind": "pass", "message": ""}


def test_a_silent_sanitizer_crash_is_retried_once(monkeypatch):
    """Seen on an H200 under load: the checking process of a correct kernel died by SIGSEGV with an empty
    compute-sanitizer report. It is run once more (same seed) before anything is blamed on the kernel."""
    outcome, calls = _sanitized(monkeypatch, [(-11, "========= COMPUTE-SANITIZER\n", None),
                                              (0, "========= ERROR SUMMARY: 0 errors\n", PASS)])
    assert outcome.ok and len(calls) == 2 and calls[0][0].endswith("compute-sanitizer")


def test_a_crash_twice_is_the_kernels(monkeypatch):
    crash = (-11, "========= COMPUTE-SANITIZER\n", None)
    outcome, calls = _sanitized(monkeypatch, [crash, crash])
    assert not outcome.ok and outcome.kind == "crash" and len(calls) == 2


def test_a_sanitizer_report_is_not_retried(monkeypatch):
    """An invalid access found by the sanitizer (exit code 86) is the kernel's: no second run."""
    report = "========= Invalid __global__ read of size 4 bytes\n========= ERROR SUMMARY: 1 error\n"
    outcome, calls = _sanitized(monkeypatch, [(86, report, None)])
    assert not outcome.ok and "invalid memory accesses" in outcome.message and len(calls) == 1


SANITIZER_READ = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at triton_softmax_kernel+0x2a0 in /tmp/x/learner_kernels.py:12
=========     by thread (96,0,0) in block (2,0,0)
=========     Address 0x7f0000001000 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: _PyEval_EvalFrameDefault [0x1db2ed] in python3
========= Invalid __global__ read of size 4 bytes
=========     at triton_softmax_kernel+0x2a0 in /tmp/x/learner_kernels.py:12
=========         Host Frame: PyObject_Call [0x14b1d4] in python3
========= ERROR SUMMARY: 2 errors
"""


def test_a_sanitizer_report_reads_like_the_cpu_fence(monkeypatch):
    """An out-of-bounds read on the GPU is named as the CPU's fence names it, with the first report and
    without its host backtrace."""
    outcome, _ = _sanitized(monkeypatch, [(86, SANITIZER_READ, PASS)])
    assert "reads past the end" in outcome.message and "Invalid __global__ read" in outcome.message
    assert "Host Frame" not in outcome.message and "1 more like it (ERROR SUMMARY: 2 errors)" in outcome.message


def test_a_failed_check_keeps_its_diagnosis_beside_the_sanitizer(monkeypatch):
    """The stray reads also made NaN: the check's own diagnosis (which names the cause) comes first."""
    verdict = {"ok": False, "kind": "fail", "message": "C[0, 3] is NaN: K = 40 is not a multiple of BLOCK_K = 16"}
    outcome, _ = _sanitized(monkeypatch, [(86, SANITIZER_READ, verdict)])
    assert outcome.message.startswith("C[0, 3] is NaN") and "compute-sanitizer found" in outcome.message


def test_kernel_test_cells_never_reach_the_learners_kernel(monkeypatch, tmp_path):
    """Their source (the hidden tests, once restored) is never sent to the notebook's kernel: each gets the
    "graded outside" line, and only the other cells run."""
    sent = []

    def preprocess(self, nb, resources=None, km=None):
        for index, cell in enumerate(nb.cells):
            nb.cells[index], resources = self.preprocess_cell(cell, resources, index)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        sent.append(cell.source)
        return cell, resources

    monkeypatch.setattr(Execute, "preprocess", preprocess)
    monkeypatch.setattr(Execute, "preprocess_cell", preprocess_cell)
    hidden = _test_cell("test_a")
    hidden.source += "\n### BEGIN HIDDEN TESTS\nsecret_case = 12345\n### END HIDDEN TESTS\n"
    nb, _ = ResilientExecute().preprocess(_notebook(hidden), {"metadata": {"path": str(tmp_path)}})
    assert not any("%%kernel_test" in s or "secret_case" in s for s in sent), sent
    assert any("assert True" in s for s in sent)  # the plain grade cell still runs
    assert "Graded in a fresh process outside this notebook" in nb.cells[2].outputs[0]["text"]

"""Does a failure of the grading processes (a dead or garbled zygote, a judge without a verdict, a runner that
dies, a crash under compute-sanitizer) fail as the grader's or as the kernel's, as it should? The judge and the
runner are stand-ins here (tests/support/grader_faults.py's _pair)."""
from __future__ import annotations

import io
import subprocess
import threading
from pathlib import Path

import pytest

from grader_faults import KERNEL, _notebook, _pair, _passing, _test_cell
from tritoncourse.device import infer_device
from tritoncourse.grading.autograde import nbgrader_plugin
from tritoncourse.grading.processes import isolated, zygote_client


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


STUB = KERNEL.split("    offs")[0] + "    raise NotImplementedError()\n"  # the release's stub, refused by the lint


@pytest.mark.skipif(infer_device() != "cpu", reason="the sandbox's zygote is the CPU interpreter's")
@pytest.mark.parametrize("kernel,zygotes", [(STUB, 0), (KERNEL, 1)], ids=["stub", "kernel"])
def test_the_sandboxs_zygote_starts_only_where_a_test_runs_the_learners_code(monkeypatch, tmp_path, kernel, zygotes):
    """A notebook whose every kernel test the lint refuses before any process (an untouched notebook's stubs, a
    hostile definition) starts no zygote in its sandbox: ~1.5 s of CPU a notebook of a class. A kernel that runs
    starts one (the tests themselves are stand-ins here)."""
    started = []

    class Recorder:
        def __init__(self, sandbox):
            started.append(sandbox)

        def close(self):
            pass

    monkeypatch.setattr(nbgrader_plugin, "_Zygote", Recorder)
    real = isolated.run_test  # its refusals as they are (no process); a test that would run one passes here
    monkeypatch.setattr(isolated, "run_test", lambda body, assembly, **kw: (real if assembly.problems else _passing)(
        body, assembly, **kw))
    nb = _notebook(_test_cell("test_a"), _test_cell("test_b"))
    nb.cells[1].source = kernel
    nb, resources = nbgrader_plugin.IsolatedKernelTests(workers=1).preprocess(
        nb, {"metadata": {"path": str(tmp_path)}, "tritoncourse": {}})
    assert len(started) == zygotes
    verdicts = resources["tritoncourse"]["verdicts"]
    assert {v["kind"] for v in verdicts.values()} == ({"invalid"} if zygotes == 0 else {"pass"}), verdicts


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

"""The judge's processes and threads bounded by a cgroup of its own per test (issue 42): RLIMIT_NPROC cannot do it
(it counts every process of the grader's uid, and root, the grader on CI and on the hub, is exempt), and threads
count too (torch's, CUDA's). judge/cgroup.py makes the group where the sandbox makes its own; the judge joins it
first thing in its main.

The judge runs no learner code, so the attempt is injected as the sandbox's own tests inject a fork bomb: here as
the test's body, which runs in the judge process (the instructor's checks gone wrong). Against the code before the
bound (2026-11-28), the judge started every process and thread it asked for, its test passed, and the processes it
left, each in a session of its own, outlived the test. Now the test fails with the bound's message, nothing it
started is left, and the next test in the same sandbox passes. Where no cgroup can be made (a learner's machine
without root, TRITONCOURSE_SANDBOX_CGROUP=off, a GPU machine whose cgroup2 has no pids controller) the bound is
skipped and the sandbox's status line says why.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from conftest import DEVICE
from known_kernels import CORRECT_VECTOR_ADD
from tritoncourse.grading import sandbox
from tritoncourse.grading.judge.cgroup import JOIN_ENV, JudgeCgroup
from tritoncourse.grading.processes.isolated import Assembly, run_test
from tritoncourse.grading.sandbox.limits import JudgeLimits

pytestmark = pytest.mark.slow

BOUND = 24  # TRITONCOURSE_JUDGE_PROCESSES in these tests: the judge's own threads fit, 40 more do not
CORRECT_KERNEL = CORRECT_VECTOR_ADD
LAUNCH = textwrap.dedent('''
    """Full blocks."""
    import os
    from tritoncourse.checks.vector_add import check_vector_add

    check_vector_add(triton_vector_add_kernel, n=1024, block_size=256)
''')
# Run in the judge after a correct kernel's check: 40 processes, each in a session of its own (out of the judge's
# process group, which the grader kills at a time-out) writing its pid in PIDS, or 40 threads; all sleeping.
FORKS = LAUNCH + textwrap.dedent('''
    import time
    for _ in range(40):
        if os.fork() == 0:
            os.setsid()
            open(os.path.join(PIDS, str(os.getpid())), "w").close()
            time.sleep(60)
            os._exit(0)
''')
THREADS = LAUNCH + textwrap.dedent('''
    import threading, time
    for _ in range(40):
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
''')
# A correct kernel's judge in its cgroup, with its threads (torch's pool after a large op, a few of its own) and a
# short process of its own (as Triton runs ldconfig on a GPU): all within the bound.
WITHIN = LAUNCH + textwrap.dedent('''
    import subprocess, threading, torch
    assert "tritoncourse-judge-" in open("/proc/self/cgroup").read(), open("/proc/self/cgroup").read()
    torch.ones(1 << 22).add_(1)
    done = threading.Event()
    helpers = [threading.Thread(target=done.wait) for _ in range(4)]
    for t in helpers:
        t.start()
    assert len(os.listdir("/proc/self/task")) >= 5, os.listdir("/proc/self/task")
    done.set()
    assert subprocess.run(["true"]).returncode == 0
''')
OUTSIDE = LAUNCH + textwrap.dedent('''
    assert "tritoncourse-judge-" not in open("/proc/self/cgroup").read(), open("/proc/self/cgroup").read()
''')


@pytest.fixture(scope="module")
def box():
    assert sandbox.problem() is None, sandbox.problem()
    b = sandbox.Sandbox("judge-processes")
    yield b
    b.close()


@pytest.fixture
def bounded(monkeypatch):
    """The judge's bound at BOUND; skipped, saying why, where no pids cgroup can be made for the judge here."""
    monkeypatch.setenv("TRITONCOURSE_JUDGE_PROCESSES", str(BOUND))
    group = JudgeCgroup(gpu=DEVICE != "cpu")
    try:
        if "pids" in group.why_not:
            pytest.skip(f"the judge's processes are not bounded here: {group.why_not['pids']}")
    finally:
        group.close()


def judged(box, body: str, timeout: float = 60):
    return run_test(body, Assembly(CORRECT_KERNEL, ["triton_vector_add_kernel"], []), timeout=timeout, seed=7,
                    device=DEVICE, sandbox=box)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.parametrize("hook", ["processes", "threads"])
def test_a_judge_past_its_process_bound_fails_only_that_test(box, bounded, hook, tmp_path):
    """40 processes (or threads) started by the judge, past its bound of 24: the test fails with the bound's message
    (a grader error: the judge runs no learner code), within seconds, and nothing it started is left."""
    pids = tmp_path / "pids"
    pids.mkdir()
    body = f"PIDS = {str(pids)!r}\n" + (FORKS if hook == "processes" else THREADS)
    start = time.monotonic()
    outcome = judged(box, body)
    print(f"\n{outcome.kind}: {outcome.message!r}")
    assert not outcome.ok and outcome.kind == "grader-error", outcome.report()
    assert f"tried to start more than {BOUND} processes or threads, its bound" in outcome.message, outcome.message
    assert time.monotonic() - start < 40
    started = [int(p.name) for p in pids.iterdir()]
    assert hook == "threads" or 0 < len(started) < 40, started
    left = [pid for pid in started if _alive(pid)]
    assert not left, f"the judge's processes outlived its test: {left}"


def test_a_correct_kernel_passes_with_its_threads_within_the_bound(box, bounded):
    """After those, in the same sandbox, under the same bound: a correct kernel passes, its judge in its own cgroup,
    with torch's threads and its own, and a short process of its own."""
    outcome = judged(box, WITHIN)
    assert outcome.ok, outcome.report()


def test_the_judges_cgroups_are_removed_after_each_test(box):
    """Each test's cgroup goes with it: none left in the folders where they are made."""
    group = JudgeCgroup(gpu=DEVICE != "cpu")
    parents = {folder.parent for folder in (group._cg.dirs.values() if group._cg is not None else [])}
    group.close()
    if not parents:
        pytest.skip(f"no cgroup for the judge here: {group.why_not}")
    assert judged(box, LAUNCH).ok
    left = [p for parent in parents for p in parent.glob(f"tritoncourse-judge-{os.getpid()}-*")]
    assert not left, left


def test_without_a_cgroup_the_judge_runs_and_the_status_says_why(box, monkeypatch):
    """Where no cgroup can be made (here by TRITONCOURSE_SANDBOX_CGROUP=off, the path a learner's machine without
    root takes), nothing is asked of the judge, a correct kernel passes, and the sandbox's status names the cause."""
    monkeypatch.setenv(sandbox.CGROUP_ENV, "off")
    group = JudgeCgroup(gpu=DEVICE != "cpu")
    assert group.env() == {} and set(group.why_not) == {"memory", "pids"}, group.why_not
    assert "TRITONCOURSE_SANDBOX_CGROUP=off" in group.why_not["pids"]
    outcome = judged(box, OUTSIDE)
    assert outcome.ok, outcome.report()
    quiet = sandbox.Sandbox("judge-no-cgroup", watchdog=False)
    try:
        status = quiet.resource_control()
    finally:
        quiet.close()
    assert "each test's judge: processes: NO cgroup (TRITONCOURSE_SANDBOX_CGROUP=off): unbounded" in status, status


def test_a_learners_own_check_makes_no_cgroup():
    """Unsandboxed (a learner's `make check` on their own machine), the judge is asked to join nothing, and a correct
    kernel passes there as before."""
    outcome = run_test(OUTSIDE, Assembly(CORRECT_KERNEL, ["triton_vector_add_kernel"], []), timeout=60, seed=7,
                       device=DEVICE)
    assert outcome.ok, outcome.report()


MEMFD = textwrap.dedent('''
    import os, sys
    from tritoncourse.grading.judge.cgroup import join

    join()
    fd = os.memfd_create("fill")
    block = b"x" * (1 << 20)
    for _ in range(int(sys.argv[1])):
        os.write(fd, block)
    print("all written")
''')


def test_the_judges_memory_of_every_kind_is_bounded(tmp_path):
    """The cgroup's memory bound (JudgeLimits.memory_mb, here 256 MB) counts what the judge's address-space rlimit
    does not: a process that joins the judge's cgroup as the judge does (cgroup.join) and writes 512 MB into a memfd
    is stopped, and the group says it was its memory."""
    group = JudgeCgroup(gpu=DEVICE != "cpu", limits=JudgeLimits(memory_mb=256))
    try:
        if "memory" in group.why_not:
            pytest.skip(f"the judge's memory has no cgroup here: {group.why_not['memory']}")
        env = dict(os.environ, **group.env(), PYTHONPATH=str(sandbox.PACKAGE.parent))
        proc = subprocess.run([sys.executable, "-c", MEMFD, "512"], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == -9 and "all written" not in proc.stdout, (proc.returncode, proc.stderr[-2000:])
        assert group.breach() is not None and group.breach()[0] == "memory", group.breach()
    finally:
        group.close()
    assert JOIN_ENV not in os.environ

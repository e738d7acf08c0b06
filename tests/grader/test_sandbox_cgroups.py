"""The grading sandbox: every kind of memory, processes and disk counted where the kernel counts them (issue 31):
memory in memfds and in tmpfs pages by the sandbox's memory cgroup, processes by its pids cgroup, unlinked files by
filesystems of bounded size (where neither can be used they skip, saying so); nothing outlives close(), a killed
grader's sandbox is swept by the next; cgroup v2's plan and files on a fake hierarchy (tritoncourse/grading/sandbox/,
docs/INSTRUCTORS.md "Threat model")."""
from __future__ import annotations

import contextlib
import json
import secrets
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from course import ROOT
from sandboxes import (_marked, _wait_for, box, kernel_bounds_expected, report, run_in,  # noqa: F401 (fixtures)
                       sandbox_works)
from tritoncourse.grading import sandbox
from tritoncourse.grading.sandbox import Limits, Sandbox


def needs(b: Sandbox, what: str) -> None:
    """Skip, saying why, where the kernel does not bound ``what`` (a cgroup controller, or "disk") here:
    test_a_correct_program_runs_within_the_limits fails where it should."""
    have = bool(b.mounts) if what == "disk" else what in b._cg.dirs if b._cg is not None else False
    if not have:
        pytest.skip(f"{what} is not bounded by the kernel here, the hole stays open: {b.resource_control()}")


def env_limits(**fields) -> Limits:
    """Limits as an instructor sets them: TRITONCOURSE_SANDBOX_<FIELD>."""
    return Limits.from_env({f"TRITONCOURSE_SANDBOX_{k.upper()}": str(v) for k, v in fields.items()})


def _report_or_none(proc: subprocess.CompletedProcess) -> dict | None:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


# Each writes 8 MB at a time into a file of some kind, at most argv[1] MB, reports, then holds it a moment.
MEMFD = """
    import json, os, sys, time
    fd, total, error = os.memfd_create("hog"), 0, None
    try:
        for _ in range(int(sys.argv[1]) // 8):
            os.write(fd, b"\\xff" * (8 << 20))
            total += 8
    except OSError as err:
        error = err.strerror
    print(json.dumps({"mb": total, "error": error}), flush=True)
    time.sleep(1.5)
"""


UNLINKED = """
    import json, os, sys, time
    path = os.path.join(sys.argv[2], "unlinked.bin")
    fd, total, error = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600), 0, None
    os.unlink(path)  # the file has no name any more: no walk of the folder finds it
    try:
        for _ in range(int(sys.argv[1]) // 8):
            os.write(fd, b"\\xff" * (8 << 20))
            total += 8
    except OSError as err:
        error = err.strerror
    print(json.dumps({"mb": total, "error": error}), flush=True)
    time.sleep(1.5)
"""


# A tmpfs of the learner's own: a user namespace of its own may mount one (of half the machine's memory).
OWN_TMPFS = """
    import json, os, subprocess, sys
    script = ("mount -t tmpfs none /tmp && i=0 && while [ $i -lt $(($1 / 8)) ]; do "
              "head -c 8388608 /dev/zero > /tmp/f$i || exit 3; i=$((i + 1)); done")
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", sys.argv[1]], capture_output=True, text=True)
    print(json.dumps({"code": r.returncode, "err": r.stderr[-300:]}), flush=True)
"""


def test_memory_in_memfd_counts(box):
    """(issue 31) Memory held in a memfd is in no process's resident memory and takes no address space: only
    the sandbox's cgroup counts it. 512 MB written into a memfd in a sandbox of 256 MB is stopped, named."""
    b = box(limits=env_limits(memory_mb=1024, total_memory_mb=256))
    needs(b, "memory")
    r = run_in(b, MEMFD, args=["512"], watch=True)
    got = _report_or_none(r)
    assert got is None or got["mb"] < 256, f"a 512 MB memfd was not stopped: {got}"
    assert any("MB of memory (counting files in memory)" in e for e in b.limit_events()), b.limit_events()
    assert any("256 MB of memory" in why for why in b.killed), b.killed


@pytest.mark.parametrize("where", ["tmp", "own_tmpfs"])
def test_memory_in_tmpfs_counts(box, where):
    """(issue 31) A file in the sandbox's /tmp (a tmpfs of DISK_MB, here larger than the memory limit), or in a
    tmpfs the learner's code mounts itself in a user namespace of its own, is memory: stopped at 256 MB."""
    b = box(limits=env_limits(memory_mb=1024, total_memory_mb=256, disk_mb=1024))
    needs(b, "memory")
    if where == "tmp":
        r = run_in(b, UNLINKED, args=["512", "/tmp"], watch=True)
        got = _report_or_none(r)
        assert got is None or got["mb"] < 256, f"512 MB in /tmp were not stopped: {got}"
    else:
        r = run_in(b, OWN_TMPFS, args=["512"], watch=True)
        got = _report_or_none(r)
        if got and "unshare" in got["err"] and got["code"] == 1:
            pytest.skip(f"no user namespaces inside the sandbox here: {got['err']}")
        assert got is None or got["code"] != 0, f"512 MB in a tmpfs of the learner's own were not stopped: {got}"
    assert any("MB of memory (counting files in memory)" in e for e in b.limit_events()), (b.limit_events(), got)


@pytest.mark.parametrize("where", ["shared", "tmp"])
def test_unlinked_files_count_as_disk(box, where):
    """(issue 31) An unlinked open file in the shared folder grows past DISK_MB: the shared folder is a
    filesystem of that size (ENOSPC; the watchdog then stops the sandbox), named as disk. /tmp (bwrap's --size
    tmpfs) bounds one as well."""
    b = box(limits=env_limits(memory_mb=1024, total_memory_mb=1024, disk_mb=64))
    if where == "shared":
        needs(b, "disk")
    folder = str(b.shared) if where == "shared" else "/tmp"
    r = run_in(b, UNLINKED, args=["384", folder], watch=True)
    got = _report_or_none(r)
    assert got is not None and got["mb"] <= 64 and got["error"] == "No space left on device", (got, r.stderr[-500:])
    assert any("wrote more than 64 MB to disk" in e for e in b.limit_events()), b.limit_events()


def test_fork_bomb_is_bounded_by_the_cgroup(box):
    """The sandbox's cgroup refuses the fork bomb's 48th process or thread (the per-user rlimit is set above
    it), and says so."""
    b = box(limits=env_limits(processes=48))
    needs(b, "pids")  # else the per-user rlimit alone bounds it (test_fork_bomb_is_bounded)
    got = report(run_in(b, """
        import json, os, time
        start, children, error = time.time(), 0, None
        while time.time() - start < 20 and children < 2000:
            try:
                pid = os.fork()
            except OSError as err:
                error = type(err).__name__
                break
            if pid == 0:
                time.sleep(max(0.0, 20 - (time.time() - start)))
                os._exit(0)
            children += 1
        print(json.dumps({"children": children, "error": error}), flush=True)
        os._exit(0)
    """))
    assert got["error"] == "BlockingIOError" and got["children"] < 48, got
    assert "your code started more than 48 processes or threads" in b.limit_events(), b.limit_events()


def test_close_removes_cgroup_and_mount_and_every_process(box):
    """(issue 31) Nothing outlives close(): not a process started without watch() that keeps the sandbox's first
    process alive, nor its daemon; the cgroups are removed and the shared folder's filesystem unmounted."""
    marker = "closing" + secrets.token_hex(6)
    b = box()
    first = subprocess.Popen(b.argv([sys.executable, "-I", "-c", textwrap.dedent("""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1] + "-daemon"],
                         start_new_session=True, stdin=subprocess.DEVNULL)
        time.sleep(60)
    """), marker]), stdin=subprocess.DEVNULL)
    try:
        assert _wait_for(lambda: _marked(marker + "-daemon"), 20), "the daemon never started"
        b.close()
        assert _wait_for(lambda: not _marked(marker), 5), "processes outlived close()"
        assert first.wait(timeout=10) is not None
        made = list(b.cgroups) + list(b.mounts)  # what the sandbox made (as root here: both)
        assert not kernel_bounds_expected() or len(made) >= 2, b.resource_control()
        assert not [p for p in made if p.exists()], made
        mounted = Path("/proc/self/mountinfo").read_text()
        assert str(b.shared) not in mounted and not b.root.exists()
    finally:
        for proc in _marked(marker):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if first.poll() is None:
            sandbox.kill_process_tree(first.pid)
        first.wait(timeout=10)


def test_a_killed_graders_sandbox_is_swept_by_the_next(box):
    """A grading process killed by a signal never closes its sandboxes (course grade kills a notebook's nbgrader
    at its time limit): the next sandbox made on the machine removes the dead one's tmpfs, cgroups and scratch
    folder, and leaves a live one alone."""
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import json, os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from tritoncourse.grading.sandbox import Sandbox
        b = Sandbox("killed-grader")
        print(json.dumps([str(b.root)] + [str(p) for p in b.cgroups + b.mounts]), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)], capture_output=True, text=True, timeout=60)
    left = [Path(p) for p in json.loads(killed.stdout.splitlines()[-1])]
    assert killed.returncode == -signal.SIGKILL and all(p.exists() for p in left), (killed.stderr, left)
    assert not kernel_bounds_expected() or len(left) >= 3, left  # the folder, one cgroup (v2) or two (v1), a mount
    alive = box()
    box()
    assert not [p for p in left if p.exists()], left
    assert str(left[0]) not in Path("/proc/self/mountinfo").read_text()
    assert alive.root.exists() and all(p.exists() for p in alive.cgroups + alive.mounts)


def test_cgroup_v2_plan_and_files_on_a_fake_hierarchy(tmp_path):
    """cgroup v2 cannot be tried on these CPU machines (v1): on a fake cgroup2 tree, the plan a GPU machine of this
    course needs (the grader's own group holds processes, its parent enables only memory: a sibling gets memory,
    processes stay with the rlimit, saying so), a delegated folder named by TRITONCOURSE_SANDBOX_CGROUP (both), the
    v2 files written and read, and the launcher's write of its own pid."""
    fake = tmp_path / "cgroup2"
    (fake / "grader").mkdir(parents=True)
    (fake / "deleg").mkdir()
    for folder, available, enabled in ((fake, "cpu memory pids", "memory"), (fake / "grader", "memory", ""),
                                       (fake / "deleg", "memory pids", "memory pids")):
        (folder / "cgroup.controllers").write_text(available + "\n")
        (folder / "cgroup.subtree_control").write_text(enabled + "\n")
    mountinfo = f"41 31 0:38 / {fake} rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
    plan, why = sandbox._cgroup_plan({}, mountinfo, "0::/grader\n", may_nest=False)
    assert plan == {"memory": (2, fake)} and "pids" in why, (plan, why)
    plan, why = sandbox._cgroup_plan({sandbox.CGROUP_ENV: str(fake / "deleg")}, mountinfo, "0::/grader\n",
                                     may_nest=False)
    assert plan == {"memory": (2, fake / "deleg"), "pids": (2, fake / "deleg")} and why == "", (plan, why)
    assert sandbox._cgroup_plan({sandbox.CGROUP_ENV: "off"}, mountinfo, "0::/grader\n")[0] == {}

    cg = sandbox._Cgroups("tritoncourse-sandbox-fake", plan, 300 << 20, 64)
    child = fake / "deleg" / "tritoncourse-sandbox-fake"
    assert cg.dirs == {"memory": child, "pids": child} and not cg.failed, (cg.dirs, cg.failed)
    assert (child / "memory.max").read_text() == str(300 << 20) and (child / "pids.max").read_text() == "64"
    (child / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\noom_group_kill 0\n")
    (child / "pids.events").write_text("max 3\n")
    assert cg.counts() == {"memory": 1, "processes": 3}
    launched = subprocess.run(["sh", "-c", sandbox._LAUNCHER, "launcher", "1", str(child / "cgroup.procs"),
                               "sh", "-c", "echo $$"], capture_output=True, text=True, timeout=30)
    assert launched.stdout.split() == (child / "cgroup.procs").read_text().split(), launched
    refused = subprocess.run(["sh", "-c", sandbox._LAUNCHER, "launcher", "1", str(tmp_path / "none" / "cgroup.procs"),
                              "echo", "LEARNER CODE RAN"], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 125 and "LEARNER" not in refused.stdout, refused


def test_the_graders_own_cgroup2_group_is_nested_not_a_systemd_unit(tmp_path):
    """On a cgroup v2 machine whose grader is in a group that holds processes (the course's GPU machines), the
    grader moves the group's processes into a leaf and enables the controllers there, so the sandboxes become its
    children (its device rules: the GPU stays reachable, run on an H200 in docs/GPU-RUNS.md). A fake tree: the
    moves and the writes, and a systemd unit left alone."""
    fake = tmp_path / "cgroup2"
    for name in ("grader", "session-1.scope"):
        (fake / name).mkdir(parents=True)
        (fake / name / "cgroup.controllers").write_text("memory pids\n")
        (fake / name / "cgroup.subtree_control").write_text("\n")
        (fake / name / "cgroup.procs").write_text("101\n102\n")
    assert not sandbox._nest(fake / "grader", attempts=1)  # a regular file does not enable anything
    leaf = fake / "grader" / sandbox.NEST_LEAF
    assert (leaf / "cgroup.procs").read_text() == "102", "every process of the group is moved into the leaf"
    assert (fake / "grader" / "cgroup.subtree_control").read_text() == "+pids"  # each controller written in turn
    assert not sandbox._nest(fake / "session-1.scope", attempts=1)
    assert not (fake / "session-1.scope" / sandbox.NEST_LEAF).exists(), "a systemd unit is never reorganised"
    (fake / "grader" / "cgroup.subtree_control").write_text("memory pids\n")
    assert sandbox._nest(fake / "grader"), "already enabled: nothing to do"
    for name in ("cgroup.controllers", "cgroup.subtree_control"):
        (leaf / name).write_text("memory pids\n")
    mountinfo = f"41 31 0:38 / {fake} rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
    plan, why = sandbox._cgroup_plan({}, mountinfo, f"0::/grader/{sandbox.NEST_LEAF}\n", may_nest=True)
    assert plan == {"memory": (2, fake / "grader"), "pids": (2, fake / "grader")} and why == "", (plan, why)
    assert not (leaf / sandbox.NEST_LEAF).exists(), "a grader in the leaf never nests again"

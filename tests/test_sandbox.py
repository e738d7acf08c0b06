"""The grading sandbox (tritoncourse/grading/sandbox.py, docs/INSTRUCTORS.md "Threat model").

Unit tests: what a sandboxed process can see and do (no course, read-only Python and package, private /tmp,
no network, a uid of its own, limits, nothing left running), which limit the kernel counts (memory of every kind and
processes in a cgroup, disk in a filesystem of bounded size; where neither can be used they skip, saying so), and
tools/system-deps.sh without bwrap.

The hostile suite: every learner of tests/hostile/01_vector_add/ (patches the course, forges the gradebook,
reads the hidden tests, calls the grader's machine, fork bomb, memory hog, memory in memfds and in a tmpfs of its
own, disk filler, unlinked files, kills its parents, symlinks and ../ names) is graded, between two correct
learners, once by plain `nbgrader autograde` and once by `python -m tritoncourse grade`, each in a course copy
of its own, with its own copy of the package, so that nothing here can touch this checkout (those the lint refuses
by plain nbgrader only, those the sandbox's kernel-enforced bounds contain by `course grade` only: KERNEL_BOUNDED).
Then: each loses only its own points, the course is unchanged, no output shows a hidden test or another learner's work, nothing is left
running, grading ends in time.

Finally grading refuses to run without bubblewrap, naming the command that installs it, unless opted out.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell

from course import BIN, ROOT, Course, Fixture
from tritoncourse.device import infer_device
from tritoncourse.grading import sandbox
from tritoncourse.grading.sandbox import INSTALL_COMMAND, OPT_OUT_ENV, OPT_OUT_VALUE, PACKAGE, Limits, Sandbox

A = "01_vector_add"
HOSTILE = Path(__file__).resolve().parent / "hostile" / A
KERNEL_TESTS = ["test_vector_add_full_blocks", "test_vector_add_ragged_sizes", "test_vector_add_block_sizes",
                "test_vector_add_large", "test_vector_add_fp16"]
# Limits for the hostile graders: far below the defaults, so that a hog or a filler that the sandbox lets
# through (a bug) costs this shared machine little; correct kernels' checks fit well inside them.
# On a GPU a checking process under compute-sanitizer holds more than 2 GB resident (CUDA's context and the
# sanitizer's shadow memory), and there only the watchdog limits memory (no address-space limit: CUDA maps far more
# than it uses).
ON_GPU = infer_device() == "cuda"
# TRITONCOURSE_HOSTILE_FIXTURES=name,name grades only those hostile learners (with the two correct ones around
# them): a GPU run short of device time re-checks the few that changed; every other one's test is skipped, saying so.
ONLY_HOSTILE = {name for name in os.environ.get("TRITONCOURSE_HOSTILE_FIXTURES", "").split(",") if name}
HOSTILE_LIMITS = {"TRITONCOURSE_SANDBOX_MEMORY_MB": "8192" if ON_GPU else "2048", "TRITONCOURSE_SANDBOX_DISK_MB": "256",
                  # the whole sandbox (cgroup): on a GPU the default (checks under compute-sanitizer hold GBs each)
                  "TRITONCOURSE_SANDBOX_TOTAL_MEMORY_MB": "0" if ON_GPU else "3072"}
# One learner's grading, and the whole hostile class, must end well inside the usual time-outs.
GRADING_TIMEOUT = 900


@pytest.fixture(scope="module", autouse=True)
def sandbox_works():
    why = sandbox.problem()
    assert why is None, f"the grading sandbox cannot run here ({why}): {INSTALL_COMMAND}"


# ------------------------------------------------------------------------------------------ unit tests

def run_in(box: Sandbox, code: str, timeout: float = 60, watch: bool = False,
           args: list[str] = ()) -> subprocess.CompletedProcess:
    """Run Python ``code`` (with ``args``) inside ``box``; with ``watch`` the watchdog guards it."""
    proc = subprocess.Popen(box.argv([sys.executable, "-I", "-c", textwrap.dedent(code), *args]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    if watch:
        box.watch(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        sandbox.kill_process_tree(proc.pid)
        out, err = proc.communicate()
        raise AssertionError(f"the sandboxed process did not end within {timeout} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def report(proc: subprocess.CompletedProcess) -> dict:
    """The JSON object the sandboxed code printed last."""
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return json.loads(lines[-1])


@pytest.fixture
def box():
    boxes = []

    def make(limits: Limits | None = None, **fields) -> Sandbox:
        boxes.append(Sandbox("unit", limits=limits or Limits(**fields)))
        return boxes[-1]

    yield make
    for b in boxes:
        b.close()


def test_course_files_and_home_are_invisible(box, tmp_path):
    """Neither the course (source/, gradebook, configuration, tests), nor the grader's home, nor the grader's
    /tmp can be seen; the package and the Python environment can."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the grader's own file")
    hidden = [ROOT / "source", ROOT / "nbgrader_config.py", ROOT / "tests", ROOT / "release", ROOT / "Makefile",
              Path.home() / ".ssh", Path.home() / ".bashrc", Path.home() / ".cache", secret, Path("/home")]
    shown = [PACKAGE / "checking.py", Path(sys.prefix) / "bin", Path(sys.executable)]
    b = box()
    r = run_in(b, f"""
        import json, os
        print(json.dumps({{"hidden": {{p: os.path.exists(p) for p in {[str(p) for p in hidden]!r}}},
                          "shown": {{p: os.access(p, os.R_OK) for p in {[str(p) for p in shown]!r}}}}}))
    """)
    got = report(r)
    assert not any(got["hidden"].values()), got
    assert all(got["shown"].values()), got


def test_python_and_package_are_read_only(box):
    """The learner's code can import the package but change neither it nor the Python environment."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    name = f"sandbox-probe-{secrets.token_hex(4)}"
    targets = [os.path.join(site, name + ".txt"), str(PACKAGE / f"{name}.py"), str(PACKAGE / "checking.py"),
               str(Path(sys.prefix) / "bin" / name)]
    before = (PACKAGE / "checking.py").read_bytes()
    r = run_in(box(), f"""
        import json, sys
        sys.path.insert(0, {str(PACKAGE.parent)!r})
        import tritoncourse.checking
        out = {{}}
        for path in {targets!r}:
            try:
                with open(path, "a") as f:
                    f.write("# written from the sandbox\\n")
                out[path] = "written"
            except OSError as err:
                out[path] = type(err).__name__
        print(json.dumps(out))
    """)
    got = report(r)
    written = [p for p in targets[:2] + targets[3:] if os.path.exists(p)]
    for p in written:
        os.unlink(p)
    assert (PACKAGE / "checking.py").read_bytes() == before
    assert not written and "written" not in got.values(), got


def test_tmp_is_private_and_scratch_is_removed(box):
    """/tmp inside is not the grader's /tmp, and what the learner wrote is gone when the sandbox closes."""
    tag = secrets.token_hex(6)
    outside = Path("/tmp") / f"outside-{tag}"
    outside.write_text("the grader's")
    try:
        b = box()
        r = run_in(b, f"""
            import json, os
            open("/tmp/inside-{tag}", "w").write("x")
            open(os.path.join(os.environ["HOME"], "note"), "w").write("x")
            print(json.dumps({{"outside": os.path.exists("{outside}"), "tmp": os.listdir("/tmp"),
                              "home": os.environ["HOME"]}}))
        """)
        got = report(r)
        # /tmp holds what the learner wrote, and the mount points of the sandbox's own scratch folder and of what
        # it binds from under the grader's /tmp (a course or an environment that lives there, as a clone in /tmp)
        mounts = {Path(p).relative_to("/tmp").parts[0] for p in b._readonly_paths() if p.startswith("/tmp/")}
        assert got["outside"] is False and set(got["tmp"]) == {f"inside-{tag}", b.root.name} | mounts, got
        assert not Path(f"/tmp/inside-{tag}").exists()
        assert got["home"].startswith(str(b.shared)) and (Path(got["home"]) / "note").exists()
        b.close()
        assert not b.root.exists()
    finally:
        outside.unlink()


def test_no_network_not_even_the_graders_loopback(box):
    """A port the grader listens on (loopback) cannot be reached, and neither can the internet."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        r = run_in(box(), f"""
            import json, socket
            out = {{}}
            for host, port in (("127.0.0.1", {port}), ("localhost", {port}), ("1.1.1.1", 53), ("pypi.org", 443)):
                try:
                    socket.create_connection((host, port), timeout=3).close()
                    out[f"{{host}}:{{port}}"] = "connected"
                except OSError as err:
                    out[f"{{host}}:{{port}}"] = type(err).__name__
            print(json.dumps({{"connect": out, "interfaces": [name for _, name in socket.if_nameindex()]}}))
        """)
        got = report(r)
        with pytest.raises(socket.timeout):
            server.accept()
    assert "connected" not in got["connect"].values(), got
    assert got["interfaces"] == ["lo"], got


def test_runs_as_a_user_of_its_own_without_privileges(box):
    b1, b2 = box(), box()
    code = """
        import json, os
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
        print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "caps": status["CapEff"].strip(),
                          "nnp": status.get("NoNewPrivs", "").strip(), "pid": os.getpid()}))
    """
    one, two = report(run_in(b1, code)), report(run_in(b2, code))
    assert one["caps"] == "0000000000000000", one
    assert one["uid"] != 0 and one["gid"] != 0, one
    if os.geteuid() == 0:  # a uid of each sandbox's own: no file of the grader's is its, nor another learner's
        assert one["uid"] == b1.uid and two["uid"] == b2.uid and one["uid"] != two["uid"], (one, two)
        assert one["nnp"] == "1", one
    else:  # a user namespace
        assert one["uid"] == 1000, one
    assert one["pid"] < 10, one  # a PID namespace of its own


def test_fork_bomb_is_bounded(box):
    """A fork bomb stops at the process limit (each process stops itself after 20 s in any case)."""
    b = box(processes=48)
    start = time.monotonic()
    r = run_in(b, """
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
        os._exit(0)  # the children die with the sandbox's first process (PID namespace)
    """, timeout=60)
    got = report(r)
    assert got["error"] == "BlockingIOError" and got["children"] < 48, got
    assert time.monotonic() - start < 15


def test_memory_hog_is_stopped(box):
    """On the CPU the address-space limit stops a hog with MemoryError; the watchdog (the GPU's only guard,
    where CUDA needs the address space) kills a process whose resident memory passes the limit."""
    hog = """
        import json, time
        hog, error = [], None
        try:
            for _ in range(40):  # 64 MB at a time, at most 2.5 GB
                hog.append(bytearray(64 << 20))
                time.sleep(0.1)
        except MemoryError as err:
            error = type(err).__name__
        print(json.dumps({"mb": len(hog) * 64, "error": error}), flush=True)
    """
    limited = box(memory_mb=512)
    limited.gpu = False  # a CPU sandbox (the default where no GPU is): the address-space limit
    got = report(run_in(limited, hog))
    assert got["error"] == "MemoryError" and got["mb"] < 512, got
    watched = box(memory_mb=384)
    watched.gpu = True  # no address-space limit: only the watchdog
    r = run_in(watched, hog, watch=True)
    assert r.returncode != 0 and "{" not in r.stdout, (r.returncode, r.stdout)
    assert any("memory" in why for why in watched.killed), watched.killed


def test_disk_filler_is_stopped(box, monkeypatch):
    """/tmp is a tmpfs of the disk limit; so is the shared folder (as root), which the watchdog empties once full
    (stopping the sandbox); without a filesystem of its own (not root), the watchdog stops a sandbox whose shared
    folder's files pass the limit; one file may not pass the file limit."""
    fill = """
        import json, os, sys, time
        total, error = 0, None
        try:
            with open(os.path.join(sys.argv[1], "fill.bin"), "wb") as f:
                for _ in range(48):  # 8 MB at a time, at most 384 MB
                    f.write(b"x" * (8 << 20))
                    f.flush()
                    total += 8
                    print(json.dumps({"mb": total}), flush=True)
                    time.sleep(0.05)
        except OSError as err:
            error = err.strerror
        print(json.dumps({"mb": total, "error": error}), flush=True)
    """
    b = box(disk_mb=64)
    proc = subprocess.run(b.argv([sys.executable, "-I", "-c", textwrap.dedent(fill), "/tmp"]), capture_output=True,
                          text=True, timeout=60)
    got = report(proc)
    assert got["error"] == "No space left on device" and got["mb"] <= 64, got

    for tmpfs in ("auto", "off"):  # "off": as without root, the shared folder is only watched
        monkeypatch.setenv(sandbox.TMPFS_ENV, tmpfs)
        watched = box(disk_mb=64)
        assert bool(watched.mounts) == (tmpfs == "auto" and os.geteuid() == 0), watched.resource_control()
        proc = subprocess.Popen(watched.argv([sys.executable, "-I", "-c", textwrap.dedent(fill), str(watched.shared)]),
                                stdout=subprocess.PIPE, text=True)
        watched.watch(proc.pid)
        out, _ = proc.communicate(timeout=60)
        if watched.mounts:  # the filesystem refuses the 65th MB; the watchdog then finds it full
            # The watchdog may stop the sandbox between the refusal and the report (a loaded machine): then the
            # last progress line still shows that no more than 64 MB were written.
            last = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            assert last and last[-1]["mb"] <= 64 and last[-1].get("error", "No space left on device") \
                == "No space left on device", out
        else:
            assert proc.returncode != 0 and '"error"' not in out, (proc.returncode, out)  # stopped mid-write
        assert _wait_for(lambda: any("disk" in why for why in watched.killed), 5), watched.killed
        assert _wait_for(lambda: not (watched.shared / "fill.bin").exists(), 5)
        assert watched.limit_events() == ["your code wrote more than 64 MB to disk"], watched.limit_events()
    monkeypatch.delenv(sandbox.TMPFS_ENV)

    small = box(file_mb=16)
    got = report(subprocess.run(small.argv([sys.executable, "-I", "-c", textwrap.dedent(fill), str(small.shared)]),
                                capture_output=True, text=True, timeout=60))
    assert got["error"] == "File too large" and got["mb"] <= 16, got


def _marked(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc)
    return found


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_the_watchdogs_walk_finds_what_psutil_finds():
    """Sandbox.descendants walks the kernel's per-task children lists (only the watched tree, not every process of
    the machine): the same processes as psutil's children(recursive=True), children of a process's other threads
    included, and nothing once the tree has ended."""
    from tritoncourse.grading.sandbox import _descendant_pids

    if _descendant_pids(os.getpid()) is None:
        pytest.skip("no /proc/PID/task/TID/children on this kernel: the watchdog uses psutil's walk")
    script = ("import subprocess, threading, time\n"
              "subprocess.Popen(['sleep', '60'])\n"
              "threading.Thread(target=lambda: subprocess.run(['bash', '-c', 'sleep 60 & sleep 60 & wait'])).start()\n"
              "time.sleep(60)\n")
    root = subprocess.Popen([sys.executable, "-c", script])
    try:
        assert _wait_for(lambda: len(psutil.Process(root.pid).children(recursive=True)) == 4, 20)
        ours = [p.pid for p in Sandbox.descendants(root.pid)]
        assert sorted(ours) == sorted(p.pid for p in psutil.Process(root.pid).children(recursive=True))
        assert {psutil.Process(pid).ppid() for pid in ours[:2]} == {root.pid}, "children first"
    finally:
        for proc in psutil.Process(root.pid).children(recursive=True) + [psutil.Process(root.pid)]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        root.wait(10)
    assert Sandbox.descendants(root.pid) == []


def test_processes_are_gone_when_the_first_ends_or_the_sandbox_closes(box):
    """A detached daemon dies with the sandbox's first process (PID namespace), and everything dies at close."""
    daemon = """
        import os, subprocess, sys, time
        if os.fork() == 0:
            os.setsid()
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1] + "-daemon"],
                             start_new_session=True, stdin=subprocess.DEVNULL)
            os._exit(0)
        os.wait()
        time.sleep(float(sys.argv[2]))
    """
    quick, slow = "quick" + secrets.token_hex(6), "slow" + secrets.token_hex(6)
    b = box()
    first = subprocess.Popen(b.argv([sys.executable, "-I", "-c", textwrap.dedent(daemon), quick, "3"]))
    assert _wait_for(lambda: _marked(quick + "-daemon"), 20), "the daemon never started"
    first.wait(timeout=30)
    assert _wait_for(lambda: not _marked(quick), 5), "a daemon outlived the sandbox's first process"

    b = box()
    first = subprocess.Popen(b.argv([sys.executable, "-I", "-c", textwrap.dedent(daemon), slow, "60"]))
    b.watch(first.pid)
    assert _wait_for(lambda: _marked(slow + "-daemon"), 20), "the daemon never started"
    b.close()
    assert _wait_for(lambda: not _marked(slow) and first.poll() is not None, 5), "processes outlived close()"


# ---- every kind of memory, processes and disk counted where the kernel counts them (issue 31)

def kernel_bounds_expected() -> bool:
    """As root, unless the instructor turned them off, a sandbox here gets a cgroup and a tmpfs (the course's CPU
    machines: cgroup v1; its GPU machines: cgroup v2, the grader's own group nested, memory only). Not with the
    NVIDIA devices where only a sibling group could be had: a sibling's device rules may not give the GPU, so such
    a sandbox has no cgroup and says so."""
    if sandbox._gpu_devices() and not sandbox._cgroup_plan(allow_sibling=False)[0]:
        return False
    return os.geteuid() == 0 and all(os.environ.get(name, "").lower() != "off"
                                     for name in (sandbox.CGROUP_ENV, sandbox.TMPFS_ENV))


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


def test_a_correct_program_runs_within_the_limits(box):
    """Threads, a child process, small files in /tmp and in the shared folder, 100 MB of memory, and a Unix socket
    the grader made in the shared folder (the notebook kernel's connection): all work inside the limits, and
    no limit is reported."""
    b = box()
    if kernel_bounds_expected():  # the kernel counts the memory and the disk (a pids cgroup where there is one)
        assert "memory" in b._cg.dirs and b.mounts, b.resource_control()
    path = b.shared / "grader.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        os.chmod(path, 0o777)
        server.listen(1)
        server.settimeout(30)
        proc = subprocess.Popen(b.argv([sys.executable, "-I", "-c", textwrap.dedent(f"""
            import json, os, socket, subprocess, sys, threading
            data = bytearray(100 << 20)
            threads = [threading.Thread(target=sum, args=(range(10 ** 5),)) for _ in range(8)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            child = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
            for folder in ("/tmp", os.environ["HOME"]):
                with open(os.path.join(folder, "note.txt"), "w") as f:
                    f.write("x" * 100000)
            with socket.socket(socket.AF_UNIX) as s:
                s.connect({str(path)!r})
                s.sendall(b"hello from the sandbox")
            print(json.dumps({{"child": child.stdout.strip(), "mb": len(data) >> 20}}), flush=True)
        """)]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        b.watch(proc.pid)
        conn, _ = server.accept()
        with conn:
            heard = conn.recv(100)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and json.loads(out.splitlines()[-1]) == {"child": "42", "mb": 100}, (out, err)
    assert heard == b"hello from the sandbox"
    assert (b.shared / "home" / "note.txt").stat().st_size == 100000  # the grader reads what was written
    assert b.limit_events() == [] and b.killed == [], (b.limit_events(), b.killed)


def _path_without(command: str, tmp_path: Path) -> str:
    """A PATH of one folder with links to every command of this PATH but ``command``."""
    folder = tmp_path / f"no-{command}"
    folder.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep) + [str(BIN)]:
        with contextlib.suppress(OSError):
            for entry in os.scandir(d):
                if entry.name != command and not (folder / entry.name).exists() and os.access(entry.path, os.X_OK):
                    (folder / entry.name).symlink_to(entry.path)
    return str(folder)


def test_system_deps_names_the_command_for_a_user_without_bwrap():
    """tools/system-deps.sh, as a user who is not root, on a PATH without bwrap: exit 1, naming the command."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="system-deps-") as tmp:  # readable by that user (pytest's is not)
        tmp = Path(tmp)
        tmp.chmod(0o755)
        script = tmp / "tools" / "system-deps.sh"
        script.parent.mkdir()
        shutil.copy(ROOT / "tools" / "system-deps.sh", script)
        env = {"PATH": _path_without("bwrap", tmp), "HOME": "/nonexistent"}
        cmd = ["bash", str(script)]
        if os.geteuid() == 0:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "bubblewrap" in r.stderr and f"sudo {script}" in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------ the hostile suite

def _env(course: Path, **extra) -> dict:
    # The course's own package first; then whatever PYTHONPATH already held other than this checkout (the GPU
    # machines carry nbgrader there), so that graded code never imports this checkout's package.
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.realpath(p) != str(ROOT)]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join([str(course)] + kept), PYTHONDONTWRITEBYTECODE="1", **extra)
    env.pop("TRITONCOURSE_SEED", None)
    return env


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A generated course with its own copy of the package (graded code never touches this checkout)."""
    course = Course(tmp_path_factory.mktemp("sandbox-template") / "course", [A], scaled_down=True)
    shutil.copytree(ROOT / "tritoncourse", course.path / "tritoncourse", ignore=shutil.ignore_patterns("__pycache__"))
    return course.path


def _copy(template: Path, dest: Path) -> Course:
    shutil.copytree(template, dest, symlinks=True)
    return Course.existing(dest)


def digest(root: Path) -> dict[str, str]:
    """Every file of the course but what grading writes (autograded/ with the state folder, the gradebook,
    nbgrader's log) and feedback/: path -> sha256 (symlinks by their target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in ("autograded", "feedback") or str(rel) in ("gradebook.db", ".nbgrader.log"):
            continue
        if path.is_symlink():
            out[str(rel)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[str(rel)] = "dir"
    return out


class Listener:
    """A loopback port that records every connection made to it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    self.received.append(conn.recv(1024) or b"<connected>")

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


class HostileClass:
    """One hostile class graded twice: by plain nbgrader autograde and by course grade."""

    def __init__(self, tmp: Path, template: Path):
        self.marker = "m" + secrets.token_hex(8)
        self.token = "AKIA" + secrets.token_hex(8).upper()  # a fake key in the grader's environment
        # and secrets under the course's own prefixes, which once passed into the sandboxes whole (sandbox_config.py)
        self.planted = {"TRITONCOURSE_GRADEBOOK_PASSWORD": "pg" + secrets.token_hex(8),
                        "PYTORCH_SECRET_HOOK": "pt" + secrets.token_hex(8)}
        self.listener = Listener()
        self.fixtures = [Fixture.load(p) for p in sorted(HOSTILE.glob("*.py")) if not ONLY_HOSTILE or p.stem in ONLY_HOSTILE]
        self.private = {name: f"private note of {name}: {secrets.token_hex(8)}" for name in ("aaa_before", "zzz_after")}
        self.courses = {"nbgrader": _copy(template, tmp / "plain"), "course_grade": _copy(template, tmp / "classroom")}
        for course in self.courses.values():
            self.submit_all(course)
        self.digests = {k: digest(c.path) for k, c in self.courses.items()}
        self.secrets = self.hidden_lines()
        self.procs, self.seconds = {}, {}
        start = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(self.grade, self.courses))
        self.wall = time.monotonic() - start
        self.left_running = [" ".join(p.cmdline()) for p in _marked(self.marker)]
        for proc in _marked(self.marker):  # if the sandbox failed: stop what this test started, then report
            with contextlib.suppress(psutil.Error):
                proc.kill()
        time.sleep(2)  # a forger that outlived grading would write now
        self.feedback = {k: self.run_feedback(c) for k, c in self.courses.items()}
        self.listener.close()

    def fill(self, text: str, course: Course) -> str:
        return (text.replace("{{course}}", str(course.path)).replace("{{marker}}", self.marker)
                .replace("{{port}}", str(self.listener.port)).replace("{{before}}", "aaa_before"))

    def submit_all(self, course: Course) -> None:
        release, source = course.release_notebook(A), course.source_notebook(A)
        for name, note in self.private.items():
            nb = nbformat.from_dict(source)
            nb.cells.append(new_code_cell(f"# {note}"))
            course.submit(name, A, nb)
        kind = next(k for k, c in self.courses.items() if c is course)
        for fx in self.fixtures:
            if kind not in graders_of(fx.name):
                continue
            nb = fx.notebook(release, source)
            for cell in nb.cells:
                cell.source = self.fill(cell.source, course)
            course.submit(fx.name, A, nb)
        folder = course.path / "submitted"
        links = folder / "hostile_symlinks" / A
        if links.is_dir():
            self.plant_links(course, links)
        dotdot = folder / "hostile_dotdot_names" / A
        for name in ("..\\..\\gradebook.db", "..%2F..%2Fgradebook.db", "...", ".. .ipynb") if dotdot.is_dir() else ():
            (dotdot / name).write_text(f"{self.marker}\n")

    def plant_links(self, course: Course, links: Path) -> None:
        folder = course.path / "submitted"
        (links / "source_link").symlink_to(course.path / "source")
        (links / "gradebook_link.db").symlink_to(course.path / "gradebook.db")
        (links / "classmate_link.ipynb").symlink_to(folder / "aaa_before" / A / f"{A}.ipynb")

    def hidden_lines(self) -> set[str]:
        from tritoncourse.classroom.feedback import hidden_secrets

        c = self.courses["nbgrader"].path
        return hidden_secrets(c / "source", c / "release", A)[A]

    def grade(self, kind: str) -> None:
        course = self.courses[kind]
        env = _env(course.path, AWS_SECRET_ACCESS_KEY=self.token, **self.planted, **HOSTILE_LIMITS)
        if kind == "nbgrader":
            cmd = [sys.executable, "-m", "nbgrader", "autograde", A, "--force", "--log-level=INFO"]
        else:
            cmd = [sys.executable, "-m", "tritoncourse", "grade", A, "--course", str(course.path), "--jobs", "2"]
        start = time.monotonic()
        self.procs[kind] = subprocess.run(cmd, cwd=course.path, env=env, capture_output=True, text=True,
                                          timeout=GRADING_TIMEOUT)
        self.seconds[kind] = time.monotonic() - start

    def run_feedback(self, course: Course) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tritoncourse", "feedback", A, "--course", str(course.path)],
                              cwd=course.path, env=_env(course.path), capture_output=True, text=True, timeout=600)

    # ---- what the tests ask
    def scores(self, kind: str, student: str) -> dict[str, float]:
        return self.courses[kind].scores(A, student)

    def outputs(self, kind: str, student: str, tests: bool = True) -> str:
        """The outputs of the learner's autograded notebook (its sources hold the instructor's tests); without
        ``tests``, those of the learner's own cells only (a failed test's traceback may quote a hidden line of
        its own: HideHiddenTests blanks those in feedback)."""
        path = self.courses[kind].path / "autograded" / student / A / f"{A}.ipynb"
        nb = nbformat.read(path, as_version=4)
        return json.dumps([c.get("outputs", []) for c in nb.cells
                           if tests or not c.get("metadata", {}).get("nbgrader", {}).get("grade")])

    def logs(self, kind: str) -> str:
        course = self.courses[kind].path
        text = self.procs[kind].stdout + self.procs[kind].stderr
        for log in (course / "autograded" / ".classroom" / "logs").rglob("*.log"):
            text += log.read_text(errors="replace")
        if (course / ".nbgrader.log").exists():
            text += (course / ".nbgrader.log").read_text(errors="replace")
        return text

    def leaks(self, text: str) -> list[str]:
        """The secrets in ``text``: hidden test lines, another learner's note, the grader's key, the gradebook."""
        from tritoncourse.classroom.secrets import normal

        plain = normal(text.replace("\\n", "\n").replace('\\"', '"'))
        found = [s for s in self.secrets if s in plain]
        found += [note for note in self.private.values() if note in text]
        found += [s for s in (self.token, *self.planted.values(), "CREATE TABLE grade", "SQLite format 3") if s in text]
        return found


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, template) -> HostileClass:
    return HostileClass(tmp_path_factory.mktemp("hostile"), template)


GRADERS = ["nbgrader", "course_grade"]
# hostile_kernel_*: a kernel that runs Python in the checking process, refused by the lint (grading/lint.py) before
# anything of it runs, the same code under either grader: graded by plain nbgrader only (tests/test_source.py checks
# each refusal fast). Every other hostile learner acts on the notebook's run, the sandbox or the files, which the two
# graders lay out differently (one process for the class; a private course copy per learner, two at a time).
LINT_REFUSED = "hostile_kernel_"
# The learners that the kernel's own bounds of the notebook's sandbox contain (its memory cgroup, which counts memfds
# and tmpfs pages; the bounded filesystem of its folders; its network namespace): the same sandbox, made by the same
# plugin inside `nbgrader autograde` whichever grader started it. Graded by `course grade` only, two at a time beside
# each other as in a class; the memory hog and the fork bomb still under both graders, so that plain nbgrader's
# limits are proved to reach the sandbox too.
KERNEL_BOUNDED = {"hostile_memfd_hog", "hostile_tmpfs_hog", "hostile_disk_filler", "hostile_unlinked_disk",
                  "hostile_network"}


def graders_of(name: str) -> list[str]:
    """The graders that grade hostile learner ``name``."""
    if name.startswith(LINT_REFUSED):
        return GRADERS[:1]
    return GRADERS[1:] if name in KERNEL_BOUNDED else GRADERS


def _hostile_params():
    return [pytest.param(kind, Fixture.load(p), id=f"{kind}/{p.stem}",
                         marks=[pytest.mark.skip("not in TRITONCOURSE_HOSTILE_FIXTURES")]
                         if ONLY_HOSTILE and p.stem not in ONLY_HOSTILE else [])
            for kind in GRADERS for p in sorted(HOSTILE.glob("*.py")) if kind in graders_of(p.stem)]


# What each hostile cell must report, or the grader must say, when the sandbox held.
CONTAINED = {"hostile_patch_course_files": "patch_course_files: 0 changed",
             "hostile_fork_bomb": "then BlockingIOError",
             # the CPU's address-space limit raises MemoryError; on a GPU the watchdog stops the kernel
             "hostile_memory_hog": "MB of memory" if ON_GPU else "then MemoryError",
             "hostile_disk_filler": f"wrote more than {HOSTILE_LIMITS['TRITONCOURSE_SANDBOX_DISK_MB']} MB to disk",
             # the shared folder's filesystem refuses past DISK_MB, or the watchdog stops the kernel first if its
             # look falls while the file is still held (seen on CI, 2026-11-26): either way it is contained
             "hostile_unlinked_disk": ("MB, then OSError",
                                       f"wrote more than {HOSTILE_LIMITS['TRITONCOURSE_SANDBOX_DISK_MB']} MB to disk"),
             # the cgroup stops them at TOTAL_MEMORY_MB on the CPU; a GPU's default sandbox limit is above their 6 GB
             "hostile_memfd_hog": "" if ON_GPU else "3072 MB of memory (counting files in memory)",
             "hostile_tmpfs_hog": "" if ON_GPU else "3072 MB of memory (counting files in memory)",
             "hostile_kill_parent": "DeadKernelError",
             "hostile_kill_everything": "DeadKernelError",
             "hostile_symlinks": "symlinks: 0 read",
             # refused as it arrives (ResilientExecute.message_limit): the grader does not grow by the message
             "hostile_huge_output": "OutputTooLarge"}


@pytest.mark.slow
@pytest.mark.parametrize("kind,fixture", _hostile_params())
def test_hostile_learner_loses_only_its_own_points(hostile, kind, fixture):
    """An empty kernel that tries to gain points gets 0; a right kernel keeps full marks whatever else its
    notebook does; the hostile cell really ran, inside the sandbox."""
    scores = hostile.scores(kind, fixture.name)
    outputs = hostile.outputs(kind, fixture.name)
    for t in KERNEL_TESTS:
        want = 0 if t in fixture.expect_fail else {"test_vector_add_ragged_sizes": 3, "test_vector_add_fp16": 1}.get(t, 2)
        assert scores[t] == want, (t, scores, outputs[-3000:])
    if not (ON_GPU and fixture.name == "hostile_memory_hog"):  # on a GPU the watchdog kills it before it can print
        assert "HOSTILE-RAN " + fixture.name.removeprefix("hostile_") in outputs, outputs[-3000:]
    assert "UNSANDBOXED" not in outputs and "CONNECTED" not in outputs
    # ../ paths reach only the sandbox's own /tmp (the grader's /tmp is checked in test_nothing_is_left_running...)
    assert not re.search(r"(gradebook\.db|\.ipynb): written", outputs), outputs[-3000:]
    contained = CONTAINED.get(fixture.name, "")
    assert any(c in outputs for c in ((contained,) if isinstance(contained, str) else contained)), outputs[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind,fixture", _hostile_params())
def test_hostile_learner_sees_no_secret(hostile, kind, fixture):
    """No hidden test, no other learner's note, no key of the grader's, no gradebook in anything handed back:
    the autograded notebook's outputs, the other files of its folder, the feedback HTML and folder."""
    course = hostile.courses[kind].path
    assert not hostile.leaks(hostile.outputs(kind, fixture.name, tests=False))
    for folder in (course / "autograded" / fixture.name, course / "feedback" / fixture.name):
        assert folder.is_dir(), folder
        for path in sorted(folder.rglob("*")):
            assert not path.is_symlink(), f"a symlink was handed back: {path} -> {os.readlink(path)}"
            # the verdicts log (instructor's only, never in feedback) may quote a failed test's own line
            if path.is_file() and not path.name.endswith((".ipynb", ".verdicts.json")):
                data = path.read_bytes()
                from tritoncourse.classroom.feedback import html_text

                text = html_text(path) if path.suffix == ".html" else data.decode("utf-8", "replace")
                assert not hostile.leaks(text), f"{path.relative_to(course)}: {hostile.leaks(text)[:3]}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
def test_learners_before_and_after_keep_full_marks(hostile, kind):
    for student in ("aaa_before", "zzz_after"):
        scores = hostile.scores(kind, student)
        assert all(scores[t] > 0 for t in KERNEL_TESTS), (student, scores)
        assert sum(scores.values()) == 10, (student, scores)
        assert hostile.marker not in hostile.outputs(kind, student)


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
def test_gradebook_holds_no_forged_value(hostile, kind):
    db = hostile.courses[kind].path / "gradebook.db"
    with sqlite3.connect(db) as con:
        dump = "\n".join(con.iterdump())
        forged = con.execute("SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL "
                             "OR extra_credit IS NOT NULL").fetchone()[0]
    assert hostile.marker not in dump
    assert forged == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
def test_course_tree_is_unchanged(hostile, kind):
    """Every file of the course (source/, release/, submitted/, the configuration, the package) is as it was."""
    before, after = hostile.digests[kind], digest(hostile.courses[kind].path)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, changed


@pytest.mark.slow
def test_nothing_is_left_running_or_written_outside(hostile):
    """No process a learner started outlives grading; nothing was written to the grader's /tmp, the package,
    the Python environment; no connection reached the grader's loopback port."""
    import sysconfig

    assert not hostile.left_running, hostile.left_running
    leftovers = [str(p) for p in Path("/tmp").glob(f"*{hostile.marker}*")]
    leftovers += [str(p) for p in Path(sysconfig.get_paths()["purelib"]).glob("sitecustomize.py")]
    leftovers += [str(p) for p in (ROOT / "tritoncourse").rglob("sitecustomize.py")]
    assert not leftovers, leftovers
    assert not hostile.listener.received, hostile.listener.received


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
def test_grading_ends_in_time_and_logs_show_no_secret(hostile, kind):
    proc = hostile.procs[kind]
    students = ["aaa_before", "zzz_after"] + [fx.name for fx in hostile.fixtures if kind in graders_of(fx.name)]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"{kind}: {len(students)} notebooks in {hostile.seconds[kind]:.0f} s "
          f"(both graders at once: {hostile.wall:.0f} s wall)")
    assert hostile.seconds[kind] < GRADING_TIMEOUT
    if kind == "course_grade":
        state = json.loads((hostile.courses[kind].path / "autograded" / ".classroom" / "state.json").read_text())
        for s in students:
            entry = state["entries"][f"{A}/{s}"]
            assert entry["status"] == "graded" and entry["attempts"] == 1, (s, entry)
            assert entry["seconds"] < 300, (s, entry)
    assert not hostile.leaks(hostile.logs(kind))
    fb = hostile.feedback[kind]
    assert fb.returncode == 0, fb.stdout[-3000:] + fb.stderr[-3000:]


# ------------------------------------------------------------------------------------------ no sandbox, no grading

@pytest.mark.slow
def test_grading_refuses_to_run_unsandboxed(template, tmp_path):
    """With bwrap hidden from PATH: plain autograde fails the notebook naming the install command, course
    grade exits 2 with it; with the opt-out both grade (unsandboxed)."""
    path = _path_without("bwrap", tmp_path)
    courses = {k: _copy(template, tmp_path / k) for k in ("plain", "classroom", "plain_opt_out", "classroom_opt_out")}
    for c in courses.values():
        c.submit("reference", A, c.source_notebook(A))

    def run(kind):
        c = courses[kind]
        env = dict(_env(c.path), PATH=path)
        if kind == "plain_opt_out":
            env[OPT_OUT_ENV] = OPT_OUT_VALUE
        if kind.startswith("plain"):
            cmd = [sys.executable, "-m", "nbgrader", "autograde", A, "--force"]
        else:
            cmd = [sys.executable, "-m", "tritoncourse", "grade", A, "--course", str(c.path), "--jobs", "1"]
            if kind == "classroom_opt_out":
                cmd.append("--unsandboxed-learners-can-forge-grades")
        return subprocess.run(cmd, cwd=c.path, env=env, capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(2) as pool:
        procs = dict(zip(courses, pool.map(run, courses)))
    plain = procs["plain"]
    assert plain.returncode != 0 and INSTALL_COMMAND in plain.stdout + plain.stderr, plain.stderr[-3000:]
    assert not (courses["plain"].path / "autograded" / "reference" / A / f"{A}.ipynb").exists()
    classroom = procs["classroom"]
    assert classroom.returncode == 2 and INSTALL_COMMAND in classroom.stdout, classroom.stdout + classroom.stderr
    assert not (courses["classroom"].path / "autograded" / "reference").exists()
    for kind in ("plain_opt_out", "classroom_opt_out"):
        p = procs[kind]
        assert p.returncode == 0, (kind, p.stdout[-2000:], p.stderr[-3000:])
        assert "UNSANDBOXED" in p.stdout + p.stderr, kind
        assert sum(courses[kind].scores(A, "reference").values()) == 10, kind

"""The grading sandbox's limits as rlimits and its watchdog (tritoncourse/grading/sandbox/, docs/INSTRUCTORS.md
"Threat model"): a fork bomb stops at the process limit, a memory hog at the address-space limit or the watchdog's,
a disk filler at /tmp's and the shared folder's size or the watchdog's, one file at the file limit; the watchdog's
walk of the watched tree; and a correct program runs within all of them. What the kernel itself counts (cgroups,
filesystems of bounded size): tests/grader/test_sandbox_cgroups.py."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from sandboxes import _wait_for, box, kernel_bounds_expected, report, run_in, sandbox_works  # noqa: F401 (fixtures)
from tritoncourse.grading import sandbox
from tritoncourse.grading.sandbox import Sandbox


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

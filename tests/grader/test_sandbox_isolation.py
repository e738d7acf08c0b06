"""The grading sandbox (tritoncourse/grading/sandbox/, docs/INSTRUCTORS.md "Threat model"), unit tests: what a
sandboxed process can see and do (no course, read-only Python and package, private /tmp, no network, a uid of its
own, nothing left running), and tools/system-deps.sh without bwrap. Its bounds: tests/grader/test_sandbox_bounds.py
(rlimits, watchdog) and tests/grader/test_sandbox_cgroups.py (what the kernel counts); the hostile class:
tests/workflows/test_sandbox_hostile.py."""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course import ROOT
from sandboxes import _marked, _path_without, _wait_for, box, report, run_in, sandbox_works  # noqa: F401 (fixtures)
from tritoncourse.grading.sandbox import PACKAGE


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

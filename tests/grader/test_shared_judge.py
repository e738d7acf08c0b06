"""One judge zygote shared by the private gradings of one process (zygote_server.py), without nbgrader.

Each private grading connects to it instead of importing torch, triton and the checks again; what must hold: the
clients' children and ids stay apart, a client that hangs up (its nbgrader killed at its time limit) leaves no
judge child behind, a missing socket costs nothing but the saving, and the zygote ends with its starter. The
grading process forks the private gradings' nbgrader there too: it ends as a fresh one would, is killed with what it
started, and is a fresh process wherever the zygote's imports could differ from its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DEVICE
from course import ROOT
from tritoncourse.classroom.private import kill_tree
from tritoncourse.grading.processes import zygote, zygote_client, zygote_server
from tritoncourse.grading.processes.zygote_client import _SharedZygote, _Zygote

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the zygotes serve the CPU interpreter only")


@pytest.fixture(scope="module")
def server():
    shared = zygote_server.SharedJudge()
    path = shared.socket_for(dict(os.environ))
    assert path and Path(path).exists()
    assert Path(path).parent.stat().st_mode & 0o777 == 0o700
    yield shared, path
    shared.close()


def judge_request(tmp: Path, name: str, runner_gone: bool) -> tuple[str, dict, str]:
    """A judge's folder, env and output file; with ``runner_gone`` it ends at once (no runner will come), else it
    waits for a runner (300 s)."""
    jdir, rdir = tmp / f"{name}-judge", tmp / f"{name}-runner"
    jdir.mkdir()
    rdir.mkdir()
    if runner_gone:
        (jdir / "runner-exit").write_text("1")
    env = dict(os.environ, TRITON_INTERPRET="1", TRITONCOURSE_RUNNER_DIR=str(rdir),
               TRITONCOURSE_RESULT_FILE=str(jdir / "result.json"), TRITONCOURSE_STAGE_FILE=str(jdir / "stage.txt"))
    return str(jdir), env, str(jdir / "out.txt")


def wait_exit(z: _Zygote, rid: str, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while (code := z.poll(rid)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return code


def gone(pid: int, seconds: float = 10) -> bool:
    import psutil

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_two_clients_each_get_their_own_judges_exit(server, tmp_path):
    """Two connections (two private gradings) each fork a judge with ids of their own (both "1"); each gets its own
    judge's exit, and each judge ran with its own env (its verdict in its own folder)."""
    _, path = server
    a, b = _SharedZygote(path), _SharedZygote(path)
    try:
        ra = a.start(*judge_request(tmp_path, "a", True), entry="judge")
        rb = b.start(*judge_request(tmp_path, "b", True), entry="judge")
        assert ra == rb == "1"
        assert wait_exit(a, ra) == 1 and wait_exit(b, rb) == 1
        for name in ("a", "b"):
            assert json.loads((tmp_path / f"{name}-judge" / "result.json").read_text())["kind"] == "runner-lost"
        assert a.replies[ra]["pid"] != b.replies[rb]["pid"]
        out = tmp_path / "runner-out.txt"  # the shared zygote forks judges only: a runner would run learner code
        assert wait_exit(a, a.start(str(tmp_path), {}, str(out), entry="runner")) == 3
        assert "unknown entry \"refused 'runner'\"" in out.read_text()
    finally:
        a.close(), b.close()


def test_a_closed_connection_leaves_no_judge_behind(server, tmp_path):
    """A judge still waiting for its runner when its client hangs up is killed with its session; the zygote goes on
    serving the others. ``kill`` of one id kills that child only."""
    shared, path = server
    a, b = _SharedZygote(path), _SharedZygote(path)
    try:
        ra = a.start(*judge_request(tmp_path, "a", False), entry="judge")
        rb1 = b.start(*judge_request(tmp_path, "b1", False), entry="judge")
        rb2 = b.start(*judge_request(tmp_path, "b2", False), entry="judge")
        for z, rid in ((a, ra), (b, rb1), (b, rb2)):
            while "pid" not in z.replies.get(rid, {}):
                time.sleep(0.02)
        pa = a.replies[ra]["pid"]
        a.close()  # as when its nbgrader is killed: the connection ends, nothing else
        assert gone(pa), "the closed client's judge is still running"
        b.kill(rb1)
        assert wait_exit(b, rb1) == -9
        assert b.poll(rb2) is None, "another client's kill reached this judge"
        assert shared.proc.poll() is None
        c = _SharedZygote(path)
        rc = c.start(*judge_request(tmp_path, "c", True), entry="judge")
        assert wait_exit(c, rc) == 1
        c.close()
    finally:
        b.close()


def test_the_judge_zygote_ends_with_its_starter(tmp_path):
    """Closed (at exit, or on the grader's stop), the shared zygote ends with its judges still running and its
    private folder; the socket's folder is the grader's alone."""
    shared = zygote_server.SharedJudge()
    path = shared.socket_for(dict(os.environ))
    z = _SharedZygote(path)
    rid = z.start(*judge_request(tmp_path, "a", False), entry="judge")
    while "pid" not in z.replies.get(rid, {}):
        time.sleep(0.02)
    pid, zpid = z.replies[rid]["pid"], shared.proc.pid
    shared.close()
    assert gone(pid) and gone(zpid)
    assert not Path(path).parent.exists()
    assert z.poll(rid) == "lost" and not z.alive()
    z.close()


def test_warm_judge_uses_the_socket_or_falls_back(server, monkeypatch):
    """``_warm_zygote("judge")`` connects to the socket the grading names; with the socket gone, the grading starts
    its own zygote as before. The runner's zygote is never the shared one."""
    _, path = server
    monkeypatch.setattr(zygote_client, "_zygotes", {})
    monkeypatch.setenv(zygote_client.SHARED_JUDGE_ENV, path)
    monkeypatch.delenv("TRITONCOURSE_ZYGOTE", raising=False)
    z = zygote_client._warm_zygote("judge")
    assert isinstance(z, _SharedZygote) and z.alive()
    assert zygote_client._warm_zygote("judge") is z
    z.close()
    monkeypatch.setattr(zygote_client, "_zygotes", {})
    monkeypatch.setenv(zygote_client.SHARED_JUDGE_ENV, path + ".absent")
    own = zygote_client._warm_zygote("judge")
    try:
        assert type(own) is _Zygote and own.alive()
    finally:
        own.close()


def test_only_where_a_judge_zygote_is_used(monkeypatch):
    """The grading's env names a shared judge only where the zygote is used (not with TRITONCOURSE_ZYGOTE=0) and
    not opted out (TRITONCOURSE_SHARED_JUDGE=0); without a socket, the env is as given."""
    started = []
    monkeypatch.setattr(zygote_server._shared, "socket_for", lambda env: started.append(1) or "/x/judge.sock")
    base = {"TRITON_INTERPRET": "1", zygote_server.ENV: "/stale"}
    assert zygote_server.shared_judge_env(base)[zygote_server.ENV] == "/x/judge.sock"
    for off in ({"TRITONCOURSE_ZYGOTE": "0"}, {zygote_server.OPT_OUT_ENV: "0"}):
        assert zygote_server.ENV not in zygote_server.shared_judge_env(dict(base, **off))
    assert len(started) == 1


def _fork(shared, path: str, cwd: Path, args: list[str], config: Path = ROOT / "nbgrader_config.py", **extra):
    """``forked_nbgrader`` of ``nbgrader ARGS`` in ``cwd`` (its log starts with the grader's own line), the env."""
    cwd.mkdir(exist_ok=True)
    env = dict(shared.env, **{zygote_server.ENV: path}, **extra)
    log = cwd / "log.txt"
    log.write_text("$ the grader's line\n")
    return zygote_server.forked_nbgrader(["-m", "nbgrader", *args], cwd, env, log, config), log, env


def test_a_private_nbgrader_is_forked_and_ends_as_a_fresh_one(server, tmp_path, monkeypatch):
    """Where the grading's environment is the zygote's, its nbgrader is forked there (imported once), in a session
    of its own: the configuration of its folder is read, its output follows the grader's line in the log, and it
    says so and ends with a fresh process's exit code and output."""
    shared, path = server
    monkeypatch.setattr(zygote_server, "_shared", shared)
    for i, args in enumerate((["--version"], ["autograde", "no_such_assignment", "--student", "nobody"])):
        forked_dir, fresh_dir = tmp_path / f"forked{i}", tmp_path / f"fresh{i}"
        for folder in (forked_dir, fresh_dir):
            folder.mkdir()
            (folder / "nbgrader_config.py").write_text("print('read: the folder\\'s configuration')\n")
        proc, log, env = _fork(shared, path, forked_dir, args)
        assert isinstance(proc, zygote_server.ForkedNbgrader)
        code = proc.wait(timeout=120)
        fresh = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=fresh_dir, env=env,
                               capture_output=True, text=True, timeout=120)
        text = log.read_text()
        assert code == fresh.returncode, (args, text, fresh.stdout + fresh.stderr)
        assert text.startswith("$ the grader's line\n" + zygote.FORKED_NBGRADER + "\n"), text
        if args[0] == "autograde":
            assert "read: the folder's configuration" in text and "read: the folder's configuration" in fresh.stdout
        last = (fresh.stdout + fresh.stderr).strip().splitlines()[-1].replace(str(fresh_dir), str(forked_dir))
        assert last.split("]")[-1].strip() in text, (last, text)
    assert shared.proc.poll() is None


def test_a_forked_nbgrader_past_its_time_is_killed_with_what_it_started(server, tmp_path, monkeypatch):
    """A private grading past its time limit: ``wait`` times out as a Popen's does, and ``kill_tree`` (the grader's
    kill) ends the forked nbgrader and the process it started, with a killed process's exit code."""
    shared, path = server
    monkeypatch.setattr(zygote_server, "_shared", shared)
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "nbgrader_config.py").write_text(
        "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(300)\n")
    proc, _, _ = _fork(shared, path, tmp_path, ["autograde", "a"])
    import psutil

    deadline = time.monotonic() + 60
    while not (children := psutil.Process(proc.pid).children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children, "the configuration's process did not start"
    assert os.getsid(proc.pid) == proc.pid == os.getsid(children[0].pid)  # a session of its own, as Popen's
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)
    kill_tree(proc)
    assert proc.returncode == -9 and gone(children[0].pid) and gone(proc.pid)


def test_a_forked_nbgrader_dies_with_its_zygote(tmp_path, monkeypatch):
    """The zygote killed (its grading process or Dask worker gone, and it with them), its forked nbgrader dies too,
    as a worker's nbgrader did through its die-with-parent launcher; ``wait`` says it was killed."""
    shared = zygote_server.SharedJudge()
    path = shared.socket_for(dict(os.environ))
    monkeypatch.setattr(zygote_server, "_shared", shared)
    (tmp_path / "nbgrader_config.py").write_text("import time\nprint('configured', flush=True)\ntime.sleep(300)\n")
    try:
        proc, log, _ = _fork(shared, path, tmp_path, ["autograde", "a"])
        deadline = time.monotonic() + 60
        while "configured" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        shared.proc.kill()
        assert gone(proc.pid) and proc.wait(timeout=10) == -9
    finally:
        shared.close()


def test_nbgrader_is_a_fresh_process_where_the_zygotes_imports_could_differ(server, tmp_path, monkeypatch):
    """No fork (the caller starts a fresh Python) where the environment differs from the zygote's, where asked not
    to, for another command, or where the course's configuration would import another copy of the package."""
    shared, path = server
    monkeypatch.setattr(zygote_server, "_shared", shared)
    other = tmp_path / "other_course"
    (other / "tritoncourse").mkdir(parents=True)
    assert _fork(shared, path, tmp_path / "a", ["--version"], TRITONCOURSE_SEED="1")[0] is None
    assert _fork(shared, path, tmp_path / "b", ["--version"], **{zygote_server.FORK_NBGRADER_ENV: "0"})[0] is None
    assert _fork(shared, path, tmp_path / "c", ["--version"], config=other / "nbgrader_config.py")[0] is None
    env = dict(shared.env, **{zygote_server.ENV: path})
    assert zygote_server.forked_nbgrader(["-c", "pass"], tmp_path, env, tmp_path / "log", ROOT) is None
    proc = _fork(shared, path, tmp_path / "d", ["--version"])[0]
    assert proc is not None and proc.wait(timeout=60) == 0

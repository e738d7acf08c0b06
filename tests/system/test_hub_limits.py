"""Limits per learner on the local-process hub (issue 41), against the running hub: each learner's server in control
groups of its own (hub/tritonhub_limits.py), enforced by the kernel. Learner A exceeds each limit from processes in
A's server's groups (what A's terminal or kernel starts lands there: the kernel keeps a process's children in its
groups, and A, not owning them, cannot leave): memory past the limit is killed by the OOM killer, forks past the
process limit are refused, a busy loop gets no more CPU time than its quota; learner B's server and the hub live on
throughout, B can still fork. Stopping A's server kills what A left in its groups and removes them. The hub's state
files are root's only (0600: its database, cookie secret, token, settings, pid files). The idle culler stops an
idle server after the settings' timeout (and not one in use).

Root only (it makes Unix accounts th<random>-*, and deletes only those; it writes cgroups); needs
configurable-http-proxy (`bash tools/system-deps.sh hub`). About 60 s, a third of it waiting for the culler.
"""
from __future__ import annotations

import datetime
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hub_env import ROOT, Hub, _run
from servers import free_port

pytestmark = pytest.mark.slow

MEMORY, CPUS, PIDS, IDLE = 384 << 20, 0.5, 128, 20  # small, so that each is reached in a second or two
ARTIFACTS = ROOT / "tests" / "artifacts" / "hub_limits"


class LimitedHub(Hub):
    def setup(self) -> None:
        """Set up through hub/tritonhub.py with the small limits and idle timeout, no assignment generated."""
        self.made_users.append(self.instructor)
        _run(self.tool + ["setup", *self.args, "--existing-venv", "--venv", str(self.venv), "--exchange",
                          str(self.scratch / "exchange"), "--instructor", self.instructor, "--learners-group",
                          self.prefix, "--assignments", "--chp", self.chp, "--port", str(self.port),
                          "--hub-port", str(free_port()), "--proxy-api-port", str(free_port()),
                          "--mem-limit", f"{MEMORY >> 20}M", "--cpu-limit", str(CPUS), "--pids-limit", str(PIDS),
                          "--idle-timeout", str(IDLE)])
        self.add_learners([self.learners["a"], self.learners["b"]], "Learner")


@pytest.fixture(scope="module")
def hub():
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("makes Unix accounts, spawns servers as them and writes cgroups: Linux and root only (CI is root)")
    chp = shutil.which("configurable-http-proxy")
    if not chp or not shutil.which("useradd"):
        pytest.skip("needs configurable-http-proxy and useradd: `bash tools/system-deps.sh hub` installs them")
    if not (Path(sys.executable).parent / "jupyterhub-idle-culler").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements" / "hub.txt")],
                       check=True)
    sys.path.insert(0, str(ROOT / "hub"))
    import tritonhub_limits

    _, missing = tritonhub_limits.plan()
    if missing:
        pytest.skip(f"no cgroups for the learners here: {missing}")
    scratch = Path(tempfile.mkdtemp(prefix="tritonhub-limits-"))
    scratch.chmod(0o711)
    h = LimitedHub(scratch, chp)
    try:
        h.setup()
        h.start()
        for k in ("a", "b"):
            name = h.learners[k]
            h.api("POST", f"/users/{name}")
            h.api("POST", f"/users/{name}/server")
        for k in ("a", "b"):
            wait_ready(h, h.learners[k])
        yield h
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        if h.proc:
            (ARTIFACTS / "jupyterhub.log").write_text(h.log_text())
        h.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def wait_ready(hub: Hub, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server = (hub.api("GET", f"/users/{name}")[1].get("servers") or {}).get("")
        if server and server.get("ready"):
            return
        time.sleep(0.3)
    raise AssertionError(f"{name}'s server was not ready in {timeout:.0f} s:\n{hub.log_text()}")


def in_use(hub: Hub) -> None:
    """Both learners' servers had activity now, as when their users work in them (the hub's activity API, as
    jupyterhub-singleuser reports it): the culler leaves them alone until the last test lets B's go idle."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    for k in ("a", "b"):
        if hub.api("GET", f"/users/{hub.learners[k]}")[1].get("servers"):
            hub.api("POST", f"/users/{hub.learners[k]}/activity", {"servers": {"": {"last_activity": now}}})
    hub.touched = time.monotonic()


def server_pid(hub: Hub, name: str) -> int:
    out = subprocess.run(["pgrep", "-u", name, "-f", "jupyterhub-singleuser"], capture_output=True, text=True).stdout
    pids = [int(p) for p in out.split()]
    assert len(pids) == 1, f"{name}'s servers: {pids}"
    return pids[0]


def groups_of(pid: int) -> dict[str, Path]:
    """The folder of each of ``pid``'s control groups with a limit here: {"memory": ..., "cpu": ..., "pids": ...}."""
    import tritonhub_limits

    where, _ = tritonhub_limits.hub_plan()
    own = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            own[c] = path
    out = {}
    for c, (version, parent) in where.items():
        path = own["" if version == 2 else c]
        out[c] = parent / path.rsplit("/", 1)[-1]
        assert path.endswith(f"/{tritonhub_limits.PARENT}/{out[c].name}"), f"{pid} is in {path} for {c}"
    return out


def as_learner_in(hub: Hub, name: str, groups: dict[str, Path], code: str, timeout: float = 60):
    """``code`` run by the hub's python as ``name`` inside ``groups`` (put there as root before it runs, as the
    spawner puts the server); the CompletedProcess."""
    pw = pwd.getpwnam(name)
    procs = [groups[c] / "cgroup.procs" for c in dict.fromkeys(groups)]

    def enter():
        for path in dict.fromkeys(procs):
            path.write_text(str(os.getpid()))
        os.setgid(pw.pw_gid)
        os.setgroups([])
        os.setuid(pw.pw_uid)

    return subprocess.run([str(hub.venv / "bin" / "python"), "-c", code], preexec_fn=enter, cwd=pw.pw_dir,
                          env={"HOME": pw.pw_dir, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=timeout)


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and b"zombie" not in Path(f"/proc/{pid}/status").read_bytes().lower()


def assert_others_live(hub: Hub, b_pid: int) -> None:
    assert alive(b_pid), "learner B's server died"
    assert hub.proc.poll() is None, "the hub died"
    assert hub.api("GET", f"/users/{hub.learners['b']}")[1]["servers"][""]["ready"]


def read(path: Path) -> str:
    return path.read_text().strip()


def test_each_learner_server_is_in_its_own_limited_groups(hub):
    in_use(hub)
    a, b = (groups_of(server_pid(hub, hub.learners[k])) for k in ("a", "b"))
    assert set(a) == {"memory", "cpu", "pids"} and a != b
    for groups, k in ((a, "a"), (b, "b")):
        assert {p.name for p in groups.values()} == {hub.learners[k]}
        m = groups["memory"]
        assert int(read(m / ("memory.max" if (m / "memory.max").exists() else "memory.limit_in_bytes"))) == MEMORY
        assert int(read(groups["pids"] / "pids.max")) == PIDS
        cpu = groups["cpu"]
        quota = read(cpu / "cpu.max").split()[0] if (cpu / "cpu.max").exists() else read(cpu / "cpu.cfs_quota_us")
        assert int(quota) == int(CPUS * 100_000)


def test_memory_past_the_limit_is_killed_only_in_that_learner(hub):
    in_use(hub)
    a_pid, b_pid = (server_pid(hub, hub.learners[k]) for k in ("a", "b"))
    a = groups_of(a_pid)
    hog = ("import sys\nchunks = []\nfor i in range(64):\n    chunks.append(bytearray(b'x') * (32 << 20))\n"
           "    print(len(chunks) * 32, flush=True)\n")
    proc = as_learner_in(hub, hub.learners["a"], a, hog)
    reached = int((proc.stdout.split() or ["0"])[-1])
    assert proc.returncode == -9, f"the hog was not killed: rc {proc.returncode}, {reached} MiB, {proc.stderr[-500:]}"
    assert reached << 20 < MEMORY, f"{reached} MiB allocated under a {MEMORY >> 20} MiB limit"
    print(f"memory: the hog killed after {reached} MiB")
    m = a["memory"]
    events = read(m / "memory.events") if (m / "memory.events").exists() else read(m / "memory.oom_control")
    assert "oom_kill 0" not in events, events
    assert_others_live(hub, b_pid)


def test_forks_past_the_process_limit_are_refused_only_for_that_learner(hub):
    in_use(hub)
    a_pid, b_pid = (server_pid(hub, hub.learners[k]) for k in ("a", "b"))
    bomb = ("import os, signal\nkids = []\ntry:\n    for i in range(400):\n        pid = os.fork()\n"
            "        if pid == 0:\n            signal.pause()\n        kids.append(pid)\nexcept BlockingIOError:\n"
            "    print('refused', len(kids))\nfor k in kids:\n    os.kill(k, 9)\n    os.waitpid(k, 0)\n"
            "print('forked', len(kids))\n")
    proc = as_learner_in(hub, hub.learners["a"], groups_of(a_pid), bomb)
    assert "refused" in proc.stdout, proc.stdout + proc.stderr[-500:]
    forked = int(proc.stdout.split()[-1])
    assert 0 < forked < PIDS, proc.stdout
    print(f"processes: {forked} forks, then refused")
    assert alive(a_pid)  # the server itself keeps running: only new tasks were refused
    b = as_learner_in(hub, hub.learners["b"], groups_of(b_pid), "import subprocess\nprint(subprocess.run(['true']).returncode)")
    assert b.stdout.strip() == "0", b.stderr
    assert_others_live(hub, b_pid)


def test_a_busy_loop_gets_no_more_than_the_cpu_quota(hub):
    in_use(hub)
    a_pid, b_pid = (server_pid(hub, hub.learners[k]) for k in ("a", "b"))
    a = groups_of(a_pid)
    wall = 2.0
    busy = ("import os, time, resource\nkids = []\nfor i in range(2):\n    pid = os.fork()\n    if pid == 0:\n"
            f"        end = time.monotonic() + {wall}\n        while time.monotonic() < end:\n            pass\n"
            "        os._exit(0)\n    kids.append(pid)\nfor k in kids:\n    os.waitpid(k, 0)\n"
            "r = resource.getrusage(resource.RUSAGE_CHILDREN)\nprint(r.ru_utime + r.ru_stime)\n")
    stat = a["cpu"] / "cpu.stat"
    # The group's weight raised for the test (root's, not the learner's): on a busy machine its fair share alone could
    # stay under the quota, which would then never act. The quota is what is checked.
    weight = a["cpu"] / ("cpu.weight" if (a["cpu"] / "cpu.weight").exists() else "cpu.shares")
    old = read(weight)
    weight.write_text("10000" if weight.name == "cpu.weight" else "262144")
    try:
        before = dict(line.split() for line in read(stat).splitlines())
        proc = as_learner_in(hub, hub.learners["a"], a, busy)
        after = dict(line.split() for line in read(stat).splitlines())
    finally:
        weight.write_text(old)
    used = float(proc.stdout.split()[-1])
    assert used <= CPUS * wall * 1.25 + 0.1, f"{used:.2f} s of CPU in {wall} s under a {CPUS} CPU quota"
    assert int(after["nr_throttled"]) > int(before["nr_throttled"]), (before, after)  # the quota acted
    print(f"cpu: {used:.2f} s of CPU in {wall} s, throttled {int(after['nr_throttled']) - int(before['nr_throttled'])}"
          " times")
    assert_others_live(hub, b_pid)


def test_state_files_are_root_only(hub):
    state = hub.state
    assert state.stat().st_mode & 0o777 == 0o711
    files = {p.name: p.stat().st_mode & 0o777 for p in state.iterdir() if p.is_file()}
    for name in ("jupyterhub.sqlite", "jupyterhub_cookie_secret", "api-token", "settings.json", "jupyterhub.pid",
                 "jupyterhub-proxy.pid"):
        assert files.get(name) == 0o600, f"{name}: {oct(files[name]) if name in files else 'missing'}"
    assert all(mode == 0o600 for mode in files.values()), {n: f"{m:o}" for n, m in files.items()}
    peek = hub.as_user(hub.learners["a"], "cat", str(state / "jupyterhub.sqlite"), check=False)
    assert peek.returncode != 0 and "Permission denied" in peek.stderr


def test_stopping_a_server_kills_what_the_learner_left_and_removes_the_groups(hub):
    in_use(hub)
    a_pid = server_pid(hub, hub.learners["a"])
    a = groups_of(a_pid)
    left = as_learner_in(hub, hub.learners["a"], a, "import subprocess\n"
                         "print(subprocess.Popen(['sleep', '300'], start_new_session=True, stdout=subprocess.DEVNULL, "
                         "stderr=subprocess.DEVNULL).pid)")
    job = int(left.stdout.split()[-1])
    assert alive(job)
    assert hub.api("DELETE", f"/users/{hub.learners['a']}/server")[0] in (202, 204)
    deadline = time.monotonic() + 30
    while (alive(job) or any(p.exists() for p in a.values())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(job), "a learner's background job outlived the server"
    assert not any(p.exists() for p in a.values()), a


def test_the_idle_culler_stops_an_idle_server(hub):
    b = hub.learners["b"]
    assert hub.api("GET", f"/users/{b}")[1].get("servers"), "B's server was stopped before it was idle"
    deadline = hub.touched + IDLE + 30
    while time.monotonic() < deadline:
        if not (hub.api("GET", f"/users/{b}")[1].get("servers") or {}):
            assert time.monotonic() - hub.touched >= IDLE - 1
            assert f"Culling server {b} " in hub.log_text()
            return
        time.sleep(1)
    raise AssertionError(f"{b}'s idle server was not culled {IDLE} + 60 s after it started:\n{hub.log_text()}")

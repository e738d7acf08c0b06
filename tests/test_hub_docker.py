"""The course's JupyterHub with DockerSpawner (issue 30): each learner's JupyterLab is a container of the course's
learner image, as a learner and the instructor use it.

The hub is set up by hub/tritonhub.py (``setup --spawner docker --learner-image triton-course:cpu``: the learner image
tests/docker_images.py builds once per session for tests/test_container.py too, and on it hub/singleuser.Dockerfile's
thin layer) with throw-away Unix accounts (th<random>-*, deleted afterwards, only those; tests/hub_env.py), then:

- learner A logs in through the hub's log-in form (PAM, over HTTP: no browser), and the hub starts A's server as a
  container of that image, run as A's uid and gid; the Assignment List is on in A's JupyterLab, Formgrader off;
- in the container, A fetches 01_vector_add through the Assignment List's own REST handlers (what its Fetch button
  calls), writes a cell naming A into the notebook through the contents API, and submits it (the Submit button's
  handler, which runs hub/checked_submit.py);
- A's kernel, in the container, reads its own home but not the course's source/, gradebook or directory, not learner
  B's home or file, and cannot list the exchange's inbound/; its passwd names A alone; the container mounts A's home,
  the exchange, the learners' configuration and its passwd and group files, nothing else;
- learner B submits on the host meanwhile (nbgrader as B), and the instructor's server starts as a local process
  (Formgrader's grading needs the course directory and bubblewrap), not a container;
- the instructor's `nbgrader collect` takes both submissions, each its owner's notebook; stopping A's server
  deletes its container.

Limits and the network (set up with limits of the test's own, not the course's defaults, so that they are seen to be
the configured ones, and on a learners' network of its own, removed by ``tritonhub.py teardown`` afterwards):

- A's and B's containers (B's server is started as a container too, through the hub's API) have the configured
  memory (swap included), CPU quota and pids limit (docker inspect), on the learners' network, whose inter-container
  communication is off;
- in A's container, a bounded fork loop (at most twice the limit, 30 s) stops with EAGAIN at the pids limit (the
  container's pids cgroup full), and afterwards A's kernel, A's server and the hub answer;
- A's kernel cannot open a TCP connection to B's server (B's address on the network, and B's port published on the
  host, through the gateway) nor the hub's proxy (127.0.0.1 only), nor B (a process of B's uid in B's container) to
  A's, while both reach the hub's API on the gateway and the host reaches B's server.

Without a GPU (CI) the container gets none, and the configuration test below checks that the GPU request is there only
where the machine has one: the GPU path itself was not run here. Root only (Unix accounts); needs a Docker engine
(as test_container.py: skipped without one, failed in CI as root) and configurable-http-proxy. Seconds of each step:
tests/artifacts/hub-docker/times.json.
"""
from __future__ import annotations

import asyncio
import http.cookiejar
import importlib.util
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import asdict
from pathlib import Path

import nbformat
import pytest

import hub_env
from docker_images import ROOT, docker, run
from hub_env import PHASE, Hub
from hub_learners import marked_notebook, owner_of

ARTIFACTS = ROOT / "tests" / "artifacts" / "hub-docker"
# The hub's interpreter, copied where every user may run it: a folder of this test's own, so that tests/test_hub.py's
# (/opt/tritonhub-test, rebuilt by each hub) may run at the same time on another worker.
PORTABLE = Path("/opt/tritonhub-docker-test")
COURSE_ID = "triton-kernels"
# The learners' containers' limits here (tritonhub.py setup's --mem-limit, --cpu-limit, --pids-limit): not the course's
# defaults (6G, 2, 1024), so that inspect shows the configured ones; small enough for a quick fork loop.
LIMITS = {"mem_limit": "1536M", "cpu_limit": 1.5, "pids_limit": 256}
MEMORY_BYTES = 1536 << 20
HUB_LABEL = "org.tritoncourse.hub.state"  # tritonhub.py's label on the learners' network and containers


def _tritonhub():
    spec = importlib.util.spec_from_file_location("tritonhub", ROOT / "hub" / "tritonhub.py")
    module = sys.modules.setdefault("tritonhub", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)  # (in sys.modules first: its dataclass looks its module up)
    return module


def _hub_packages() -> None:
    """requirements/hub.txt (jupyterhub, dockerspawner) in this environment, as tests/hub_env.py installs it."""
    if importlib.util.find_spec("dockerspawner") is None or \
            not (Path(sys.executable).parent / "jupyterhub-singleuser").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements" / "hub.txt")],
                       check=True)


def _skip_unless_possible() -> tuple[str, str]:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the hub test makes Unix accounts: Linux and root only (CI is root)")
    chp = shutil.which("configurable-http-proxy")
    if not chp:
        pytest.skip("configurable-http-proxy (npm) is not installed: `bash tools/system-deps.sh hub` installs it")
    if not (shutil.which("useradd") and shutil.which("chpasswd")):
        pytest.skip("needs useradd and chpasswd (tools/system-deps.sh)")
    client = docker()  # skips without an engine (fails in CI as root), as tests/test_container.py
    _hub_packages()
    return chp, client


class DockerHub(Hub):
    """tests/hub_env.py's hub, set up with ``--spawner docker`` on the session's learner image."""

    def __init__(self, scratch: Path, chp: str, client: str, learner_image: str, times: dict):
        self.client, self.learner_image, self.times = client, learner_image, times
        start = time.monotonic()
        super().__init__(scratch, chp)  # (copies this interpreter and .venv's packages: portable_venv)
        self.network = f"{self.prefix}-learners"  # the learners' network of this hub alone
        times["the hub's environment (tests/hub_env.py's portable_venv)"] = round(time.monotonic() - start, 1)

    def setup(self) -> None:
        cmd = self.tool + ["setup", *self.args, "--existing-venv", "--venv", str(self.venv), "--exchange",
                           str(self.scratch / "exchange"), "--instructor", self.instructor, "--learners-group",
                           self.prefix, "--assignments", PHASE, "--chp", self.chp, "--port", str(self.port),
                           "--hub-port", str(hub_env.free_port()), "--proxy-api-port", str(hub_env.free_port()),
                           "--spawner", "docker", "--learner-image", self.learner_image, "--docker", self.client,
                           "--docker-network", self.network, "--mem-limit", LIMITS["mem_limit"],
                           "--cpu-limit", str(LIMITS["cpu_limit"]), "--pids-limit", str(LIMITS["pids_limit"])]
        self.made_users.append(self.instructor)
        start = time.monotonic()
        hub_env._run(cmd)
        self.times["tritonhub.py setup --spawner docker (hub image layer, course, gradebook)"] = \
            round(time.monotonic() - start, 1)
        self.times["tritonhub.py users (2 learners)"] = round(
            self.add_learners([self.learners["a"], self.learners["b"]], "Learner"), 1)
        self.settings = json.loads((self.state / "settings.json").read_text())
        self.course = Path(pwd.getpwnam(self.instructor).pw_dir) / self.settings["course_id"]

    def container(self, user: str) -> str:
        from dockerspawner import DockerSpawner

        return f"tritonhub-{DockerSpawner._escape(user)}"

    def remove_containers(self) -> None:
        """Containers of this hub's accounts that outlived it (the hub deletes them when it stops)."""
        ids = run(self.client, "ps", "-aq", "--filter", f"name=tritonhub-{self.prefix}", check=False).stdout.split()
        if ids:
            run(self.client, "rm", "-f", *ids, check=False)

    def network_info(self) -> dict | None:
        found = run(self.client, "network", "inspect", self.network, check=False)
        return json.loads(found.stdout)[0] if found.returncode == 0 else None

    def teardown(self) -> None:
        """`tritonhub.py teardown`: the learners' network (and any container of this hub) removed; where set-up never
        finished (no settings), the network by its label."""
        ran = (self.state / "settings.json").exists()
        if ran:
            hub_env._run(self.tool + ["teardown", *self.args])
        left = self.network_info()
        if left is not None and (left.get("Labels") or {}).get(HUB_LABEL) == str(self.state):
            run(self.client, "network", "rm", self.network, check=False)
            assert not ran, f"tritonhub.py teardown left the network {self.network}"


class Learner:
    """A learner's HTTP session with the hub, as JupyterLab's page holds one: the hub's and the server's cookies,
    and the server's XSRF token sent with every request that changes something."""

    def __init__(self, base: str, name: str):
        self.base, self.name = base, name
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def xsrf(self, path: str) -> str | None:
        found = [c for c in self.jar if c.name == "_xsrf" and path.startswith(c.path)]
        return max(found, key=lambda c: len(c.path)).value if found else None

    def request(self, method: str, path: str, form: dict | None = None, body: dict | None = None,
                timeout: float = 120) -> tuple[int, str, bytes]:
        headers, data = {}, None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        elif form is not None:
            data, headers["Content-Type"] = urllib.parse.urlencode(form).encode(), "application/x-www-form-urlencoded"
        if method not in ("GET", "HEAD") and self.xsrf(path.split("?")[0]):
            headers["X-XSRFToken"] = self.xsrf(path.split("?")[0])
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with self.opener.open(req, timeout=timeout) as resp:
                return resp.status, urllib.parse.urlparse(resp.geturl()).path, resp.read()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: {e.code} {e.read()[-2000:]!r}") from None

    def json(self, method: str, path: str, **kw):
        return json.loads(self.request(method, path, **kw)[2])

    def cookie_header(self, path: str) -> str:
        return "; ".join(f"{c.name}={c.value}" for c in self.jar if path.startswith(c.path))

    def log_in(self, password: str) -> str:
        self.request("GET", "/hub/login")
        _, landed, page = self.request("POST", "/hub/login", form={
            "username": self.name, "password": password, "_xsrf": self.xsrf("/hub/login") or ""})
        assert not landed.startswith("/hub/login"), f"the log-in failed: {page[-1500:]!r}"
        return landed

    def execute(self, kernel_id: str, code: str, timeout: float = 120) -> str:
        """Run ``code`` in the kernel through its websocket (as JupyterLab's notebook does); return its stdout."""
        return asyncio.run(self._execute(kernel_id, code, timeout))

    async def _execute(self, kernel_id: str, code: str, timeout: float) -> str:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        path = f"/user/{self.name}/api/kernels/{kernel_id}/channels"
        url = self.base.replace("http://", "ws://") + path + f"?session_id={uuid.uuid4().hex}"
        conn = await asyncio.wait_for(websocket_connect(HTTPRequest(url, headers={
            "Cookie": self.cookie_header(path)})), 60)
        msg_id = uuid.uuid4().hex
        conn.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": self.name, "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out, deadline = [], time.monotonic() + timeout
        try:
            while True:
                raw = await asyncio.wait_for(conn.read_message(), max(1.0, deadline - time.monotonic()))
                assert raw is not None, "the kernel's websocket closed"
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg.get("msg_type")
                if kind == "stream":
                    out.append(msg["content"]["text"])
                elif kind == "error":
                    raise AssertionError("the probe raised in the kernel:\n" + "\n".join(msg["content"]["traceback"]))
                elif kind == "status" and msg["content"]["execution_state"] == "idle":
                    return "".join(out)
        finally:
            conn.close()


def _probe_code(hub: DockerHub, a_home: Path, b_home: Path) -> str:
    """What learner A's kernel tries, in A's container: paths of the host that A must not reach there."""
    targets = {
        "own_home": (a_home, True),
        "course_source": (hub.course / "source" / PHASE / f"{PHASE}.ipynb", False),
        "gradebook": (hub.course / "gradebook.db", False),
        "course_dir": (hub.course, True),
        "instructor_home": (hub.course.parent, True),
        "other_home": (b_home, True),
        "other_file": (b_home / "notes.txt", False),
        "inbound": (Path(hub.settings["exchange"]) / COURSE_ID / "inbound", True),
    }
    paths = {k: (str(p), listing) for k, (p, listing) in targets.items()}
    return (
        "import json, os, pwd, sys\n"
        "def probe(path, listing):\n"
        "    try:\n"
        "        os.listdir(path) if listing else open(path, 'rb').read(1)\n"
        "        return 'read'\n"
        "    except Exception as e:\n"
        "        return type(e).__name__\n"
        "import tritoncourse\n"
        "print(json.dumps({\n"
        "    'uid': os.getuid(), 'gid': os.getgid(), 'user': pwd.getpwuid(os.getuid()).pw_name,\n"
        "    'prefix': sys.prefix, 'interpret': os.environ.get('TRITON_INTERPRET'),\n"
        "    'tritoncourse': tritoncourse.__file__, 'passwd': open('/etc/passwd').read(),\n"
        "    'pid1': open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode(),\n"
        "    'process_uids': sorted({os.stat(f'/proc/{p}').st_uid for p in os.listdir('/proc') if p.isdigit()}),\n"
        f"    **{{k: probe(p, l) for k, (p, l) in {paths!r}.items()}},\n"
        "}))\n")


def _net_probe_code(targets: dict) -> str:
    """Python that opens a TCP connection to each ``(host, port)`` of ``targets`` at once (3 s each: Docker drops what
    inter-container communication off forbids, so a refused one answers at once and a dropped one times out) and asks
    each URL (the hub's API) for its JSON's version; prints {name: connected | timeout | the error's name | version}."""
    return (
        "import json, socket, threading, urllib.request\n"
        f"targets = {targets!r}\n"
        "seen = {}\n"
        "def one(name, target):\n"
        "    try:\n"
        "        if isinstance(target, str):\n"
        "            seen[name] = json.loads(urllib.request.urlopen(target, timeout=30).read())['version']\n"
        "        else:\n"
        "            socket.create_connection(tuple(target), timeout=3).close()\n"
        "            seen[name] = 'connected'\n"
        "    except socket.timeout:\n"
        "        seen[name] = 'timeout'\n"
        "    except Exception as e:\n"
        "        seen[name] = type(e).__name__\n"
        "threads = [threading.Thread(target=one, args=item) for item in targets.items()]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(json.dumps(seen))\n")


# Forks children that wait on a pipe until ``cap`` of them or ``seconds`` have passed or a fork fails; then closes
# the pipe (every child exits) and reaps them. Prints how many, why it stopped, and the pids cgroup's counters as the
# container sees them (cgroup v1's pids hierarchy, or v2's unified one). Its children exit with it, even killed.
FORK_LOOP = r"""
import errno, json, os, sys, time
cap, seconds = int(sys.argv[1]), float(sys.argv[2])
def cgroup(name):
    for path in ('/sys/fs/cgroup/pids/' + name, '/sys/fs/cgroup/' + name):
        try:
            return open(path).read().strip()
        except OSError:
            pass
r, w = os.pipe()
children, stopped, current = [], None, None
start = time.monotonic()
try:
    while len(children) < cap and time.monotonic() - start < seconds:
        try:
            pid = os.fork()
        except OSError as e:
            stopped, current = errno.errorcode.get(e.errno, str(e.errno)), cgroup('pids.current')
            break
        if pid == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        children.append(pid)
finally:
    os.close(w)
    for pid in children:
        os.waitpid(pid, 0)
print(json.dumps({'forked': len(children), 'stopped': stopped, 'pids_current_then': current,
                  'pids_max': cgroup('pids.max'), 'seconds': round(time.monotonic() - start, 2)}))
"""


def _fork_probe_code(cap: int, seconds: float) -> str:
    """What A's kernel runs: FORK_LOOP in a process of its own (in A's container), killed past 2 x ``seconds``."""
    return (
        "import json, subprocess, sys\n"
        f"p = subprocess.run([sys.executable, '-c', {FORK_LOOP!r}, '{cap}', '{seconds}'], capture_output=True, "
        f"text=True, timeout={2 * seconds})\n"
        "print(p.stdout.strip().splitlines()[-1] if p.returncode == 0 else "
        "json.dumps({'rc': p.returncode, 'stderr': p.stderr[-3000:]}))\n")


def _check_limits(info: dict, network: str) -> None:
    """A learner's container (docker inspect): the configured limits (LIMITS), on the learners' network."""
    host = info["HostConfig"]
    seen = {k: host.get(k) for k in ("Memory", "MemorySwap", "CpuQuota", "CpuPeriod", "NanoCpus", "PidsLimit")}
    # DockerSpawner's cpu_limit is a CFS quota over a period of 100 ms (NanoCpus, `docker run --cpus`, stays 0)
    assert seen == {"Memory": MEMORY_BYTES, "MemorySwap": MEMORY_BYTES, "CpuQuota": int(LIMITS["cpu_limit"] * 100_000),
                    "CpuPeriod": 100_000, "NanoCpus": 0, "PidsLimit": LIMITS["pids_limit"]}, seen
    assert host["NetworkMode"] == network and list(info["NetworkSettings"]["Networks"]) == [network], \
        (host["NetworkMode"], list(info["NetworkSettings"]["Networks"]))
    ports = info["NetworkSettings"]["Ports"]
    assert [b["HostIp"] for bindings in ports.values() for b in bindings or []] == ["127.0.0.1"], ports


def _wait_ready(h: DockerHub, user: str, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while True:
        server = h.api("GET", f"/users/{user}")[1]["servers"].get("", {})
        if server.get("ready"):
            return
        assert server.get("pending") and time.monotonic() < deadline, \
            f"{user}'s server did not start: {server}\n{h.log_text()}"
        time.sleep(1)


@pytest.fixture(scope="session")
def hub_possible() -> tuple[str, str]:
    """configurable-http-proxy's path and the Docker client, or the reason to skip; before ``cpu_image`` (same scope,
    named first): no image is built for a test that skips."""
    return _skip_unless_possible()


@pytest.fixture
def docker_hub(hub_possible, cpu_image, monkeypatch):
    """A hub with DockerSpawner on the session's CPU learner image: the instructor, learners a and b, 01_vector_add
    released, started; stopped, its containers and accounts deleted afterwards (its log kept in ARTIFACTS)."""
    chp, client = hub_possible
    monkeypatch.setattr(hub_env, "PORTABLE", PORTABLE)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    scratch = Path(tempfile.mkdtemp(prefix="tritonhub-docker-test-"))
    scratch.chmod(0o711)
    h, times, began = None, {}, time.monotonic()
    try:
        h = DockerHub(scratch, chp, client, cpu_image, times)
        h.setup()
        start = time.monotonic()
        h.as_user(h.instructor, "nbgrader", "release_assignment", PHASE, "--log-level=WARN", cwd=h.course)
        times["release_assignment"] = round(time.monotonic() - start, 1)
        start = time.monotonic()
        h.start()
        times["hub start"] = round(time.monotonic() - start, 1)
        yield h
    finally:
        if h is not None:
            if h.proc:
                (ARTIFACTS / "jupyterhub.log").write_text(h.log_text())
            for user in h.learners.values():  # a container still there (a failure): its server's log
                logs = run(h.client, "logs", "--tail", "300", h.container(user), check=False)
                if logs.returncode == 0:
                    (ARTIFACTS / f"container-{user}.log").write_text(logs.stdout + logs.stderr)
            start = time.monotonic()
            try:
                h.stop()
                h.remove_containers()
                times["teardown"] = round(time.monotonic() - start, 1)
                start = time.monotonic()
                h.teardown()
                times["tritonhub.py teardown (the learners' network)"] = round(time.monotonic() - start, 1)
            finally:
                times["all of it, beyond the learner image"] = round(time.monotonic() - began, 1)
                (ARTIFACTS / "times.json").write_text(json.dumps(times, indent=1) + "\n")
                shutil.rmtree(scratch, ignore_errors=True)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.container
def test_learner_fetches_and_submits_in_a_container_of_the_learner_image(docker_hub):
    h = docker_hub
    times = h.times
    a, b, instructor = h.learners["a"], h.learners["b"], h.instructor
    a_home, b_home = h.home(a), h.home(b)
    a_pw = pwd.getpwnam(a)

    # Meanwhile: the instructor's server (a local process), learner B's server (a container, started through the hub's
    # API: A must not reach it) and B's submission (nbgrader on the host, as B).
    h.api("POST", f"/users/{instructor}/server")
    b_started = time.monotonic()
    h.api("POST", f"/users/{b}")  # the hub knows a learner once logged in, or added so
    h.api("POST", f"/users/{b}/server")
    b_errors: list[BaseException] = []

    def learner_b() -> None:
        try:
            h.as_user(b, "nbgrader", "fetch_assignment", PHASE, "--log-level=WARN")
            nbformat.write(marked_notebook(b), b_home / PHASE / f"{PHASE}.ipynb")
            (b_home / "notes.txt").write_text("B's own notes\n")
            for path in (b_home / PHASE / f"{PHASE}.ipynb", b_home / "notes.txt"):
                os.chown(path, pwd.getpwnam(b).pw_uid, pwd.getpwnam(b).pw_gid)
            h.as_user(b, "nbgrader", "submit", PHASE, "--log-level=WARN")
        except BaseException as e:  # noqa: BLE001 (reported below)
            b_errors.append(e)

    b_thread = threading.Thread(target=learner_b, daemon=True)
    b_thread.start()

    # A logs in; the hub starts A's server, a container of the learner image.
    start = time.monotonic()
    learner = Learner(h.base, a)
    learner.log_in(h.passwords[a])
    learner.request("GET", "/hub/spawn")
    _wait_ready(h, a)
    times["A's log-in to a running container"] = round(time.monotonic() - start, 1)

    name = h.container(a)
    info = json.loads(run(h.client, "inspect", name).stdout)[0]
    image = h.settings["image"]
    assert info["Config"]["Image"] == image, info["Config"]["Image"]
    layers = {i: json.loads(run(h.client, "image", "inspect", i).stdout)[0]["RootFS"]["Layers"]
              for i in (image, h.learner_image)}
    assert layers[image][:len(layers[h.learner_image])] == layers[h.learner_image], \
        f"{image} is not built on {h.learner_image}"
    assert info["Config"]["User"] == f"{a_pw.pw_uid}:{a_pw.pw_gid}", info["Config"]["User"]
    mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in info["Mounts"]}
    role_dir = str(h.state / "etc" / "learner")
    assert mounts == {
        str(a_home): (str(a_home), True), h.settings["exchange"]: (h.settings["exchange"], True),
        role_dir: (role_dir, False), "/etc/passwd": (str(h.state / "containers" / a / "passwd"), False),
        "/etc/group": (str(h.state / "containers" / a / "group"), False)}, mounts
    assert not info["HostConfig"].get("DeviceRequests"), "a GPU was requested on a machine without one"
    assert info["HostConfig"]["CapDrop"] == ["ALL"] and "no-new-privileges" in info["HostConfig"]["SecurityOpt"]
    # the configured limits, on the learners' network, whose inter-container communication is off (setup made it)
    _check_limits(info, h.network)
    network = h.network_info()
    assert network and network["Driver"] == "bridge" and network["Options"].get(
        "com.docker.network.bridge.enable_icc") == "false", network
    assert network["Labels"].get(HUB_LABEL) == str(h.state), network["Labels"]
    assert info["Config"]["Labels"].get(HUB_LABEL) == str(h.state), info["Config"]["Labels"]
    gateway = [g["Gateway"] for g in network["IPAM"]["Config"] if g.get("Gateway")][0]

    # A's JupyterLab (the hub's OAuth on the way): the Assignment List on, Formgrader off.
    start = time.monotonic()
    _, landed, page = learner.request("GET", f"/user/{a}/lab")
    assert landed.startswith(f"/user/{a}/lab"), landed
    config = json.loads(re.search(rb'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))
    disabled = set(config.get("disabledExtensions", []))
    assert "@jupyter/nbgrader:assignment-list" not in disabled and "@jupyter/nbgrader:menu" not in disabled, disabled
    assert "@jupyter/nbgrader:formgrader" in disabled, disabled

    # The Assignment List's Fetch, a cell naming A written into the notebook, and its Submit.
    listed = learner.json("GET", f"/user/{a}/assignments?course_id={COURSE_ID}")
    assert [x["status"] for x in listed["value"] if x["assignment_id"] == PHASE] == ["released"], listed
    fetched = learner.json("POST", f"/user/{a}/assignments/fetch",
                           form={"course_id": COURSE_ID, "assignment_id": PHASE})
    assert any(x["assignment_id"] == PHASE and x["status"] == "fetched" for x in fetched["value"]), fetched
    nb_path = f"/user/{a}/api/contents/{PHASE}/{PHASE}.ipynb"
    model = learner.json("GET", nb_path + "?content=1")
    model["content"]["cells"].append({"cell_type": "code", "id": "owner-marker", "metadata": {},
                                      "source": f"# OWNER={a}", "outputs": [], "execution_count": None})
    learner.json("PUT", nb_path, body={"type": "notebook", "format": "json", "content": model["content"]})
    assert owner_of(a_home / PHASE / f"{PHASE}.ipynb") == a
    assert (a_home / PHASE / f"{PHASE}.ipynb").stat().st_uid == a_pw.pw_uid, "the notebook is not A's file"
    submitted = learner.json("POST", f"/user/{a}/assignments/submit",
                             form={"course_id": COURSE_ID, "assignment_id": PHASE})
    assert submitted.get("success") is True, submitted
    times["A's fetch, edit and submit"] = round(time.monotonic() - start, 1)

    b_thread.join(timeout=300)
    assert not b_thread.is_alive() and not b_errors, f"learner B's submission failed: {b_errors}"

    # A's kernel, in the container: A's own files only.
    start = time.monotonic()
    kernel = learner.json("POST", f"/user/{a}/api/kernels", body={"name": "python3"})

    def in_kernel(code: str) -> dict:
        return json.loads(learner.execute(kernel["id"], code).strip().splitlines()[-1])

    try:
        seen = in_kernel(_probe_code(h, a_home, b_home))
        times["A's kernel probe"] = round(time.monotonic() - start, 1)

        # B's server, a container on the same network: A cannot connect to it, B cannot connect to A's; both reach
        # the hub's API on the gateway; the host (the proxy's side) reaches B's server.
        waited = time.monotonic()
        _wait_ready(h, b)
        times["B's server started (a container), from the API's request"] = round(time.monotonic() - b_started, 1)
        times["waited for B's server after A's probe"] = round(time.monotonic() - waited, 1)
        start = time.monotonic()
        b_info = json.loads(run(h.client, "inspect", h.container(b)).stdout)[0]
        _check_limits(b_info, h.network)
        a_info = json.loads(run(h.client, "inspect", name).stdout)[0]
        port = int(next(iter(b_info["Config"]["ExposedPorts"])).split("/")[0])  # the server's port in a container
        ip = {who: i["NetworkSettings"]["Networks"][h.network]["IPAddress"] for who, i in (("a", a_info), ("b", b_info))}
        b_published = int(b_info["NetworkSettings"]["Ports"][f"{port}/tcp"][0]["HostPort"])
        hub_api = f"http://{gateway}:{h.settings['hub_port']}/hub/api/"
        socket.create_connection((ip["b"], port), timeout=10).close()  # B's server listens there (from the host)
        b_pw = pwd.getpwnam(b)
        b_seen: dict = {}

        def from_b() -> None:  # a process of B's uid in B's container
            try:
                out = run(h.client, "exec", "--user", f"{b_pw.pw_uid}:{b_pw.pw_gid}", h.container(b), "python3", "-c",
                          _net_probe_code({"hub": hub_api, "a_server": [ip["a"], port]}), timeout=120)
                b_seen.update(json.loads(out.stdout.strip().splitlines()[-1]))
            except Exception as e:  # noqa: BLE001 (asserted below)
                b_seen["error"] = repr(e)[-3000:]

        b_probe = threading.Thread(target=from_b, daemon=True)
        b_probe.start()
        a_net = in_kernel(_net_probe_code({"hub": hub_api, "b_server": [ip["b"], port],
                                           "b_published_port": [gateway, b_published],
                                           "hub_proxy": [gateway, h.port]}))
        b_probe.join(timeout=150)
        times["network probes (A's kernel, B's docker exec)"] = round(time.monotonic() - start, 1)
        (ARTIFACTS / "network.json").write_text(json.dumps({"a": a_net, "b": b_seen, "ip": ip, "port": port,
                                                            "gateway": gateway, "b_published": b_published}, indent=1))
        version = h.api("GET", "/")[1]["version"]
        assert a_net["hub"] == version and b_seen.get("hub") == version, (a_net, b_seen)
        assert a_net["b_server"] != "connected" and a_net["b_published_port"] != "connected", a_net
        assert a_net["hub_proxy"] != "connected", a_net  # the proxy listens on 127.0.0.1 only
        assert b_seen.get("a_server") not in (None, "connected"), b_seen

        # A fork loop in A's container stops at the pids limit (EAGAIN: the container's pids cgroup is full) long
        # before its own cap; afterwards the container's task count is back down and A's kernel, A's server and the
        # hub answer (the host was never involved: the loop ran in the container, bounded).
        start = time.monotonic()
        limit = LIMITS["pids_limit"]
        forked = in_kernel(_fork_probe_code(2 * limit, 30))
        after = in_kernel("import json\nprint(json.dumps({'pids_current': next((open(p).read().strip() for p in "
                          "('/sys/fs/cgroup/pids/pids.current', '/sys/fs/cgroup/pids.current') "
                          "if __import__('os').path.exists(p)), None)}))")
        times["fork loop to the pids limit, in A's container"] = round(time.monotonic() - start, 1)
        (ARTIFACTS / "fork.json").write_text(json.dumps({"loop": forked, "after": after}, indent=1))
        assert forked.get("stopped") == "EAGAIN" and forked["forked"] < limit, forked
        assert forked["pids_max"] in (None, str(limit)), forked
        if forked["pids_current_then"] is not None:  # the cgroup was full when the fork failed
            assert int(forked["pids_current_then"]) >= limit - 8, forked
        if after["pids_current"] is not None:
            assert int(after["pids_current"]) < limit // 2, after
        assert learner.json("GET", f"/user/{a}/api/status") and h.api("GET", "/")[0] == 200
    finally:
        learner.request("DELETE", f"/user/{a}/api/kernels/{kernel['id']}")
    (ARTIFACTS / "probe.json").write_text(json.dumps(seen, indent=1) + "\n")
    assert (seen["uid"], seen["gid"], seen["user"]) == (a_pw.pw_uid, a_pw.pw_gid, a), seen
    assert seen["prefix"] == "/opt/venv" and seen["interpret"] == "1", seen  # the learner image's CPU environment
    assert seen["tritoncourse"].startswith("/opt/venv/"), seen
    assert seen["own_home"] == "read", seen
    for what in ("course_source", "gradebook", "course_dir", "instructor_home", "other_home", "other_file"):
        assert seen[what] == "FileNotFoundError", f"{what}: {seen[what]} (not mounted: it must not exist there)"
    assert seen["inbound"] == "PermissionError", seen  # nbgrader's inbound/ (2733): written, never listed
    assert [line.split(":")[0] for line in seen["passwd"].splitlines()] == ["root", a], seen["passwd"]
    # a pid namespace of its own: Docker's init, then A's processes only (no other user's, no host's)
    assert seen["pid1"].endswith("docker-init") and seen["process_uids"] == [a_pw.pw_uid], seen

    # The instructor's server: a local process as the instructor, no container.
    deadline = time.monotonic() + 240
    while not h.api("GET", f"/users/{instructor}")[1]["servers"].get("", {}).get("ready"):
        assert time.monotonic() < deadline, f"the instructor's server did not start:\n{h.log_text()}"
        time.sleep(1)
    assert h.pids_of(instructor), "the instructor's server runs no process as the instructor"
    assert run(h.client, "inspect", h.container(instructor), check=False).returncode != 0, \
        "the instructor's server is a container"

    # The instructor collects: each submission is its owner's notebook.
    start = time.monotonic()
    h.as_user(instructor, "nbgrader", "collect", PHASE, "--log-level=WARN", cwd=h.course)
    times["instructor's collect"] = round(time.monotonic() - start, 1)
    for learner_name in (a, b):
        collected = h.course / "submitted" / learner_name / PHASE / f"{PHASE}.ipynb"
        assert collected.exists(), f"{learner_name}'s submission was not collected"
        assert owner_of(collected) == learner_name, f"{collected} is not {learner_name}'s notebook"

    # Stopping A's (and B's) server deletes its container; A's files stay in A's home.
    start = time.monotonic()
    h.api("DELETE", f"/users/{a}/server")
    h.api("DELETE", f"/users/{b}/server")
    deadline = time.monotonic() + 120
    for container in (name, h.container(b)):
        while run(h.client, "inspect", container, check=False).returncode == 0:
            assert time.monotonic() < deadline, f"{container} outlived its server"
            time.sleep(1)
    assert owner_of(a_home / PHASE / f"{PHASE}.ipynb") == a
    times["A's server stopped, container gone"] = round(time.monotonic() - start, 1)


# ---- the configuration alone (no engine, no hub): the GPU request, the limits, the network ----

def _load_config(tmp_path: Path, monkeypatch, drop: tuple = (), **settings):
    if importlib.util.find_spec("dockerspawner") is None:
        pytest.skip("dockerspawner is not installed here (requirements/hub.txt; the slow test above installs it)")
    from traitlets.config import Config

    state = tmp_path / "state"
    (state / "etc" / "learner").mkdir(parents=True)
    (state / "api-token").write_text("not-a-token\n")
    values = dict(asdict(_tritonhub().Settings()), state=str(state), exchange=str(tmp_path / "exchange"),
                  spawner="docker", image="triton-course-hub:cpu", hub_ip="172.17.0.1", chp="chp")
    values.update(settings)
    for key in drop:  # a settings.json written before the key existed
        del values[key]
    (state / "settings.json").write_text(json.dumps(values))
    monkeypatch.setenv("TRITONHUB_SETTINGS", str(state / "settings.json"))
    c = Config()
    path = ROOT / "hub" / "jupyterhub_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: c, "__name__": "jupyterhub_config"})
    return c, state


def test_config_requests_the_gpus_only_where_the_machine_has_one(tmp_path, monkeypatch):
    """hub/jupyterhub_config.py with DockerSpawner: no device request on a machine without a GPU (settings' cpu, from
    nvidia-smi at set-up); on one with a GPU, every GPU (what `docker run --gpus all` asks the engine for)."""
    import docker as docker_py

    cpu, _ = _load_config(tmp_path / "cpu", monkeypatch, cpu=True)
    assert "device_requests" not in cpu.DockerSpawner.extra_host_config
    gpu, _ = _load_config(tmp_path / "gpu", monkeypatch, cpu=False)
    host = docker_py.types.HostConfig(version="1.43", **gpu.DockerSpawner.extra_host_config)
    assert host["DeviceRequests"] == [{"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]],
                                       "Options": {}}], host["DeviceRequests"]
    # the containers reach the hub's API on the network's gateway (settings' hub_ip here: no engine is asked)
    assert gpu.JupyterHub.hub_bind_url == gpu.JupyterHub.hub_connect_url
    assert gpu.JupyterHub.hub_connect_url.startswith("http://172.17.0.1:")
    assert gpu.JupyterHub.spawner_class.__name__ == "CourseSpawner"


def test_config_mounts_only_the_learners_own_things(tmp_path, monkeypatch):
    """The pre-spawn hook of a learner (here the account `nobody`): the learner's uid and gid, their home, the exchange,
    the learners' configuration and a passwd naming only them; the instructor gets no container settings."""
    c, state = _load_config(tmp_path, monkeypatch, instructor="root")
    pw = pwd.getpwnam("nobody")
    spawner = types.SimpleNamespace(user=types.SimpleNamespace(name="nobody"), environment={})
    c.Spawner.pre_spawn_hook(spawner)
    assert spawner.extra_create_kwargs == {"user": f"{pw.pw_uid}:{pw.pw_gid}", "working_dir": pw.pw_dir,
                                           "labels": {HUB_LABEL: str(state)}}
    assert spawner.volumes == {pw.pw_dir: {"bind": pw.pw_dir, "mode": "rw"},
                               str(tmp_path / "exchange"): {"bind": str(tmp_path / "exchange"), "mode": "rw"}}
    ids = state / "containers" / "nobody"
    assert spawner.read_only_volumes == {str(state / "etc" / "learner"): str(state / "etc" / "learner"),
                                         str(ids / "passwd"): "/etc/passwd", str(ids / "group"): "/etc/group"}
    assert [line.split(":")[0] for line in (ids / "passwd").read_text().splitlines()] == ["root", "nobody"]
    assert spawner.environment["HOME"] == pw.pw_dir and spawner.environment["USER"] == "nobody"
    assert spawner.environment["JUPYTER_CONFIG_PATH"] == str(state / "etc" / "learner")
    instructor = types.SimpleNamespace(user=types.SimpleNamespace(name="root"), environment={})
    c.Spawner.pre_spawn_hook(instructor)
    assert not hasattr(instructor, "volumes") and instructor.environment["JUPYTER_CONFIG_PATH"].endswith("instructor")


def test_config_limits_each_learner_container_and_names_its_network(tmp_path, monkeypatch):
    """The course's defaults (6G of memory with no swap beyond it, 2 CPUs' worth of time, 1024 processes and threads),
    setup's values in their place, 0 for none, and the defaults for a settings.json written before the limits existed;
    the learners' network by its name, each server reached on its port published on 127.0.0.1."""
    import docker as docker_py

    def engine_fields(c) -> dict:  # what docker-py sends the engine for DockerSpawner's limits
        d = c.DockerSpawner
        host = docker_py.types.HostConfig(version="1.41", **({"mem_limit": d.mem_limit} if "mem_limit" in d else {}),
                                          **d.extra_host_config)
        return {k: host.get(k) for k in ("Memory", "MemorySwap", "PidsLimit")} | {"cpus": d.get("cpu_limit")}

    default, _ = _load_config(tmp_path / "default", monkeypatch)
    assert engine_fields(default) == {"Memory": 6 << 30, "MemorySwap": 6 << 30, "PidsLimit": 1024, "cpus": 2.0}
    old, _ = _load_config(tmp_path / "old", monkeypatch, drop=("mem_limit", "cpu_limit", "pids_limit"))
    assert engine_fields(old) == engine_fields(default)
    given, _ = _load_config(tmp_path / "given", monkeypatch, **LIMITS)
    assert engine_fields(given) == {"Memory": MEMORY_BYTES, "MemorySwap": MEMORY_BYTES,
                                    "PidsLimit": LIMITS["pids_limit"], "cpus": LIMITS["cpu_limit"]}
    none, _ = _load_config(tmp_path / "none", monkeypatch, mem_limit="0", cpu_limit=0, pids_limit=0)
    assert engine_fields(none) == {"Memory": None, "MemorySwap": None, "PidsLimit": None, "cpus": None}
    # math threads as many as the CPU quota allows (torch/OpenBLAS would start one per host core)
    assert default.DockerSpawner.environment == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    assert given.DockerSpawner.environment["OMP_NUM_THREADS"] == str(max(1, int(LIMITS["cpu_limit"])))
    assert "OMP_NUM_THREADS" not in none.DockerSpawner.get("environment", {})
    assert default.DockerSpawner.extra_host_config["init"] is True  # the rest stays
    assert default.DockerSpawner.network_name == "tritonhub-learners"
    assert default.DockerSpawner.use_internal_ip is False


def test_setup_takes_the_limits_and_makes_the_learners_network_without_icc(tmp_path, monkeypatch):
    """tritonhub.py setup's options for the limits (into the settings it saves), its checks of them, and the learners'
    network: made with inter-container communication off and this hub's label; an existing one used only when its
    ICC is off (a stand-in Docker client records what setup asks)."""
    th = _tritonhub()
    taken = []
    monkeypatch.setattr(th, "setup", taken.append)
    th.main(["setup", "--state", str(tmp_path), "--spawner", "docker"])
    th.main(["setup", "--state", str(tmp_path), "--spawner", "docker", "--mem-limit", "8G", "--cpu-limit", "4",
             "--pids-limit", "2048", "--docker-network", "course-net"])
    assert [(s.mem_limit, s.cpu_limit, s.pids_limit, s.docker_network) for s in taken] == [
        ("6G", 2.0, 1024, "tritonhub-learners"), ("8G", 4.0, 2048, "course-net")]
    th.check_limits(th.Settings(mem_limit="0", cpu_limit=0, pids_limit=0))  # none
    th.check_limits(th.Settings(mem_limit="1.5G", cpu_limit=0.5, pids_limit=64))
    for bad in ({"mem_limit": "6 GB"}, {"mem_limit": "6g"}, {"mem_limit": "100M"}, {"cpu_limit": -1.0},
                {"pids_limit": 10}, {"pids_limit": -1}):
        with pytest.raises(SystemExit):
            th.check_limits(th.Settings(**bad))

    log, network = tmp_path / "docker.log", tmp_path / "network.json"
    client = tmp_path / "docker"
    client.write_text(f"""#!/bin/sh
echo "$@" >> {log}
if [ "$1 $2" = "network inspect" ]; then [ -f {network} ] && cat {network} && exit 0; exit 1; fi
""")
    client.chmod(0o755)
    settings = th.Settings(docker=str(client), docker_network="course-net", state="/srv/x")
    th.ensure_network(settings)
    assert log.read_text().splitlines()[-1] == ("network create --driver bridge --opt "
                                                "com.docker.network.bridge.enable_icc=false --label "
                                                "org.tritoncourse.hub.state=/srv/x course-net")
    network.write_text(json.dumps([{"Driver": "bridge", "Options": {"com.docker.network.bridge.enable_icc": "true"}}]))
    with pytest.raises(SystemExit, match="lets containers reach each other"):
        th.ensure_network(settings)
    network.write_text(json.dumps([{"Driver": "bridge", "Options": {"com.docker.network.bridge.enable_icc": "false"}}]))
    th.ensure_network(settings)  # an existing one without ICC: used as it is
    assert [line.split()[:2] for line in log.read_text().splitlines()] == [
        ["network", "inspect"], ["network", "create"], ["network", "inspect"], ["network", "inspect"]]

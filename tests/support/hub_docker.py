"""The course's JupyterHub with DockerSpawner, as tests/system/test_hub_docker.py sets it up: the hub on the session's
learner image (``DockerHub``, tests/support/hub_env.py's hub with ``--spawner docker``), the limits and network it is
given, when it can run here (``_skip_unless_possible``), and the checks of a learner's container (``_check_limits``,
``_wait_ready``). tests/system/test_hub_docker_config.py loads hub/tritonhub.py (``_tritonhub``) and these limits
without an engine."""
from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hub_env
from docker_images import ROOT, docker, run
from hub_env import PHASE, Hub

ARTIFACTS = ROOT / "tests" / "artifacts" / "hub-docker"
# The hub's interpreter, copied where every user may run it: a folder of this test's own, so that
# tests/system/test_hub.py's (/opt/tritonhub-test, rebuilt by each hub) may run at the same time on another worker.
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
    """requirements/hub.txt (jupyterhub, dockerspawner) in this environment, as tests/support/hub_env.py installs it."""
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
    client = docker()  # skips without an engine (fails in CI as root), as tests/system/test_container.py
    _hub_packages()
    return chp, client


class DockerHub(Hub):
    """tests/support/hub_env.py's hub, set up with ``--spawner docker`` on the session's learner image."""

    def __init__(self, scratch: Path, chp: str, client: str, learner_image: str, times: dict):
        self.client, self.learner_image, self.times = client, learner_image, times
        start = time.monotonic()
        super().__init__(scratch, chp)  # (copies this interpreter and .venv's packages: portable_venv)
        self.network = f"{self.prefix}-learners"  # the learners' network of this hub alone
        times["the hub's environment (tests/support/hub_env.py's portable_venv)"] = round(time.monotonic() - start, 1)

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

"""What every part of hub/tritonhub.py shares: the repository's paths, the assignments, the Settings that
``setup`` saves to <state>/settings.json (and hub/jupyterhub_config.py reads), running a command (``run``; as a
user, ``as_user``) and each role's Jupyter configuration folder (``role``, ``role_dir``).

Standard library only, as hub/tritonhub.py (run as root with any Python 3.10+).
"""
from __future__ import annotations

import json
import pwd
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HUB = REPO / "hub"
ASSIGNMENTS = ["01_vector_add", "02_softmax", "03_matmul_relu", "04_benchmarking", "05_autotuning",
               "06_fused_attention", "07_attention_backward"]


@dataclass
class Settings:
    venv: str = "/opt/tritonhub/venv"
    state: str = "/srv/tritonhub"  # the hub's database, cookie secret, logs, role configuration (root only)
    exchange: str = "/srv/nbgrader/exchange"
    instructor: str = "instructor"
    learners_group: str = "tritoncourse-learners"
    course_id: str = "triton-kernels"
    port: int = 8000  # the proxy's public port, on 127.0.0.1 only
    hub_port: int = 8081  # the hub's own API, 127.0.0.1
    proxy_api_port: int = 8001  # configurable-http-proxy's REST API, 127.0.0.1
    chp: str = ""  # configurable-http-proxy's path
    assignments: list = field(default_factory=lambda: list(ASSIGNMENTS))
    cpu: bool = True  # no GPU: Triton's interpreter in every learner's kernel
    build_venv: bool = True  # False: ``venv`` is an existing environment with the course and requirements/hub.txt
    spawner: str = "local"  # "docker": each learner's server is a container of ``image`` (DockerSpawner)
    learner_image: str = ""  # docker/Dockerfile's learner target (setup builds triton-course:cpu or :gpu if empty)
    image: str = ""  # the single-user image hub/singleuser.Dockerfile makes of it (setup sets it)
    docker: str = ""  # the Docker client setup builds with (empty: found on PATH)
    docker_network: str = "tritonhub-learners"  # the learners' containers' network (setup makes it: no ICC)
    hub_ip: str = ""  # the hub's address on that network (empty: the network's gateway, asked when the hub starts)
    # Each learner's server (0: no limit): its control groups (local processes: hub/tritonhub_limits.py) or its
    # container (DockerSpawner). Memory: all its processes together (no swap beyond it), as the grading sandbox
    # allows one process (tritoncourse/grading/sandbox/limits.py); CPU: the CPUs' worth of time its processes share
    # (a CFS quota); processes: tasks (processes and threads) at once (pids cgroup). The instructor's has none.
    mem_limit: str = "6G"
    cpu_limit: float = 2.0
    pids_limit: int = 1024
    idle_timeout: int = 3600  # seconds without activity after which jupyterhub-idle-culler stops a server (0: never)

    @property
    def course_dir(self) -> Path:
        return Path(pwd.getpwnam(self.instructor).pw_dir) / self.course_id

    @classmethod
    def load(cls, state: str) -> "Settings":
        path = Path(state) / "settings.json"
        if not path.exists():
            sys.exit(f"{path} is missing: run `python3 hub/tritonhub.py setup` (make hub) first")
        return cls(**json.loads(path.read_text()))



def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)



def as_user(user: str, cmd: list[str], settings: Settings, cwd: Path | None = None, **kw):
    """``cmd`` as ``user`` (uid, gid and groups), with the hub venv first on PATH and the user's HOME."""
    pw = pwd.getpwnam(user)
    env = {"PATH": f"{settings.venv}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": pw.pw_dir, "USER": user,
           "LANG": "C.UTF-8", "JUPYTER_CONFIG_PATH": str(role_dir(settings, role(user, settings)))}
    return subprocess.run(cmd, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd=cwd or pw.pw_dir, env=env,
                          check=kw.pop("check", True), **kw)



def role(user: str, settings: Settings) -> str:
    return "instructor" if user == settings.instructor else "learner"



def role_dir(settings: Settings, name: str) -> Path:
    return Path(settings.state) / "etc" / name


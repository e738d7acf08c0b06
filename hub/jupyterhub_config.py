"""JupyterHub for the Triton kernels course on one machine (docs/JUPYTERHUB.md).

Started by ``python3 hub/tritonhub.py start`` (``make hub``) as root, which names the settings that
``tritonhub.py setup`` wrote in TRITONHUB_SETTINGS. Local Unix accounts log in through PAM; each user's JupyterLab
runs as that user (LocalProcessSpawner) from the course's environment, each learner's in control groups of their own
with the settings' memory, CPU and process limits (hub/tritonhub_limits.py); idle servers are stopped by
jupyterhub-idle-culler (settings' idle_timeout); the hub's state files are root's only; everything listens on
127.0.0.1 only.

With ``tritonhub.py setup --spawner docker`` (settings' ``spawner``), each learner's JupyterLab is a container of the
course's learner image instead (DockerSpawner; hub/singleuser.Dockerfile), run as the learner's Unix uid and gid,
with the learner's home and nbgrader's exchange mounted at their paths and nothing else of the machine; the GPUs
are passed through when the machine has one. The instructor's server stays a local process: Formgrader and the
grading sandbox need the course directory and bubblewrap, which no learner container has. The hub's own API then
listens on the Docker network's gateway instead of 127.0.0.1 (the containers' only way to the hub). The learners'
containers share a network of their own (setup makes it) on which inter-container communication is off: none reaches
another's server. Each has a memory, CPU and process limit (settings' mem_limit, cpu_limit, pids_limit).
"""
import grp
import importlib.util
import json
import os
import pwd
import signal
import subprocess
import sys

from jupyterhub.proxy import ConfigurableHTTPProxy
from jupyterhub.spawner import LocalProcessSpawner

# hub/tritonhub_limits.py, beside this file (its path from the code object: also when exec'd without __file__)
sys.path.insert(0, os.path.dirname(os.path.abspath(sys._getframe(0).f_code.co_filename)))
import tritonhub_limits  # noqa: E402

c = get_config()  # noqa: F821

# ---- a hub started from a background job (`tritonhub.py start --daemon` in a script, `cmd &` in a shell without job
# control) inherits SIGINT ignored, and so would its managed services (the idle culler, the exchange's hand-in service),
# which it starts before it installs its own handlers: each would then ignore the SIGINT the hub stops it with and be
# stopped by SIGTERM only 30 s later each (JupyterHub's wait after its SIGINT), at every stop of the hub. A process
# started with SIGINT handled gets it back at its default.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
s = json.load(open(os.environ["TRITONHUB_SETTINGS"]))
state = s["state"]

# ---- the hub's state, root's only: its database (users, activity, every server's port and pid), cookie secret, token,
# settings, pid files and log are made 0600 before the hub opens them (SQLite's journal takes the database's mode; an
# existing file keeps its mode when rewritten), and any file already there is made so; only the roles' folders
# (etc/) and DockerSpawner's passwd files (containers/) below <state> are for the users' servers -------------------------
os.chmod(state, 0o711)
for _name in ("jupyterhub.sqlite", "jupyterhub.pid"):
    os.close(os.open(os.path.join(state, _name), os.O_WRONLY | os.O_CREAT, 0o600))
for _entry in os.scandir(state):
    if _entry.is_file(follow_symlinks=False):
        os.chmod(_entry.path, 0o600)
c.JupyterHub.pid_file = os.path.join(state, "jupyterhub.pid")


class _ProxyPidRootOnly(ConfigurableHTTPProxy):
    """The proxy's pid file, which JupyterHub removes and writes anew at each start, made root's only."""

    def _write_pid_file(self):
        super()._write_pid_file()
        os.chmod(self.pid_file, 0o600)


c.JupyterHub.proxy_class = _ProxyPidRootOnly

# ---- network: loopback only (a TLS-terminating reverse proxy in front of the port is the deployer's) ----------------
c.JupyterHub.bind_url = f"http://127.0.0.1:{s['port']}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{s['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [s["chp"]]
c.ConfigurableHTTPProxy.pid_file = os.path.join(state, "jupyterhub-proxy.pid")
c.JupyterHub.db_url = "sqlite:///" + os.path.join(state, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(state, "jupyterhub_cookie_secret")
c.JupyterHub.cleanup_servers = True  # the hub stops every user's server when it stops
c.JupyterHub.cleanup_proxy = True

# ---- who may log in: the instructor and the members of the learners' Unix group, by their Unix passwords ------------
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = {s["instructor"]}
c.PAMAuthenticator.allowed_groups = {s["learners_group"]}
c.Authenticator.admin_users = set()  # hub administration stays with root's command line
c.PAMAuthenticator.open_sessions = False  # jupyterhub's default since 2.2; said here because it matters

# ---- root's scripts: a service whose token (<state>/api-token, root only) may add users to the hub's list, and start
# and stop their servers, through the hub's REST API (docs/JUPYTERHUB.md); it cannot use their servers or files ----------
with open(os.path.join(state, "api-token")) as _f:
    c.JupyterHub.services = [{"name": "tritonhub-admin", "api_token": _f.read().strip()}]
c.JupyterHub.load_roles = [{"name": "tritonhub-admin", "services": ["tritonhub-admin"],
                            "scopes": ["admin:users", "list:users", "read:users", "read:servers", "servers"]}]

# ---- each user's JupyterLab, as that user, from the course's environment ----------------------------------------------
# (LocalProcessSpawner with each learner's limits: tritonhub_limits.LimitedSpawner, below)
c.Spawner.cmd = [os.path.join(s["venv"], "bin", "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.Spawner.environment = {
    "PATH": f"{s['venv']}/bin:/usr/local/bin:/usr/bin:/bin",  # nbgrader runs `jupyter` and `alembic` as commands
    **({"TRITON_INTERPRET": "1"} if s["cpu"] else {}),
}


def _role_config(spawner):
    """The user's Jupyter configuration folder: the instructor's (Formgrader, the course directory) or a learner's
    (the Assignment List, no Formgrader); hub/tritonhub.py write_role_configs writes both."""
    role = "instructor" if spawner.user.name == s["instructor"] else "learner"
    spawner.environment = dict(spawner.environment, JUPYTER_CONFIG_PATH=os.path.join(state, "etc", role))


c.Spawner.pre_spawn_hook = _role_config
# Servers get no standard input: left alone, each would inherit the hub's, which is root's terminal when `make hub`
# runs in the foreground, and any learner's process could then read what root types there.
c.LocalProcessSpawner.popen_kwargs = {"stdin": subprocess.DEVNULL}


def _bytes(text) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}  # as DockerSpawner's ByteSpecification
    text = str(text).strip()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(float(text))


# Limits of each learner (0: none). Defaults are tritonhub.py Settings' (also for a settings.json written before they
# existed): memory of all their processes together with no swap beyond it, CPU time as a CFS quota, processes and threads
# at once (a fork bomb stops there). Docker: each container's (below); local processes: control groups of each
# learner's own, made by hub/tritonhub_limits.py (cgroup v2 or v1); the instructor's server has none.
_limits = {"mem_limit": "6G", "cpu_limit": 2.0, "pids_limit": 1024}
_limits.update({k: s[k] for k in _limits if k in s})
_memory, _cpus, _pids = _bytes(_limits["mem_limit"]), float(_limits["cpu_limit"]), int(_limits["pids_limit"])

# ---- limits per learner on the local-process hub: each learner's server in control groups of its own ------------------
c.JupyterHub.spawner_class = tritonhub_limits.LimitedSpawner
c.LimitedSpawner.memory_bytes = _memory
c.LimitedSpawner.cpus = _cpus
c.LimitedSpawner.processes = _pids
c.LimitedSpawner.unlimited_users = {s["instructor"]}
if s.get("spawner", "local") == "local" and (_memory or _cpus or _pids):
    _where, _missing = tritonhub_limits.hub_plan()
    if _missing:  # no learner's server would start: say so now, and how to go on
        raise SystemExit(f"tritonhub: {_missing}. Each learner's server runs in control groups with the settings' "
                         "limits; without them set --mem-limit 0 --cpu-limit 0 --pids-limit 0 (tritonhub.py setup)")

# ---- the idle culler: servers without activity for the settings' idle_timeout seconds are stopped (0: never) -----------
_idle = int(s.get("idle_timeout", 3600))
if _idle:
    if importlib.util.find_spec("jupyterhub_idle_culler") is None:
        raise SystemExit(f"tritonhub: jupyterhub-idle-culler is not installed in {sys.prefix}: pip install -r "
                         "requirements/hub.txt there (or tritonhub.py setup --idle-timeout 0: no culler)")
    c.JupyterHub.services.append({"name": "idle-culler", "command": [
        sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={_idle}", f"--cull-every={max(5, min(600, _idle // 6))}"]})
    c.JupyterHub.load_roles.append({"name": "idle-culler", "services": ["idle-culler"],
                                    "scopes": ["list:users", "read:users:activity", "read:servers",
                                               "delete:servers"]})

# ---- the exchange's hand-in service (hub/exchange_service.py; docs/JUPYTERHUB.md, "The exchange"): root, started and
# stopped with the hub; it writes each learner's submission into inbound/, which no learner may write, under the name
# the kernel gives the connecting uid (its Unix socket, <exchange>/hand-in.sock, also reaches the learners' containers
# through the exchange's mount) ---------------------------------------------------------------------------------------
c.JupyterHub.services.append({"name": "exchange-hand-in", "command": [
    sys.executable, os.path.join(os.path.dirname(os.path.abspath(sys._getframe(0).f_code.co_filename)),
                                 "exchange_service.py"),
    os.environ["TRITONHUB_SETTINGS"]]})

# ---- DockerSpawner: each learner's JupyterLab in a container of the learner image ------------------------------------
if s.get("spawner", "local") == "docker":
    from dockerspawner import DockerSpawner

    def _docker_gateway(network: str) -> str:
        """The host's address on the containers' Docker network (the bridge's gateway, 172.17.0.1 by default)."""
        import docker  # docker-py, DockerSpawner's own client

        client = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
        try:
            found = client.inspect_network(network)
        except docker.errors.NotFound:
            raise SystemExit(f"the Docker network {network!r} is missing: `tritonhub.py setup --spawner docker` "
                             "makes it (`teardown` removed it?)") from None
        gateways = [g["Gateway"] for g in (found["IPAM"]["Config"] or []) if g.get("Gateway")]
        if not gateways:
            raise SystemExit(f"the Docker network {network!r} names no gateway: give its host address as the "
                             "settings' hub_ip (tritonhub.py setup --hub-ip)")
        return gateways[0]

    # The containers reach the hub's API on the network's gateway (the host's address there, not reachable from
    # outside the machine); the proxy reaches each container on a port published on 127.0.0.1.
    _hub_ip = s.get("hub_ip") or _docker_gateway(s["docker_network"])
    c.JupyterHub.hub_bind_url = f"http://{_hub_ip}:{s['hub_port']}"
    c.JupyterHub.hub_connect_url = f"http://{_hub_ip}:{s['hub_port']}"

    class CourseSpawner(LocalProcessSpawner):
        """The instructor's server: a local process (LocalProcessSpawner, as without Docker); every learner's: a
        DockerSpawner container. (JupyterHub makes each user's spawner from one class; this one's constructor hands
        back an instance of the right one, whose state the hub then keeps. Never an instance of its own.)"""

        def __new__(cls, *args, **kwargs):
            user = kwargs.get("user")
            if user is not None and user.name == s["instructor"]:
                return LocalProcessSpawner(*args, **kwargs)
            return DockerSpawner(*args, **kwargs)

    c.JupyterHub.spawner_class = CourseSpawner
    c.DockerSpawner.image = s["image"]  # hub/singleuser.Dockerfile on the learner image; setup built it
    c.DockerSpawner.pull_policy = "never"  # a local image: never replaced by a registry's
    c.DockerSpawner.remove = True  # a stopped server's container is deleted; the learner's home stays on the host
    c.DockerSpawner.name_template = "tritonhub-{username}"
    # The learners' network (tritonhub.py setup: a bridge with inter-container communication off, so no learner's
    # container reaches another's; each reaches the host, hence the hub's API on the gateway). The proxy reaches each
    # server on a port published on 127.0.0.1, as on Docker's default bridge (DockerSpawner's default for any other
    # network would be the container's own address).
    c.DockerSpawner.network_name = s["docker_network"]
    c.DockerSpawner.use_internal_ip = False
    c.DockerSpawner.cmd = ["jupyterhub-singleuser"]
    c.DockerSpawner.environment = {}  # the image's PATH, and TRITON_INTERPRET=1 in the CPU image
    # The learner's limits (above) as the container's: the kernel's OOM killer acts inside the container, CPU time
    # is DockerSpawner's cpu_limit (CpuQuota over a CpuPeriod of 100 ms), processes and threads the pids cgroup's.
    if _memory:
        c.DockerSpawner.mem_limit = _memory
    if _cpus:
        c.DockerSpawner.cpu_limit = _cpus
        # torch and OpenBLAS start a math thread per core of the host, not of the quota: as many as the quota allows
        _threads = str(max(1, int(_cpus)))
        c.DockerSpawner.environment = {"OMP_NUM_THREADS": _threads, "MKL_NUM_THREADS": _threads}
    c.DockerSpawner.extra_host_config = {
        **({"memswap_limit": _memory} if _memory else {}),  # memory and swap together: no swap beyond the limit
        **({"pids_limit": _pids} if _pids else {}),
        "init": True,  # an init process reaps the kernels' children, as docker/compose.yaml's services have
        "cap_drop": ["ALL"],  # the learner's uid needs no capability
        "security_opt": ["no-new-privileges"],
        # every GPU of the machine, shared by all learners (NVIDIA Container Toolkit); none without a GPU
        **({} if s["cpu"] else {"device_requests": [{"count": -1, "capabilities": [["gpu"]]}]}),
    }

    def _learner_container(spawner):
        """A learner's container: run as the learner's uid and gid, with their home, nbgrader's exchange and the
        learners' Jupyter configuration mounted at the paths they have on the host, and a passwd and group file
        naming only them (nbgrader names the submitter by the uid's passwd entry; the host's list of accounts
        stays out). Nothing else of the machine is mounted: no course directory, no other learner's home."""
        pw = pwd.getpwnam(spawner.user.name)
        group = grp.getgrgid(pw.pw_gid).gr_name
        ids = os.path.join(state, "containers", spawner.user.name)
        os.makedirs(ids, mode=0o755, exist_ok=True)
        files = {"passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                           f"{pw.pw_name}:x:{pw.pw_uid}:{pw.pw_gid}::{pw.pw_dir}:/bin/bash\n",
                 "group": f"root:x:0:\n{group}:x:{pw.pw_gid}:\n"}
        for name, text in files.items():
            with open(os.path.join(ids, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(ids, name), 0o644)
        role_dir = os.path.join(state, "etc", "learner")
        spawner.volumes = {pw.pw_dir: {"bind": pw.pw_dir, "mode": "rw"},
                           s["exchange"]: {"bind": s["exchange"], "mode": "rw"}}
        spawner.read_only_volumes = {role_dir: role_dir, os.path.join(ids, "passwd"): "/etc/passwd",
                                     os.path.join(ids, "group"): "/etc/group"}
        spawner.extra_create_kwargs = {"user": f"{pw.pw_uid}:{pw.pw_gid}", "working_dir": pw.pw_dir,
                                       # this hub's: `tritonhub.py teardown` removes any left behind
                                       "labels": {"org.tritoncourse.hub.state": state}}
        spawner.notebook_dir = pw.pw_dir
        spawner.environment = dict(spawner.environment, HOME=pw.pw_dir, USER=pw.pw_name)

    def _pre_spawn(spawner):
        _role_config(spawner)
        if spawner.user.name != s["instructor"]:
            _learner_container(spawner)

    c.Spawner.pre_spawn_hook = _pre_spawn

"""JupyterHub for the Triton kernels course on one machine (docs/JUPYTERHUB.md).

Started by ``python3 hub/tritonhub.py start`` (``make hub``) as root, which names the settings that
``tritonhub.py setup`` wrote in TRITONHUB_SETTINGS. Local Unix accounts log in through PAM; each user's JupyterLab
runs as that user (LocalProcessSpawner) from the course's environment; everything listens on 127.0.0.1 only.
"""
import json
import os

c = get_config()  # noqa: F821
s = json.load(open(os.environ["TRITONHUB_SETTINGS"]))
state = s["state"]

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
c.JupyterHub.spawner_class = "localprocess"
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

"""The course on one Linux machine's JupyterHub: set-up, accounts and start (docs/JUPYTERHUB.md).

Run as root with any Python 3.10+ (standard library only; the hub's venv is built with the Python that runs
``setup``, which the pins need to be 3.11.5 or newer):

    python3 hub/tritonhub.py setup [--venv DIR] [--instructor NAME] ...   # idempotent
        [--mem-limit 6G] [--cpu-limit 2] [--pids-limit 1024]   # each learner server's limits (cgroups)
        [--idle-timeout 3600]                                  # jupyterhub-idle-culler stops idle servers
    python3 hub/tritonhub.py setup --spawner docker [--learner-image IMAGE]  # learners' servers in containers
    python3 hub/tritonhub.py users ROSTER.csv                              # learners' Unix accounts
    python3 hub/tritonhub.py remove-users ROSTER.csv                       # only accounts of the learners' group
    python3 hub/tritonhub.py start [--daemon]                              # JupyterHub on 127.0.0.1
    python3 hub/tritonhub.py stop | restart | status                       # the hub of <state>/jupyterhub.pid
    python3 hub/tritonhub.py backup DIR                 # gradebook, course, exchange, learners' homes, roster
    python3 hub/tritonhub.py restore DIR/tritonhub-backup-...               # with the hub stopped
    python3 hub/tritonhub.py teardown                                      # (docker) the learners' network, after

What set-up makes (each step skipped when already there):
- the hub's virtual environment (``--venv``): the course's pinned requirements, requirements/hub.txt and the
  ``tritoncourse`` package installed (not editable), readable by every learner; the learners' kernel;
- the instructor's Unix account, home 0700, with the course directory ``~/triton-kernels`` copied from this
  repository's tracked files (nbgrader_config.py, source/, tritoncourse/) and each assignment generated into its
  gradebook: learners can read none of it;
- a Unix group for the learners (the hub lets in only its members and the instructor);
- nbgrader's exchange (``--exchange``): made by root before anyone logs in, nothing in it writable by learners
  (hub/exchange_service.py ``prepare``); learners hand in through the hand-in service the hub starts, which knows
  who is asking (docs/JUPYTERHUB.md, "The exchange");
- Jupyter configuration for two roles (``<state>/etc/{learner,instructor}``, chosen per user at spawn): learners
  get the Assignment List and Validate, not Formgrader, Create Assignment or the Course List, and submit through
  hub/checked_submit.py (copied beside their nbgrader_config.py with hub/course_exchange.py: a clear refusal of what
  cannot be graded, all or nothing through the hand-in service); the instructor's collect is
  hub/course_exchange.py's (no link followed, bounded, one learner's bad submission costs only them); the instructor's
  nbgrader configuration loads the course's own nbgrader_config.py, so Formgrader's buttons grade through the
  course's sandboxed grader;
- ``<state>/settings.json``, read by hub/jupyterhub_config.py, and ``<state>/api-token`` (root only): root's scripts'
  token for the hub's REST API (add users to the hub, start and stop their servers);
- with ``--spawner docker``: the learner image (docker/Dockerfile's ``learner`` target, built unless
  ``--learner-image`` names one) and on it the hub's single-user image (hub/singleuser.Dockerfile), which
  DockerSpawner runs for each learner (hub/jupyterhub_config.py says how; docs/JUPYTERHUB.md, "DockerSpawner"),
  and the learners' Docker network (``--docker-network``, default ``tritonhub-learners``): a bridge with
  inter-container communication off, so that no learner's container reaches another's server; each container's
  memory, CPU and process limits (``--mem-limit``, ``--cpu-limit``, ``--pids-limit``) go into the settings.
``teardown`` removes what set-up made on the Docker engine and the hub leaves: containers of this hub still there
and that network (images, accounts and the state folder stay).

Before building the venv, ``setup`` checks the Python that runs it (the pins need 3.11.5 or newer) and that the
hub's users may run it (not under /root), and rebuilds a venv whose stamp is there but whose python no longer works.

This file keeps the command line, ``start`` and the local set-up (the venv, the course directory, the roles'
configuration, ``setup`` itself); its parts beside it: hub/tritonhub_common.py (the paths, Settings, running a command
as a user), hub/tritonhub_accounts.py (Unix accounts, ``users`` and ``remove-users``), hub/tritonhub_docker.py
(``--spawner docker``'s images, limits and network, ``teardown``) and hub/tritonhub_ops.py (the Python checks,
``start --daemon``, ``stop``, ``restart``, ``status``) and hub/tritonhub_backup.py (``backup``, ``restore``). Their
names are re-exported here. Each learner's
limits on the local-process hub are hub/tritonhub_limits.py's, loaded by hub/jupyterhub_config.py.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # its parts, beside it, also when loaded by path (tests)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
# every name of its parts, re-exported: tritonhub.Settings, tritonhub.check_limits, tritonhub.docker_client, ...
from tritonhub_accounts import (USER_ID, add_account, add_users, ensure_group, groups_of,  # noqa: E402,F401
                                read_roster, remove_users, user_exists)
import exchange_service  # noqa: E402
from tritonhub_common import ASSIGNMENTS, HUB, REPO, Settings, as_user, role, role_dir, run  # noqa: E402,F401
from tritonhub_docker import (HUB_LABEL, MEMORY, NO_ICC, build_images, check_limits, docker_client,  # noqa: E402,F401
                              ensure_network, hub_image_name, teardown)
from tritonhub_backup import backup, restore  # noqa: E402,F401
from tritonhub_ops import (interpreter_problem, python_problem, running_pid, start_daemon,  # noqa: E402,F401
                           status, stop, venv_works)

COURSE_FILES = ["nbgrader_config.py", "source", "tritoncourse", "pyproject.toml"]  # tracked paths copied

# nbgrader's lab plugins and server extensions a learner does not get (docker/Dockerfile turns off more: there
# is no exchange in the learner's container).
LEARNER_LAB_OFF = ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                   "@jupyter/nbgrader:course-list"]
LEARNER_SERVER_OFF = ["nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"]


# ---------------------------------------------------------------------------------------------------- set-up

def build_venv(settings: Settings) -> None:
    """The learners' and instructor's environment: built once per content of the requirement files."""
    venv = Path(settings.venv)
    reqs = ["requirements/lock.txt", "requirements/hub.txt",
            "requirements/torch-cpu.txt" if settings.cpu else "requirements/torch-gpu.txt"]
    digest = hashlib.sha256(b"".join((REPO / r).read_bytes() for r in reqs + ["pyproject.toml"])).hexdigest()
    stamp = venv / ".tritonhub-installed"
    if stamp.exists() and stamp.read_text().strip() == digest:
        if venv_works(venv):
            return
        print(f"tritonhub: {venv} is broken (its python cannot import jupyterhub, nbgrader, tritoncourse): rebuilding")
    # Before anything is built: a Python the pins install on, which every user of the hub may run (the venv's python
    # is a link to it), rather than a pip refusal or a PermissionError when the first server starts.
    base = getattr(sys, "_base_executable", sys.executable)
    for problem in (python_problem(tuple(sys.version_info[:3])), interpreter_problem(base)):
        if problem:
            sys.exit(f"tritonhub: {problem}")
    print(f"tritonhub: building {venv} (the course's requirements, requirements/hub.txt, tritoncourse)")
    if venv.exists() and any(venv.iterdir()) and not (venv / "pyvenv.cfg").exists():
        sys.exit(f"tritonhub: {venv} exists and is no virtual environment: name another --venv")
    stamp.unlink(missing_ok=True)
    if not venv_works(venv):  # missing, half built, or its interpreter gone or changed: made again from this one
        run([sys.executable, "-m", "venv", "--clear", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    # as the Makefile's venv: torch's CPU build from PyTorch's CPU index where it can be reached
    index = ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "--retries", "1", "--timeout", "20"] \
        if settings.cpu else []
    run(pip + index + [f"-r{REPO / r}" for r in reqs])
    run(pip + ["--no-deps", str(REPO)])  # the package learners import; not editable: no path into this repository
    stamp.write_text(digest + "\n")



def copy_course(settings: Settings) -> None:
    """The instructor's course directory: this repository's tracked course files, owned by the instructor."""
    course = settings.course_dir
    if course.exists():
        print(f"tritonhub: {course} exists; left as it is")
        return
    tracked = run(["git", "-C", str(REPO), "ls-files", "-z", "--", *COURSE_FILES], capture_output=True).stdout
    for rel in filter(None, tracked.decode().split("\0")):
        src, dst = REPO / rel, course / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    pw = pwd.getpwnam(settings.instructor)
    for path in [course, *course.rglob("*")]:
        os.chown(path, pw.pw_uid, pw.pw_gid)
    print(f"tritonhub: course directory {course}")



def write_role_configs(settings: Settings) -> None:
    """Per-role Jupyter configuration (JUPYTER_CONFIG_PATH of each spawned server; hub/jupyterhub_config.py)."""
    learner = role_dir(settings, "learner")
    (learner / "labconfig").mkdir(parents=True, exist_ok=True)
    (learner / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {n: True for n in LEARNER_LAB_OFF},
         "lockedExtensions": {n: True for n in LEARNER_LAB_OFF}}, indent=1))
    (learner / "jupyter_server_config.json").write_text(json.dumps(
        {"ServerApp": {"jpserver_extensions": {n: False for n in LEARNER_SERVER_OFF}}}, indent=1))
    (learner / "nbgrader_config.py").write_text(
        "# The learner's nbgrader: the course's exchange; Validate runs each kernel test in a fresh process; Submit\n"
        "# refuses what cannot be graded and hands in through the exchange's service (checked_submit.py, beside this)\n"
        "c = get_config()  # noqa: F821\n" + exchange_config(settings, learner) + "c.Execute.timeout = 300\n")
    instructor = role_dir(settings, "instructor")
    instructor.mkdir(parents=True, exist_ok=True)
    course = settings.course_dir
    (instructor / "nbgrader_config.py").write_text(
        "# The instructor's nbgrader (Formgrader and the terminal): the course directory and the course's own\n"
        "# configuration, whose grading steps run every notebook in the grading sandbox with out-of-kernel verdicts.\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        f"load_subconfig({str(course / 'nbgrader_config.py')!r})  # noqa: F821\n"
        + exchange_config(settings, instructor))
    for path in [role_dir(settings, "."), learner, instructor, *learner.rglob("*"), *instructor.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)



# ---------------------------------------------------------------------------------------------------- the exchange

# nbgrader's exchange classes of each role (hub/course_exchange.py, hub/checked_submit.py; docs/JUPYTERHUB.md, "The
# exchange"): the learners hand in through the hand-in service (hub/exchange_service.py, started by the hub), the
# instructor collects without following links, within bounds; nobody but root writes the exchange's root.
EXCHANGE_CLASSES = {
    "learner": {"submit": "checked_submit.CheckedSubmit", "list": "course_exchange.List",
                "fetch_assignment": "course_exchange.FetchAssignment",
                "fetch_feedback": "course_exchange.FetchFeedback"},
    "instructor": {"collect": "course_exchange.Collect", "list": "course_exchange.List",
                   "release_assignment": "course_exchange.ReleaseAssignment",
                   "release_feedback": "course_exchange.ReleaseFeedback"},
}


def exchange_config(settings: Settings, folder: Path) -> str:
    """The lines of a role's nbgrader_config.py that name the exchange and its classes (copied into ``folder``)."""
    role_name = folder.name
    files = ["course_exchange.py"] + (["checked_submit.py"] if role_name == "learner" else [])
    for name in files:
        shutil.copy2(HUB / name, folder / name)
    return ("import sys\n"
            f"sys.path.insert(0, {str(folder)!r})  # {', '.join(files)}\n"
            f"c.Exchange.root = {settings.exchange!r}\n"
            f"c.CourseDirectory.course_id = {settings.course_id!r}\n"
            + "".join(f"c.ExchangeFactory.{k} = {v!r}\n" for k, v in EXCHANGE_CLASSES[role_name].items()))



def setup(settings: Settings) -> None:
    if os.geteuid() != 0:
        sys.exit("tritonhub setup runs as root (it makes Unix accounts and spawns servers as them)")
    settings.chp = settings.chp or shutil.which("configurable-http-proxy") or ""
    if not settings.chp:
        sys.exit("configurable-http-proxy is missing: `bash tools/system-deps.sh hub` installs it (npm)")
    state = Path(settings.state)
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o711)  # the role configuration below it is read by the users' servers; nothing is listable
    if settings.spawner not in ("local", "docker"):
        sys.exit(f"--spawner is local or docker, not {settings.spawner!r}")
    check_limits(settings)
    if settings.idle_timeout < 0:
        sys.exit(f"--idle-timeout is seconds (0: no culler), not {settings.idle_timeout}")
    if settings.build_venv:
        build_venv(settings)
    elif not (Path(settings.venv) / "bin" / "jupyterhub-singleuser").exists():
        sys.exit(f"{settings.venv} has no jupyterhub-singleuser: pip install -r requirements/hub.txt into it")
    problem = interpreter_problem(str(Path(settings.venv) / "bin" / "python"))
    if problem:  # every server runs as its user with this interpreter
        sys.exit(f"tritonhub: {problem}")
    ensure_group(settings.learners_group)
    token = state / "api-token"  # root's scripts' token for the hub's REST API (hub/jupyterhub_config.py)
    if not token.exists():
        token.touch(mode=0o600)
        token.write_text(secrets.token_hex(32) + "\n")
    password = None
    if not user_exists(settings.instructor):
        password = secrets.token_urlsafe(12)
        (state / "instructor-password").write_text(password + "\n")
        (state / "instructor-password").chmod(0o600)
        print(f"tritonhub: instructor account {settings.instructor!r}, password in {state / 'instructor-password'}")
    add_account(settings.instructor, [], password)
    modules = "nbgrader, jupyterhub" + (", dockerspawner" if settings.spawner == "docker" else "")
    probe = as_user(settings.instructor, [f"{settings.venv}/bin/python", "-c", f"import {modules}"],
                    settings, check=False, capture_output=True, text=True)
    if probe.returncode != 0:
        sys.exit(f"{settings.venv} cannot be used by other users (an interpreter or packages under /root?):\n"
                 f"{probe.stderr[-2000:]}")
    exchange_service.prepare(settings.exchange, settings.course_id, settings.instructor)  # before anyone logs in
    write_role_configs(settings)
    if settings.spawner == "docker":
        build_images(settings)
        ensure_network(settings)
    copy_course(settings)
    release = settings.course_dir / "release"
    for assignment in settings.assignments:
        if not (release / assignment).exists():
            as_user(settings.instructor, ["nbgrader", "generate_assignment", assignment, "--log-level=WARN"],
                    settings, cwd=settings.course_dir)
    (state / "settings.json").write_text(json.dumps(asdict(settings), indent=1))
    (state / "settings.json").chmod(0o600)
    print(f"tritonhub: set up; start with `python3 hub/tritonhub.py start --state {state}` (make hub)")



# ---------------------------------------------------------------------------------------------------- start

def start_command(settings: Settings) -> tuple[list[str], dict]:
    env = dict(os.environ, TRITONHUB_SETTINGS=str(Path(settings.state) / "settings.json"),
               PATH=f"{settings.venv}/bin:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return [f"{settings.venv}/bin/jupyterhub", "-f", str(HUB / "jupyterhub_config.py")], env



def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["setup", "users", "remove-users", "start", "stop", "restart", "status",
                                        "backup", "restore", "teardown"])
    p.add_argument("path", nargs="?", type=Path, metavar="ROSTER|DIR",
                   help="users' roster; backup's folder (where backup makes one; the one restore puts back)")
    p.add_argument("--daemon", action="store_true",
                   help="start: in the background, log in <state>/jupyterhub.log, pid in <state>/jupyterhub.pid")
    p.add_argument("--state", default=Settings.state)
    defaults = Settings()
    for name in ("venv", "exchange", "instructor", "learners_group", "course_id", "chp"):
        p.add_argument(f"--{name.replace('_', '-')}", default=getattr(defaults, name))
    for name in ("port", "hub_port", "proxy_api_port"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    p.add_argument("--assignments", nargs="*", default=ASSIGNMENTS)
    p.add_argument("--existing-venv", action="store_true",
                   help="use --venv as it is (it holds the course's requirements and requirements/hub.txt)")
    p.add_argument("--gpu", action="store_true", help="torch's CUDA build, no interpreter (default: nvidia-smi)")
    p.add_argument("--spawner", choices=["local", "docker"], default="local",
                   help="docker: each learner's server is a container of the learner image (DockerSpawner)")
    p.add_argument("--learner-image", default="",
                   help="an existing learner image (docker/Dockerfile's learner target); default: build it")
    p.add_argument("--docker", default="", help="the Docker client (default: one on PATH that builds with BuildKit)")
    p.add_argument("--docker-network", default=Settings.docker_network)
    p.add_argument("--hub-ip", default="", help="the hub's address on that network (default: its gateway)")
    p.add_argument("--mem-limit", default=defaults.mem_limit,
                   help=f"each learner server's memory, swap included (default {defaults.mem_limit}; 0: none)")
    p.add_argument("--cpu-limit", type=float, default=defaults.cpu_limit,
                   help=f"each learner server's CPUs' worth of time (default {defaults.cpu_limit:g}; 0: none)")
    p.add_argument("--pids-limit", type=int, default=defaults.pids_limit,
                   help=f"each learner server's processes and threads (default {defaults.pids_limit}; 0: none)")
    p.add_argument("--idle-timeout", type=int, default=defaults.idle_timeout,
                   help=f"seconds of inactivity before a server is stopped (default {defaults.idle_timeout}; 0: never)")
    a = p.parse_args(argv)
    if a.command == "setup":
        gpu = a.gpu or bool(shutil.which("nvidia-smi")
                            and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0)
        setup(Settings(venv=a.venv, state=a.state, exchange=a.exchange, instructor=a.instructor,
                       learners_group=a.learners_group, course_id=a.course_id, port=a.port, hub_port=a.hub_port,
                       proxy_api_port=a.proxy_api_port, chp=a.chp, assignments=a.assignments, cpu=not gpu,
                       build_venv=not a.existing_venv, spawner=a.spawner, learner_image=a.learner_image,
                       docker=a.docker, docker_network=a.docker_network, hub_ip=a.hub_ip,
                       mem_limit=a.mem_limit, cpu_limit=a.cpu_limit, pids_limit=a.pids_limit,
                       idle_timeout=a.idle_timeout))
        return
    settings = Settings.load(a.state)
    if a.command == "teardown":
        teardown(settings)
    elif a.command in ("users", "remove-users", "backup", "restore"):
        if a.path is None:
            sys.exit(f"usage: tritonhub.py {a.command} {'ROSTER.csv' if 'users' in a.command else 'DIR'}")
        {"users": add_users, "remove-users": remove_users, "backup": backup,
         "restore": restore}[a.command](settings, a.path)
    elif a.command == "status":
        sys.exit(status(settings))
    elif a.command == "stop":
        stop(settings)
    elif a.command == "restart" or a.daemon:
        if a.command == "restart":
            stop(settings)
        start_daemon(settings, *start_command(settings))
    else:
        if (pid := running_pid(settings)) is not None:
            sys.exit(f"tritonhub: the hub is running already (pid {pid}); `tritonhub.py stop` stops it")
        cmd, env = start_command(settings)
        os.chdir(settings.state)
        os.execvpe(cmd[0], cmd, env)



if __name__ == "__main__":
    main()

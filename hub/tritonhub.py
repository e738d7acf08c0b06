"""The course on one Linux machine's JupyterHub: set-up, accounts and start (docs/JUPYTERHUB.md).

Run as root with any Python 3.10+ (standard library only):

    python3 hub/tritonhub.py setup [--venv DIR] [--instructor NAME] ...   # idempotent
    python3 hub/tritonhub.py setup --spawner docker [--learner-image IMAGE]  # learners' servers in containers
        [--mem-limit 6G] [--cpu-limit 2] [--pids-limit 1024]                  # each learner container's limits
    python3 hub/tritonhub.py users ROSTER.csv                              # learners' Unix accounts
    python3 hub/tritonhub.py remove-users ROSTER.csv                       # only accounts of the learners' group
    python3 hub/tritonhub.py start                                         # JupyterHub on 127.0.0.1
    python3 hub/tritonhub.py teardown                                      # (docker) the learners' network, after

What set-up makes (each step skipped when already there):
- the hub's virtual environment (``--venv``): the course's pinned requirements, requirements/hub.txt and the
  ``tritoncourse`` package installed (not editable), readable by every learner; the learners' kernel;
- the instructor's Unix account, home 0700, with the course directory ``~/triton-kernels`` copied from this
  repository's tracked files (nbgrader_config.py, source/, tritoncourse/) and each assignment generated into its
  gradebook: learners can read none of it;
- a Unix group for the learners (the hub lets in only its members and the instructor);
- nbgrader's exchange (``--exchange``, mode 1777: written by everyone, nothing removable by others);
- Jupyter configuration for two roles (``<state>/etc/{learner,instructor}``, chosen per user at spawn): learners
  get the Assignment List and Validate, not Formgrader, Create Assignment or the Course List, and submit through
  hub/checked_submit.py (copied beside their nbgrader_config.py: a clear refusal of what cannot be graded, all or
  nothing into the exchange); the instructor's
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
"""
from __future__ import annotations

import argparse
import csv
import grp
import hashlib
import json
import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HUB = REPO / "hub"
ASSIGNMENTS = ["01_vector_add", "02_softmax", "03_matmul_relu", "04_benchmarking", "05_autotuning",
               "06_fused_attention"]
COURSE_FILES = ["nbgrader_config.py", "source", "tritoncourse", "pyproject.toml"]  # tracked paths copied
# A Unix user name that is also a valid learner id of the course (docs/INSTRUCTORS.md: no double underscore).
USER_ID = re.compile(r"^[a-z][a-z0-9-]*(?:_[a-z0-9-]+)*$")
# nbgrader's lab plugins and server extensions a learner does not get (docker/Dockerfile turns off more: there
# is no exchange in the learner's container).
LEARNER_LAB_OFF = ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                   "@jupyter/nbgrader:course-list"]
LEARNER_SERVER_OFF = ["nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"]


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
    # Each learner's container (DockerSpawner; 0: no limit). Memory: all its processes together (no swap beyond
    # it), as the grading sandbox allows one process (tritoncourse/grading/sandbox_limits.py); CPU: the CPUs' worth
    # of time its processes share (a CFS quota); processes: tasks (processes and threads) at once (pids cgroup).
    mem_limit: str = "6G"
    cpu_limit: float = 2.0
    pids_limit: int = 1024

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


# ---------------------------------------------------------------------------------------------------- set-up

def build_venv(settings: Settings) -> None:
    """The learners' and instructor's environment: built once per content of the requirement files."""
    venv = Path(settings.venv)
    reqs = ["requirements/lock.txt", "requirements/hub.txt",
            "requirements/torch-cpu.txt" if settings.cpu else "requirements/torch-gpu.txt"]
    digest = hashlib.sha256(b"".join((REPO / r).read_bytes() for r in reqs + ["pyproject.toml"])).hexdigest()
    stamp = venv / ".tritonhub-installed"
    if stamp.exists() and stamp.read_text().strip() == digest:
        return
    print(f"tritonhub: building {venv} (the course's requirements, requirements/hub.txt, tritoncourse)")
    if not (venv / "bin" / "python").exists():
        run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    # as the Makefile's venv: torch's CPU build from PyTorch's CPU index where it can be reached
    index = ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "--retries", "1", "--timeout", "20"] \
        if settings.cpu else []
    run(pip + index + [f"-r{REPO / r}" for r in reqs])
    run(pip + ["--no-deps", str(REPO)])  # the package learners import; not editable: no path into this repository
    stamp.write_text(digest + "\n")


def ensure_group(name: str) -> None:
    try:
        grp.getgrnam(name)
    except KeyError:
        run(["groupadd", name])


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def add_account(name: str, groups: list[str], password: str | None) -> bool:
    """A Unix account with a private home (0700); returns True when it was made now."""
    made = False
    if not user_exists(name):
        run(["useradd", "--create-home", "--shell", "/bin/bash", "--user-group"]
            + (["--groups", ",".join(groups)] if groups else []) + [name])
        made = True
    home = Path(pwd.getpwnam(name).pw_dir)
    home.chmod(0o700)
    if password:
        run(["chpasswd"], input=f"{name}:{password}\n", text=True)
    return made


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
    exchange = (f"c.Exchange.root = {settings.exchange!r}\n"
                f"c.CourseDirectory.course_id = {settings.course_id!r}\n")
    learner = role_dir(settings, "learner")
    (learner / "labconfig").mkdir(parents=True, exist_ok=True)
    (learner / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {n: True for n in LEARNER_LAB_OFF},
         "lockedExtensions": {n: True for n in LEARNER_LAB_OFF}}, indent=1))
    (learner / "jupyter_server_config.json").write_text(json.dumps(
        {"ServerApp": {"jpserver_extensions": {n: False for n in LEARNER_SERVER_OFF}}}, indent=1))
    shutil.copy2(HUB / "checked_submit.py", learner / "checked_submit.py")
    (learner / "nbgrader_config.py").write_text(
        "# The learner's nbgrader: the course's exchange; Validate runs each kernel test in a fresh process; Submit\n"
        "# refuses what cannot be graded and hands in all or nothing (checked_submit.py, beside this file)\n"
        "import sys\n"
        f"sys.path.insert(0, {str(learner)!r})\n"
        "c = get_config()  # noqa: F821\n" + exchange + "c.Execute.timeout = 300\n"
        "c.ExchangeFactory.submit = 'checked_submit.CheckedSubmit'\n")
    instructor = role_dir(settings, "instructor")
    instructor.mkdir(parents=True, exist_ok=True)
    course = settings.course_dir
    (instructor / "nbgrader_config.py").write_text(
        "# The instructor's nbgrader (Formgrader and the terminal): the course directory and the course's own\n"
        "# configuration, whose grading steps run every notebook in the grading sandbox with out-of-kernel verdicts.\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        f"load_subconfig({str(course / 'nbgrader_config.py')!r})  # noqa: F821\n" + exchange)
    for path in [role_dir(settings, "."), learner, instructor, *learner.rglob("*"), *instructor.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def docker_client(given: str = "") -> str:
    """A Docker client that builds with BuildKit (the images use ``RUN --mount``): Debian's 20.10 has it built in,
    newer clients need the buildx plugin."""
    for client in ([given] if given else ["/usr/bin/docker", shutil.which("docker") or ""]):
        if not client or not os.access(client, os.X_OK):
            continue
        out = subprocess.run([client, "version", "--format", "{{.Client.Version}}"], capture_output=True,
                             text=True).stdout.strip()
        major = int(out.split(".")[0]) if out[:1].isdigit() else 0
        if 0 < major < 23 or subprocess.run([client, "buildx", "version"], capture_output=True).returncode == 0:
            return client
    sys.exit("--spawner docker needs a Docker client that builds with BuildKit (Debian's docker.io, or Docker's "
             "own with the buildx plugin) and a running engine: `bash tools/docker-engine.sh` installs and starts "
             "Debian's")


def hub_image_name(learner_image: str) -> str:
    """triton-course:cpu -> triton-course-hub:cpu"""
    name, tag = learner_image, "latest"
    if ":" in learner_image.rsplit("/", 1)[-1]:
        name, tag = learner_image.rsplit(":", 1)
    return f"{name}-hub:{tag}"


def build_images(settings: Settings) -> None:
    """The learner image (unless given) and the hub's single-user image on it. Each build is cached by Docker: a
    second setup rebuilds nothing that did not change."""
    docker = settings.docker = docker_client(settings.docker)
    if subprocess.run([docker, "info"], capture_output=True, timeout=60).returncode != 0:
        sys.exit(f"`{docker} info` fails: no Docker engine answers (`bash tools/docker-engine.sh` starts Debian's)")
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    flavor = "cpu" if settings.cpu else "gpu"
    if not settings.learner_image:
        settings.learner_image = f"triton-course:{flavor}"
        print(f"tritonhub: building the learner image {settings.learner_image} (docker/Dockerfile, FLAVOR={flavor})")
        run([docker, "build", "-f", str(REPO / "docker" / "Dockerfile"), "--target", "learner",
             "--build-arg", f"FLAVOR={flavor}", "-t", settings.learner_image, str(REPO)], env=env)
    elif subprocess.run([docker, "image", "inspect", settings.learner_image], capture_output=True).returncode != 0:
        sys.exit(f"the learner image {settings.learner_image} is not on this Docker engine")
    settings.image = hub_image_name(settings.learner_image)
    print(f"tritonhub: building the hub's single-user image {settings.image} on {settings.learner_image}")
    with tempfile.TemporaryDirectory(prefix="tritonhub-image-") as tmp:
        # a context of its own: the four things hub/singleuser.Dockerfile copies, and nothing else of the repository
        context = Path(tmp)
        tracked = run(["git", "-C", str(REPO), "ls-files", "-z", "--", "tritoncourse"], capture_output=True).stdout
        for rel in [*filter(None, tracked.decode().split("\0")), "requirements/lock.txt", "requirements/hub.txt",
                    "pyproject.toml"]:
            if (REPO / rel).is_file():
                (context / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, context / rel)
        shutil.copy2(HUB / "singleuser.Dockerfile", context / "Dockerfile")
        run([docker, "build", "--build-arg", f"LEARNER_IMAGE={settings.learner_image}", "-t", settings.image,
             str(context)], env=env)


# What setup's Docker network and the hub's containers carry: the state folder of the hub that made them.
HUB_LABEL = "org.tritoncourse.hub.state"
NO_ICC = "com.docker.network.bridge.enable_icc"
MEMORY = re.compile(r"^[0-9]+(\.[0-9]+)?[KMGT]?$")


def check_limits(settings: Settings) -> None:
    """The learners' containers' limits, as ``setup`` takes them (0: none)."""
    if not MEMORY.match(str(settings.mem_limit)):
        sys.exit(f"--mem-limit is bytes with an optional K, M, G or T (6G, 1536M; 0: none), not {settings.mem_limit!r}")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    mem = str(settings.mem_limit)
    size = float(mem[:-1]) * units[mem[-1]] if mem[-1] in units else float(mem)
    if 0 < size < 256 << 20:
        sys.exit(f"--mem-limit {mem} is below 256M: too little for JupyterLab and a kernel")
    if not 0 <= settings.cpu_limit <= 1024:
        sys.exit(f"--cpu-limit is CPUs (2, 0.5; 0: none), not {settings.cpu_limit}")
    if settings.pids_limit and not 64 <= settings.pids_limit:
        sys.exit(f"--pids-limit {settings.pids_limit} is below 64: too few for JupyterLab and a kernel (0: none)")


def ensure_network(settings: Settings) -> None:
    """The learners' Docker network: a bridge with inter-container communication off (each learner's container
    reaches the host, whose gateway address serves the hub's API, but no other container on it). Made once,
    labelled with this hub's state folder; an existing network of that name is used only if its ICC is off."""
    docker, name = settings.docker, settings.docker_network
    found = subprocess.run([docker, "network", "inspect", name], capture_output=True, text=True)
    if found.returncode == 0:
        net = json.loads(found.stdout)[0]
        if net.get("Driver") != "bridge" or (net.get("Options") or {}).get(NO_ICC) != "false":
            sys.exit(f"the Docker network {name!r} exists and lets containers reach each other (driver "
                     f"{net.get('Driver')!r}, {NO_ICC}={(net.get('Options') or {}).get(NO_ICC)!r}): learners' "
                     "containers could reach each other's servers on it. Name another with --docker-network "
                     "(setup makes it), or remove that one (docker network rm) if nothing else uses it")
        return
    print(f"tritonhub: the learners' Docker network {name} (a bridge, inter-container communication off)")
    run([docker, "network", "create", "--driver", "bridge", "--opt", f"{NO_ICC}=false",
         "--label", f"{HUB_LABEL}={settings.state}", name], stdout=subprocess.DEVNULL)


def teardown(settings: Settings) -> None:
    """After the hub has stopped: the learners' containers of this hub still on the engine (the hub deletes each
    one when its server stops; a hub killed outright leaves them) and the learners' network, if setup made it.
    Images, accounts, homes, the course and the state folder stay."""
    if os.geteuid() != 0:
        sys.exit("tritonhub teardown runs as root")
    if settings.spawner != "docker":
        print("tritonhub: nothing to tear down (the hub does not use Docker)")
        return
    docker = docker_client(settings.docker)
    ids = run([docker, "ps", "-aq", "--filter", f"label={HUB_LABEL}={settings.state}"], capture_output=True,
              text=True).stdout.split()
    if ids:
        run([docker, "rm", "-f", *ids], stdout=subprocess.DEVNULL)
        print(f"tritonhub: removed {len(ids)} learner container(s) of this hub")
    found = subprocess.run([docker, "network", "inspect", settings.docker_network], capture_output=True, text=True)
    if found.returncode != 0:
        return
    if (json.loads(found.stdout)[0].get("Labels") or {}).get(HUB_LABEL) != settings.state:
        print(f"tritonhub: the Docker network {settings.docker_network} was not made by this hub's setup: left")
        return
    run([docker, "network", "rm", settings.docker_network], stdout=subprocess.DEVNULL)
    print(f"tritonhub: removed the Docker network {settings.docker_network}")


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
    if settings.build_venv:
        build_venv(settings)
    elif not (Path(settings.venv) / "bin" / "jupyterhub-singleuser").exists():
        sys.exit(f"{settings.venv} has no jupyterhub-singleuser: pip install -r requirements/hub.txt into it")
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
    exchange = Path(settings.exchange)
    exchange.mkdir(parents=True, exist_ok=True)
    exchange.chmod(0o1777)  # nbgrader: writable by all; sticky: nobody removes another's course folder
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


# ---------------------------------------------------------------------------------------------------- accounts

def read_roster(path: Path) -> list[dict]:
    """Rows of a CSV with an ``id`` column (and optional first_name, last_name, email, password)."""
    with open(path, newline="") as f:
        rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in csv.DictReader(f)]
    bad = [r.get("id", "") for r in rows if not USER_ID.match(r.get("id", "")) or len(r.get("id", "")) > 32]
    if bad:
        sys.exit(f"{path}: ids must be Unix user names and learner ids (a-z first, then a-z 0-9 - and single "
                 f"underscores, 32 at most): {bad}")
    return rows


def add_users(settings: Settings, roster: Path) -> None:
    """Each learner of ``roster``: a Unix account in the learners' group (home 0700), a password (the roster's, or
    a new one written to <state>/passwords.csv, root only), and a student of the course's gradebook."""
    if os.geteuid() != 0:
        sys.exit("tritonhub users runs as root")
    made_passwords = []
    rows = read_roster(roster)
    for row in rows:
        name = row["id"]
        if user_exists(name) and settings.learners_group not in groups_of(name):
            sys.exit(f"{name} is an existing account outside {settings.learners_group}: not taken over")
        password = row.get("password") or None
        if not user_exists(name) and not password:
            password = secrets.token_urlsafe(9)
            made_passwords.append((name, password))
        made = add_account(name, [settings.learners_group], password)
        print(f"tritonhub: {'added' if made else 'updated'} {name}")
    # the gradebook's students, in one nbgrader command (one per learner took a second or more each)
    students = Path(settings.course_dir) / ".tritonhub-students.csv"
    with open(students, "w", newline="") as f:
        out = csv.DictWriter(f, ["id", "first_name", "last_name", "email"], extrasaction="ignore")
        out.writeheader()
        out.writerows({k: row.get(k, "") for k in out.fieldnames} for row in rows)
    pw = pwd.getpwnam(settings.instructor)
    os.chown(students, pw.pw_uid, pw.pw_gid)
    try:
        as_user(settings.instructor, ["nbgrader", "db", "student", "import", str(students), "--log-level=WARN"],
                settings, cwd=settings.course_dir)
    finally:
        students.unlink()
    if made_passwords:
        out = Path(settings.state) / "passwords.csv"
        with open(out, "a", newline="") as f:
            csv.writer(f).writerows(made_passwords)
        out.chmod(0o600)
        print(f"tritonhub: new passwords appended to {out} (root only)")


def groups_of(name: str) -> set[str]:
    pw = pwd.getpwnam(name)
    return {g.gr_name for g in grp.getgrall() if name in g.gr_mem} | {grp.getgrgid(pw.pw_gid).gr_name}


def remove_users(settings: Settings, roster: Path) -> None:
    """Delete the accounts (and homes) of ``roster`` that are in the learners' group; never any other."""
    for row in read_roster(roster):
        name = row["id"]
        if not user_exists(name):
            continue
        if settings.learners_group not in groups_of(name):
            print(f"tritonhub: {name} is not in {settings.learners_group}: left alone", file=sys.stderr)
            continue
        subprocess.run(["pkill", "-KILL", "-u", name], check=False)  # that user's processes only
        run(["userdel", "--remove", name], stderr=subprocess.DEVNULL)
        print(f"tritonhub: removed {name}")


# ---------------------------------------------------------------------------------------------------- start

def start_command(settings: Settings) -> tuple[list[str], dict]:
    env = dict(os.environ, TRITONHUB_SETTINGS=str(Path(settings.state) / "settings.json"),
               PATH=f"{settings.venv}/bin:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return [f"{settings.venv}/bin/jupyterhub", "-f", str(HUB / "jupyterhub_config.py")], env


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["setup", "users", "remove-users", "start", "teardown"])
    p.add_argument("roster", nargs="?", type=Path)
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
                   help=f"each learner container's memory, swap included (default {defaults.mem_limit}; 0: none)")
    p.add_argument("--cpu-limit", type=float, default=defaults.cpu_limit,
                   help=f"each learner container's CPUs' worth of time (default {defaults.cpu_limit:g}; 0: none)")
    p.add_argument("--pids-limit", type=int, default=defaults.pids_limit,
                   help=f"each learner container's processes and threads (default {defaults.pids_limit}; 0: none)")
    a = p.parse_args(argv)
    if a.command == "setup":
        gpu = a.gpu or bool(shutil.which("nvidia-smi")
                            and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0)
        setup(Settings(venv=a.venv, state=a.state, exchange=a.exchange, instructor=a.instructor,
                       learners_group=a.learners_group, course_id=a.course_id, port=a.port, hub_port=a.hub_port,
                       proxy_api_port=a.proxy_api_port, chp=a.chp, assignments=a.assignments, cpu=not gpu,
                       build_venv=not a.existing_venv, spawner=a.spawner, learner_image=a.learner_image,
                       docker=a.docker, docker_network=a.docker_network, hub_ip=a.hub_ip,
                       mem_limit=a.mem_limit, cpu_limit=a.cpu_limit, pids_limit=a.pids_limit))
        return
    settings = Settings.load(a.state)
    if a.command == "teardown":
        teardown(settings)
    elif a.command in ("users", "remove-users"):
        if a.roster is None:
            sys.exit(f"usage: tritonhub.py {a.command} ROSTER.csv")
        (add_users if a.command == "users" else remove_users)(settings, a.roster)
    else:
        cmd, env = start_command(settings)
        os.chdir(settings.state)
        os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()

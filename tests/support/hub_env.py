"""The hub of tests/system/test_hub.py: hub/ set up by hub/tritonhub.py on free loopback ports, with throw-away Unix
accounts (th<random>-*, deleted afterwards, only those), run from an environment every user can run; and what the tests
do as its users: nbgrader's commands as a learner's Unix user, the hub's REST API with root's token
(<state>/api-token)."""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from learner_lab import CHROMIUM
from servers import free_port, wait_until_answers

ROOT = Path(__file__).resolve().parents[2]
PHASE = "01_vector_add"
PORTABLE = Path("/opt/tritonhub-test")  # this interpreter, copied where every user may run it (kept between runs)
LEARNERS = ("a", "b", "c", "d")  # a: the reference; b: a wrong kernel, resubmitted; c: hostile; d: bad input


def _skip_unless_possible() -> str:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the hub test makes Unix accounts and spawns servers as them: Linux and root only (CI is root)")
    chp = shutil.which("configurable-http-proxy")
    if not chp:
        pytest.skip("configurable-http-proxy (npm) is not installed: `bash tools/system-deps.sh hub` installs it")
    if not (Path(CHROMIUM).exists() and shutil.which("useradd") and shutil.which("chpasswd")):
        pytest.skip(f"needs {CHROMIUM}, useradd and chpasswd (tools/system-deps.sh)")
    if not all((Path(sys.executable).parent / s).exists() for s in ("jupyterhub-singleuser", "jupyterhub-idle-culler")):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements" / "hub.txt")],
                       check=True)
    return chp


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"


# ------------------------------------------------------------------ an environment every user can run

def portable_venv() -> Path:
    """A venv usable by every user: this interpreter's installation copied under /opt (without its site-packages),
    .venv's packages hard-linked into it, and .venv's console scripts with this venv's interpreter."""
    base = PORTABLE / "python"
    if not (base / "bin" / "python3").exists():
        src = Path(sys.base_prefix)
        tmp = PORTABLE / "python.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, symlinks=True, ignore=lambda d, names: [
            n for n in names if n in ("__pycache__", "test") or (n == "site-packages" and Path(d).name.startswith("python"))])
        _runpath_to_origin(tmp, src)
        tmp.rename(base)
    # A venv of this hub's own: one shared by every hub was rebuilt (removed, linked again) by the next hub's set-up
    # while an earlier hub's servers ran from it (another pytest worker's hub module, another checkout's run), and
    # their nbgrader failed with ModuleNotFoundError. Hub.stop removes it.
    venv = PORTABLE / f"venv-{secrets.token_hex(4)}"
    subprocess.run([str(base / "bin" / "python3"), "-m", "venv", "--without-pip", str(venv)], check=True)
    course_venv = Path(sys.prefix)
    site = course_venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    # .venv's packages and Jupyter files, hard-linked (instant, no copy) inside this venv: the grading sandbox shows
    # a runner only its environment's own folders
    for shared in (site.relative_to(course_venv), Path("etc"), Path("share")):  # share/jupyterhub: its templates
        (venv / shared).parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(venv / shared, ignore_errors=True)
        subprocess.run(["cp", "-al", str(course_venv / shared), str(venv / shared)], check=True)
    for script in (course_venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            head, _, rest = script.read_bytes().partition(b"\n")
            if head.startswith(b"#!") and b"python" in head and not (venv / "bin" / script.name).exists():
                (venv / "bin" / script.name).write_bytes(b"#!" + str(venv / "bin" / "python").encode() + b"\n" + rest)
                (venv / "bin" / script.name).chmod(0o755)
    for path in [PORTABLE, *PORTABLE.parents]:
        if path != Path("/") and not (path.stat().st_mode & 0o001):
            raise AssertionError(f"{path} is not searchable by other users")
    return venv


def _runpath_to_origin(copy: Path, src: Path) -> None:
    """A copied interpreter whose RUNPATH names the original's lib/ (pyenv builds: /root/..., unreadable to others)
    finds the copy's libpython instead: the path is overwritten in place by $ORIGIN/../lib, padded with NULs."""
    old = str(src / "lib").encode() + b"\0"
    new = b"$ORIGIN/../lib"
    for exe in (copy / "bin").glob("python3*"):
        if exe.is_symlink() or not exe.is_file():
            continue
        data = exe.read_bytes()
        if data.count(old) == 1 and len(new) < len(old):
            exe.write_bytes(data.replace(old, new.ljust(len(old), b"\0")))


# ------------------------------------------------------------------ the hub and its accounts

class Hub:
    def __init__(self, scratch: Path, chp: str):
        self.prefix = "th" + secrets.token_hex(3)
        self.instructor = f"{self.prefix}-instr"
        self.learners = {k: f"{self.prefix}-{k}" for k in LEARNERS}
        self.passwords = {name: secrets.token_urlsafe(12) for name in [self.instructor, *self.learners.values()]}
        self.scratch, self.state = scratch, scratch / "state"
        self.port = free_port()
        self.venv = portable_venv()
        self.tool = [sys.executable, str(ROOT / "hub" / "tritonhub.py")]
        self.args = ["--state", str(self.state)]
        self.made_users: list[str] = []
        self.proc = None
        self.chp = chp

    def setup(self) -> None:
        scratch, chp = self.scratch, self.chp
        setup = self.tool + ["setup", *self.args, "--existing-venv", "--venv", str(self.venv), "--exchange",
                             str(scratch / "exchange"), "--instructor", self.instructor, "--learners-group",
                             self.prefix, "--assignments", PHASE, "--chp", chp, "--port", str(self.port),
                             "--hub-port", str(free_port()), "--proxy-api-port", str(free_port())]
        self.made_users.append(self.instructor)
        _run(setup)
        subprocess.run(["chpasswd"], input=f"{self.instructor}:{self.passwords[self.instructor]}\n", text=True,
                       check=True)
        self.add_learners(self.learners.values(), "Learner")
        self.settings = json.loads((self.state / "settings.json").read_text())
        self.course = Path(pwd.getpwnam(self.instructor).pw_dir) / self.settings["course_id"]

    def add_learners(self, names, last_name: str) -> float:
        """Accounts for ``names`` through `hub/tritonhub.py users ROSTER` (make hub-users' code path), with passwords
        of the test's own; returns the seconds it took."""
        self.passwords.update({n: secrets.token_urlsafe(12) for n in names})
        roster = self.scratch / f"roster-{len(self.made_users)}.csv"
        roster.write_text("id,first_name,last_name,email,password\n" + "".join(
            f"{n},{n.rsplit('-', 1)[1].upper()},{last_name},,{self.passwords[n]}\n" for n in names))
        self.made_users += list(names)
        started = time.monotonic()
        _run(self.tool + ["users", str(roster), *self.args])
        return time.monotonic() - started

    def api(self, method: str, path: str, body: dict | None = None):
        """The hub's REST API with root's token (<state>/api-token: may list users, start and stop servers)."""
        token = (self.state / "api-token").read_text().strip()
        req = urllib.request.Request(f"{self.base}/hub/api{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            data = resp.read()
            return resp.status, (json.loads(data) if data.strip() else None)

    def home(self, user: str) -> Path:
        return Path(pwd.getpwnam(user).pw_dir)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def as_user(self, user: str, *cmd: str, check: bool = True, cwd: Path | None = None,
                popen: bool = False) -> subprocess.CompletedProcess | subprocess.Popen:
        pw = pwd.getpwnam(user)
        role = "instructor" if user == self.instructor else "learner"
        env = {"PATH": f"{self.venv}/bin:/usr/bin:/bin", "HOME": pw.pw_dir, "USER": user, "LANG": "C.UTF-8",
               "JUPYTER_CONFIG_PATH": str(self.state / "etc" / role)}
        kw = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd=cwd or pw.pw_dir, env=env,
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return subprocess.Popen(list(cmd), **kw) if popen else subprocess.run(list(cmd), check=check, **kw)

    def start(self) -> None:
        env = dict(os.environ, TRITONHUB_SETTINGS=str(self.state / "settings.json"),
                   PATH=f"{self.venv}/bin:{os.environ.get('PATH', '')}")
        self.log = open(self.scratch / "jupyterhub.log", "wb")
        self.proc = subprocess.Popen([str(self.venv / "bin" / "jupyterhub"), "-f", str(ROOT / "hub" / "jupyterhub_config.py")],
                                     cwd=self.state, env=env, stdin=subprocess.PIPE, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_sigint_ignored)
        wait_until_answers(lambda: urllib.request.urlopen(f"{self.base}/hub/api/", timeout=5).read(), self.proc, 90,
                           "jupyterhub", self.log_text)

    def log_text(self) -> str:
        self.log.flush()
        return (self.scratch / "jupyterhub.log").read_text(errors="replace")[-8000:]

    def stop(self) -> None:
        """The hub (which stops every user's server), then whatever the test's own accounts still run; then only
        the accounts and group this test made."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._stop_left_proxy()
        for user in self.made_users:
            try:
                pwd.getpwnam(user)
            except KeyError:
                continue
            assert user.startswith(self.prefix + "-")
            if subprocess.run(["pkill", "-KILL", "-u", user], check=False).returncode == 0:
                time.sleep(0.2)  # killed ones: gone before userdel
            subprocess.run(["userdel", "--remove", user], check=False, capture_output=True)
        subprocess.run(["groupdel", self.prefix], check=False, capture_output=True)
        if self.venv.name.startswith("venv-"):  # this hub's own (portable_venv; PORTABLE may be patched back by now)
            shutil.rmtree(self.venv, ignore_errors=True)

    def _stop_left_proxy(self) -> None:
        """The proxy a hub killed outright left running (in a session of its own, so the hub's group signal missed
        it): found by the pid file the hub writes (a hub that stopped cleanly removed it), killed only if it is a
        configurable-http-proxy. (The exchange's hand-in service stops by itself once its hub is gone.)"""
        pid_file = self.state / "jupyterhub-proxy.pid"
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if b"configurable-http-proxy" in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def pids_of(self, user: str) -> list[int]:
        out = subprocess.run(["pgrep", "-u", user], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]


def _sigint_ignored() -> None:
    """The hub starts as from a background job of a shell without job control (CI's runner, `cmd &` in a script):
    SIGINT ignored, which the processes it starts inherit unless the hub's configuration restores it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def running_hub(artifacts: Path):
    """A hub set up with the instructor and LEARNERS, 01_vector_add released, started; stopped and its accounts
    deleted afterwards (the hub's log kept in ``artifacts``)."""
    chp = _skip_unless_possible()
    scratch = Path(tempfile.mkdtemp(prefix="tritonhub-test-"))
    scratch.chmod(0o711)
    h = None
    try:
        h = Hub(scratch, chp)
        h.setup()
        h.as_user(h.instructor, "nbgrader", "release_assignment", PHASE, "--log-level=WARN")
        h.start()
        yield h
    finally:
        if h is not None:
            artifacts.mkdir(parents=True, exist_ok=True)
            if h.proc:
                (artifacts / "jupyterhub.log").write_text(h.log_text())
            h.stop()
        shutil.rmtree(scratch, ignore_errors=True)

"""hub/tritonhub.py's running of a hub for a term: the checks before anything is built (the Python the pins install on,
an interpreter the hub's users can run, a venv that works), the hub as a background process with a pid file and a
log (``start --daemon``, ``stop``, ``restart``, ``status``); ``backup`` and ``restore`` are hub/tritonhub_backup.py's.
docs/JUPYTERHUB.md, "Running it for a term".

Standard library only, as hub/tritonhub.py (run as root with any Python 3.10+).
"""
from __future__ import annotations

import os
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from tritonhub_common import Settings

# The Pythons requirements/lock.txt installs on (the Makefile's PYTHON_MIN, PYTHON_BELOW and PYTHON_NOT; tests check
# they agree): soupsieve 4.1.2 needs 3.11.5, triton 3.6.0 has no wheels past 3.14, networkx 3.6.1 refuses 3.14.1.
PYTHON_MIN, PYTHON_BELOW, PYTHON_NOT = (3, 11, 5), (3, 15), (3, 14, 1)
NOBODY = 65534  # a uid and gid with no rights of their own: what any learner can run, it can run
DEBIAN_ROUTE = (
    "  uv:    UV_PYTHON_INSTALL_DIR=/opt/python uv python install 3.11 && \\\n"
    "         make hub PYTHON=$(UV_PYTHON_INSTALL_DIR=/opt/python uv python find --managed-python 3.11)\n"
    "  pyenv: PYENV_ROOT=/opt/pyenv pyenv install 3.11 && make hub PYTHON=/opt/pyenv/versions/$(PYENV_ROOT=/opt/pyenv "
    "pyenv latest 3.11)/bin/python\n"
    "(Debian 12's own python3 is 3.11.2, which the pins refuse; Ubuntu 24.04's 3.12 fits.)")


def python_problem(version: tuple = tuple(sys.version_info[:3])) -> str:
    """Why the hub's environment cannot be built with a Python of ``version`` (empty when it can)."""
    if PYTHON_MIN <= tuple(version) < PYTHON_BELOW and tuple(version) != PYTHON_NOT:
        return ""
    found = ".".join(map(str, version))
    return (f"Python {found} cannot build the hub's environment: requirements/lock.txt installs on "
            f"{'.'.join(map(str, PYTHON_MIN))} or newer, older than {'.'.join(map(str, PYTHON_BELOW))} and not "
            f"{'.'.join(map(str, PYTHON_NOT))}. Install one outside /root (every user runs it), e.g.:\n" + DEBIAN_ROUTE)


def interpreter_problem(python: str, uid: int = NOBODY, gid: int = NOBODY) -> str:
    """Why a user with ``uid`` cannot run ``python`` (empty when ``python -c 1`` works as that user): the hub's users
    run every server and kernel with it, so an interpreter under /root (pyenv's) stops here, before anything is
    built, rather than with a PermissionError when the first server starts."""
    try:
        proc = subprocess.run([python, "-c", "1"], user=uid, group=gid, extra_groups=[], cwd="/",
                              env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, capture_output=True, text=True,
                              timeout=60)
        if proc.returncode == 0:
            return ""
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    except OSError as err:
        why = f"{type(err).__name__}: {err.strerror or err}"
    folders = [*reversed(Path(os.path.abspath(python)).parents), *reversed(Path(os.path.realpath(python)).parents)]
    closed = [str(p) for p in dict.fromkeys(folders) if p.exists() and not p.stat().st_mode & stat.S_IXOTH]
    where = f" ({closed[0]} is closed to other users)" if closed else ""
    return (f"the hub's users cannot run {python}{where}: {why}.\nEvery learner's server and kernel runs with this "
            "interpreter. Build the hub from a Python installed where every user may run it, e.g.:\n" + DEBIAN_ROUTE)


def venv_works(venv: Path) -> bool:
    """The hub's venv runs and imports what the hub needs (False: missing, or broken, e.g. its base interpreter gone)."""
    try:
        return subprocess.run([str(venv / "bin" / "python"), "-c", "import jupyterhub, nbgrader, tritoncourse"],
                              capture_output=True, timeout=120).returncode == 0
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------------- as a service

def pid_file(settings: Settings) -> Path:
    return Path(settings.state) / "jupyterhub.pid"  # written by JupyterHub itself (hub/jupyterhub_config.py)


def log_file(settings: Settings) -> Path:
    return Path(settings.state) / "jupyterhub.log"


def _tail(log: Path, lines: int = 30) -> str:
    """The last lines of the hub's log (none when it is missing), for a message that outlives the log's folder."""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


def running_pid(settings: Settings) -> int | None:
    """The hub's pid when its pid file names a live JupyterHub."""
    try:
        pid = int(pid_file(settings).read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return pid if b"jupyterhub" in cmdline else None


def start_daemon(settings: Settings, cmd: list[str], env: dict, timeout: float = 120) -> int:
    """JupyterHub in the background (a session of its own, no terminal), its output appended to <state>/jupyterhub.log
    (root only); returns once it has written its pid file, or exits with the log's end if it stopped first."""
    if (pid := running_pid(settings)) is not None:
        sys.exit(f"tritonhub: the hub is running already (pid {pid}); `tritonhub.py restart` restarts it")
    log = log_file(settings)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.chmod(log, 0o600)
    os.write(fd, f"\n==== tritonhub start {time.strftime('%Y-%m-%d %H:%M:%S')}: {shlex.join(cmd)}\n".encode())
    proc = subprocess.Popen(cmd, env=env, cwd=settings.state, stdin=subprocess.DEVNULL, stdout=fd,
                            stderr=subprocess.STDOUT, start_new_session=True)
    os.close(fd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"tritonhub: the hub stopped at once; the end of {log}:\n{_tail(log)}")
        if running_pid(settings) == proc.pid:
            print(f"tritonhub: the hub runs (pid {proc.pid}, pid file {pid_file(settings)}); log {log}; "
                  f"stop with `python3 hub/tritonhub.py stop --state {settings.state}`")
            return proc.pid
        time.sleep(0.2)
    sys.exit(f"tritonhub: the hub (pid {proc.pid}) wrote no pid file in {timeout:.0f} s; see {log}")


# How long `stop` waits for the hub after its SIGTERM: the hub stops every user's server at once, each by
# LocalProcessSpawner's SIGINT, SIGTERM 30 s later (interrupt_timeout), SIGKILL 30 s after that (term_timeout), then
# 5 s (kill_timeout): 65 s for a server that ignores the first two (a learner's running kernel can hold one up to its
# SIGTERM), then the proxy and the hub's own exit. As the systemd unit's TimeoutStopSec (hub/tritonhub.service).
STOP_TIMEOUT = 90


def stop(settings: Settings, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM to the hub of the pid file (it stops every user's server and the proxy), waiting until it is gone;
    False when none was running."""
    pid = running_pid(settings)
    if pid is None:
        print(f"tritonhub: no hub running (no live pid in {pid_file(settings)})")
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        log = log_file(settings)
        sys.exit(f"tritonhub: the hub (pid {pid}) is still running {timeout:.0f} s after SIGTERM; the end of {log}:\n"
                 f"{_tail(log)}")
    print(f"tritonhub: stopped the hub (pid {pid}) and its users' servers")
    return True


def _alive(pid: int) -> bool:
    """The process runs (a zombie, ended and not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def status(settings: Settings) -> int:
    pid = running_pid(settings)
    print(f"tritonhub: {'running, pid ' + str(pid) if pid else 'not running'}; log {log_file(settings)} "
          "(with --daemon or the service unit's journal)")
    return 0 if pid else 3  # as `systemctl status`: 3 when not running

"""Running the course's hub for a term, without a hub (issue 41; hub/tritonhub_ops.py): the Python check before
anything is built (the Makefile's bounds, Debian 12's 3.11.2 refused with a route), the friendly stop when the hub's
users cannot run its interpreter (one under /root, pyenv's here) before any venv is made, the rebuild of a venv whose
stamp is there but whose python is gone, ``start --daemon`` / ``status`` / ``stop`` with the pid file and a root-only
log (a stand-in JupyterHub), and ``backup DIR`` (the gradebook through SQLite's backup API while a writer holds it,
the exchange's links kept as links). A few seconds; the interpreter checks need root (they run as nobody)."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hub"))
import tritonhub  # noqa: E402
import tritonhub_backup  # noqa: E402
import tritonhub_ops  # noqa: E402
from tritonhub_common import Settings  # noqa: E402

TOOL = [sys.executable, str(ROOT / "hub" / "tritonhub.py")]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="runs an interpreter as nobody: root only (CI is root)")


def test_python_bounds_are_the_makefiles():
    make = (ROOT / "Makefile").read_text()
    bound = {k: tuple(int(x) for x in re.search(rf"^{k} := ([0-9.]+)$", make, re.M).group(1).split("."))
             for k in ("PYTHON_MIN", "PYTHON_BELOW", "PYTHON_NOT")}
    assert (tritonhub_ops.PYTHON_MIN, tritonhub_ops.PYTHON_BELOW, tritonhub_ops.PYTHON_NOT) == tuple(bound.values())


@pytest.mark.parametrize("version,fits", [((3, 11, 2), False), ((3, 11, 5), True), ((3, 12, 1), True),
                                          ((3, 14, 1), False), ((3, 15, 0), False), ((3, 10, 13), False)])
def test_python_check(version, fits):
    problem = tritonhub_ops.python_problem(version)
    assert (problem == "") == fits, problem
    if not fits:
        assert "3.11.5" in problem and "uv python install" in problem and "outside /root" in problem


@needs_root
def test_an_interpreter_other_users_cannot_run_is_named_with_the_closed_folder():
    closed = Path(tempfile.mkdtemp(prefix="tritonhub-closed-"))  # 0700, in /tmp (pytest's own tmp_path is closed)
    try:
        (closed / "python3").symlink_to("/usr/bin/python3")  # the distribution's: every user runs it
        problem = tritonhub_ops.interpreter_problem(str(closed / "python3"))
        assert f"({closed} is closed to other users)" in problem and "PermissionError" in problem, problem
        assert "uv python install" in problem
        closed.chmod(0o755)
        if Path("/usr/bin/python3").exists():
            assert tritonhub_ops.interpreter_problem(str(closed / "python3")) == ""  # opened: it passes
    finally:
        shutil.rmtree(closed)


@needs_root
def test_setup_stops_before_building_with_an_interpreter_under_root(tmp_path):
    """setup run by an interpreter nobody may run (this one, when it lies under /root as pyenv's does here) stops
    before any venv exists; run by one older than 3.11.5 (Debian's /usr/bin/python3 here), likewise."""
    base = getattr(sys, "_base_executable", sys.executable)
    cases = []
    if tritonhub_ops.interpreter_problem(base):
        cases.append((sys.executable, "cannot run"))
    debian = Path("/usr/bin/python3")
    if debian.exists():
        out = subprocess.run([str(debian), "-c", "import sys; print(sys.version_info[:3] < (3, 11, 5))"],
                             capture_output=True, text=True).stdout
        if out.strip() == "True":
            cases.append((str(debian), "requirements/lock.txt installs on 3.11.5 or newer"))
    if not cases:
        pytest.skip("this machine's interpreters all fit and are runnable by everyone")
    for i, (python, said) in enumerate(cases):
        venv = tmp_path / f"venv{i}"
        proc = subprocess.run([python, str(ROOT / "hub" / "tritonhub.py"), "setup", "--venv", str(venv), "--state",
                               str(tmp_path / f"state{i}"), "--chp", "/bin/true", "--idle-timeout", "0"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert not venv.exists(), "a venv was started before the check"


def test_a_venv_whose_python_is_gone_is_rebuilt(tmp_path, monkeypatch):
    """The stamp says built, the probe says broken (its interpreter removed): made again with `venv --clear`."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /gone\n")
    (venv / "bin" / "python").symlink_to("/gone/python3")
    settings = Settings(venv=str(venv), cpu=True)
    reqs = ["requirements/lock.txt", "requirements/hub.txt", "requirements/torch-cpu.txt", "pyproject.toml"]
    import hashlib
    digest = hashlib.sha256(b"".join((ROOT / r).read_bytes() for r in reqs)).hexdigest()
    (venv / ".tritonhub-installed").write_text(digest + "\n")
    ran = []
    monkeypatch.setattr(tritonhub, "run", lambda cmd, **kw: ran.append(cmd))
    monkeypatch.setattr(tritonhub, "interpreter_problem", lambda python: "")
    assert not tritonhub_ops.venv_works(venv)
    tritonhub.build_venv(settings)
    assert ran[0][1:] == ["-m", "venv", "--clear", str(venv)], ran
    assert any("install" in cmd for cmd in ran[1:])
    assert (venv / ".tritonhub-installed").read_text().strip() == digest  # written after the (stubbed) install


FAKE_HUB = """#!{python}
import os, signal, sys, time
pid_file = os.path.join(os.getcwd(), "jupyterhub.pid")
print("fake hub starting", flush=True)
with open(pid_file, "w") as f:
    f.write(str(os.getpid()))
def bye(*_):
    os.unlink(pid_file)
    print("fake hub stopped", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
while True:
    time.sleep(1)
"""


def test_daemon_start_status_stop(tmp_path):
    venv, state = tmp_path / "venv", tmp_path / "state"
    (venv / "bin").mkdir(parents=True)
    state.mkdir()
    hub = venv / "bin" / "jupyterhub"  # a stand-in: writes the pid file in its working folder, as the hub does
    hub.write_text(FAKE_HUB.format(python=sys.executable))
    hub.chmod(0o755)
    (state / "settings.json").write_text(json.dumps(asdict(Settings(venv=str(venv), state=str(state)))))
    args = ["--state", str(state)]
    started = subprocess.run(TOOL + ["start", "--daemon", *args], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0 and "jupyterhub.log" in started.stdout, started.stderr
    pid = int((state / "jupyterhub.pid").read_text())
    try:
        assert os.getsid(pid) == pid  # a session of its own: no terminal, the shell's hang-up does not reach it
        assert stat.S_IMODE((state / "jupyterhub.log").stat().st_mode) == 0o600
        assert subprocess.run(TOOL + ["status", *args], capture_output=True).returncode == 0
        again = subprocess.run(TOOL + ["start", "--daemon", *args], capture_output=True, text=True)
        assert again.returncode == 1 and f"running already (pid {pid})" in again.stderr
        stopped = subprocess.run(TOOL + ["stop", *args], capture_output=True, text=True, timeout=90)
        assert stopped.returncode == 0 and f"stopped the hub (pid {pid})" in stopped.stdout, stopped.stderr
        assert not Path(f"/proc/{pid}").exists() or b"zombie" in Path(f"/proc/{pid}/status").read_bytes().lower()
        log = (state / "jupyterhub.log").read_text()
        assert "fake hub starting" in log and "fake hub stopped" in log
        assert subprocess.run(TOOL + ["status", *args], capture_output=True).returncode == 3
    finally:
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, 9)


def test_backup_copies_the_gradebook_while_it_is_written_and_keeps_links_as_links(tmp_path):
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    (exchange / "triton-kernels" / "inbound").mkdir(parents=True)
    course.mkdir()
    (exchange / "triton-kernels" / "inbound" / "a+01+1").write_text("a notebook")
    (exchange / "triton-kernels" / "inbound" / "planted").symlink_to("/etc/shadow")
    db = sqlite3.connect(course / "gradebook.db")
    db.execute("create table grade (student text, score real)")
    db.execute("insert into grade values ('a', 3.5)")
    db.commit()
    db.execute("insert into grade values ('b', 1.0)")  # a writer's open transaction: not in the copy

    class Here(Settings):
        course_dir = course  # no instructor account needed

    try:
        out = tritonhub_backup.backup(Here(exchange=str(exchange), learners_group="th-no-such-group"),
                                      tmp_path / "backups")
    finally:
        db.rollback()
        db.close()
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {
        "gradebook.db": 0o600, "course.tar.gz": 0o600, "exchange.tar.gz": 0o600, "homes.tar.gz": 0o600,
        "roster.csv": 0o600, "backup.json": 0o600}
    assert sqlite3.connect(out / "gradebook.db").execute("select * from grade").fetchall() == [("a", 3.5)]
    with tarfile.open(out / "exchange.tar.gz") as tar:
        planted = tar.getmember("exchange/triton-kernels/inbound/planted")
        assert planted.issym() and planted.linkname == "/etc/shadow"
        assert tar.extractfile("exchange/triton-kernels/inbound/a+01+1").read() == b"a notebook"


def tree(folder: Path) -> dict:
    """Each path under ``folder``: its type, mode, owner and content (a link's target), to compare two trees."""
    out = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        st = path.lstat()
        what = (os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else "dir")
        out[str(path.relative_to(folder))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, what)
    return out


@needs_root
def test_restore_puts_the_course_and_exchange_back_as_they_were(tmp_path):
    """A backup, then the course directory lost and the exchange changed: ``restore`` puts both back (the present
    ones set aside, nothing deleted) with the gradebook's consistent copy, owners, modes and a planted link kept as a
    link (never followed: /etc/shadow is unchanged); a file whose owner's name this machine has not becomes root's,
    not the old number's (here nobody's); it refuses a tarball whose names leave their folder."""
    nobody = 65534
    course, exchange = tmp_path / "home" / "triton-kernels", tmp_path / "srv" / "exchange"
    (course / "submitted" / "a" / "01_vector_add").mkdir(parents=True)
    (course / "submitted" / "a" / "01_vector_add" / "01_vector_add.ipynb").write_text("a's notebook")
    tritonhub_backup.exchange_service.prepare(str(exchange), "triton-kernels", "nobody")
    (exchange / "triton-kernels" / "inbound" / "planted").symlink_to("/etc/shadow")
    db = sqlite3.connect(course / "gradebook.db")
    db.execute("create table grade (student text, score real)")
    db.execute("insert into grade values ('a', 3.5)")
    db.commit()
    db.close()
    for path in [course, *course.rglob("*")]:
        os.chown(path, nobody, nobody)

    class Here(Settings):
        course_dir = course

    settings = Here(exchange=str(exchange), instructor="nobody", learners_group="th-no-such-group",
                    state=str(tmp_path / "state"))
    shadow = Path("/etc/shadow").stat().st_mtime_ns
    before = {"course": tree(course), "exchange": tree(exchange)}
    out = tritonhub_backup.backup(settings, tmp_path / "backups")
    # a file of an account this machine has not (deleted, or the backup made elsewhere) whose old number is another
    # user's here (nobody's): restored as root's, never by number
    with tarfile.open(out / "course.tar.gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    gone = tarfile.TarInfo("triton-kernels/ta-notes.txt")
    gone.size, gone.mode, gone.uid, gone.gid, gone.uname, gone.gname = 5, 0o640, nobody, nobody, "th-gone", "th-gone"
    with tarfile.open(out / "course.tar.gz", "w:gz") as tar:
        for member, data in [*members, (gone, b"notes")]:
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    shutil.rmtree(course)
    (exchange / "triton-kernels" / "outbound" / "later").write_text("made after the backup")
    tritonhub_backup.restore(settings, out)
    assert tree(course).pop("ta-notes.txt") == (stat.S_IFREG, 0o640, 0, b"notes")
    assert (course / "ta-notes.txt").stat().st_gid == 0
    (course / "ta-notes.txt").unlink()
    after = {"course": tree(course), "exchange": tree(exchange)}
    for name in ("course", "exchange"):
        changed = {k for k in before[name].keys() | after[name].keys() if before[name].get(k) != after[name].get(k)}
        assert changed <= {"gradebook.db"}, (name, changed)  # SQLite's copy: the same rows, another header
    assert after["course"]["gradebook.db"][:3] == before["course"]["gradebook.db"][:3]
    rows = sqlite3.connect(course / "gradebook.db").execute("select * from grade").fetchall()
    assert rows == [("a", 3.5)]
    assert [p.name for p in exchange.parent.iterdir() if p.name.startswith("exchange.before-restore-")], \
        "the exchange found there was not set aside"
    assert Path("/etc/shadow").stat().st_mtime_ns == shadow
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "x").write_text("x")
    with tarfile.open(out / "course.tar.gz", "w:gz") as tar:
        tar.add(evil / "x", arcname="triton-kernels/../../outside")
    with pytest.raises(SystemExit, match="outside triton-kernels/"):
        tritonhub_backup.restore(settings, out)
    assert not (tmp_path / "outside").exists() and not (tmp_path / "home" / "outside").exists()


def test_make_hub_checks_the_python_before_anything_else(tmp_path):
    """`make hub`'s first step is python-check on $(PYTHON) alone (not .venv's), with the hub's advice; an interpreter
    older than 3.11.5 stops it there (a stand-in that reports 3.11.2, as Debian 12's python3)."""
    # --no-print-directory: under `make test` (MAKELEVEL=1) make would print "Entering directory" first
    steps = subprocess.run(["make", "--no-print-directory", "-n", "hub"], cwd=ROOT, capture_output=True,
                           text=True).stdout.splitlines()
    assert "python-check PY=/nonexistent PYTHON_FOR=hub" in steps[0], steps[:3]
    assert any("system-deps.sh hub" in s for s in steps[1:]) and any("tritonhub.py setup" in s for s in steps[1:])
    old = tmp_path / "python3"
    old.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Python 3.11.2'; exit 0; fi\nexit 1\n")
    old.chmod(0o755)
    proc = subprocess.run(["make", "--no-print-directory", "python-check", "PY=/nonexistent", "PYTHON_FOR=hub",
                           f"PYTHON={old}"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "Found: Python 3.11.2" in proc.stdout, proc.stdout + proc.stderr
    assert "make hub PYTHON=" in proc.stdout and "not under /root" in proc.stdout
    fits = subprocess.run(["make", "--no-print-directory", "python-check", "PY=/nonexistent", "PYTHON_FOR=hub",
                           f"PYTHON={sys.executable}"], cwd=ROOT, capture_output=True, text=True)
    assert fits.returncode == 0 and not fits.stdout.strip(), fits.stdout  # this one (3.11.7 here) fits


@needs_root
def test_a_learner_changes_their_password_with_passwd():
    """What docs/JUPYTERHUB.md tells learners: `passwd` as the learner (their terminal) changes the password that the
    hub's PAM log-in (PAMAuthenticator: pamela, service `login`) then takes; the old one is refused."""
    pamela = pytest.importorskip("pamela", reason="pamela (requirements/hub.txt) is not installed")
    if not (shutil.which("useradd") and shutil.which("passwd") and shutil.which("setpriv")):
        pytest.skip("needs useradd, passwd and setpriv")
    name = "th" + os.urandom(3).hex() + "-pw"
    subprocess.run(["useradd", "--create-home", name], check=True)
    try:
        subprocess.run(["chpasswd"], input=f"{name}:Old-pass-123\n", text=True, check=True)
        import pwd

        pw = pwd.getpwnam(name)
        changed = subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", "passwd"],
                                 input="Old-pass-123\nNew-pass-456x\nNew-pass-456x\n", capture_output=True, text=True)
        assert changed.returncode == 0, changed.stdout + changed.stderr
        pamela.authenticate(name, "New-pass-456x", service="login")
        with pytest.raises(pamela.PAMError):
            pamela.authenticate(name, "Old-pass-123", service="login")
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True)


def test_stop_waits_longer_than_the_hub_takes_to_stop_a_server():
    """`stop` waits for the hub as long as systemd does, longer than LocalProcessSpawner may take to stop a server
    (SIGINT, SIGTERM after interrupt_timeout, SIGKILL after term_timeout, kill_timeout): a fresh clone's CI saw the hub
    still stopping a learner's server after the 60 s the tool used to wait."""
    LocalProcessSpawner = pytest.importorskip(
        "jupyterhub.spawner", reason="jupyterhub is not installed here (requirements/hub.txt; the hub's slow tests "
        "install it, in `make test` usually before this one: longest first)").LocalProcessSpawner

    config = (ROOT / "hub" / "jupyterhub_config.py").read_text()
    assert not re.search(r"\b(interrupt|term|kill)_timeout\b", config), "the config sets a spawner stop timeout"
    worst = sum(getattr(LocalProcessSpawner, f"{t}_timeout").default_value for t in ("interrupt", "term", "kill"))
    assert tritonhub_ops.STOP_TIMEOUT > worst
    assert f"TimeoutStopSec={tritonhub_ops.STOP_TIMEOUT}\n" in (ROOT / "hub" / "tritonhub.service").read_text()

"""Grading a class past one machine (docs/INSTRUCTORS.md, "Grading on a cluster"): Dask and PostgreSQL, real parts.

One class of 20 learners (the fixtures of tests/submissions/01_vector_add/, every kind of bug and trouble but
the endless kernel, which only waits for time limits) is graded three ways, with the same seed:
- serially by plain ``nbgrader autograde`` into the SQLite gradebook: the reference;
- by ``python -m tritoncourse grade --cluster local --jobs 2`` (a Dask LocalCluster of two worker processes)
  into a gradebook on a real PostgreSQL server that this module starts (Debian's ``postgresql``, installed by
  tools/install-ci-deps.sh) and that nbgrader itself created; one worker is killed in the middle of a grading;
- five of them by ``--scheduler`` on a separate scheduler and workers, through every fault at once: a worker
  killed that never comes back, the scheduler killed and restarted (new workers), the coordinator killed and
  started again.
Every gradebook value must equal the reference's, and no learner may be lost or doubled.
"""
from __future__ import annotations

import csv
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
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from course import BIN, ROOT, SUBMISSIONS, Course, Fixture, graded_test_ids

A = "01_vector_add"
SEED = "20261125"
CLASS_SIZE = 20
FAULT_CLASS = 5


# ------------------------------------------------------------------------------------------ PostgreSQL

def _pg_bin(name: str) -> str | None:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]))
    return str(found[-1]) if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Postgres:
    """A PostgreSQL server of its own: a data folder in /tmp, loopback only, a password for the course's user."""

    folder: Path
    port: int
    password: str = "grader-secret"
    user: str = "grader"
    databases: list[str] = field(default_factory=list)

    @property
    def as_server_user(self) -> list[str]:
        # PostgreSQL refuses to run as root: as root (CI here), run it as Debian's `postgres` user.
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                             dbname="postgres", autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return self.url(name)

    @classmethod
    def start(cls) -> "Postgres":
        initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        if not initdb or not pg_ctl:
            pytest.fail("PostgreSQL's server is not installed: run tools/install-ci-deps.sh (Debian's postgresql)")
        folder = Path(tempfile.mkdtemp(prefix="tritoncourse-pg-"))
        server = cls(folder, _free_port())
        (folder / "pw").write_text(server.password)
        if os.geteuid() == 0:
            pg = pwd.getpwnam("postgres")
            for p in (folder, folder / "pw"):
                os.chown(p, pg.pw_uid, pg.pw_gid)
        run = dict(capture_output=True, text=True, timeout=120)
        r = subprocess.run([*server.as_server_user, initdb, "-D", str(folder / "data"), "-U", server.user,
                            f"--pwfile={folder / 'pw'}", "--auth=scram-sha-256", "-E", "UTF8", "--no-sync"], **run)
        assert r.returncode == 0, r.stdout + r.stderr
        r = subprocess.run([*server.as_server_user, pg_ctl, "-D", str(folder / "data"), "-l", str(folder / "log"),
                            "-w", "-o", f"-h 127.0.0.1 -p {server.port} -k {folder} -F", "start"], **run)
        assert r.returncode == 0, r.stdout + r.stderr + (folder / "log").read_text(errors="replace")
        return server

    def stop(self) -> None:
        subprocess.run([*self.as_server_user, _pg_bin("pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate",
                        "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres():
    server = Postgres.start()
    yield server
    server.stop()


# ------------------------------------------------------------------------------------------ the class

def _env(course: Path, **extra) -> dict:
    """Every process imports the course package from the course folder's frozen copy, with one seed."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(course),
               TRITONCOURSE_SEED=SEED)
    env.pop("TRITONCOURSE_DB_URL", None)
    env.update(extra)
    return env


def class_fixtures() -> list[Fixture]:
    every = [Fixture.load(p) for p in sorted((SUBMISSIONS / A).glob("*.py"))]
    chosen = [fx for fx in every if fx.name != "wrong_endless_loop"][:CLASS_SIZE]
    assert len(chosen) == CLASS_SIZE
    return chosen


def _new_course(path: Path, db_url: str | None = None) -> Course:
    """A course folder with the frozen package; its gradebook created by nbgrader (on ``db_url`` if given)."""
    path.mkdir(parents=True)
    shutil.copy2(ROOT / "nbgrader_config.py", path / "nbgrader_config.py")
    shutil.copytree(ROOT / "source" / A, path / "source" / A)
    shutil.copytree(ROOT / "tritoncourse", path / "tritoncourse", ignore=shutil.ignore_patterns("__pycache__"))
    env = _env(path, **({"TRITONCOURSE_DB_URL": db_url} if db_url else {}))
    r = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", A, "--force", "--log-level=WARN"],
                       cwd=path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    c = Course.__new__(Course)
    c.path = path
    release, source = c.release_notebook(A), c.source_notebook(A)
    for fx in class_fixtures():
        c.submit(fx.name, A, fx.notebook(release, source))
    return c


def gradebook_rows(url: str) -> dict:
    """Every value autograde writes, by (assignment, student), read through nbgrader's API."""
    from nbgrader.api import Gradebook

    rows = {}
    with Gradebook(url) as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                nbs = {}
                for nb in sub.notebooks:
                    nbs[nb.name] = {
                        "late_penalty": nb.late_submission_penalty,
                        "grades": {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade, g.score)
                                   for g in nb.grades},
                        "comments": {cm.name: (cm.auto_comment, cm.manual_comment) for cm in nb.comments}}
                rows[(assignment.name, sub.student.id)] = {"timestamp": str(sub.timestamp), "notebooks": nbs}
    return rows


def row_counts(url: str) -> dict[str, int]:
    """How many rows each table of submissions holds: a learner graded twice or lost shows here."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as con:
        counts = {t: con.execute(text(f"SELECT count(*) FROM {t}")).scalar()
                  for t in ("student", "submitted_assignment", "submitted_notebook", "grade", "comment")}
    engine.dispose()
    return counts


def sqlite_url(c: Course) -> str:
    return f"sqlite:///{c.path / 'gradebook.db'}"


def state(c: Course) -> dict:
    import json

    return json.loads((c.path / "autograded" / ".classroom" / "state.json").read_text())["entries"]


def grade_cmd(c: Course, *flags: str) -> list[str]:
    return [sys.executable, "-m", "tritoncourse", "grade", "--course", str(c.path), *flags]


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def gradings(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The nbgrader autograde processes among ``procs`` (a worker's grading of one learner)."""
    out = []
    for p in procs:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "nbgrader" in cmd and "autograde" in cmd:
            out.append(p)
    return out


def student_of(proc: psutil.Process) -> str:
    cmd = proc.cmdline()
    return cmd[cmd.index("--student") + 1]


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.2)
    return False


class Output:
    """A command's output read line by line in a thread; the test waits for lines that match."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines, self.ended, self._cv = proc, [], False, threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line)
                self._cv.notify_all()
        with self._cv:
            self.ended = True
            self._cv.notify_all()

    def wait_for(self, pattern: str, timeout: float = 900, start: int = 0) -> int:
        """Index of the first line from ``start`` on that matches; fails if the output ends first."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for i in range(start, len(self.lines)):
                    if re.search(pattern, self.lines[i]):
                        return i
                if self.ended or time.monotonic() > deadline:
                    raise AssertionError(f"no line matching {pattern!r}:\n{self.text[-6000:]}")
                self._cv.wait(timeout=1)

    @property
    def text(self) -> str:
        return "".join(self.lines)


# ------------------------------------------------------------------------------------------ the three gradings

@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> Course:
    """The reference: plain serial `nbgrader autograde` into SQLite."""
    c = _new_course(tmp_path_factory.mktemp("serial") / "course")
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", A, "--force"], cwd=c.path, env=_env(c.path),
                       capture_output=True, text=True, timeout=3600)
    c.seconds = time.monotonic() - start
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return c


@dataclass
class DaskRun:
    course: Course
    url: str
    output: str
    returncode: int
    killed_worker: int
    killed_grading: int
    killed_student: str
    grading_died: bool
    seconds: float


@pytest.fixture(scope="module")
def dask_pg(tmp_path_factory, postgres) -> DaskRun:
    """`grade --cluster local --jobs 2` into PostgreSQL; one worker process SIGKILLed mid-grading."""
    url = postgres.create_database("class_dask")
    c = _new_course(tmp_path_factory.mktemp("dask-pg") / "course", db_url=url)
    assert not (c.path / "gradebook.db").exists()  # the gradebook is on the server
    start = time.monotonic()
    proc = subprocess.Popen(grade_cmd(c, "--cluster", "local", "--jobs", "2"), cwd=c.path,
                            env=_env(c.path, TRITONCOURSE_DB_URL=url), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    try:
        out.wait_for(r"^\[1/")  # mid-run: one learner merged, gradings running on both workers
        victim = None
        deadline = time.monotonic() + 300
        while victim is None and time.monotonic() < deadline:
            running = [g for g in gradings(descendants(proc.pid)) if time.time() - g.create_time() > 4]
            victim = running[0] if running else None  # well inside its grading
            time.sleep(0.2)
        assert victim is not None, out.text
        worker = victim.parent()
        student = student_of(victim)
        worker.kill()
        died = gone_within([victim.pid], 15)
        proc.wait(timeout=1800)
        out.wait_for(r"^Graded \d+ notebook", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return DaskRun(c, url, out.text, proc.returncode, worker.pid, victim.pid, student, died,
                   time.monotonic() - start)



def _scores(rows: dict, student: str) -> dict[str, float]:
    return {gid: g[3] for gid, g in rows[(A, student)]["notebooks"][A]["grades"].items()}


@pytest.mark.slow
def test_a_local_cluster_with_a_worker_killed_grades_like_serial_nbgrader(dask_pg, serial):
    """Does a Dask LocalCluster of 2 worker processes, one killed in the middle of a grading, give every learner
    exactly the grades plain serial nbgrader gives, each learner graded and merged exactly once?"""
    r = dask_pg
    assert r.returncode == 0, r.output[-6000:]
    # The killed worker's nbgrader (and everything under it) did not outlive the worker.
    assert r.grading_died, f"the grading of {r.killed_student} (pid {r.killed_grading}) outlived its worker"
    names = sorted(fx.name for fx in class_fixtures())
    reported = re.findall(rf"^\[\d+/{CLASS_SIZE}\] {A}/(\S+): .*\(\d+\.\d s on (\S+)\)", r.output, re.M)
    assert sorted(s for s, _ in reported) == names, r.output[-6000:]  # each learner reported once
    entries = state(r.course)
    for name in names:
        e = entries[f"{A}/{name}"]
        # the killed worker's grading was handed to another worker by Dask: not a failed attempt of the learner
        assert e["status"] == "graded" and e["attempts"] == 1 and e["worker"], (name, e)
    assert len({w for _, w in reported}) >= 2, reported
    assert "Graded per worker:" in r.output and "Coordinator:" in r.output, r.output[-3000:]
    # Grades: every value equal to plain serial nbgrader's, the same number of rows (nothing lost or doubled).
    dask_rows, serial_rows = gradebook_rows(r.url), gradebook_rows(sqlite_url(serial))
    assert len(serial_rows) == CLASS_SIZE
    diffs = {k: (dask_rows.get(k), serial_rows[k]) for k in serial_rows if dask_rows.get(k) != serial_rows[k]}
    assert not diffs and set(dask_rows) == set(serial_rows), diffs
    assert row_counts(r.url) == row_counts(sqlite_url(serial))
    # And each fixture lost exactly the tests its header says.
    tests = graded_test_ids(serial.source_notebook(A))
    wrong = {}
    for fx in class_fixtures():
        scores = _scores(dask_rows, fx.name)
        lost = {t for t in tests if scores[t] == 0}
        if lost != (set() if fx.all_pass else fx.expect_fail):
            wrong[fx.name] = sorted(lost)
    assert not wrong, wrong
    print(f"dask {r.seconds:.0f} s, serial {serial.seconds:.0f} s")


@pytest.mark.slow
def test_export_and_feedback_work_the_same_on_postgresql_and_sqlite(dask_pg, serial, tmp_path):
    pg_env = _env(dask_pg.course.path, TRITONCOURSE_DB_URL=dask_pg.url)
    tables = {}
    for name, c, env in (("pg", dask_pg.course, pg_env), ("sqlite", serial, _env(serial.path))):
        out = tmp_path / f"{name}.csv"
        r = subprocess.run([sys.executable, "-m", "tritoncourse", "export", "--course", str(c.path), "-o", str(out)],
                           cwd=c.path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        tables[name] = {row["student"]: row for row in csv.DictReader(out.open())}
    tests = graded_test_ids(serial.source_notebook(A))
    keep = ["score", "max_score", "needs_manual_grade", "late_penalty", *tests]
    assert len(tables["pg"]) == CLASS_SIZE
    assert {s: [row[k] for k in keep] for s, row in tables["pg"].items()} == \
        {s: [row[k] for k in keep] for s, row in tables["sqlite"].items()}
    # the Dask run's failures carry their seed (the one every process was given)
    assert re.search(rf"test_vector_add_ragged_sizes\(seed={SEED}\)", tables["pg"]["wrong_no_mask"]["failed_tests"])
    who = ["wrong_no_mask", "correct_other_zero"]
    r = subprocess.run([sys.executable, "-m", "tritoncourse", "feedback", A, "--course", str(dask_pg.course.path),
                        "--students", *who], cwd=dask_pg.course.path, env=pg_env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for student in who:
        html = (dask_pg.course.path / "feedback" / student / A / f"{A}.html").read_text()
        assert ("FAILED" in html) == (student == "wrong_no_mask"), student


@pytest.mark.slow
def test_a_learner_copy_of_the_gradebook_holds_that_learner_alone(dask_pg, tmp_path):
    """What a Dask task carries: the assignment and one learner's rows, with the values of the real gradebook."""
    from tritoncourse.classroom.gradebook import learner_copy, snapshot

    template = snapshot(dask_pg.url, tmp_path / "snapshot.db")  # PostgreSQL -> SQLite, through nbgrader's models
    assert gradebook_rows(f"sqlite:///{template}") == gradebook_rows(dask_pg.url)
    copy = tmp_path / "learner.db"
    copy.write_bytes(learner_copy(template, A, "wrong_no_mask"))
    rows = gradebook_rows(f"sqlite:///{copy}")
    assert rows == {(A, "wrong_no_mask"): gradebook_rows(dask_pg.url)[(A, "wrong_no_mask")]}
    assert row_counts(f"sqlite:///{copy}")["student"] == 1
    assert copy.stat().st_size < template.stat().st_size

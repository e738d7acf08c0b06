"""Grading a class past one machine (docs/INSTRUCTORS.md, "Grading on a cluster"): Dask and PostgreSQL, real parts.

Every grading here is compared with the session's serial baseline (tests/support/baseline.py, conftest.py): phase 1's
class, with every kind of bug and trouble, graded once by plain serial ``nbgrader autograde`` into SQLite. The same
notebooks of some of its learners are graded again, here with one seed:
- six (right and wrong kernels, a compile error, a kernel that crashes the notebook) by
  ``python -m tritoncourse grade --cluster local --jobs 2`` (a Dask LocalCluster of two worker processes) into a
  gradebook on a real PostgreSQL server that this module starts (Debian's ``postgresql``, installed by
  tools/install-ci-deps.sh) and that nbgrader itself created; one worker is killed in the middle of a grading;
- five of them by ``--scheduler`` on a separate scheduler and workers, through every fault at once: a worker
  killed that never comes back, the scheduler killed and restarted (new workers), the coordinator killed and
  started again (tests/workflows/test_distributed_faults.py);
- four of them by ``--cluster slurm`` on a one-node Slurm this module starts (tests/support/slurm.py), two batch jobs.
Every gradebook value must equal the baseline's, and no learner may be lost or doubled. (Dask's worker grades one
learner by the same private `nbgrader autograde` as local grading, whose equality with the baseline on the whole
class of troubles tests/workflows/test_classroom.py proves.) The class, its helpers and the baseline's rows:
tests/support/cluster_grading.py. On the same PostgreSQL server, the hub's backup and restore of a gradebook there
(hub/tritonhub_backup.py).
"""
from __future__ import annotations

import csv
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil
import pytest

from cluster_grading import (A, CLASS_SIZE, DASK_CLASS, GPU_CLASS, SEED, SLURM_CLASS, Output, _env, _new_course,
                             baseline_course, baseline_rows, expected_counts, gone_within, gpu_fixtures, grade_cmd,
                             row_counts, running_gradings, sqlite_url, state, student_of, worker_of)
from course import ROOT, Course, gradebook_rows, graded_test_ids
from postgres import Postgres, PostgresMissing
from slurm import Slurm, SlurmMissing


# ------------------------------------------------------------------------------------------ PostgreSQL

@pytest.fixture(scope="module")
def postgres():
    try:
        server = Postgres.start()
    except PostgresMissing as err:
        pytest.fail(str(err))
    yield server
    server.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="tritonhub.py restore runs as root (CI is root)")
def test_the_hubs_backup_and_restore_bring_a_postgresql_gradebook_back(postgres, tmp_path, monkeypatch, capsys):
    """hub/tritonhub.py backup dumps the PostgreSQL gradebook that the course's nbgrader_config.py names (read as the
    instructor reads it, TRITONCOURSE_DB_URL unset) in pg_dump's custom format; restore loads it with pg_restore into
    an empty database only: refused while the hub runs and into a database that holds tables (nothing changed
    there), then the backup's rows in a new empty one, and a dump cut short leaves another empty. The password is
    never in pg_dump's, pg_restore's or psql's arguments (any local user, a learner on the hub, reads those with ps),
    nor in what backup and restore print."""
    import psycopg

    sys.path.insert(0, str(ROOT / "hub"))
    import tritonhub_backup
    from tritonhub_common import Settings

    def sql(dbname, *statements):
        with psycopg.connect(host="127.0.0.1", port=postgres.port, user=postgres.user, password=postgres.password,
                             dbname=dbname, autocommit=True) as con:
            for statement in statements:
                con.execute(statement)
            return con.execute("select student, score from grade order by student").fetchall()

    url = postgres.create_database("hub_backup")
    backed_up = sql("hub_backup", "create table grade (student text primary key, score real)",
                    "insert into grade values ('a', 3.5), ('b', 1.0)")
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.db_url = {url!r}\n")
    tritonhub_backup.exchange_service.prepare(str(exchange), "triton-kernels", "root")

    class Here(Settings):
        course_dir = course

    # the instructor root: the test's course and .venv may sit where no other user can read (the switch to the
    # instructor is as_user's, which the hub's tests run for every nbgrader command)
    settings = Here(exchange=str(exchange), instructor="root", learners_group="th-no-such-group",
                    state=str(tmp_path / "state"), venv=sys.prefix)
    monkeypatch.delenv("TRITONCOURSE_DB_URL", raising=False)
    argvs, run = [], subprocess.run
    monkeypatch.setattr(tritonhub_backup.subprocess, "run",
                        lambda argv, *a, **kw: argvs.append(argv) or run(argv, *a, **kw))
    out = tritonhub_backup.backup(settings, tmp_path / "backups")
    assert (out / "gradebook.pgdump").read_bytes()[:5] == b"PGDMP"  # the custom format
    assert stat.S_IMODE((out / "gradebook.pgdump").stat().st_mode) == 0o600
    manifest = (out / "backup.json").read_text()
    assert "hub_backup" in manifest and postgres.password not in manifest
    changed = sql("hub_backup", "update grade set score = 0 where student = 'a'", "insert into grade values ('c', 9)")
    # the hub running (a live process named jupyterhub in its pid file): refused before anything
    hub = subprocess.Popen(["bash", "-c", "exec -a jupyterhub sleep 60"])
    try:
        time.sleep(0.2)
        (tmp_path / "state").mkdir(exist_ok=True)
        (tmp_path / "state" / "jupyterhub.pid").write_text(str(hub.pid))
        with pytest.raises(SystemExit, match="the hub is running"):
            tritonhub_backup.restore(settings, out)
    finally:
        hub.kill()
        hub.wait()
    with pytest.raises(SystemExit, match="is not empty .* Nothing was restored") as refused:
        tritonhub_backup.restore(settings, out)  # the configuration still names the changed database
    assert sql("hub_backup") == changed and postgres.password not in str(refused.value)
    empty = postgres.create_database("hub_restored")  # the new empty database the instructor names
    (course / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.db_url = {empty!r}\n")
    tritonhub_backup.restore(settings, out)
    assert sql("hub_restored") == backed_up
    assert any(a[0] == "pg_dump" for a in argvs) and any(a[0] == "pg_restore" for a in argvs), argvs
    assert not [a for a in argvs if postgres.password in " ".join(map(str, a))], argvs
    printed = capsys.readouterr()
    assert "hub_restored" in printed.out and postgres.password not in printed.out + printed.err
    # a dump cut short (a disk that filled during the backup): pg_restore fails, and the database stays empty (one
    # transaction: without --single-transaction the table stayed, seen 2026-11-28)
    dump = out / "gradebook.pgdump"
    dump.write_bytes(dump.read_bytes()[:-12])  # its data cut: the table is made, then the data fail
    third = postgres.create_database("hub_cut_short")
    (course / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.db_url = {third!r}\n")
    with pytest.raises(SystemExit, match="failed, nothing restored") as failed:
        tritonhub_backup.restore(settings, out)
    assert postgres.password not in str(failed.value)
    with psycopg.connect(host="127.0.0.1", port=postgres.port, user=postgres.user, password=postgres.password,
                         dbname="hub_cut_short") as con:
        assert con.execute("select count(*) from pg_tables where schemaname = 'public'").fetchone()[0] == 0


# ------------------------------------------------------------------------------------------ fast checks

def test_the_gradebook_url_comes_from_the_course_configuration(tmp_path, monkeypatch):
    """SQLite in the course folder by default; TRITONCOURSE_DB_URL, or a URL written in nbgrader_config.py,
    otherwise: the same that nbgrader reads."""
    from tritoncourse.classroom.database import describe
    from tritoncourse.classroom.workflow import Course as RealCourse

    shutil.copy2(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    monkeypatch.delenv("TRITONCOURSE_DB_URL", raising=False)
    assert RealCourse(tmp_path).db_url == f"sqlite:///{tmp_path / 'gradebook.db'}"
    url = "postgresql+psycopg://grader:s3cret@db.example.edu:5432/triton_kernels"
    monkeypatch.setenv("TRITONCOURSE_DB_URL", url)
    assert RealCourse(tmp_path).db_url == url
    assert "s3cret" not in describe(url) and "db.example.edu" in describe(url)
    monkeypatch.delenv("TRITONCOURSE_DB_URL")
    other = tmp_path / "other"
    other.mkdir()
    (other / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.db_url = {url!r}\n")
    assert RealCourse(other).db_url == url


def test_gpu_workers_of_one_machine_each_see_one_gpu():
    from tritoncourse.classroom.distributed import local_gpu_cluster_spec

    spec = local_gpu_cluster_spec(["0", "3"])
    assert [w["options"]["env"]["CUDA_VISIBLE_DEVICES"] for w in spec.values()] == ["0", "3"]
    assert all(w["options"]["resources"] == {"GPU": 1} and w["options"]["nthreads"] == 1 for w in spec.values())


def test_a_worker_with_other_grading_code_refuses_the_task():
    """A worker whose course package differs would grade differently, silently: it refuses, naming both."""
    from tritoncourse.classroom.distributed import code_fingerprint, grade_on_worker

    with pytest.raises(RuntimeError, match=f"other grading code.*{code_fingerprint()}.*0123456789abcdef"):
        grade_on_worker({"fingerprint": "0123456789abcdef", "assignment": A, "student": "x"})


# ------------------------------------------------------------------------------------------ the three gradings

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
def dask_pg(tmp_path_factory, postgres, serial_baseline) -> DaskRun:
    """`grade --cluster local --jobs 2` into PostgreSQL; one worker process SIGKILLed mid-grading."""
    url = postgres.create_database("class_dask")
    c = baseline_course(tmp_path_factory.mktemp("dask-pg") / "course", serial_baseline, db_url=url)
    assert not (c.path / "gradebook.db").exists()  # the gradebook is on the server
    start = time.monotonic()
    proc = subprocess.Popen(grade_cmd(c, "--cluster", "local", "--jobs", "2"), cwd=c.path,
                            env=_env(c.path, TRITONCOURSE_DB_URL=url), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    try:
        out.wait_for(r"^\[1/")  # mid-run: one learner merged, gradings running on both workers
        victim = worker = None
        deadline = time.monotonic() + 300
        while worker is None and time.monotonic() < deadline:
            for g in running_gradings(proc.pid, 4):  # well inside its grading
                try:
                    worker, student, victim = worker_of(g), student_of(g), g
                except psutil.Error:  # it ended just now: look again
                    continue
                if worker is not None:
                    break
            time.sleep(0.2)
        assert worker is not None, out.text
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


def test_gpu_workers_grade_like_serial_nbgrader(tmp_path_factory):
    """On a GPU machine, `grade --cluster local --gpu`: one worker per GPU, which sees only its GPU and takes one
    grading at a time, gives the grades plain serial nbgrader gives (compute-sanitizer on in both). Runs only where
    a GPU is (the device tool's machines; docs/GPU-RUNS.md records the runs)."""
    from tritoncourse.classroom.distributed import visible_gpus

    gpus = visible_gpus()
    if not gpus:
        pytest.skip("no GPU here: `--cluster local --gpu` is checked on a GPU machine (docs/GPU-RUNS.md)")
    learners = {fx.name: fx for fx in gpu_fixtures()}
    serial = _new_course(tmp_path_factory.mktemp("gpu-serial") / "course", learners)
    r = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", A, "--force"], cwd=serial.path,
                       env=_env(serial.path), capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    c = _new_course(tmp_path_factory.mktemp("gpu-dask") / "course", learners)
    start = time.monotonic()
    r = subprocess.run(grade_cmd(c, "--cluster", "local", "--gpu"), cwd=c.path, env=_env(c.path),
                       capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - start
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert f"{len(gpus)} worker(s) now, {len(gpus)} grading(s) at a time" in out, out[-6000:]
    reported = re.findall(rf"^\[\d+/{GPU_CLASS}\] {A}/(\S+): .*\(\d+\.\d s on (\S+)\)", out, re.M)
    assert sorted(s for s, _ in reported) == sorted(learners), out[-6000:]
    assert {w.split("@")[0] for _, w in reported} <= {f"gpu{g}" for g in gpus}, reported
    rows, reference = gradebook_rows(sqlite_url(c)), gradebook_rows(sqlite_url(serial))
    assert rows == reference, {k: (rows.get(k), reference.get(k)) for k in reference if rows.get(k) != reference[k]}
    print(f"gpu workers: {GPU_CLASS} learners on {len(gpus)} GPU(s) in {seconds:.0f} s")


@pytest.mark.slow
def test_a_local_cluster_with_a_worker_killed_grades_like_serial_nbgrader(dask_pg, serial_baseline):
    """Does a Dask LocalCluster of 2 worker processes, one killed in the middle of a grading, give every learner
    exactly the grades plain serial nbgrader gives, each learner graded and merged exactly once?"""
    r = dask_pg
    assert r.returncode == 0, r.output[-6000:]
    # The killed worker's nbgrader (and everything under it) did not outlive the worker.
    assert r.grading_died, f"the grading of {r.killed_student} (pid {r.killed_grading}) outlived its worker"
    names = sorted(DASK_CLASS)
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
    dask_rows, serial_rows = gradebook_rows(r.url), baseline_rows(serial_baseline)
    diffs = {k: (dask_rows.get(k), serial_rows[k]) for k in serial_rows if dask_rows.get(k) != serial_rows[k]}
    assert not diffs and set(dask_rows) == set(serial_rows), diffs
    assert row_counts(r.url) == expected_counts(serial_rows)
    # And each learner lost exactly the tests its fixture (or trouble) says.
    tests = graded_test_ids(serial_baseline.course.source_notebook(A))
    wrong = {}
    for learner in serial_baseline.learners:
        if learner.name in DASK_CLASS:
            scores = _scores(dask_rows, learner.name)
            lost = {t for t in tests if scores[t] == 0}
            if lost != learner.lose:
                wrong[learner.name] = sorted(lost)
    assert not wrong, wrong
    print(f"dask {r.seconds:.0f} s for {CLASS_SIZE} learners")


@pytest.mark.slow
def test_export_and_feedback_work_the_same_on_postgresql_and_sqlite(dask_pg, serial_baseline, tmp_path):
    pg_env = _env(dask_pg.course.path, TRITONCOURSE_DB_URL=dask_pg.url)
    serial = serial_baseline.course
    tables = {}
    for name, c, env in (("pg", dask_pg.course, pg_env), ("sqlite", serial, _env(serial.path))):
        out = tmp_path / f"{name}.csv"
        r = subprocess.run([sys.executable, "-m", "tritoncourse", "export", A, "--course", str(c.path), "-o",
                            str(out)], cwd=c.path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        tables[name] = {row["student"]: row for row in csv.DictReader(out.open()) if row["student"] in DASK_CLASS}
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
    from tritoncourse.classroom.database import learner_copy, snapshot

    template = snapshot(dask_pg.url, tmp_path / "snapshot.db")  # PostgreSQL -> SQLite, through nbgrader's models
    assert gradebook_rows(f"sqlite:///{template}") == gradebook_rows(dask_pg.url)
    copy = tmp_path / "learner.db"
    copy.write_bytes(learner_copy(template, A, "wrong_no_mask"))
    rows = gradebook_rows(f"sqlite:///{copy}")
    assert rows == {(A, "wrong_no_mask"): gradebook_rows(dask_pg.url)[(A, "wrong_no_mask")]}
    # that learner's rows and no other's (a file size says nothing at a few learners: SQLite's pages stay)
    assert row_counts(f"sqlite:///{copy}") == expected_counts(rows)
    assert row_counts(f"sqlite:///{copy}")["grade"] < row_counts(f"sqlite:///{template}")["grade"]


@pytest.fixture(scope="module")
def slurm():
    try:
        cluster = Slurm.start()
    except SlurmMissing as err:
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail(f"{err} (CI's set-up, tools/system-deps.sh, must have installed it)", pytrace=False)
        pytest.skip(str(err))
    yield cluster
    cluster.stop()


@pytest.mark.slow
def test_a_slurm_cluster_grades_like_serial_nbgrader(slurm, serial_baseline, tmp_path_factory):
    """`grade --cluster slurm --jobs 2` on a real Slurm (dask-jobqueue's SLURMCluster: one batch job per worker,
    set up by Dask's configuration as docs/INSTRUCTORS.md shows): every learner graded once, in a Slurm job, with
    serial nbgrader's grades; no job left behind."""
    pytest.importorskip("dask_jobqueue")
    c = baseline_course(tmp_path_factory.mktemp("slurm") / "course", serial_baseline, SLURM_CLASS)
    jobs = tmp_path_factory.mktemp("slurm-jobs")
    config = {  # Dask's configuration as environment variables: what ~/.config/dask/jobqueue.yaml would say
        "DASK_JOBQUEUE__SLURM__CORES": "1", "DASK_JOBQUEUE__SLURM__PROCESSES": "1",
        "DASK_JOBQUEUE__SLURM__MEMORY": "2GB", "DASK_JOBQUEUE__SLURM__WALLTIME": "00:30:00",
        "DASK_JOBQUEUE__SLURM__QUEUE": "grading", "DASK_JOBQUEUE__SLURM__LOG_DIRECTORY": str(jobs / "logs"),
        "DASK_JOBQUEUE__SLURM__LOCAL_DIRECTORY": str(jobs / "work")}
    start = time.monotonic()
    r = subprocess.run(grade_cmd(c, "--cluster", "slurm", "--jobs", "2"), cwd=c.path,
                       env=_env(c.path, **slurm.env(), **config), capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - start
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:] + "\n" + slurm.logs()
    names = sorted(DASK_CLASS[:SLURM_CLASS])
    reported = re.findall(rf"^\[\d+/{SLURM_CLASS}\] {A}/(\S+): .*\(\d+\.\d s on (\S+)\)", out, re.M)
    assert sorted(s for s, _ in reported) == names, out[-6000:]
    assert all(w.startswith("SLURMCluster-") for _, w in reported), reported  # graded in Slurm jobs
    assert list((jobs / "logs").glob("dask-worker-*.err")), "no Slurm job wrote its log"
    rows, reference = gradebook_rows(sqlite_url(c)), baseline_rows(serial_baseline, SLURM_CLASS)
    assert rows == reference, {k: (rows.get(k), reference[k]) for k in reference if rows.get(k) != reference[k]}
    deadline = time.monotonic() + 60
    while slurm.jobs() and time.monotonic() < deadline:  # the cluster's jobs end with the grading
        time.sleep(1)
    assert not slurm.jobs(), slurm.jobs()
    print(f"slurm: {SLURM_CLASS} learners in {seconds:.0f} s")

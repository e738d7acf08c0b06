"""The serial baseline: one class of phase 1 graded once per test session by plain serial `nbgrader autograde`
(conftest.py's ``serial_baseline``), which the classroom, Dask, PostgreSQL, Slurm and container tests compare their
own gradings with, instead of each grading a class of its own serially again.

The class (:func:`build_class`) mixes ordinary learners with every kind of trouble a learner can cause; it is
tests/workflows/test_classroom.py's class, whose parallel grading by `python -m tritoncourse grade` must give these
grades. Learners that plain nbgrader cannot grade (a renamed notebook, an unreadable file, an empty folder) and the
endless kernel (it only waits for time limits) are in the classroom's class only (``serial=False``), and so are the
troubles confined to the notebook's own cells and metadata (see build_class).
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

from course import BIN, ROOT, SUBMISSIONS, Course, Fixture, graded_test_ids, nbgrader

A = "01_vector_add"
RETAKE = "01_vector_add_retake"  # a second assignment: trouble in one must not touch the other
# Endless kernels wait for the time limits (and spin a core all the while): scaled down. With phase 1's sizes scaled
# down (tests/support/course.py) a correct test took 0.2-0.7 s in the parallel class at a load of 3 on this 2-core
# machine; the endless learner, the class's slowest, went from 160 s to about a third of that. At 0.08 * 120 s a fresh
# clone's `make test` (2026-11-29, a slow hour) once saw a correct retake's test_vector_add_block_sizes (0.3-2.4 s in the
# same class) stopped at 9.8 s: 0.12 (14 s; each of the endless learner's five tests waits that long).
TIMEOUT_FACTOR = 0.12
CELL_TIMEOUT = 15
# The ordinary learners among the troubles (fixtures of tests/submissions/01_vector_add/, each judged in
# tests/judged/test_verdicts.py or tests/workflows/test_grading.py too): right and wrong kernels for the classroom's
# neighbours, and the Dask, Slurm and container classes' learners.
ORDINARY = ("correct_other_zero", "wrong_no_mask", "wrong_compile_error")


def env(frozen: Path | None = None, **extra) -> dict:
    """The environment of a command; with ``frozen``, the course package is imported from that course
    folder's own copy (see :func:`freeze`), in every process: grader, notebook kernel, test processes."""
    out = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    out.pop("TRITONCOURSE_SEED", None)
    if frozen is not None:
        out["PYTHONPATH"] = str(frozen)
    out.update(extra)
    return out


def freeze(course_dir: Path) -> None:
    """Copy the course package into a course folder: a class graded for minutes is graded by one version
    of the code even while the working tree changes."""
    shutil.copytree(ROOT / "tritoncourse", course_dir / "tritoncourse",
                    ignore=shutil.ignore_patterns("__pycache__"))


def nbgrader_frozen(*args: str, cwd: Path, timeout: float = 3 * 3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env(cwd), capture_output=True,
                          text=True, timeout=timeout)


def ids(nb) -> dict[str, int]:
    return {c.metadata.nbgrader["grade_id"]: i for i, c in enumerate(nb.cells)
            if "grade_id" in c.get("metadata", {}).get("nbgrader", {})}


# ---- edited metadata (a learner's troubles here; tests/workflows/test_classroom_commands.py sanitizes each in-process
# too)

def _edit(nb, gid, **meta):
    cell = nb.cells[ids(nb)[gid]]
    cell.metadata.nbgrader.update(meta)
    return nb


METADATA_EDITS = {
    "points raised": lambda nb: _edit(nb, "test_vector_add_fp16", points=100),
    "test made ungraded": lambda nb: _edit(nb, "test_vector_add_large", grade=False),
    "test made a solution": lambda nb: _edit(nb, "test_vector_add_block_sizes", solution=True),
    "test unlocked": lambda nb: _edit(nb, "test_vector_add_ragged_sizes", locked=False),
    "grade_id renamed": lambda nb: _edit(nb, "test_vector_add_full_blocks", grade_id="mine"),
    "points not a number": lambda nb: _edit(nb, "test_vector_add_fp16", points="lots"),
    "newer schema_version": lambda nb: _edit(nb, "test_vector_add_large", schema_version=99),
    "kernel cell made a 50-point test": lambda nb: _edit(nb, "vector_add_kernel", grade=True, points=50),
    "metadata removed": lambda nb: nb.cells[ids(nb)["test_vector_add_fp16"]].metadata.pop("nbgrader") and nb,
    "metadata not a dict": lambda nb: nb.cells[ids(nb)["test_vector_add_fp16"]].metadata.update(nbgrader="x"),
    "a bonus cell added": lambda nb: nb.cells.append(new_code_cell("print(1)", metadata={"nbgrader": {
        "grade": True, "grade_id": "bonus", "points": 50, "locked": False, "solution": False,
        "schema_version": 3}})),
    "test cell duplicated": lambda nb: nb.cells.insert(3, copy.deepcopy(nb.cells[ids(nb)["test_vector_add_large"]])),
}


# ---- the class

@dataclass
class Learner:
    name: str
    case: str  # the trouble, in words ("" for an ordinary learner)
    nb: object  # a notebook, a str (raw file content) or None (an empty submission folder)
    lose: set[str] = field(default_factory=set)  # kernel tests it must lose (its own points)
    filename: str = f"{A}.ipynb"
    serial: bool = True  # plain nbgrader can grade it too (compared with the parallel grades)
    retake: bool = False  # also hands in a correct retake (the other assignment)
    precheck_error: str = ""  # not graded: the recorded reason must say this
    fixture: Fixture | None = None  # the fixture of tests/submissions/01_vector_add/ it hands in, as it is


def _fixture(name: str):
    return Fixture.load(SUBMISSIONS / A / f"{name}.py")


def build_class(c: Course) -> list[Learner]:
    release, source = c.release_notebook(A), c.source_notebook(A)
    tests = graded_test_ids(source)
    learners: list[Learner] = []

    def fixture_learner(fx_name, who=None, case="", serial=True):
        fx = _fixture(fx_name)
        lose = set() if fx.all_pass else set(fx.expect_fail)
        learners.append(Learner(who or fx_name, case, fx.notebook(release), lose, fixture=fx, serial=serial))
        return learners[-1]

    learners.append(Learner("reference", "", source))
    learners.append(Learner("untouched", "", release, {t for t in tests}))
    for name in ORDINARY:
        fixture_learner(name)

    # The troubles: each among the good learners above. Those that change only the notebook's own cells and
    # metadata (syntax errors, deleted or edited tests and metadata, another's outputs) are graded by `course grade`
    # only (serial=False, 2026-11-29): its private gradings are plain `nbgrader autograde` of the learner's notebook,
    # the same steps the serial run takes, and test_each_trouble_costs_only_its_own_points checks each one's points;
    # the serial baseline keeps what could reach the next learner in one nbgrader process (a killed or crashed
    # kernel, megabytes of output, monkeypatching) and the learners the cluster, container and hub gradings reuse.
    fixture_learner("wrong_syntax_error", "syntax_error_kernel", "the kernel cell has a syntax error", serial=False)
    fixture_learner("correct_broken_unrelated_cell", "syntax_error_elsewhere",
                    "a syntax error in another cell (the kernel is right)", serial=False)
    # Half the test cells deleted, the other half replaced by `pass`: both restored from the gradebook, and graded.
    restored = copy.deepcopy(source)
    for gid in tests[1::2]:
        restored.cells[ids(restored)[gid]].source = "%%kernel_test\npass"
    restored.cells = [cell for cell in restored.cells
                      if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") not in tests[::2]]
    learners.append(Learner("tests_deleted_and_edited", "every other test cell deleted, the rest replaced by `pass`",
                            restored, serial=False))
    flags = copy.deepcopy(source)
    for edit in ("points raised", "test made ungraded", "test made a solution", "test unlocked",
                 "kernel cell made a 50-point test"):
        METADATA_EDITS[edit](flags)
    learners.append(Learner("metadata_flags", "test cells' metadata edited: points 100, grade off, solution on, "
                            "unlocked; the kernel cell made a 50-point test", flags, serial=False))
    idsnb = copy.deepcopy(source)
    for edit in ("grade_id renamed", "newer schema_version", "test cell duplicated", "a bonus cell added",
                 "metadata not a dict"):
        METADATA_EDITS[edit](idsnb)
    learners.append(Learner("metadata_ids", "a test's grade_id renamed, a newer schema_version, a test cell "
                            "duplicated, a 50-point bonus cell added, metadata that is not a dict", idsnb, serial=False))
    killer = copy.deepcopy(source)
    killer.cells.insert(ids(killer)["vector_add_kernel"] + 1,
                        new_code_cell("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"))
    learners.append(Learner("kills_python", "a cell kills the notebook's Python process (SIGKILL)", killer,
                            retake=True))
    fixture_learner("wrong_segfault", "segfault_kernel", "the kernel segfaults the notebook's process "
                    "(reads far outside its tensors)")
    endless = fixture_learner("wrong_endless_loop", "endless_kernel", "the kernel never ends (on fp16 inputs: "
                              "in its fp16 test)")
    endless.retake = True
    # Its fp16 test waits for its (scaled) time limit: graded in parallel only, to keep `make test` short; the
    # serial comparison still covers more than 20 notebooks.
    endless.serial = False
    loud = copy.deepcopy(source)
    loud.cells.append(new_code_cell("for _ in range(40):\n    print(('x' * 99 + '\\n') * 2500)  # 10 MB"))
    learners.append(Learner("prints_megabytes", "a cell prints 10 MB", loud))
    fixture_learner("wrong_monkeypatch", "monkeypatch", "patches the course's checks, torch and numpy "
                    "(and forgets the mask)")
    foreign = _fixture("wrong_no_mask").notebook(release)
    ref_outputs = {gid: [nbformat.v4.new_output("stream", name="stdout", text="PASSED\n")] for gid in tests}
    for gid, outs in ref_outputs.items():
        foreign.cells[ids(foreign)[gid]].outputs = outs
        foreign.cells[ids(foreign)[gid]].execution_count = 7
    # Handed in renamed too (a browser's -Copy1 suffix), which plain nbgrader cannot read: one grading proves both
    # that the renamed notebook is found and graded as the learner's (its kernel's own four tests lost, no more, no
    # fewer) and that the planted outputs gain nothing (2026-11-29; a `renamed` learner handed in the source
    # notebook apart before, a whole grading of the reference's kernel, ~10 s, again).
    learners.append(Learner("others_outputs", "outputs of another learner's passing run (its own kernel forgets the "
                            "mask), the notebook renamed to 01_vector_add-Copy1.ipynb", foreign,
                            set(_fixture("wrong_no_mask").expect_fail), filename=f"{A}-Copy1.ipynb", serial=False))
    learners.append(Learner("not_json", "the file is not JSON", "{ this is not a notebook", serial=False,
                            retake=True, precheck_error="not JSON"))
    learners.append(Learner("empty", "an empty submission folder", None, serial=False,
                            precheck_error="empty submission"))
    return learners


def submit_class(c: Course, learners: list[Learner], serial_only: bool = False) -> None:
    for learner in learners:
        if serial_only and not learner.serial:
            continue
        dest = c.path / "submitted" / learner.name / A
        dest.mkdir(parents=True, exist_ok=True)
        if learner.nb is None:
            pass
        elif isinstance(learner.nb, str):
            (dest / learner.filename).write_text(learner.nb)
        else:
            nbformat.write(learner.nb, dest / learner.filename)
        if learner.retake:
            retake = dest.parent / RETAKE
            retake.mkdir(parents=True, exist_ok=True)
            nbformat.write(c.source_notebook(RETAKE), retake / f"{RETAKE}.ipynb")


def new_class_course(path: Path) -> Course:
    """A generated course of phase 1 and its retake (a copy under another name), with the frozen package."""
    c = Course(path, [A], scaled_down=True)
    src = c.path / "source" / RETAKE
    src.mkdir(parents=True)
    shutil.copy2(c.path / "source" / A / f"{A}.ipynb", src / f"{RETAKE}.ipynb")
    nbgrader("generate_assignment", RETAKE, "--force", "--log-level=WARN", cwd=c.path)
    freeze(c.path)
    return c


@dataclass
class Baseline:
    course: Course
    learners: list[Learner]
    seconds: float

    def url(self) -> str:
        return f"sqlite:///{self.course.path / 'gradebook.db'}"

    def notebook(self, student: str) -> Path:
        """The learner's submitted phase-1 notebook, for another grading of the same file."""
        return self.course.path / "submitted" / student / A / f"{A}.ipynb"


def grade_baseline(path: Path) -> Baseline:
    """The class (what plain nbgrader can read) graded by plain serial `nbgrader autograde`, phase 1 then the
    retake, with the classroom's scaled limits."""
    c = new_class_course(path)
    learners = build_class(c)
    submit_class(c, learners, serial_only=True)
    start = time.monotonic()
    for assignment in (A, RETAKE):
        # (not checked: the tests compare what the gradebook holds, learner by learner)
        nbgrader_frozen("autograde", assignment, "--force", f"--IsolatedKernelTests.timeout_factor={TIMEOUT_FACTOR}",
                        f"--ResilientExecute.timeout={CELL_TIMEOUT}", cwd=c.path)
    return Baseline(c, learners, time.monotonic() - start)


def shared_baseline(folder: Path) -> Baseline:
    """The baseline graded once into ``folder`` for every pytest-xdist worker of a run: the first to ask grades
    it under a file lock and records its time; the others wait, then read the same course."""
    from filelock import FileLock

    folder.mkdir(parents=True, exist_ok=True)
    done = folder / "done.json"
    with FileLock(str(folder / "lock")):
        if not done.exists():
            b = grade_baseline(folder / "course")
            done.write_text(json.dumps({"seconds": b.seconds}))
            return b
    c = Course.existing(folder / "course")
    return Baseline(c, build_class(c), json.loads(done.read_text())["seconds"])


class EarlyBaseline:
    """Under pytest-xdist, the shared baseline is graded from the session's start, beside the workers' first tests:
    graded when a test first asked, one worker's serial grading (about one core) held the lock while the other worker
    waited for it, the machine half idle (a fresh-clone `make test` on 2 cores: the instructor's container test
    waited 41 s, 45 s of idle CPU). A process of its own runs shared_baseline (the first to take the lock grades,
    the others wait and read), with the environment the worker had before any test ran: a test that sets a variable
    in its worker meanwhile (monkeypatch) cannot reach this grading, as it could a thread's. Its output: the
    folder's early.log."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        support = Path(__file__).resolve().parent
        code = ("import sys; sys.path[:0] = sys.argv[1:3]; from pathlib import Path; "
                "from baseline import shared_baseline; shared_baseline(Path(sys.argv[3]))")
        with open(folder / "early.log", "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", code, str(support), str(support.parents[1]),
                                          str(folder)], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=dict(os.environ))

    def join(self) -> None:
        """Wait for it (the fixture grades again, and fails with the cause, where it failed)."""
        self.proc.wait()

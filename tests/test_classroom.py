"""The instructor's workflow (docs/INSTRUCTORS.md): submit, collect, zip_collect, grade a whole class, export,
feedback without hidden tests, handouts without solutions.

Fast tests need one generated course (no grading). The slow ones grade one class (tests/baseline.py) in parallel by
`python -m tritoncourse grade` (stopped after its first learner and restarted) and compare it with the session's
serial baseline, the same class graded by plain `nbgrader autograde` (conftest.py); the class mixes good learners with every kind of trouble a learner can cause. They
check that each trouble costs only its own points, that parallel grades equal serial grades, and write
the reliability table of docs/INSTRUCTORS.md (`TRITONCOURSE_UPDATE_DOCS=1 pytest tests/test_classroom.py`).
Speed is measured apart, by tools/grading_speed.py.
"""
from __future__ import annotations

import copy
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell

from baseline import (A, CELL_TIMEOUT, METADATA_EDITS, RETAKE, TIMEOUT_FACTOR, Learner, build_class, env, ids,
                      nbgrader_frozen, new_class_course, submit_class)
from course import CLASS_FIXTURES, ROOT, Course, gradebook_rows, graded_test_ids, nbgrader

DOCS = ROOT / "docs" / "INSTRUCTORS.md"
JOBS = 2
_env = env


def tc(*args: str, cwd: Path = ROOT, timeout: float = 600, frozen: Path | None = None,
       **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritoncourse", *args], cwd=frozen or cwd, env=_env(frozen),
                          capture_output=True, text=True, timeout=timeout, **kw)


# ------------------------------------------------------------------------------------------ fast tests

@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    """A generated course (gradebook, release/) and no submissions; tests copy it before changing it."""
    return Course(tmp_path_factory.mktemp("classroom"), [A])


def fresh(course: Course, tmp_path: Path) -> Course:
    dest = tmp_path / "course"
    shutil.copytree(course.path, dest)
    return _at(dest)


def _at(path: Path) -> Course:
    return Course.existing(path)


@pytest.mark.parametrize("target,expect", [
    (["grade"], "-m tritoncourse grade"),
    (["grade", "PHASE=01_vector_add", "STUDENTS=ann bob", "JOBS=2", "GRADE_FLAGS=--timeout-factor 2"],
     "-m tritoncourse grade 01_vector_add --students ann bob --jobs 2 --timeout-factor 2"),
    (["grades"], "-m tritoncourse export -o grades.csv"),
    (["collect", "PHASE=01_vector_add", "FROM=returned"], "-m tritoncourse collect 01_vector_add returned"),
    (["feedback", "PHASE=01_vector_add"], "-m tritoncourse feedback 01_vector_add"),
    (["solutions", "PHASE=01_vector_add"], "-m tritoncourse solutions 01_vector_add"),
    (["handout", "OUT=../learners"], "-m tritoncourse handout ../learners"),
    (["submit", "PHASE=01_vector_add", "STUDENT=ann"], "-m tritoncourse submit 01_vector_add --student ann"),
])
def test_make_targets_run_the_documented_commands(target, expect):
    r = subprocess.run(["make", "-n", *target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and expect in " ".join(r.stdout.split()), r.stdout + r.stderr
    assert f"make {target[0]}" in (ROOT / "docs" / "INSTRUCTORS.md").read_text() + (ROOT / "README.md").read_text()


def test_submit_writes_the_file_collect_expects(course, tmp_path):
    c = fresh(course, tmp_path)
    mine = tmp_path / "work" / f"{A}.ipynb"
    mine.parent.mkdir()
    nbformat.write(c.source_notebook(A), mine)
    out = tmp_path / "submissions"
    r = tc("submit", A, "--student", "jane_doe", "--notebook", str(mine), "--out", str(out), "--no-check",
           "--course", str(c.path))
    assert r.returncode == 0, r.stdout + r.stderr
    written = out / f"jane_doe__{A}.ipynb"
    assert written.read_bytes() == mine.read_bytes()
    # Submitting again after a change keeps the earlier file.
    nb = nbformat.read(mine, as_version=4)
    nb.cells.append(new_markdown_cell("second try"))
    nbformat.write(nb, mine)
    assert tc("submit", A, "--student", "jane_doe", "--notebook", str(mine), "--out", str(out), "--no-check",
              "--course", str(c.path)).returncode == 0
    assert len(list((out / "backups").glob("jane_doe__*.ipynb"))) == 1
    assert "second try" in written.read_text()
    # ... and the instructor's collect takes it.
    r = tc("collect", A, str(out), "--course", str(c.path))
    assert r.returncode == 0, r.stdout
    assert (c.path / "submitted" / "jane_doe" / A / f"{A}.ipynb").read_bytes() == written.read_bytes()


def test_submit_runs_the_checks(course, tmp_path):
    """Without --no-check the tests run first (as `check` does); failures do not stop the hand-in."""
    c = fresh(course, tmp_path)
    mine = tmp_path / f"{A}.ipynb"
    nbformat.write(c.release_notebook(A), mine)
    r = tc("submit", A, "--student", "ann", "--notebook", str(mine), "--out", str(tmp_path / "out"),
           "--course", str(c.path), timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "released version, unchanged" in r.stdout and "0 passed" in r.stdout
    assert (tmp_path / "out" / f"ann__{A}.ipynb").exists()


@pytest.mark.parametrize("case,expect", [
    ("not_json", "not JSON"),
    ("empty_file", "empty file"),
    ("no_cells", "empty notebook"),
    ("bad_name", "not a valid learner id"),
    ("unknown_assignment", "Unknown assignment"),
    ("other_assignment", "not the 01_vector_add notebook"),
    ("missing", "no such notebook"),
])
def test_submit_refuses_bad_input_with_a_clear_error(course, tmp_path, case, expect):
    c = fresh(course, tmp_path)
    mine = tmp_path / f"{A}.ipynb"
    nb = c.release_notebook(A)
    student, assignment = "ann", A
    if case == "not_json":
        mine.write_text("{ not json")
    elif case == "empty_file":
        mine.write_text("")
    elif case == "no_cells":
        nb.cells = []
        nbformat.write(nb, mine)
    elif case == "other_assignment":
        for cell in nb.cells:
            cell.get("metadata", {}).pop("nbgrader", None)
        nbformat.write(nb, mine)
    elif case != "missing":
        nbformat.write(nb, mine)
    if case == "bad_name":
        student = "ann__x"
    if case == "unknown_assignment":
        assignment = "99_nothing"
    before = mine.read_bytes() if mine.exists() else None
    r = tc("submit", assignment, "--student", student, "--notebook", str(mine), "--out", str(tmp_path / "out"),
           "--no-check", "--course", str(c.path))
    assert r.returncode == 2 and expect in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert (mine.read_bytes() if mine.exists() else None) == before  # nothing lost


def test_collect_takes_good_files_and_explains_bad_ones(course, tmp_path):
    c = fresh(course, tmp_path)
    box = tmp_path / "returned"
    (box / "lms" / "Bob Smith_123_assignsubmission_file_").mkdir(parents=True)
    good = c.source_notebook(A)
    nbformat.write(good, box / f"alice__{A}.ipynb")
    nbformat.write(good, box / "lms" / "Bob Smith_123_assignsubmission_file_" / f"bob__{A} (1).ipynb")
    nbformat.write(good, box / "carol__final_version.ipynb")  # renamed: its cells say what it is
    (box / f"dan__{A}.ipynb").write_text("{ not json")
    (box / f"erin__{A}.ipynb").write_text("")
    empty = copy.deepcopy(good)
    empty.cells = []
    nbformat.write(empty, box / f"fay__{A}.ipynb")
    nbformat.write(good, box / f"{A}.ipynb")  # whose?
    nbformat.write(good, box / f"gus__{A}.ipynb")
    nbformat.write(good, box / f"gus__{A}-2.ipynb")  # two from one learner
    other = copy.deepcopy(good)
    for cell in other.cells:
        if "nbgrader" in cell.get("metadata", {}):
            cell.metadata.nbgrader["grade_id"] = "softmax_" + cell.metadata.nbgrader["grade_id"]
    (box / "notes.txt").write_text("not a notebook")
    before = {p: p.read_bytes() for p in box.rglob("*") if p.is_file()}
    # An earlier, different submission from alice is kept, not overwritten.
    earlier = c.path / "submitted" / "alice" / A
    earlier.mkdir(parents=True)
    (earlier / f"{A}.ipynb").write_text(json.dumps(nbformat.v4.new_notebook()))

    r = tc("collect", A, str(box), "--course", str(c.path))
    assert r.returncode == 1, r.stdout  # some files had errors; the good ones are collected anyway
    out = r.stdout
    for student in ("alice", "bob", "carol"):
        got = c.path / "submitted" / student / A / f"{A}.ipynb"
        assert got.exists(), out
        assert nbformat.read(got, as_version=4) == good
    assert "renamed file" in out
    for student in ("dan", "erin", "fay", "gus"):
        assert not (c.path / "submitted" / student).exists(), student
    assert "not JSON" in out and "empty file" in out and "no cells" in out
    assert "cannot tell whose notebook" in out and "2 notebooks from gus" in out
    kept = list((c.path / "submitted" / ".replaced" / "alice" / A).glob(f"*/{A}.ipynb"))
    assert len(kept) == 1 and kept[0].read_text() == json.dumps(nbformat.v4.new_notebook())
    assert {p: p.read_bytes() for p in box.rglob("*") if p.is_file()} == before  # sources untouched
    # Collecting the same folder again changes nothing.
    again = tc("collect", A, str(box), "--course", str(c.path))
    assert "3 unchanged" in again.stdout, again.stdout


def test_collect_checks_learners_against_the_roster(course, tmp_path):
    c = fresh(course, tmp_path)
    nbgrader("db", "student", "add", "alice", cwd=c.path)
    box = tmp_path / "box"
    box.mkdir()
    nbformat.write(c.release_notebook(A), box / f"alicia__{A}.ipynb")
    r = tc("collect", A, str(box), "--course", str(c.path))
    assert r.returncode == 1 and "unknown learner 'alicia'" in r.stdout, r.stdout
    assert not (c.path / "submitted" / "alicia").exists()
    assert tc("collect", A, str(box), "--add-students", "--course", str(c.path)).returncode == 0
    assert (c.path / "submitted" / "alicia" / A / f"{A}.ipynb").exists()


def test_zip_collect_with_the_course_regexp(course, tmp_path):
    """An LMS download (zip of per-learner folders) through plain `nbgrader zip_collect`."""
    c = fresh(course, tmp_path)
    archive = c.path / "downloaded" / A / "archive"
    archive.mkdir(parents=True)
    text = nbformat.writes(c.release_notebook(A))
    with zipfile.ZipFile(archive / "lms-download.zip", "w") as z:
        z.writestr(f"Alice Liddell_1001_assignsubmission_file_/alice__{A}.ipynb", text)
        z.writestr(f"Bob Smith_1002_assignsubmission_file_/bob_smith__{A} (2).ipynb", text)
        z.writestr(f"Carl_1003_assignsubmission_file_/carl__{A}-Copy1.ipynb", text)
        z.writestr("Dora_1004_assignsubmission_file_/my_notebook.ipynb", text)
    r = nbgrader("zip_collect", A, cwd=c.path)
    for student in ("alice", "bob_smith", "carl"):
        assert (c.path / "submitted" / student / A / f"{A}.ipynb").read_text() == text, r.stderr
    assert not any(p.name.startswith("Dora") for p in (c.path / "submitted").iterdir())
    assert "my_notebook.ipynb" in r.stderr  # reported as skipped


def test_bad_names_give_a_clear_error_and_change_nothing(course, tmp_path, capsys):
    """Each command's own error, exit code 2, nothing changed. The commands run in this process (the entry point
    `python -m tritoncourse` dispatches to the same ``main``; the other tests here run it as a command)."""
    from tritoncourse.cli import main

    c = fresh(course, tmp_path)
    c.submit("alice", A, c.release_notebook(A))
    db = (c.path / "gradebook.db").read_bytes()
    for args, expect in [
        (("grade", "99_nothing"), "Unknown assignment '99_nothing'"),
        (("grade", A, "--students", "bob"), "No submission from bob"),
        (("collect", "99_nothing", str(tmp_path)), "Unknown assignment"),
        (("collect", A, str(tmp_path / "nope")), "no such folder"),
        (("export", "99_nothing"), "Unknown assignment"),
        (("feedback", A, "--students", "alice"), "No autograded 01_vector_add for alice"),
    ]:
        code = main([*args, "--course", str(c.path)])
        out = capsys.readouterr()
        assert code == 2 and expect in out.out, (args, out.out, out.err)
    assert (c.path / "gradebook.db").read_bytes() == db
    assert not (c.path / "autograded" / "alice").exists()


def test_unreleased_assignment_says_to_release_it(course, tmp_path, capsys):
    from tritoncourse.cli import main

    c = fresh(course, tmp_path)
    shutil.copytree(ROOT / "source" / A, c.path / "source" / "02_new")
    code, out = main(["grade", "02_new", "--course", str(c.path)]), capsys.readouterr().out
    assert code == 2 and "make release" in out, out


@pytest.mark.slow  # a real `nbgrader autograde` of two learners: not in `make test-fast`
def test_a_grading_that_hangs_is_retried_once_then_recorded_and_the_others_graded(course, tmp_path):
    """The whole `nbgrader autograde` of one learner never ends (here: a 3 s limit it cannot meet): it is
    stopped, retried once, recorded as failed with its reason, logs and a command to reproduce it; the
    learner after it is graded and merged, and the stuck one leaves nothing in the gradebook."""
    import io

    from nbgrader.api import Gradebook, MissingEntry

    from tritoncourse.classroom.workflow import Course as Classroom, Grader

    c = fresh(course, tmp_path)
    c.submit("stuck", A, c.source_notebook(A))
    c.submit("zed", A, c.source_notebook(A))

    class OneStuck(Grader):
        def run_one(self, task, template):
            self.notebook_timeout = 3 if task.student == "stuck" else 900
            return super().run_one(task, template)

    out = io.StringIO()
    grader = OneStuck(Classroom(c.path), jobs=1, out=out,
                      nbgrader_args=[f"--IsolatedKernelTests.timeout_factor={TIMEOUT_FACTOR}"])
    assert grader.grade([A]) == 1, out.getvalue()
    log = out.getvalue()
    assert "RETRY   01_vector_add/stuck: grading took longer than 3 s" in log, log
    state = grader.load_state()["entries"]
    stuck, zed = state[f"{A}/stuck"], state[f"{A}/zed"]
    assert stuck["status"] == "failed" and stuck["attempts"] == 2 and "longer than 3 s" in stuck["reason"], stuck
    assert "nbgrader autograde 01_vector_add --student stuck" in stuck["reproduce"], stuck
    logs = c.path / "autograded" / ".classroom" / "logs" / A
    assert (logs / "stuck.attempt1.log").exists() and (logs / "stuck.attempt2.log").exists()
    assert zed["status"] == "graded" and zed["score"] == 10 and not zed["failed_tests"], zed
    assert "failed: 01_vector_add/stuck" in log and "--retry-failed" in log
    with Gradebook(f"sqlite:///{c.path / 'gradebook.db'}") as gb:
        assert gb.find_submission(A, "zed").score == 10
        with pytest.raises(MissingEntry):
            gb.find_submission(A, "stuck")
    # A new run leaves both alone; --retry-failed takes only the failed one.
    again = io.StringIO()
    Grader(Classroom(c.path), jobs=1, out=again).grade([A])
    assert "0 notebook(s) to grade, 2 already done" in again.getvalue(), again.getvalue()


# ---- edited metadata, sanitized in-process (the same steps autograde runs first)

def _sanitize(c: Course, nb):
    from traitlets.config import Config

    from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds, OverwriteKernelspec
    from tritoncourse.grading.nbgrader_plugin import RestoreCellMetadata
    from tritoncourse.grading.nbgrader_plugin import RestoreDeletedCells

    res = {"nbgrader": {"notebook": A, "assignment": A, "student": "x",
                        "db_url": f"sqlite:///{c.path / 'gradebook.db'}"}}
    cfg = Config()
    cfg.RestoreDeletedCells.add_missing_cells = True
    for step in (ClearOutput, RestoreCellMetadata, DeduplicateIds, OverwriteKernelspec, RestoreDeletedCells,
                 CheckCellMetadata):
        nb, res = step(config=cfg)(nb, res)
    return nbformat.from_dict(nb)


@pytest.mark.parametrize("edit", list(METADATA_EDITS))
def test_edited_metadata_is_restored_from_the_gradebook(course, edit):
    """Without RestoreCellMetadata most of these fail the learner's whole notebook in nbgrader 0.9.6."""
    nb = course.release_notebook(A)
    METADATA_EDITS[edit](nb)
    out = _sanitize(course, nb)
    release = course.release_notebook(A)
    want = {c.metadata.nbgrader["grade_id"]: (c.metadata.nbgrader.get("points"), c.source)
            for c in release.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    got = {c.metadata.nbgrader["grade_id"]: (c.metadata.nbgrader.get("points"), c.source.split("\n", 1)[-1])
           for c in out.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    assert set(got) == set(want), (edit, set(got) ^ set(want))
    for gid, (points, _) in want.items():
        assert float(got[gid][0]) == float(points), (edit, gid)
        if gid.startswith("test"):
            assert want[gid][1].strip().splitlines()[-1] in got[gid][1], (edit, gid)  # the test is back


# ---- feedback and handouts without grading

def test_hidden_lines_are_blanked_in_feedback_outputs():
    from tritoncourse.classroom.feedback import REDACTED, hide_hidden_tests

    src = nbformat.read(ROOT / "source" / A / f"{A}.ipynb", as_version=4)
    rel = nbformat.read(ROOT / "release" / A / f"{A}.ipynb", as_version=4)
    nb = copy.deepcopy(src)
    ragged = nb.cells[ids(nb)["test_vector_add_ragged_sizes"]]
    hidden_line = "    check_vector_add(triton_vector_add_kernel, n=n, block_size=128)"
    assert hidden_line in ragged.source
    ragged.outputs = [nbformat.v4.new_output("error", ename="KernelTestFailed", evalue="boom", traceback=[
        "KernelTestFailed: FAILED: Ragged sizes\n  File \"test_cell.py\", line 7, in <module>\n"
        f"{hidden_line}\nValueError: boom\nLikely cause: a mask"])]
    released = {c.metadata.nbgrader["grade_id"]: c.source for c in rel.cells
                if "grade_id" in c.get("metadata", {}).get("nbgrader", {})}
    hide_hidden_tests(nb, released)
    assert ragged.source == released["test_vector_add_ragged_sizes"]
    text = "\n".join(ragged.outputs[0]["traceback"])
    assert hidden_line.strip() not in text and REDACTED in text and "Likely cause: a mask" in text
    assert "HIDDEN" not in json.dumps(nb)


def test_handout_has_no_solutions_hidden_tests_or_gradebook(tmp_path):
    from tritoncourse.classroom.workflow import Course as Classroom, handout_problems, make_handout

    assert make_handout(Classroom(ROOT), tmp_path / "handout") == 0
    files = [p for p in (tmp_path / "handout").rglob("*") if p.is_file()]
    names = {str(p.relative_to(tmp_path / "handout")) for p in files}
    assert f"release/{A}/{A}.ipynb" in names and "tritoncourse/grading/isolated.py" in names
    assert not any(n.startswith(("source/", "tests/")) or n.endswith(".db") for n in names)
    # The check itself: a release notebook with a hidden test line or a solution is refused.
    leaky = tmp_path / "leaky" / f"{A}.ipynb"
    leaky.parent.mkdir()
    shutil.copy2(ROOT / "source" / A / f"{A}.ipynb", leaky)
    problems = handout_problems(Classroom(ROOT), [leaky])
    assert problems and "BEGIN SOLUTION" in problems[0]
    hinted = nbformat.read(ROOT / "release" / A / f"{A}.ipynb", as_version=4)
    hinted.cells.append(new_code_cell("for n in (1, 127, 129, 9973, 100_003):\n    pass"))
    nbformat.write(hinted, leaky)
    problems = handout_problems(Classroom(ROOT), [leaky])
    assert problems and "1 hidden test line(s), e.g. 'for n in (1, 127, 129, 9973, 100_003):'" in problems[0], \
        problems


@pytest.mark.parametrize("assignment", sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir()))
def test_release_holds_no_solutions_hidden_tests_or_gradebook(assignment, tmp_path):
    """release/<assignment>/ (what learners get) holds one notebook and nothing else: no gradebook, no file of
    source/, no solution line and no hidden test line (judged from source/, so a leak cannot hide itself);
    the same check finds both in the source notebook even with nbgrader's markers taken out."""
    from tritoncourse.classroom.workflow import Course as Classroom, handout_problems

    classroom = Classroom(ROOT)
    files = sorted(p for p in (ROOT / "release" / assignment).rglob("*") if p.is_file())
    assert [p.relative_to(ROOT / "release").as_posix() for p in files] == [f"{assignment}/{assignment}.ipynb"]
    assert not list((ROOT / "release").rglob("*.db")) and not list((ROOT / "release").rglob("gradebook*"))
    assert handout_problems(classroom, files) == []
    unmarked = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    for cell in unmarked.cells:
        cell.source = "\n".join(line for line in cell.source.split("\n")
                                 if not re.search(r"(BEGIN|END) (SOLUTION|HIDDEN TESTS)", line))
    leaky = tmp_path / f"{assignment}.ipynb"
    nbformat.write(unmarked, leaky)
    problems = " ".join(handout_problems(classroom, [leaky]))
    assert "solution line" in problems, problems
    if "BEGIN HIDDEN TESTS" in (ROOT / "source" / assignment / f"{assignment}.ipynb").read_text():
        assert "hidden test line" in problems, problems


def test_solutions_have_no_hidden_tests(course, tmp_path):
    from tritoncourse.classroom.workflow import Course as Classroom, make_solutions

    assert make_solutions(Classroom(course.path), A, tmp_path / "sol") == 0
    nb = nbformat.read(tmp_path / "sol" / f"{A}.ipynb", as_version=4)
    text = json.dumps(nb)
    assert "HIDDEN" not in text and "100_003" not in text
    assert "tl.store(output_ptr + offsets, x + y, mask=mask)" in text


# ------------------------------------------------------------------------------------------ the class

@dataclass
class Graded:
    parallel: Course
    serial: Course | None
    learners: list[Learner]
    first_run: subprocess.CompletedProcess
    second_run: subprocess.CompletedProcess
    parallel_seconds: float
    serial_seconds: float = 0.0

    def state(self) -> dict:
        return json.loads((self.parallel.path / "autograded" / ".classroom" / "state.json").read_text())["entries"]

    def scores(self, student, assignment=A):
        return self.parallel.scores(assignment, student)


_graded: dict[str, Graded] = {}


def _grade_flags() -> list[str]:
    return ["--jobs", str(JOBS), "--timeout-factor", str(TIMEOUT_FACTOR), "--cell-timeout", str(CELL_TIMEOUT)]


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> Graded:
    """The class graded in parallel by the script, stopped after its first learner and restarted."""
    if "parallel" not in _graded:
        parallel = new_class_course(tmp_path_factory.mktemp("class-parallel") / "course")
        learners = build_class(parallel)
        submit_class(parallel, learners)
        start = time.monotonic()
        # First run: stopped (SIGTERM) once its first learner is graded.
        proc = subprocess.Popen([sys.executable, "-m", "tritoncourse", "grade", "--course", str(parallel.path),
                                 *_grade_flags()], cwd=parallel.path, env=_env(parallel.path),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("[1/"):
                proc.send_signal(signal.SIGTERM)
                break
        rest, _ = proc.communicate(timeout=120)
        first = subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + rest, "")
        second = tc("grade", "--course", str(parallel.path), *_grade_flags(), timeout=3 * 3600,
                    frozen=parallel.path)
        seconds = time.monotonic() - start
        _graded["parallel"] = Graded(parallel, None, learners, first, second, seconds)
    return _graded["parallel"]


@pytest.fixture(scope="module")
def serial_class(graded_class, serial_baseline) -> Graded:
    """The same class (what plain nbgrader can read) graded by plain serial `nbgrader autograde`: the session's
    serial baseline (tests/baseline.py), which the Dask, Slurm and container tests compare with too."""
    graded_class.serial = serial_baseline.course
    graded_class.serial_seconds = serial_baseline.seconds
    return graded_class


@pytest.mark.slow
def test_grading_can_be_stopped_and_restarted(graded_class):
    g = graded_class
    assert g.first_run.returncode == 130, g.first_run.stdout[-3000:]
    assert "Stopped:" in g.first_run.stdout
    m = re.search(r"(\d+) notebook\(s\) to grade, (\d+) already done", g.second_run.stdout)
    assert m and int(m.group(2)) >= 1, g.second_run.stdout[:2000]
    done_first = {k for k in re.findall(r"^\[\d+/\d+\] (\S+):", g.first_run.stdout, re.M)}
    regraded = set(re.findall(r"^\[\d+/\d+\] (\S+):", g.second_run.stdout, re.M))
    assert done_first and not done_first & regraded, (done_first, regraded)
    # A third run has nothing left to do and leaves the gradebook as it is.
    rows = gradebook_rows(f"sqlite:///{g.parallel.path / 'gradebook.db'}")
    third = tc("grade", "--course", str(g.parallel.path), *_grade_flags(), frozen=g.parallel.path)
    assert "0 notebook(s) to grade" in third.stdout, third.stdout
    assert gradebook_rows(f"sqlite:///{g.parallel.path / 'gradebook.db'}") == rows


@pytest.mark.slow
def test_every_learner_is_graded_or_has_a_recorded_reason(graded_class):
    g = graded_class
    state = g.state()
    for learner in g.learners:
        entry = state[f"{A}/{learner.name}"]
        if learner.precheck_error:
            assert entry["status"] == "failed" and learner.precheck_error in entry["reason"], entry
        else:
            assert entry["status"] == "graded", (learner.name, entry)
            for gid, failure in entry["failed_tests"].items():
                assert isinstance(failure["seed"], int), (learner.name, gid, failure)  # reproducible
    assert "renamed notebook" in " ".join(state[f"{A}/renamed"]["notes"])
    assert g.second_run.returncode == 1  # the two unreadable submissions are reported
    assert "not_json" in g.second_run.stdout and "empty" in g.second_run.stdout


@pytest.mark.slow
def test_each_trouble_costs_only_its_own_points(graded_class):
    """Every learner gets exactly what their kernel earns, whatever else their notebook does, and the
    retake (another assignment) of the troublemakers gets full marks."""
    g = graded_class
    tests = graded_test_ids(g.parallel.source_notebook(A))
    wrong = []
    for learner in g.learners:
        if learner.precheck_error:
            continue
        scores = g.scores(learner.name)
        lost = {t for t in tests if scores[t] == 0}
        if lost != learner.lose:
            wrong.append((learner.name, sorted(lost ^ learner.lose)))
        if learner.retake:
            retake = g.scores(learner.name, RETAKE)
            if any(retake[t] == 0 for t in tests):
                wrong.append((learner.name, "retake", retake))
    for learner in g.learners:  # the unreadable ones: nothing graded, the retake is
        if learner.precheck_error and learner.retake:
            retake = g.scores(learner.name, RETAKE)
            if any(retake[t] == 0 for t in tests):
                wrong.append((learner.name, "retake", retake))
    assert not wrong, wrong
    _write_docs_table(g)


@pytest.mark.slow
def test_each_fixture_learner_is_told_its_cause_and_seed(serial_class):
    """Does each learner who hands in a fixture of tests/submissions/ read, under its first failing test, the cause
    that fixture names and the seed, in both gradings (`course grade`, and plain serial nbgrader for those it can
    read)? The fixtures of CLASS_FIXTURES are graded through nbgrader here only (tests/course.py)."""
    g = serial_class
    tests = graded_test_ids(g.parallel.source_notebook(A))
    handed_in = {learner.fixture.name for learner in g.learners if learner.fixture}
    assert CLASS_FIXTURES[A] <= handed_in, f"not in the class: {CLASS_FIXTURES[A] - handed_in}"
    wrong = []
    for learner in g.learners:
        fx = learner.fixture
        if fx is None or fx.all_pass:
            continue
        first = next(t for t in tests if t in fx.expect_fail)
        for course in [g.parallel] + ([g.serial] if learner.serial else []):
            text = course.feedback_text(A, learner.name)[first]
            if fx.expect_message.lower() not in text.lower() or "seed" not in text:
                wrong.append((learner.name, course.path.parent.name, fx.expect_message, text[-600:]))
    assert not wrong, wrong


@pytest.mark.slow
def test_parallel_grades_equal_serial_grades(serial_class):
    g = serial_class
    parallel = gradebook_rows(f"sqlite:///{g.parallel.path / 'gradebook.db'}")
    serial = gradebook_rows(f"sqlite:///{g.serial.path / 'gradebook.db'}")
    compared = [k for k in serial if k in parallel]
    assert len(compared) == len(serial) >= 16, (sorted(compared), sorted(serial))  # every serial grade compared
    diffs = {k: (parallel[k], serial[k]) for k in compared if parallel[k] != serial[k]}
    assert not diffs, diffs
    # Only what the serial class leaves out is missing there: the renamed notebook (plain nbgrader cannot
    # grade it), the retake of the learner whose other notebook is not JSON, and the endless kernel (minutes).
    assert set(parallel) - set(serial) == {(A, "renamed"), (RETAKE, "not_json"), (A, "endless_kernel"),
                                           (RETAKE, "endless_kernel")}, set(parallel) ^ set(serial)
    print(f"{len(compared)} grades compared; parallel run {g.parallel_seconds:.0f} s, serial {g.serial_seconds:.0f} s")


@pytest.mark.slow
def test_export_has_a_column_per_test_and_the_failures_seeds(graded_class, tmp_path):
    g = graded_class
    out = tmp_path / "grades.csv"
    r = tc("export", "--course", str(g.parallel.path), "-o", str(out), frozen=g.parallel.path)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {(row["assignment"], row["student"]): row for row in csv.DictReader(out.open())}
    header = next(csv.reader(out.open()))
    tests = graded_test_ids(g.parallel.source_notebook(A))
    assert all(f"{A}:{t}" in header for t in tests), header
    assert float(rows[(A, "reference")]["score"]) == 10
    nomask = rows[(A, "wrong_no_mask")]
    assert float(nomask[f"{A}:test_vector_add_full_blocks"]) == 2
    assert re.search(r"test_vector_add_ragged_sizes\(seed=\d+\)", nomask["failed_tests"]), nomask
    assert rows[(A, "not_json")]["status"] == "failed" and "not JSON" in rows[(A, "not_json")]["reason"]
    assert rows[(RETAKE, "not_json")]["status"] == "graded"


@pytest.mark.slow
def test_feedback_shows_verdicts_but_no_hidden_test(graded_class):
    from tritoncourse.classroom.feedback import hidden_secrets, html_text

    g = graded_class
    who = ["wrong_compile_error", "wrong_no_mask", "tests_deleted_and_edited", "endless_kernel"]
    r = tc("feedback", A, "--course", str(g.parallel.path), "--students", *who, frozen=g.parallel.path)
    assert r.returncode == 0, r.stdout + r.stderr
    secrets = hidden_secrets(g.parallel.path / "source", g.parallel.path / "release", A)[A]
    assert len(secrets) >= 5
    for student in who:
        text = html_text(g.parallel.path / "feedback" / student / A / f"{A}.html")
        assert not [s for s in secrets if s in text], student
        if student == "tests_deleted_and_edited":  # its tests were restored and pass
            assert text.count("PASSED") == 5, student
        else:
            assert "FAILED" in text and "seed" in text, student
            assert "Likely cause" in text or "did not finish" in text, student
    # Plain nbgrader with nbgrader's own feedback steps would show them: the check is not vacuous.
    plain = nbgrader_frozen("generate_feedback", A, "--force", "--student", "wrong_no_mask",
                            "--GenerateFeedback.preprocessors=['nbgrader.preprocessors.GetGrades']",
                            "--CourseDirectory.feedback_directory=plain_feedback", cwd=g.parallel.path)
    leaked = g.parallel.path / "plain_feedback" / "wrong_no_mask" / A / f"{A}.html"
    assert leaked.exists(), plain.stderr
    assert [s for s in secrets if s in html_text(leaked)]


# ------------------------------------------------------------------------------------------ docs

BEGIN_TABLE, END_TABLE = "<!-- reliability-table:begin -->", "<!-- reliability-table:end -->"


def _replace(marker_begin: str, marker_end: str, text: str) -> None:
    if os.environ.get("TRITONCOURSE_UPDATE_DOCS") != "1" or not DOCS.exists():
        print(text)
        return
    doc = DOCS.read_text()
    i, j = doc.index(marker_begin) + len(marker_begin), doc.index(marker_end)
    DOCS.write_text(doc[:i] + "\n" + text.rstrip() + "\n" + doc[j:])


def _write_docs_table(g: Graded) -> None:
    tests = graded_test_ids(g.parallel.source_notebook(A))
    short = {t: t.replace("test_vector_add_", "") for t in tests}
    state = g.state()
    lines = ["| learner | what the submission does | lost (its own points) | kept | retake (other assignment) "
             "| seconds |", "|---|---|---|---|---|---|"]
    for learner in g.learners:
        if not learner.case:
            continue
        entry = state[f"{A}/{learner.name}"]
        if learner.precheck_error:
            lost, kept = "not graded: " + entry["reason"].split(": ", 1)[-1], "every other learner"
        else:
            scores = g.scores(learner.name)
            lost_t = [t for t in tests if scores[t] == 0]
            lost = (", ".join(short[t] for t in lost_t) + f" ({sum(_points(g, t) for t in lost_t):g} pts)") \
                if lost_t else "nothing"
            kept_t = [t for t in tests if scores[t] > 0]
            kept = (", ".join(short[t] for t in kept_t) + f" ({sum(scores[t] for t in kept_t):g} pts)") \
                if kept_t else "-"
            if entry.get("kernel_died_at_cell") is not None:
                lost += f"; kernel died at cell {entry['kernel_died_at_cell']}"
        retake = ""
        if learner.retake:
            r = g.scores(learner.name, RETAKE)
            retake = f"{sum(r[t] for t in tests):g}/10"
        lines.append(f"| `{learner.name}` | {learner.case} | {lost} | {kept} | {retake} | {entry.get('seconds', 0):g} |")
    good = [learner for learner in g.learners if not learner.case]
    lines.append("")
    lines.append(f"The {len(good)} ordinary learners graded beside them ({', '.join(l.name for l in good)}) got "
                 "exactly their fixtures' grades. Generated by `tests/test_classroom.py` on "
                 f"{time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores, `--jobs {JOBS}`, "
                 f"`--timeout-factor {TIMEOUT_FACTOR}`, `--cell-timeout {CELL_TIMEOUT}`, phase 1's largest test sizes "
                 "scaled down: tests/course.py's SCALED_DOWN).")
    _replace(BEGIN_TABLE, END_TABLE, "\n".join(lines))


def _points(g: Graded, gid: str) -> float:
    source = g.parallel.source_notebook(A)
    return float(source.cells[ids(source)[gid]].metadata.nbgrader["points"])


def test_parallel_gradings_share_the_cores_between_their_math_threads(monkeypatch):
    """grade --jobs N: each private grading's OpenMP/MKL threads get a share of the cores (not one per core in
    every process), and an instructor's own setting is kept."""
    from types import SimpleNamespace

    from tritoncourse.classroom.grader import Grader

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    env = Grader.grading_env(SimpleNamespace(jobs=4, test_workers=1))
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "4", env.get("OMP_NUM_THREADS")
    assert Grader.grading_env(SimpleNamespace(jobs=8, test_workers=2))["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert Grader.grading_env(SimpleNamespace(jobs=8, test_workers=2))["OMP_NUM_THREADS"] == "3"

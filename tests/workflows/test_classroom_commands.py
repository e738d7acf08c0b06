"""The instructor's commands on one generated course, no class graded (docs/INSTRUCTORS.md): the make targets,
submit, collect and zip_collect, clear errors for bad names and unreleased assignments, edited metadata restored from
the gradebook, solutions without hidden tests, the math threads of parallel gradings; and (slow: a real
`nbgrader autograde` of two learners) a grading that hangs is retried once, then recorded. Tests copy the course
before changing it. The class graded: tests/workflows/test_classroom.py; what learners get:
tests/workflows/test_classroom_handouts.py.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell

from baseline import A, METADATA_EDITS, TIMEOUT_FACTOR
from course import ROOT, Course, nbgrader
from course_cli import tc


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
    from tritoncourse.grading.autograde.nbgrader_plugin import RestoreCellMetadata
    from tritoncourse.grading.autograde.nbgrader_plugin import RestoreDeletedCells

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


def test_solutions_have_no_hidden_tests(course, tmp_path):
    from tritoncourse.classroom.workflow import Course as Classroom, make_solutions

    assert make_solutions(Classroom(course.path), A, tmp_path / "sol") == 0
    nb = nbformat.read(tmp_path / "sol" / f"{A}.ipynb", as_version=4)
    text = json.dumps(nb)
    assert "HIDDEN" not in text and "100_003" not in text
    assert "tl.store(output_ptr + offsets, x + y, mask=mask)" in text


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

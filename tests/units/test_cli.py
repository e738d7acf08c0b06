"""The learner's terminal commands: check one notebook (exit code says pass/fail), reset one notebook."""
import json
import shutil
import subprocess
import sys

import nbformat

from course import ROOT, Fixture, SUBMISSIONS
from tritoncourse.learner.check import reset_notebook


def _check(path):
    return subprocess.run([sys.executable, "-m", "tritoncourse", "check", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def test_check_passes_the_reference_and_fails_a_wrong_kernel(tmp_path):
    """Exit code 0 for the reference notebook, 1 with the likely cause for a kernel without a mask."""
    ok = _check(ROOT / "source" / "01_vector_add" / "01_vector_add.ipynb")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "5 passed, 0 failed" in ok.stdout
    release = nbformat.read(ROOT / "release" / "01_vector_add" / "01_vector_add.ipynb", as_version=4)
    wrong = Fixture.load(SUBMISSIONS / "01_vector_add" / "wrong_no_mask.py").notebook(release)
    nbformat.write(wrong, tmp_path / "01_vector_add.ipynb")
    bad = _check(tmp_path / "01_vector_add.ipynb")
    assert bad.returncode == 1
    # Every test cell has a visible case now (issue 29): the learner sees all four ragged tests fail before grading.
    assert "1 passed, 4 failed\n" in bad.stdout and "hidden, run when graded" not in bad.stdout, bad.stdout
    assert "tl.store is not masked" in bad.stdout


def test_check_explains_a_missing_or_broken_notebook(tmp_path):
    missing = _check(tmp_path / "nope.ipynb")
    assert missing.returncode == 2 and "make lab" in missing.stdout
    (tmp_path / "broken.ipynb").write_text("{ not json")
    broken = _check(tmp_path / "broken.ipynb")
    assert broken.returncode == 2 and "make reset" in broken.stdout


def test_reset_backs_up_then_restores_the_release(tmp_path):
    workspace = tmp_path / "notebooks"
    workspace.mkdir()
    mine = workspace / "01_vector_add.ipynb"
    mine.write_text(json.dumps({"my": "work"}))
    assert reset_notebook("01_vector_add", workspace, ROOT / "release") == 0
    backups = list((workspace / "backups").glob("01_vector_add.*.ipynb"))
    assert len(backups) == 1 and json.loads(backups[0].read_text()) == {"my": "work"}
    assert mine.read_bytes() == (ROOT / "release" / "01_vector_add" / "01_vector_add.ipynb").read_bytes()
    assert reset_notebook("99_nothing", workspace, ROOT / "release") == 2


def test_make_notebooks_never_overwrites_learner_work(tmp_path):
    """`make notebooks` (run by `make lab`) copies only missing notebooks."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "release", repo / "release")
    shutil.copy2(ROOT / "Makefile", repo / "Makefile")
    (repo / "notebooks").mkdir()
    mine = repo / "notebooks" / "01_vector_add.ipynb"
    mine.write_text("my work")
    subprocess.run(["make", "-s", "notebooks"], cwd=repo, check=True, capture_output=True)
    assert mine.read_text() == "my work"
    mine.unlink()
    subprocess.run(["make", "-s", "notebooks"], cwd=repo, check=True, capture_output=True)
    assert mine.read_bytes() == (ROOT / "release" / "01_vector_add" / "01_vector_add.ipynb").read_bytes()

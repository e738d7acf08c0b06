"""The learner's terminal commands: reset one notebook, `make notebooks`. Checking one notebook (the kernel tests run
in fresh processes): tests/system/test_learner_check.py."""
import json
import shutil
import subprocess

from course import ROOT
from tritoncourse.learner.check import reset_notebook


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

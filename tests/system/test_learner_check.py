"""The learner's terminal command that checks one notebook, end to end (`python -m tritoncourse check`, as `make check`
runs it: every kernel test in fresh judge and runner processes): the exit code says pass or fail, the output the
likely cause. Resetting a notebook: tests/units/test_cli.py."""
import subprocess
import sys

import nbformat

from course import ROOT, Fixture, SUBMISSIONS


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

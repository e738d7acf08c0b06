"""The learner's commands are the learner's own (issue 32; Otter-Grader's split of instructor tools, learner checks
and grader): ``python -m tritoncourse check|reset|submit`` are dispatched by ``tritoncourse.learner.cli``, which loads
nothing of the instructor's tools (``tritoncourse.classroom``) and, but for the test runner that ``check`` runs,
nothing of the grader (``tritoncourse.grading``); that ``check`` loads no classroom module is test_layout's test.
Also here: the container's ``submit`` and the hand-out's own README and Makefile (issue 29, the instructor's path)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
A = "01_vector_add"
CLASSROOM, GRADING = "tritoncourse.classroom", "tritoncourse.grading"


def _loaded_after(code: str) -> tuple[str, list[str]]:
    """What ``code`` printed, and the tritoncourse modules a fresh interpreter had loaded after running it."""
    wrapped = (f"{code}\nimport sys, json\n"
               "print('MODULES ' + json.dumps(sorted(m for m in sys.modules if m.startswith('tritoncourse'))))\n")
    out = subprocess.run([sys.executable, "-c", wrapped], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    text, _, modules = out.stdout.rpartition("MODULES ")
    return text, json.loads(modules)


def _outside(modules: list[str], *packages: str) -> list[str]:
    return [m for m in modules if m.startswith(packages)]


@pytest.mark.parametrize("module", ["tritoncourse.learner.cli", "tritoncourse.cli"])
def test_importing_the_learners_cli_loads_neither_grader_nor_classroom(module):
    _, modules = _loaded_after(f"import {module}")
    assert module in modules
    assert _outside(modules, CLASSROOM, GRADING) == [], modules


def test_submit_without_checks_writes_the_hand_in_and_loads_neither(tmp_path):
    mine = tmp_path / f"{A}.ipynb"
    mine.write_bytes((ROOT / "release" / A / f"{A}.ipynb").read_bytes())
    out = tmp_path / "submissions"
    args = ["submit", A, "--student", "ann", "--notebook", str(mine), "--out", str(out), "--no-check",
            "--course", str(ROOT)]
    text, modules = _loaded_after(f"from tritoncourse.cli import main\nassert main({args!r}) == 0")
    assert (out / f"ann__{A}.ipynb").read_bytes() == mine.read_bytes(), text
    assert "tritoncourse.learner.submit" in modules
    assert _outside(modules, CLASSROOM, GRADING) == [], modules


def test_reset_loads_neither(tmp_path):
    text, modules = _loaded_after("from tritoncourse.cli import main\nassert main(['reset', '99_nothing']) == 2")
    assert "Unknown phase '99_nothing'" in text, text
    assert _outside(modules, CLASSROOM, GRADING) == [], modules


def test_the_instructors_cli_offers_no_learner_command_of_its_own():
    """submit lives in the learner's CLI only: the instructor's command list does not define it again."""
    import argparse

    from tritoncourse.classroom.cli import add_commands

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    add_commands(sub)
    assert not set(sub.choices) & {"check", "reset", "submit"}, sorted(sub.choices)


# ---- the container's hand-in (docker/entrypoint.sh, run here on this Python: no Docker engine needed)

def test_the_containers_submit_writes_the_same_hand_in_as_make_submit(tmp_path):
    """`docker compose ... run --rm course submit PHASE STUDENT` runs what `make submit` runs, on the mounted course:
    submissions/STUDENT__PHASE.ipynb, the notebook byte for byte."""
    course = tmp_path / "course"
    (course / "release" / A).mkdir(parents=True)
    (course / "notebooks").mkdir()
    (course / "tritoncourse").symlink_to(ROOT / "tritoncourse")
    release = (ROOT / "release" / A / f"{A}.ipynb").read_bytes()
    (course / "release" / A / f"{A}.ipynb").write_bytes(release)
    mine = course / "notebooks" / f"{A}.ipynb"
    mine.write_bytes(release.replace(b"pass", b"pass  # mine", 1))
    env = {**os.environ, "COURSE_DIR": str(course), "PYTHON": sys.executable}
    entrypoint = ["bash", str(ROOT / "docker" / "entrypoint.sh")]
    r = subprocess.run([*entrypoint, "submit", A, "ann", "--no-check"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (course / "submissions" / f"ann__{A}.ipynb").read_bytes() == mine.read_bytes(), r.stdout
    assert "Hand in this file as it is" in r.stdout
    make = subprocess.run(["make", "-n", "submit", f"PHASE={A}", "STUDENT=ann"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert f"-m tritoncourse submit {A} --student ann" in make.stdout, make.stdout + make.stderr
    r = subprocess.run([*entrypoint, "submit", A], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage: submit PHASE STUDENT" in r.stderr, r.stdout + r.stderr


# ---- the hand-out's own README and Makefile (python -m tritoncourse handout)

def test_the_handouts_readme_and_makefile_describe_the_handout(tmp_path):
    from tritoncourse.classroom import learner_files
    from tritoncourse.classroom.workflow import Course, make_handout

    out = tmp_path / "handout"
    assert make_handout(Course(ROOT), out) == 0
    readme, makefile = (out / "README.md").read_text(), (out / "Makefile").read_text()
    assert not (out / "tests").exists() and not (out / "tools").exists()
    for gone in ("make test", "make gpu-check", "make release", "make grade", "tests/", "tools/", "INSTRUCTORS"):
        assert gone not in readme and gone not in makefile, gone
    for kept in ("make lab", "make check PHASE=", "make submit PHASE=", "run --rm course submit 01_vector_add your_id"):
        assert kept in readme, kept
    # Every target its help and .PHONY name has a rule, and make reads it (dry runs, nothing installed).
    phony = next(line for line in makefile.splitlines() if line.startswith(".PHONY:")).split()[1:]
    assert set(phony) >= {"help", "lab", "check", "reset", "submit"} and "test" not in phony
    for target in phony:
        r = subprocess.run(["make", "-n", target, f"PHASE={A}", "STUDENT=ann"], cwd=out, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, (target, r.stdout + r.stderr)
    # The check that refused to write it otherwise: a README that names what the hand-out lacks.
    present = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert learner_files.problems({"README.md": readme, "Makefile": makefile}, present) == []
    bad = learner_files.problems({"README.md": readme + "\nRun `make test`, then read tools/gpu_check.py.\n",
                                  "Makefile": makefile}, present)
    assert any("`make test`" in p for p in bad) and any("tools/gpu_check.py" in p for p in bad), bad


def test_submit_refuses_another_phases_notebook(tmp_path):
    """Phases share locked cells' ids (setup, reference): a phase-2 notebook handed in as phase 1 is refused,
    naming the phase it is, and phase 1's own notebook is accepted."""
    from tritoncourse.learner.submit import check_submission
    from tritoncourse.notebooks import CourseError

    other = tmp_path / "mine.ipynb"
    other.write_bytes((ROOT / "release" / "02_softmax" / "02_softmax.ipynb").read_bytes())
    with pytest.raises(CourseError, match="is not the 01_vector_add notebook.*It looks like 02_softmax"):
        check_submission(A, "ann", other)
    own = tmp_path / "own.ipynb"
    own.write_bytes((ROOT / "release" / A / f"{A}.ipynb").read_bytes())
    assert check_submission(A, "ann", own)[0].cells

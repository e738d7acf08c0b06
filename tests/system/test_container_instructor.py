"""The instructor's image, built on the session's CPU learner image (tests/support/docker_images.py) and run on a Docker
engine: the grading sandbox's bubblewrap works in the container under the least privilege docs/CONTAINER.md gives
(SANDBOX_OPTS) and is refused without it, and the image grades a class with its learners' code in that sandbox,
every gradebook value equal to the session's serial baseline's. How the images are built, and skipped without an
engine: tests/system/test_container.py's docstring. Select them with `pytest -m container`.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from container_courses import INSTRUCTOR_IMAGE, PHASES, _chown_tree
from course import SUBMISSIONS, Fixture, gradebook_rows, graded_test_ids
from docker_images import ARTIFACTS, DOCKER_DIR, HOST_UID, ROOT, _ids, _record, build, docker, run

# The bubblewrap command of the grading sandbox (../shared/field-notes.md), with a check of what it gives.
BWRAP_PROBE = ("mkdir -p /tmp/scratch && bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp "
               "--bind /tmp/scratch /tmp/scratch --unshare-net --unshare-pid --unshare-user --uid 1000 --gid 1000 "
               "--die-with-parent --new-session sh -c 'echo sandbox uid $(id -u) pid $$; "
               "touch /ro-check 2>/dev/null && echo root writable || echo root read-only'")

pytestmark = [pytest.mark.container, pytest.mark.slow]


@pytest.fixture(scope="session")
def instructor_image(cpu_image, base, torch_index) -> str:
    build(INSTRUCTOR_IMAGE, "instructor", "FLAVOR=cpu", f"BASE_CPU={base}", f"TORCH_INDEX_URL={torch_index}",
          *_ids())
    return INSTRUCTOR_IMAGE


# The least privilege that lets the grading sandbox (bubblewrap, in a user namespace) run in the container,
# as docs/CONTAINER.md gives it: no capabilities at all, no new privileges, Docker's default seccomp
# refusals but for the namespace calls (docker/sandbox-seccomp.json), and /proc unmasked so that bwrap may
# mount a /proc of its own. `systempaths` is read by the docker client only (Compose v1 and the engine's API
# refuse it), so grading runs through `docker run`.
SANDBOX_OPTS = ("--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                "--security-opt", "seccomp=docker/sandbox-seccomp.json", "--security-opt", "systempaths=unconfined")


def instructor_run(image: str, course: Path, *command: str, sandbox: bool = True, timeout: float = 1200,
                   check: bool = True) -> subprocess.CompletedProcess:
    """`docker run` of the instructor's image on ``course``, from the course folder, as docs/CONTAINER.md."""
    opts = SANDBOX_OPTS if sandbox else ()
    return run(docker(), "run", "--rm", "-v", f"{course}:/course", *opts, image, *command, cwd=course,
               timeout=timeout, check=check)


def test_docs_give_the_tested_sandbox_settings():
    text = (ROOT / "docs" / "CONTAINER.md").read_text()
    assert " ".join(SANDBOX_OPTS) in " ".join(text.split()), "docs/CONTAINER.md must give SANDBOX_OPTS as tested"


def test_bubblewrap_runs_in_the_instructor_container_only_with_the_sandbox_settings(instructor_image, tmp_path):
    """The grading sandbox's bwrap command inside the instructor's image under SANDBOX_OPTS: a read-only
    root, its own pids, the learner's uid; the course's sandbox reports itself usable. With Docker's
    defaults the same command is refused and grading would refuse to run: the settings are needed."""
    course = _instructor_course(tmp_path / "course")
    proc = instructor_run(instructor_image, course, "bash", "-c", BWRAP_PROBE, check=False)
    assert proc.returncode == 0 and "sandbox uid 1000 pid 2" in proc.stdout and "root read-only" in proc.stdout, \
        proc.stdout + proc.stderr
    status = "python -c 'from tritoncourse.grading import sandbox; print(sandbox.status())'"
    proc = instructor_run(instructor_image, course, "bash", "-c", status)
    assert "grading sandbox: bubblewrap" in proc.stdout and "user namespace" in proc.stdout, proc.stdout
    plain = instructor_run(instructor_image, course, "bash", "-c", BWRAP_PROBE, sandbox=False, check=False)
    assert plain.returncode != 0 and "sandbox uid" not in plain.stdout, plain.stdout + plain.stderr
    plain = instructor_run(instructor_image, course, "bash", "-c", status, sandbox=False)
    assert "grading sandbox UNAVAILABLE" in plain.stdout, plain.stdout


def _instructor_course(dest: Path) -> Path:
    """An instructor's course folder: source/ of phase 1, the course's nbgrader_config.py, the package,
    the compose file; released and a class submitted inside the container by the test."""
    dest.mkdir(parents=True)
    shutil.copytree(ROOT / "source" / PHASES[0], dest / "source" / PHASES[0])
    shutil.copy2(ROOT / "nbgrader_config.py", dest)
    shutil.copytree(ROOT / "tritoncourse", dest / "tritoncourse", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(DOCKER_DIR, dest / "docker")
    _chown_tree(dest)
    return dest


# A small class, graded two at a time: a correct learner, and one whose kernel forgets the mask (its stray
# read crashes the check in the sandbox, and its notebook's kernel dies: it loses only those tests). Learners of the
# session's serial baseline (tests/support/baseline.py), handing in the very files it graded.
CLASS = ("correct_other_zero", "wrong_no_mask")


def test_instructor_image_grades_a_class_sandboxed(instructor_image, serial_baseline, tmp_path):
    """In the instructor's image under SANDBOX_OPTS: release phase 1 with nbgrader, grade a class
    of two with `python -m tritoncourse grade`, every learner's code in the bubblewrap sandbox, export the
    grades; each learner gets what the host's grading gives them: every gradebook value equal to the session's
    serial baseline's (plain nbgrader on the host), and the tests their fixture names lost."""
    course = _instructor_course(tmp_path / "course")

    def in_container(*command: str) -> subprocess.CompletedProcess:
        return instructor_run(instructor_image, course, *command)

    start = time.monotonic()
    in_container("nbgrader", "generate_assignment", PHASES[0], "--log-level=WARN")
    release = nbformat.read(course / "release" / PHASES[0] / f"{PHASES[0]}.ipynb", as_version=4)
    for student in CLASS:
        dest = course / "submitted" / student / PHASES[0]
        dest.mkdir(parents=True)
        shutil.copy2(serial_baseline.notebook(student), dest / f"{PHASES[0]}.ipynb")
    _chown_tree(course)
    graded = in_container("python", "-m", "tritoncourse", "grade", PHASES[0], "--jobs", "2")
    assert "grading sandbox: bubblewrap" in graded.stdout + graded.stderr, graded.stdout + graded.stderr
    in_container("python", "-m", "tritoncourse", "export", PHASES[0], "-o", "grades.csv")
    _record("instructor grades a class of 2", seconds=round(time.monotonic() - start, 1))
    (ARTIFACTS / "instructor-grade.log").write_text(graded.stdout + graded.stderr)

    rows = gradebook_rows(f"sqlite:///{course / 'gradebook.db'}")
    reference = gradebook_rows(serial_baseline.url())
    assert rows == {(PHASES[0], s): reference[(PHASES[0], s)] for s in CLASS}, (rows, reference)
    tests = graded_test_ids(release)
    for student in CLASS:
        fx = Fixture.load(SUBMISSIONS / PHASES[0] / f"{student}.py")
        scores = {gid: g[3] for gid, g in rows[(PHASES[0], student)]["notebooks"][PHASES[0]]["grades"].items()}
        lost = {t for t in tests if scores[t] == 0}
        assert lost == (set() if fx.all_pass else fx.expect_fail), f"{student} lost {sorted(lost)}"
    grades = (course / "grades.csv").read_text()
    assert all(student in grades for student in CLASS), grades
    for path in (course / "gradebook.db", course / "grades.csv"):
        assert path.stat().st_uid == HOST_UID, f"{path.name} belongs to uid {path.stat().st_uid}"

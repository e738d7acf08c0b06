"""Course folders as the course's containers mount them at /course (tests/system/test_container.py,
tests/system/test_container_instructor.py): the phases, a learner's folder (``learner_course``), ownership by the host
user, `docker run` on a folder; and the image names the compose file runs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nbformat

from docker_images import DOCKER_DIR, HOST_GID, HOST_UID, ROOT, docker, run

# The compose file's image names: the tests build them, compose runs them.
INSTRUCTOR_IMAGE, GPU_PYTHON_IMAGE = "triton-course:instructor-cpu", "triton-course-test:gpu-python"
PHASES = sorted(p.name for p in (ROOT / "release").iterdir() if (p / f"{p.name}.ipynb").exists())


# ---- course folders, as mounted at /course ----

def _chown_tree(path: Path) -> None:
    if os.getuid() == 0:
        for p in [path, *path.rglob("*")]:
            os.lchown(p, HOST_UID, HOST_GID)


def learner_course(dest: Path, solved: list[str], missing: tuple[str, ...] = ()) -> Path:
    """A learner's course folder: what `make handout` gives (no source/), the compose file, and notebooks/
    with the phases in ``solved`` holding the source's solutions (the others as released), except
    ``missing``, left for `lab` to create. Owned by the host user."""
    from learner_lab import learner_notebook

    dest.mkdir(parents=True)
    shutil.copytree(ROOT / "release", dest / "release")
    shutil.copytree(ROOT / "tritoncourse", dest / "tritoncourse", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(DOCKER_DIR, dest / "docker")
    (dest / "notebooks").mkdir()
    shutil.copy2(ROOT / "notebooks" / "nbgrader_config.py", dest / "notebooks")
    for phase in PHASES:
        if phase in missing:
            continue
        nb = learner_notebook(phase) if phase in solved else nbformat.read(
            ROOT / "release" / phase / f"{phase}.ipynb", as_version=4)
        nbformat.write(nb, dest / "notebooks" / f"{phase}.ipynb")
    _chown_tree(dest)
    return dest


def docker_run(image: str, course: Path, *command: str, opts: tuple[str, ...] = (), timeout: float = 900,
               check: bool = True) -> subprocess.CompletedProcess:
    return run(docker(), "run", "--rm", "-v", f"{course}:/course", *opts, image, *command, timeout=timeout,
               check=check)

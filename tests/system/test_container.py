"""The images of docker/, built and run on a Docker engine: what a learner and an instructor get.

Built here, once per test session, with Debian's client (/usr/bin/docker, BuildKit built in):
- a local base (tools/docker-local-base.sh: debootstrap bookworm + this machine's Python 3.11), passed as
  ``BASE_CPU``, because no base image can be pulled on CI's machines;
- torch's CPU wheel from a local index (the wheel this machine's pip finds, served on 127.0.0.1), passed
  as ``TORCH_INDEX_URL``; everything else comes from the package registries as in a learner's build;
- the CPU learner image, the CPU instructor image, and the GPU flavour's Python layer on a stand-in for
  PyTorch's image (the local base with torch's CPU build installed system-wide, as torch is there).

Then, in the images: the lock's pins; no solution, gradebook or submission in the image or its build
context; `course check all` on a course whose notebooks hold the source's solutions; `lab-cpu` started by
docker-compose from the real compose file, healthy, driven by tests/support/learner_lab.py's browser steps (a
notebook runs, a widget renders, Validate passes), files saved on the mounted course owned by the host
user; and the instructor image grading a class with its learners' code in the bubblewrap sandbox, nested
in the container under the least privilege docs/CONTAINER.md gives (SANDBOX_OPTS; refused without them):
tests/system/test_container_instructor.py. Course folders as mounted at /course: tests/support/container_courses.py.

Sizes and build times go to tests/artifacts/container/images.json. Needs a Docker engine (root:
`bash tools/docker-engine.sh` installs and starts one): without one every test skips and says so, except in
CI as root, where it fails. TRITONCOURSE_SKIP_CONTAINER=1 skips them; TRITONCOURSE_BASE_CPU=python:3.11-slim-
bookworm and TRITONCOURSE_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu build as a learner does where
images and PyTorch's index can be reached. Select them with `pytest -m container`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from container_courses import GPU_PYTHON_IMAGE, PHASES, docker_run, learner_course
# The engine, the base, torch's wheel and the CPU learner image (fixtures base, torch_index, cpu_image): in
# tests/support/docker_images.py, shared with tests/system/test_hub_docker.py and registered by tests/conftest.py.
from docker_images import ARTIFACTS, DOCKER_DIR, HOST_GID, HOST_UID, ROOT, _ids, _record, build, docker, run
from learner_lab import KernelWaits
from servers import free_port

GPU_STAND_IN = "triton-course-test-base:bookworm-torch"
# The phases `check all` runs in the CPU image (test_course_check_all_passes_in_the_cpu_image): the first and the last.
CHECKED_IN_IMAGE = (PHASES[0], PHASES[-1])

pytestmark = [pytest.mark.container, pytest.mark.slow]


# ---- the learner's image ----

def test_learner_image_has_the_locks_pins(cpu_image):
    """The image's environment is requirements/lock.txt with torch-cpu.txt's torch, checked inside."""
    proc = run(docker(), "run", "--rm", "--entrypoint", "python", cpu_image, "/opt/course/check_pins.py",
               "/opt/course-requirements")
    assert "pins OK" in proc.stdout and "+cpu" in proc.stdout, proc.stdout


def _image_files(image: str) -> list[str]:
    """Every path of the image's file system, as `find / -xdev` lists it in a container of the image (no network,
    as root, so nothing is unreadable). The same paths as `docker export` gives but Docker's own (/.dockerenv and
    the device nodes of /dev), without streaming the ~2.5 GB image through a pipe: 1 s of CPU instead of 15."""
    proc = run(docker(), "run", "--rm", "--network=none", "--user", "0", "--entrypoint", "find", image, "/", "-xdev")
    return [line.lstrip("/") for line in proc.stdout.splitlines() if line.strip("/")]


def _course_secrets_in(paths: list[str]) -> list[str]:
    """Paths that are the course's solutions, hidden tests, gradebook or submissions."""
    source_files = [p.relative_to(ROOT / "source").as_posix() for p in (ROOT / "source").rglob("*") if p.is_file()]
    bad = []
    for path in paths:
        path = path.lstrip("./")
        parts = path.split("/")
        if "site-packages" not in parts and any(
                name in ("gradebook.db", "submitted", "autograded", "submissions", "feedback") for name in parts):
            bad.append(path)  # (nbgrader's own documentation has example folders of those names)
        elif path.startswith("course/") and path != "course/":
            bad.append(path)  # the course is mounted, never copied in
        elif any(path.endswith("/" + f) or path == f for f in source_files):
            bad.append(path)
    return bad


def test_learner_image_and_its_build_context_hold_no_solutions(cpu_image, base, tmp_path):
    """No file of source/, no gradebook, no submission: in the image's file listing, nor in the build
    context the Dockerfile's ignore file lets through (sent to a build that copies all of it out)."""
    files = _image_files(cpu_image)
    assert len(files) > 10000, f"the image lists only {len(files)} files"
    assert any(f.endswith("opt/course/check_pins.py") for f in files)
    bad = _course_secrets_in(files)
    assert not bad, f"the learner's image holds course files it must not: {bad[:20]}"

    probe = tmp_path / "context.Dockerfile"
    probe.write_text("FROM scratch\nCOPY . /\n")
    shutil.copy2(DOCKER_DIR / "Dockerfile.dockerignore", tmp_path / "context.Dockerfile.dockerignore")
    out = tmp_path / "context"
    run(docker(), "build", "-q", "-f", str(probe), "-o", f"type=local,dest={out}", str(ROOT),
        env=dict(os.environ, DOCKER_BUILDKIT="1"))
    sent = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    copied = sorted({src for src in re.findall(r"^COPY (?:--\S+ )*(.+) \S+$",
                                               (DOCKER_DIR / "Dockerfile").read_text(), re.M)
                     for src in src.split()})
    assert sent == copied, f"the build context holds {sent}; the Dockerfile copies {copied}"
    assert not _course_secrets_in(sent)


def test_course_check_all_passes_in_the_cpu_image(cpu_image, tmp_path):
    """`docker compose -f docker/compose.yaml run --rm course-cpu check all`: the phases' tests in the image, on
    notebooks holding the source's solutions; and a phase left as released fails there, so the check is real.

    `all` runs over the course's release/: here the first phase and the last (CHECKED_IN_IMAGE), the interpreter's
    simplest kernel and the phase that needs the most of the image (torch.compile's trace of a model calling a custom
    op, and autograd through it). Every phase's reference passes the same checks on the host, whose packages the image's
    lock pins (test_learner_image_has_the_locks_pins): tests/workflows/test_grading.py's full marks, and
    tests/system/test_container_files.py's entrypoint runs two phases' notebooks. All six phases here took 62 s of a
    2-core CI run (2026-11-28)."""
    course = learner_course(tmp_path / "course", solved=PHASES)
    for phase in set(PHASES) - set(CHECKED_IN_IMAGE):
        shutil.rmtree(course / "release" / phase)  # (this test's own copy)
    start = time.monotonic()
    # The README's command (Compose v1 here: `docker-compose` for `docker compose`).
    compose = [shutil.which("docker-compose") or "docker-compose", "-p", f"tccheck{os.getpid()}",
               "-f", "docker/compose.yaml", "--profile", "cpu"]
    try:
        proc = run(*compose, "run", "--rm", "course-cpu", "check", "all", cwd=course, timeout=1200, check=False)
    finally:
        run(*compose, "down", cwd=course, check=False)  # the project's network
    _record("course check all", seconds=round(time.monotonic() - start, 1))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert f"phases: {len(CHECKED_IN_IMAGE)} passed, 0 failed" in proc.stdout, proc.stdout[-3000:]
    unsolved = learner_course(tmp_path / "unsolved", solved=[], missing=tuple(PHASES[1:]))
    proc = docker_run(cpu_image, unsolved, "check", PHASES[0], check=False)
    assert proc.returncode == 1 and "FAILED" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


# ---- lab-cpu through the compose file, in the browser ----

class ComposeLab(KernelWaits):
    """`docker-compose --profile cpu up -d lab-cpu` in a course folder: the same interface as
    tests/system/test_browser.py's JupyterLab (base, token, api, wait_kernel_idle, log)."""

    def __init__(self, course: Path):
        self.course = course
        self.port = free_port()
        self.project = f"tctest{os.getpid()}"
        self.env = dict(os.environ, JUPYTER_PORT=str(self.port), HOST_UID=str(HOST_UID), HOST_GID=str(HOST_GID))
        # The image's own health check, polled every 2 s rather than every 30 s (an override of the timing only).
        override = course / "docker" / "test-override.yaml"
        override.write_text("version: '3.8'\nservices:\n  lab-cpu:\n    healthcheck:\n      interval: 2s\n"
                            "      start_period: 120s\n")
        self.compose = [shutil.which("docker-compose") or "docker-compose", "-p", self.project,
                        "-f", "docker/compose.yaml", "-f", "docker/test-override.yaml", "--profile", "cpu"]
        self.token = ""

    def _compose(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        # From the course folder, as the README says.
        return run(*self.compose, *args, cwd=self.course, env=self.env, check=check, timeout=timeout)

    def up(self, timeout: float = 180) -> float:
        start = time.monotonic()
        self._compose("up", "-d", "--no-build", "lab-cpu")
        container = self._compose("ps", "-q", "lab-cpu").stdout.strip()
        deadline = time.monotonic() + timeout
        status = ""
        while time.monotonic() < deadline:
            status = run(docker(), "inspect", container, "--format", "{{.State.Health.Status}}").stdout.strip()
            if status == "healthy":
                break
            assert status in ("starting", "healthy"), f"lab-cpu is {status}:\n{self.log()}"
            time.sleep(1)
        assert status == "healthy", f"lab-cpu was not healthy within {timeout} s ({status}):\n{self.log()}"
        healthy_after = time.monotonic() - start
        # The address JupyterLab prints, as the learner opens it.
        m = re.search(rf"http://127\.0\.0\.1:8888/lab\?token=(\w+)", self.log())
        assert m, f"JupyterLab printed no address with a token:\n{self.log()}"
        self.token = m.group(1)
        return healthy_after

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, data: dict | None = None, method: str | None = None):
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     data=None if data is None else json.dumps(data).encode(),
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = resp.read()
            return json.loads(body) if body else None

    def log(self) -> str:
        return self._compose("logs", "--no-color", "lab-cpu", check=False).stdout[-6000:]

    def down(self) -> None:
        self._compose("down", "--timeout", "20", check=False)


def test_lab_cpu_serves_the_course_in_the_browser_and_saves_as_the_host_user(cpu_image, tmp_path):
    """docker/compose.yaml's lab-cpu: healthy, creates a missing notebook from release/, and in the browser
    phase 1 runs, its widget redraws, Validate passes; what it saves belongs to the host user."""
    from playwright.sync_api import expect, sync_playwright

    from learner_lab import CHROMIUM, CHROMIUM_ARGS, TEST_SETTINGS, _drive, _requirements_or_fail

    _requirements_or_fail()
    course = learner_course(tmp_path / "course", solved=[PHASES[0]], missing=(PHASES[-1],))
    lab = ComposeLab(course)
    shots = ARTIFACTS / "browser"
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    try:
        _record("lab-cpu", healthy_after_s=round(lab.up(), 1))
        created = course / "notebooks" / f"{PHASES[-1]}.ipynb"
        assert created.exists(), f"lab did not create {created.name} from release/"
        for plugin, settings in TEST_SETTINGS.items():  # the browser test's own setting, through the API
            lab.api(f"/lab/api/settings/{plugin}", {"raw": json.dumps(settings)}, method="PUT")
        lab.api("/api/contents/saved-by-the-learner.txt",
                {"type": "file", "format": "text", "content": "mine\n"}, method="PUT")
        js_errors: list[str] = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.on("pageerror", lambda err: js_errors.append(str(err)))
                page.set_default_timeout(60_000)

                def shot(name: str) -> None:
                    page.screenshot(path=str(shots / f"{name}.png"))

                try:
                    _drive(page, lab, shot, expect)
                except BaseException:
                    shot("failure")
                    raise
            finally:
                browser.close()
        assert not js_errors, "JavaScript errors in the page:\n" + "\n".join(js_errors)
        (shots / "lab-cpu.log").write_text(lab.log())
    finally:
        lab.down()
    # Validate saved the notebook; lab created one; the API saved a file: all the host user's.
    for path in (course / "notebooks" / f"{PHASES[0]}.ipynb", created, course / "notebooks" /
                 "saved-by-the-learner.txt"):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (HOST_UID, HOST_GID), \
            f"{path.name} belongs to {st.st_uid}:{st.st_gid}, not the host user {HOST_UID}:{HOST_GID}"
    saved = nbformat.read(course / "notebooks" / f"{PHASES[0]}.ipynb", as_version=4)
    assert any(c.get("outputs") for c in saved.cells if c.cell_type == "code"), "the saved notebook has no outputs"


# ---- the GPU flavour, everything but CUDA ----

def test_gpu_flavour_python_layer_builds_on_the_test_base(base, torch_index, tmp_path):
    """docker/Dockerfile's FLAVOR=gpu on a stand-in for PyTorch's image (the base with torch's CPU build
    installed system-wide, where PyTorch's image has its CUDA build): gcc, the venv that sees the base's
    torch, the lock and its pin check, the learner's JupyterLab. CUDA itself cannot be tried here."""
    stand_in = tmp_path / "gpu-stand-in.Dockerfile"
    torch_pin = re.search(r"^torch==(\S+)", (ROOT / "requirements" / "torch-cpu.txt").read_text(), re.M).group(1)
    stand_in.write_text(f"FROM {base}\nARG TORCH_INDEX_URL\n"
                        f"RUN python -m ensurepip && python -m pip install --no-cache-dir --no-deps "
                        f"--index-url \"$TORCH_INDEX_URL\" torch=={torch_pin}\n")
    build(GPU_STAND_IN, "", f"TORCH_INDEX_URL={torch_index}", dockerfile=stand_in, context=tmp_path,
          log_name="gpu-stand-in")
    build(GPU_PYTHON_IMAGE, "learner", "FLAVOR=gpu", f"BASE_GPU={GPU_STAND_IN}", *_ids())
    proc = run(docker(), "run", "--rm", "--entrypoint", "bash", GPU_PYTHON_IMAGE, "-c",
               "gcc --version | head -1 && python /opt/course/check_pins.py /opt/course-requirements "
               "&& python -c 'import torch, sys; print(torch.__file__, sys.prefix)'")
    assert "pins OK" in proc.stdout and "/usr/local/lib/python3.11/site-packages/torch" in proc.stdout \
        and "/opt/venv" in proc.stdout, proc.stdout

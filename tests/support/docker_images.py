"""The Docker engine and the course's CPU learner image, built once per test session for every module that needs
them: tests/system/test_container.py (the images) and tests/system/test_hub_docker.py (the hub's DockerSpawner runs the
learner image). tests/conftest.py registers the fixtures ``base``, ``torch_index`` and ``cpu_image``;
test_container.py's docstring tells how they are built (a local base, torch's CPU wheel from a local index) and how to
skip them.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "docker"
ARTIFACTS = ROOT / "tests" / "artifacts" / "container"
BASE_IMAGE = "triton-course-test-base:bookworm"
# The compose file's name of the CPU learner image: the tests build it, compose runs it.
CPU_IMAGE = "triton-course:cpu"
TORCH_INDEX_PORT = 38765
# The host user the course belongs to: ours, or a stand-in when the tests run as root (as CI does).
HOST_UID = os.getuid() if os.getuid() != 0 else 4321
HOST_GID = os.getgid() if os.getuid() != 0 else 4321


# ---- the engine, the base, torch's wheel ----

def _docker_client() -> str | None:
    """A client that builds with BuildKit (hub/tritonhub.py's docker_client, the one the hub's setup uses), or None."""
    import importlib.util

    import sys

    tritonhub = sys.modules.get("tritonhub")
    if tritonhub is None:
        spec = importlib.util.spec_from_file_location("tritonhub", ROOT / "hub" / "tritonhub.py")
        tritonhub = importlib.util.module_from_spec(spec)
        sys.modules["tritonhub"] = tritonhub  # its dataclasses look their module up there
        spec.loader.exec_module(tritonhub)
    try:
        return tritonhub.docker_client()
    except SystemExit:  # no such client: the hub's setup stops there, the tests skip or fail as they say
        return None


@functools.lru_cache(maxsize=None)
def docker() -> str:
    if os.environ.get("TRITONCOURSE_SKIP_CONTAINER") == "1":
        pytest.skip("TRITONCOURSE_SKIP_CONTAINER=1")
    client = _docker_client()
    answers = client and subprocess.run([client, "info"], capture_output=True, timeout=30).returncode == 0
    if not answers:
        why = ("no Docker client that builds with BuildKit (Debian: apt-get install docker.io)" if not client
               else "the Docker engine does not answer")
        message = f"{why}: `sudo bash tools/docker-engine.sh` installs and starts one"
        if os.environ.get("CI") and os.getuid() == 0:
            pytest.fail(message + " (CI's set-up, tools/install-ci-deps.sh, must have run it)", pytrace=False)
        pytest.skip(message)
    return client


def run(*args: str, timeout: float = 900, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)[:300]} exited {proc.returncode}:\n{proc.stdout[-6000:]}\n"
                             f"{proc.stderr[-6000:]}")
    return proc


TIMINGS: dict[str, dict] = {}


def _record(name: str, **values) -> None:
    TIMINGS.setdefault(name, {}).update(values)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "images.json").write_text(json.dumps(TIMINGS, indent=2) + "\n")


def _image_size_mb(image: str) -> float:
    return int(run(docker(), "image", "inspect", image, "--format", "{{.Size}}").stdout) / 1e6


@pytest.fixture(scope="session")
def base() -> str:
    """The CPU base image: the official one where it can be pulled, else one made here."""
    given = os.environ.get("TRITONCOURSE_BASE_CPU")
    if given:
        return given
    start = time.monotonic()
    proc = run("bash", str(ROOT / "tools" / "docker-local-base.sh"), BASE_IMAGE, timeout=1200,
               env=dict(os.environ, DOCKER=docker(), PYTHON=sys.executable))
    _record("base", image=BASE_IMAGE, seconds=round(time.monotonic() - start, 1),
            size_mb=round(_image_size_mb(BASE_IMAGE)), log=proc.stdout.strip())
    return BASE_IMAGE


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def torch_index(tmp_path_factory) -> str:
    """A PEP 503 index holding torch's CPU wheel, as this machine's pip finds it (its configured index or
    wheel folder), served on 127.0.0.1 for the builds (they run with --network host)."""
    given = os.environ.get("TRITONCOURSE_TORCH_INDEX_URL")
    if given:
        yield given
        return
    folder = tmp_path_factory.mktemp("torch-index")
    run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "--retries", "1",
        "--timeout", "20", "--extra-index-url", "https://download.pytorch.org/whl/cpu",
        "-r", str(ROOT / "requirements" / "torch-cpu.txt"), "-d", str(folder / "torch"), timeout=900)
    wheels = list((folder / "torch").glob("torch-*+cpu-*.whl"))
    assert wheels, f"pip found no CPU build of torch: {list((folder / 'torch').iterdir())}"
    handler = functools.partial(_Quiet, directory=str(folder))
    try:  # the same address each session keeps the image layers built from it reusable
        server = http.server.ThreadingHTTPServer(("127.0.0.1", TORCH_INDEX_PORT), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def build(tag: str, target: str, *build_args: str, dockerfile: Path = DOCKER_DIR / "Dockerfile",
          context: Path = ROOT, log_name: str | None = None) -> None:
    args = [a for pair in build_args for a in ("--build-arg", pair)]
    start = time.monotonic()
    proc = run(docker(), "build", "--progress=plain", "--network", "host", "-f", str(dockerfile),
               *(["--target", target] if target else []), *args, "-t", tag, str(context), timeout=1800,
               check=False, env=dict(os.environ, DOCKER_BUILDKIT="1"))
    seconds = round(time.monotonic() - start, 1)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"build-{log_name or tag.replace(':', '-').replace('/', '-')}.log").write_text(proc.stderr)
    assert proc.returncode == 0, f"docker build of {tag} failed:\n{proc.stderr[-8000:]}"
    _record(tag, target=target, seconds=seconds, size_mb=round(_image_size_mb(tag)),
            build_args=[a for a in build_args if not a.startswith("TORCH_INDEX_URL=http://127.")])


def _ids() -> list[str]:
    return [f"NB_UID={HOST_UID}", f"NB_GID={HOST_GID}"]


@pytest.fixture(scope="session")
def cpu_image(base, torch_index) -> str:
    build(CPU_IMAGE, "learner", "FLAVOR=cpu", f"BASE_CPU={base}", f"TORCH_INDEX_URL={torch_index}", *_ids())
    return CPU_IMAGE

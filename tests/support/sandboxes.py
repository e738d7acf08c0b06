"""The grading sandbox's unit tests' helpers (tests/grader/test_sandbox_isolation.py, test_sandbox_bounds.py,
test_sandbox_cgroups.py; the hostile suite, tests/workflows/test_sandbox_hostile.py, uses a few): run Python in a
sandbox and read its report, a sandbox made and closed per test (``box``), the module check that the sandbox can run
here (``sandbox_works``), waiting for processes, and a PATH without a command. A test module imports the two fixtures
(``from sandboxes import box, sandbox_works``) so that pytest finds them there."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from course import BIN
from tritoncourse.grading import sandbox
from tritoncourse.grading.sandbox import INSTALL_COMMAND, Limits, Sandbox


@pytest.fixture(scope="module", autouse=True)
def sandbox_works():
    why = sandbox.problem()
    assert why is None, f"the grading sandbox cannot run here ({why}): {INSTALL_COMMAND}"


def run_in(box: Sandbox, code: str, timeout: float = 60, watch: bool = False,
           args: list[str] = ()) -> subprocess.CompletedProcess:
    """Run Python ``code`` (with ``args``) inside ``box``; with ``watch`` the watchdog guards it."""
    proc = subprocess.Popen(box.argv([sys.executable, "-I", "-c", textwrap.dedent(code), *args]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    if watch:
        box.watch(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        sandbox.kill_process_tree(proc.pid)
        out, err = proc.communicate()
        raise AssertionError(f"the sandboxed process did not end within {timeout} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def report(proc: subprocess.CompletedProcess) -> dict:
    """The JSON object the sandboxed code printed last."""
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return json.loads(lines[-1])


@pytest.fixture
def box():
    boxes = []

    def make(limits: Limits | None = None, **fields) -> Sandbox:
        boxes.append(Sandbox("unit", limits=limits or Limits(**fields)))
        return boxes[-1]

    yield make
    for b in boxes:
        b.close()


def _marked(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc)
    return found


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def kernel_bounds_expected() -> bool:
    """As root, unless the instructor turned them off, a sandbox here gets a cgroup and a tmpfs (the course's CPU
    machines: cgroup v1; its GPU machines: cgroup v2, the grader's own group nested, memory only). Not with the
    NVIDIA devices where only a sibling group could be had: a sibling's device rules may not give the GPU, so such
    a sandbox has no cgroup and says so."""
    if sandbox._gpu_devices() and not sandbox._cgroup_plan(allow_sibling=False)[0]:
        return False
    return os.geteuid() == 0 and all(os.environ.get(name, "").lower() != "off"
                                     for name in (sandbox.CGROUP_ENV, sandbox.TMPFS_ENV))


def _path_without(command: str, tmp_path: Path) -> str:
    """A PATH of one folder with links to every command of this PATH but ``command``."""
    folder = tmp_path / f"no-{command}"
    folder.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep) + [str(BIN)]:
        with contextlib.suppress(OSError):
            for entry in os.scandir(d):
                if entry.name != command and not (folder / entry.name).exists() and os.access(entry.path, os.X_OK):
                    (folder / entry.name).symlink_to(entry.path)
    return str(folder)

"""The grading sandbox's settings and the host facts it starts from: the instructor's environment variables (the
opt-out, the cgroup and tmpfs switches), what of the grader's environment passes inside (:func:`sandbox_env`), where
bubblewrap and the NVIDIA devices are, and whether the grader is root.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent  # tritoncourse/
OPT_OUT_ENV = "TRITONCOURSE_UNSANDBOXED_GRADING"
OPT_OUT_VALUE = "i-accept-that-learners-can-forge-grades"
INSTALL_COMMAND = "sudo apt-get install -y bubblewrap"
# Environment variables a sandboxed process may inherit, by exact name: an allow-list, never a prefix (every other
# variable is dropped: the gradebook's URL and password, the judge zygote's socket, the hub's and any other token,
# every other TRITONCOURSE_* setting of the grader's own). Of the course's own, only what code inside reads:
# TRITONCOURSE_HEADLESS (the widgets: draw once, no live picture) and torch's allocator settings (the runner under
# compute-sanitizer needs PYTORCH_NO_CUDA_MEMORY_CACHING; isolated.py sets it there). TRITONCOURSE_SEED stays out:
# the seed is the judge's, and no sandboxed process draws from it (the notebook runs no test under autograde).
PASS_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "TRITON_INTERPRET", "NBGRADER_EXECUTION",
            "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH",
            "CUDA_HOME", "CUDA_PATH", "TRITON_PTXAS_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "TRITONCOURSE_HEADLESS", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF")
UID_BASE = 61000
# "off": no cgroup (rlimits and the watchdog only); a cgroup2 folder: make the sandboxes' cgroups there (delegated to
# the grader, with the memory and pids controllers); unset or "auto": found as cgroups._cgroup_plan says.
CGROUP_ENV = "TRITONCOURSE_SANDBOX_CGROUP"
TMPFS_ENV = "TRITONCOURSE_SANDBOX_TMPFS"  # "off": the shared folder is not a filesystem of its own (watchdog only)


class SandboxUnavailable(RuntimeError):
    """Grading cannot run sandboxed here (and the instructor did not opt out)."""


def opted_out(env=os.environ) -> bool:
    return env.get(OPT_OUT_ENV, "") == OPT_OUT_VALUE


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _is_root() -> bool:
    return os.geteuid() == 0


def _gpu_devices() -> list[str]:
    """The NVIDIA device nodes (empty on a machine without a GPU)."""
    dev = Path("/dev")
    nodes = sorted(str(p) for p in dev.glob("nvidia*") if not p.is_dir())
    nodes += sorted(str(p) for p in (dev / "nvidia-caps").glob("*")) if (dev / "nvidia-caps").is_dir() else []
    return nodes


def python_path_dirs(env=os.environ) -> list[str]:
    """The folders of PYTHONPATH (packages installed beside the environment, as on the GPU machines), without
    any that holds the course itself (its source/ and gradebook must stay out of reach)."""
    course = str(PACKAGE.parent)
    out = []
    for entry in env.get("PYTHONPATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real == "/" or course == real or course.startswith(real + os.sep):
            continue
        out.append(real)
    return out


def sandbox_env(extra: dict | None = None, env=os.environ) -> dict:
    """The environment a sandboxed process gets: the allowed variables of ``env`` plus ``extra``."""
    out = {k: v for k, v in env.items() if k in PASS_ENV}
    if python_path_dirs(env):
        out["PYTHONPATH"] = os.pathsep.join(python_path_dirs(env))
    out.update(extra or {})
    return out

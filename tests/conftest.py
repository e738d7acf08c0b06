import os
import sys
from pathlib import Path

import pytest

# One math thread per process (torch's and OpenMP's pools default to one per core): a test run starts dozens of
# processes at once (gradings, judges, runners, notebook kernels), and their idle threads spin while the others
# wait for a core. One phase-1 reference grading here, 2 interleaved runs each, at idle: 13 s of busy CPU with the
# default pools, 11 s with one thread. An instructor's or CI's own setting is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

# Tests run on the CPU interpreter unless a GPU is present; the course's helpers are imported from the repo, the
# tests' own support modules (tests/support/) by their bare names.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cpu_profile  # noqa: E402
import scheduling  # noqa: E402
# The Docker engine's session fixtures (the base, torch's wheel, the CPU learner image), built once for
# test_container.py and test_hub_docker.py.
from docker_images import base, cpu_image, torch_index  # noqa: E402,F401
from tritoncourse.device import setup_device  # noqa: E402

DEVICE = setup_device()
os.environ.pop("TRITONCOURSE_SEED", None)

# The pyramid's tiers by folder (tests/README.md): `make test-fast` (-m "not slow") runs tests/units/ alone; every
# test of the slower tiers' folders is marked slow here (real nbgrader, every fixture judged, the sandbox, the
# browser, Docker, a hub), as are tests marked slow one by one in units/ (none today).
TESTS = Path(__file__).resolve().parent
SLOW_TIERS = {"judged", "grader", "workflows", "system"}


def _tier(item) -> str:
    """The tier folder of a test (tests/units/test_x.py -> units)."""
    return Path(item.path).resolve().relative_to(TESTS).parts[0]


def pytest_configure(config):
    scheduling.controller_setup(config)  # make test: -n N --dist loadgroup (tests/support/scheduling.py)
    cpu_profile.register(config)  # TRITONCOURSE_CPU_PROFILE=file: wall vs CPU per test (tests/support/cpu_profile.py)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _tier(item) in SLOW_TIERS:
            item.add_marker(pytest.mark.slow)
    scheduling.worker_groups(config, items)


_early: list = []  # the baseline's grading started at the session's start (baseline.EarlyBaseline), under xdist


def _baseline_folder(tmp_path_factory) -> Path:
    return tmp_path_factory.getbasetemp().parent / "serial-baseline"


def pytest_collection_finish(session):
    # Each generated course made once for the session and copied (tests/support/course.py's generated_template): all
    # workers' folder, or this run's own without xdist; set before the early baseline's process starts.
    from course import TEMPLATES_ENV

    base = session.config._tmp_path_factory.getbasetemp()
    os.environ.setdefault(TEMPLATES_ENV, str((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)
                                                    / "course-templates"))
    # One worker starts it (each collects the whole suite): gw0, before its first test.
    if os.environ.get("PYTEST_XDIST_WORKER") == "gw0" and any("serial_baseline" in getattr(item, "fixturenames", ())
                                                               for item in session.items):
        from baseline import EarlyBaseline

        _early.append(EarlyBaseline(_baseline_folder(session.config._tmp_path_factory)))


def pytest_sessionfinish(session):
    for early in _early:  # its nbgrader run ends with the session, not after it
        early.join()


@pytest.fixture(scope="session")
def serial_baseline(tmp_path_factory):
    """Phase 1's class graded once by plain serial `nbgrader autograde` (tests/support/baseline.py): the grades the
    classroom, Dask, PostgreSQL, Slurm and container gradings must equal."""
    from baseline import grade_baseline, shared_baseline

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return grade_baseline(tmp_path_factory.mktemp("serial-baseline") / "course")
    # Under pytest-xdist: graded once for all workers, by whichever asks first (the others wait for it).
    return shared_baseline(_baseline_folder(tmp_path_factory))

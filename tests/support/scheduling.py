"""How `make test` spreads the suite over pytest-xdist workers (``-n N --dist loadgroup``).

pytest-xdist's own ``xdist_group`` marks do not work with pytest 9.2 (xdist 3.8 renames ``item._nodeid``, which
pytest 9.2 no longer reads), so the groups travel another way: each worker writes them to a file named by
``GROUPS_ENV`` (set by the controller before the workers start), and the controller's scheduler
(:class:`_SchedulerPlugin`) reads that file to cut the collection into units of work.

Each test gets an ``xdist_group``: tests that share a module- or session-scoped fixture of their module (a class
graded once, a hub, an image) run on one worker, so that fixture is made once; tests parametrized by
``assignment`` are grouped per phase (test_grading's and test_verdicts' fixtures make each phase on demand). A test
that uses no such fixture is scheduled on its own. Groups start longest first (longest-processing-time scheduling), from
the seconds in tests/durations.json (a measured run; unknown tests count 1 s), so the long gradings overlap instead
of ending the run alone. The serial baseline, shared across modules, is made once for all workers
(conftest.py's ``serial_baseline``, under a file lock).

Without xdist (plain ``pytest``, ``make test-fast``) nothing here changes the order or the tests.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
GROUPS_ENV = "TRITONCOURSE_XDIST_GROUPS"
# Session fixtures shared across modules through a file lock (conftest.py), not a reason to group tests.
SHARED = {"serial_baseline"}


def _module(item) -> str:
    return item.module.__name__.rsplit(".", 1)[-1]


def _own_fixtures(item) -> list[str]:
    """The module- or session-scoped fixtures of the suite's own modules that the test uses, as
    ``defining_module:name``: its own module's, and those of helper modules that several test modules share (an
    image built once, e.g. tests/support/docker_images.py), which so put those modules' tests in one group. Fixtures of
    installed plugins (tmp_path_factory...) and ``SHARED`` ones are no reason to group."""
    info = getattr(item, "_fixtureinfo")
    autouse = set(info.initialnames) - set(info.argnames)  # cheap checks every test of a module runs
    tests_dir = Path(__file__).resolve().parents[1]
    out = []
    for name, defs in info.name2fixturedefs.items():
        d = defs[-1]
        if name in SHARED or name in autouse or d.scope not in ("module", "session", "package"):
            continue
        module = getattr(d.func, "__module__", "")
        try:
            source = Path(getattr(__import__("sys").modules.get(module), "__file__", "") or "").resolve()
        except (OSError, TypeError):
            continue
        if tests_dir in source.parents and source.stem != "conftest":
            out.append(f"{source.stem}:{name}")
    return out


def groups(items) -> dict[int, str | None]:
    """A group name for each item (by index): connected components of 'uses the same module fixture'; None for
    a test that uses none (it is scheduled on its own)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    keys = {}
    for i, item in enumerate(items):
        params = getattr(getattr(item, "callspec", None), "params", {})
        phase = params.get("assignment")
        nodes = [key + (f"[{phase}]" if phase else "") for key in _own_fixtures(item)]
        if not nodes:
            keys[i] = None
            continue
        for n in nodes[1:]:
            parent[find(n)] = find(nodes[0])
        keys[i] = nodes[0]
    return {i: (find(k) if k else None) for i, k in keys.items()}


WAITS_UNIT = "waits"  # the unit of the tests marked waits that no module fixture groups


def waits_together(items, names: dict[int, str | None]) -> dict[int, str | None]:
    """``names`` with every ungrouped test marked ``waits`` in one unit: they run one after the other on one worker
    while the others grade. Each a unit of its own, two went to the two workers at the start of a run, and the
    machine stood 7% busy for its first 22 s (2026-11-26, CI-like runs)."""
    return {i: (WAITS_UNIT if name is None and items[i].get_closest_marker("waits") is not None else name)
            for i, name in names.items()}


def order(items, names: dict[int, str | None]) -> list:
    """Items grouped, longest group first; the order inside a group (and so fixture set-up) is kept. Groups with a
    test marked ``waits`` (it mostly sleeps until a time bound) go before all others: at the end of a run they left
    both cores nearly idle for ~40 s (2026-11-26, CI-like run: two such tests at 18% and 39% of the machine busy),
    while beside the gradings their waiting costs nothing."""
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    cost: dict[str, float] = {}
    first: dict[str, int] = {}
    waits: set[str] = set()
    unit = [names[i] or item.nodeid for i, item in enumerate(items)]  # an ungrouped test is a unit of its own
    for i, item in enumerate(items):
        cost[unit[i]] = cost.get(unit[i], 0.0) + float(seconds.get(item.nodeid, 1.0))
        first.setdefault(unit[i], i)
        if item.get_closest_marker("waits") is not None:
            waits.add(unit[i])
    return [items[i] for i in sorted(range(len(items)),
                                     key=lambda i: (unit[i] not in waits, -cost[unit[i]], first[unit[i]], i))]


def controller_setup(config) -> None:
    """On the controller of ``-n N --dist loadgroup``: name the groups' file (the workers inherit the variable)
    and put the group scheduling (:class:`_SchedulerPlugin`) in xdist's place."""
    if hasattr(config, "workerinput") or getattr(config.option, "dist", "no") != "loadgroup":
        return
    os.environ[GROUPS_ENV] = str(Path(tempfile.mkdtemp(prefix="tritoncourse-xdist-")) / "groups.json")
    config.pluginmanager.register(_SchedulerPlugin(), "tritoncourse-scheduling")


def worker_groups(config, items) -> None:
    """On a worker: order the items (longest group first) and write each grouped test's group for the controller."""
    path = os.environ.get(GROUPS_ENV)
    if not path or not hasattr(config, "workerinput"):
        return
    names = waits_together(items, groups(items))
    by_id = {item.nodeid: names[i] for i, item in enumerate(items) if names[i]}
    items[:] = order(items, names)
    tmp = f"{path}.{os.getpid()}"
    Path(tmp).write_text(json.dumps(by_id))
    os.replace(tmp, path)  # every worker writes the same groups


class _SchedulerPlugin:
    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        from xdist.scheduler import LoadScopeScheduling

        class GroupScheduling(LoadScopeScheduling):
            """xdist's scope scheduling with the units read from the workers' groups file; a test of no group is
            a unit of its own. Units go out in the workers' order (``--no-loadscope-reorder``): longest first."""

            _groups: dict[str, str] | None = None

            def _split_scope(self, nodeid: str) -> str:
                if self._groups is None:
                    path = Path(os.environ[GROUPS_ENV])
                    self._groups = json.loads(path.read_text()) if path.exists() else {}
                return self._groups.get(nodeid, nodeid)

        return GroupScheduling(config, log)

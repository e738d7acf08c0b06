"""Where `make test`'s time goes: per test phase, wall seconds against CPU seconds (issue 32).

Opt-in: `TRITONCOURSE_CPU_PROFILE=/path/profile.jsonl make test`. Each line: the test, its phase (setup, call,
teardown), wall seconds, the machine's busy CPU seconds over that time (/proc/stat: every process, daemons and
sandboxes included, so it is exact only on an otherwise quiet machine), and this process's own and reaped
children's CPU seconds, when the phase started (time.time()) and on which pytest-xdist worker. A phase whose busy
CPU is far below wall x cores waits (limits, sleeps, servers); one near it is CPU-bound, and only cheaper work
shortens it.
"""
import json
import os
import time

import pytest


def _busy_cpu_seconds():
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _sample():
    t = os.times()
    return time.monotonic(), _busy_cpu_seconds(), t.user + t.system, t.children_user + t.children_system


class CpuProfile:
    def __init__(self, path):
        self.out = open(path, "a", buffering=1)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        yield from self._measure(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        yield from self._measure(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item):
        yield from self._measure(item, "teardown")

    def _measure(self, item, phase):
        started = time.time()
        before = _sample()
        yield
        after = _sample()
        wall, busy, own, children = (a - b for a, b in zip(after, before))
        if wall >= 0.5:
            self.out.write(json.dumps({"test": item.nodeid, "phase": phase, "wall": round(wall, 2),
                                       "busy_cpu": round(busy, 2), "own_cpu": round(own, 2),
                                       "children_cpu": round(children, 2), "start": round(started, 1),
                                       "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n")


def register(config):
    path = os.environ.get("TRITONCOURSE_CPU_PROFILE")
    if path:
        config.pluginmanager.register(CpuProfile(path), "tritoncourse-cpu-profile")

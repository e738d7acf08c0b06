"""Each learner's server on the local-process hub in control groups of its own: memory (all its processes together,
no swap beyond), CPU (a CFS quota: so many CPUs' worth of time) and processes (tasks at once, the pids controller),
enforced by the kernel, on cgroup v2 or v1, whichever the host has (docs/JUPYTERHUB.md, "Limits per learner").

Loaded by hub/jupyterhub_config.py in the hub's process (the hub's venv: it imports the grading sandbox's cgroup
helpers from ``tritoncourse``, which reads the mount table and this process's groups the same way).

Where the groups are made: ``tritonhub-learners/<user>`` below the hub's own group. cgroup v2 first (a current
distribution's only hierarchy): where the hub's own group is not the hierarchy's root, the hub's processes are moved
into a leaf of their own (``tritonhub-hub``) so that the group may give its children controllers (a cgroup2 group
holding processes cannot); under systemd that is allowed in the unit's own group with ``Delegate=yes``
(hub/tritonhub.service). Then, for a controller v2 does not have here, cgroup v1: a child of the hub's own group in
that controller's hierarchy (as on this project's CPU machines, where PID 1 is not systemd).

:class:`LimitedSpawner` (a LocalProcessSpawner) makes a learner's groups with the limits written before the server
starts, and its ``preexec_fn`` writes the server's pid into them as root, after the fork and before the setuid and
the exec: nothing of the learner's runs outside them, and the learner, not owning them, cannot leave them. Stopping
the server kills whatever is left in them (a kernel, a terminal's background job) and removes them.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Float, Integer, Set

from tritoncourse.grading.sandbox.cgroups import _Cgroups, _group_dir, _mountinfo, _own_cgroups

CONTROLLERS = ("memory", "cpu", "pids")
PARENT = "tritonhub-learners"  # the learners' groups' folder, below the hub's own group
HUB_LEAF = "tritonhub-hub"  # cgroup v2: where the hub's own processes move (a group with children holds none)
PERIOD_US = 100_000  # the CFS period (100 ms, as Docker's): quota = CPUs x period


def _enable(group: Path, controllers: list[str]) -> list[str]:
    """Enable ``controllers`` for the children of cgroup2 folder ``group``; the ones enabled afterwards."""
    for c in controllers:
        with contextlib.suppress(OSError):
            (group / "cgroup.subtree_control").write_text(f"+{c}")
    try:
        return [c for c in controllers if c in (group / "cgroup.subtree_control").read_text().split()]
    except OSError:
        return []


def _v2_parent(group: Path, root: bool) -> list[str]:
    """The wanted controllers cgroup2 folder ``group`` (the hub's own) can give its children, after moving the hub's
    processes into ``HUB_LEAF`` where the group is not the hierarchy's ``root``."""
    try:
        available = [c for c in CONTROLLERS if c in (group / "cgroup.controllers").read_text().split()]
        enabled = set((group / "cgroup.subtree_control").read_text().split())
    except OSError:
        return []
    if not available or not os.access(group, os.W_OK) or group.name.endswith(".slice"):
        return []
    if not root and set(available) - enabled:
        leaf = group / HUB_LEAF
        for _ in range(5):  # a process forked meanwhile lands in the group again: move it and retry
            with contextlib.suppress(OSError):
                leaf.mkdir(exist_ok=True)
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):  # gone meanwhile, or a kernel thread
                        (leaf / "cgroup.procs").write_text(pid)
            if set(_enable(group, available)) == set(available):
                break
    return _enable(group, available)


def plan(mountinfo: str | None = None, cgroup: str | None = None) -> tuple[dict[str, tuple[int, Path]], str]:
    """controller -> (cgroup version, the folder the learners' groups are made in), and what is missing (empty
    when every controller has a place). Makes the folder (and, on v2, enables the controllers in it)."""
    mounts, own = _mountinfo(mountinfo), _own_cgroups(cgroup)
    out: dict[str, tuple[int, Path]] = {}
    for fstype, point, root, _ in mounts if "" in own else ():
        group = _group_dir(point, root, own[""]) if fstype == "cgroup2" else None
        if group is not None and group.is_dir():
            if group.name == HUB_LEAF:  # moved there by an earlier start of the hub in this group
                group = group.parent
            usable = _v2_parent(group, group == Path(point))
            if usable:
                with contextlib.suppress(OSError):
                    (group / PARENT).mkdir(exist_ok=True)
                    out = {c: (2, group / PARENT) for c in _enable(group / PARENT, usable)}
            break
    for c in CONTROLLERS:
        for fstype, point, root, options in mounts if c not in out and c in own else ():
            group = _group_dir(point, root, own[c]) if fstype == "cgroup" and c in options else None
            if group is not None and (group / "cgroup.procs").is_file() and os.access(group, os.W_OK):
                with contextlib.suppress(OSError):
                    (group / PARENT).mkdir(exist_ok=True)
                    out[c] = (1, group / PARENT)
                break
    missing = [c for c in CONTROLLERS if c not in out]
    return out, ("" if not missing else f"no writable cgroup with the {' and '.join(missing)} controller"
                 f"{'s' if len(missing) > 1 else ''} for the hub (root? a cgroup2 group it may delegate?)")


hub_plan = functools.cache(plan)  # the hub's own, made once per process


class LearnerCgroups(_Cgroups):
    """One learner's groups, named by the user: the grading sandbox's memory and pids limits, counters, kill and
    removal (:class:`_Cgroups`), and a CPU quota. A controller with a limit of 0 is left out (no limit)."""

    def __init__(self, name: str, where: dict[str, tuple[int, Path]], memory: int, cpus: float, processes: int):
        self.existing(name, where).clear()  # an earlier server's leftovers (a hub killed with its servers running)
        chosen = {c: where[c] for c in ("memory", "pids") if c in where and (memory if c == "memory" else processes)}
        super().__init__(name, chosen, memory, processes)
        if cpus and "cpu" in where and not self.failed:
            version, parent = where["cpu"]
            folder, quota = parent / name, max(1000, int(cpus * PERIOD_US))
            try:
                if folder not in self.dirs.values():
                    folder.mkdir()
                self.dirs["cpu"], self.version["cpu"] = folder, version
                if version == 2:
                    (folder / "cpu.max").write_text(f"{quota} {PERIOD_US}")
                else:
                    (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                    (folder / "cpu.cfs_quota_us").write_text(str(quota))
            except OSError as err:
                self.failed["cpu"] = f"cgroup {folder}: {err.strerror or err}"

    @classmethod
    def existing(cls, name: str, where: dict[str, tuple[int, Path]]) -> "LearnerCgroups":
        """The groups of ``name`` that exist now (to kill what is in them and remove them)."""
        self = cls.__new__(cls)
        self.failed = {}
        self.dirs = {c: p / name for c, (v, p) in where.items() if (p / name).is_dir()}
        self.version = {c: v for c, (v, p) in where.items() if c in self.dirs}
        return self

    def clear(self) -> list[Path]:
        """Kill every process in the groups, then remove them; the folders that could not be removed."""
        self.kill_all()
        return self.remove()


class LimitedSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose learners' servers run in control groups of their own (memory, CPU, processes).
    Users in ``unlimited_users`` (the instructor: Formgrader grades the whole class in the grading sandbox, which
    makes its own groups) are spawned as by LocalProcessSpawner."""

    memory_bytes = Integer(0, config=True, help="memory of all a learner's processes, no swap beyond (0: none)")
    cpus = Float(0.0, config=True, help="CPUs' worth of time a learner's processes share, a CFS quota (0: none)")
    processes = Integer(0, config=True, help="tasks (processes and threads) a learner may have at once (0: none)")
    unlimited_users = Set(config=True, help="users whose servers get no limits")

    _cgroups: LearnerCgroups | None = None

    @property
    def limited(self) -> bool:
        return self.user.name not in self.unlimited_users and bool(self.memory_bytes or self.cpus or self.processes)

    def make_preexec_fn(self, name):
        drop = super().make_preexec_fn(name)
        procs = [str(p) for p in self._cgroups.procs_files()] if self._cgroups else []

        def preexec():  # in the forked child, as root, before the setuid and the exec
            for path in procs:
                with open(path, "w") as f:
                    f.write(str(os.getpid()))
            drop()

        return preexec

    async def start(self):
        if self.limited:
            where, missing = hub_plan()
            if missing:
                raise RuntimeError(f"{self.user.name}'s server is not started without its limits: {missing}")
            self._cgroups = await asyncio.to_thread(LearnerCgroups, self.user.name, where, self.memory_bytes,
                                                    self.cpus, self.processes)
            if self._cgroups.failed:
                failed = "; ".join(self._cgroups.failed.values())
                await asyncio.to_thread(self._cgroups.clear)
                self._cgroups = None
                raise RuntimeError(f"{self.user.name}'s limits could not be set: {failed}")
            if self.cpus:  # torch and OpenBLAS start a thread per core of the host, not of the quota
                threads = str(max(1, int(self.cpus)))
                self.environment = dict(self.environment, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        return await super().start()

    async def stop(self, now=False):
        await super().stop(now=now)
        if self.limited:  # what the server left (kernels, a terminal's jobs); also after a hub restart
            where, _ = hub_plan()
            left = await asyncio.to_thread(LearnerCgroups.existing(self.user.name, where).clear)
            if left:
                self.log.warning("%s's cgroups were not removed: %s", self.user.name, left)
            self._cgroups = None

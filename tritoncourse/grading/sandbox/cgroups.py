"""The grading sandbox's control groups, cgroup v2 or v1 (whichever the machine has): where they are made
(:func:`_cgroup_plan`, :func:`_nest`), and one sandbox's groups with their memory and process limits, counters
and kill (:class:`_Cgroups`). :data:`_LAUNCHER` puts each sandboxed command into them before it runs.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import time
from pathlib import Path

from .config import CGROUP_ENV, _is_root

WANTED = ("memory", "pids")
# Run first in every sandbox: writes its own pid into each cgroup.procs given ($1 of them), then execs the rest of
# its arguments (prlimit, bwrap, the command). Nothing of the learner's runs before it is in the cgroups.
_LAUNCHER = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done; '
             'exec "$@"')


def _mountinfo(text: str | None = None) -> list[tuple[str, str, str, set[str]]]:
    """(filesystem type, mount point, root inside the filesystem, super options) of every mount."""
    if text is None:
        try:
            text = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    unescape = functools.partial(re.sub, r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)))
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, more = left.split(), right.split()
        if sep and len(fields) >= 5 and len(more) >= 3:
            out.append((more[0], unescape(fields[4]), unescape(fields[3]), set(more[2].split(","))))
    return out


def _own_cgroups(text: str | None = None) -> dict[str, str]:
    """This process's cgroup path for each v1 controller, and for the cgroup2 hierarchy under the key ""."""
    if text is None:
        try:
            text = Path("/proc/self/cgroup").read_text()
        except OSError:
            return {}
    out = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                out[controller.removeprefix("name=")] = parts[2]
    return out


def _group_dir(mount_point: str, root: str, path: str) -> Path | None:
    """The folder of cgroup ``path`` in a hierarchy mounted at ``mount_point`` (showing its ``root``)."""
    if root != "/":
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            return None
        path = path[len(root):]
    return Path(mount_point) / path.lstrip("/")


def _v2_usable(parent: Path, may_enable: bool) -> list[str]:
    """The wanted controllers that children of cgroup2 folder ``parent`` get (enabled there if ``may_enable``)."""
    try:
        available = set((parent / "cgroup.controllers").read_text().split())
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
    except OSError:
        return []
    if not os.access(parent, os.W_OK):
        return []
    wanted = [c for c in WANTED if c in available]
    if may_enable and set(wanted) - enabled:
        for c in wanted:
            if c not in enabled:  # refused (EBUSY) where the folder holds processes, unless it is the root
                with contextlib.suppress(OSError):
                    (parent / "cgroup.subtree_control").write_text(f"+{c}")
        with contextlib.suppress(OSError):
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
    return [c for c in wanted if c in enabled]


NEST_LEAF = "tritoncourse-grader"  # where _nest moves the processes of the grader's own cgroup2 group
SYSTEMD_UNITS = (".slice", ".scope", ".service")  # groups systemd owns: never reorganised by the grader


def _nest(group: Path, attempts: int = 5) -> bool:
    """Let the grader's own cgroup2 ``group`` give its children the memory and pids controllers, as a container's
    init does for nested containers: move every process of the group into a leaf child (``NEST_LEAF``), then
    enable the controllers in the emptied group. The sandboxes' groups are then children of the grader's own,
    under its limits and its device rules (a GPU stays reachable: seen on the course's H200, docs/GPU-RUNS.md).
    Done only where the group has controllers it does not give yet, holds processes, and is not a systemd unit
    (systemd is the single writer of its own groups: there, name a delegated folder in TRITONCOURSE_SANDBOX_CGROUP).
    True when the controllers are enabled afterwards."""
    try:
        available = set((group / "cgroup.controllers").read_text().split())
        enabled = set((group / "cgroup.subtree_control").read_text().split())
    except OSError:
        return False
    wanted = [c for c in WANTED if c in available and c not in enabled]
    if not wanted or group.name.endswith(SYSTEMD_UNITS) or not os.access(group, os.W_OK):
        return not wanted
    leaf = group / NEST_LEAF
    for _ in range(attempts):  # a process forked meanwhile lands in the group again: move it and retry
        with contextlib.suppress(OSError):
            leaf.mkdir(exist_ok=True)
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):  # gone meanwhile, or a kernel thread
                    (leaf / "cgroup.procs").write_text(pid)
        for c in wanted:
            with contextlib.suppress(OSError):
                (group / "cgroup.subtree_control").write_text(f"+{c}")
        with contextlib.suppress(OSError):
            if not set(wanted) - set((group / "cgroup.subtree_control").read_text().split()):
                return True
    return False


def _cgroup_plan(env=os.environ, mountinfo: str | None = None, cgroup: str | None = None,
                 allow_sibling: bool = True, may_nest: bool | None = None) -> tuple[dict[str, tuple[int, Path]], str]:
    """Where a sandbox's cgroups are made: controller -> (cgroup version, parent folder), and why a wanted
    controller has none (empty when both have one).

    cgroup v2 first: the folder named by TRITONCOURSE_SANDBOX_CGROUP (the controllers are enabled in it), else the
    grader's own cgroup (at the hierarchy's root; elsewhere, as root, once :func:`_nest` has moved the group's
    processes into a leaf of their own, since a cgroup2 folder that holds processes cannot give its children
    controllers), else its parent (a sibling of the grader's own; as root on a systemd machine, or as
    a user inside systemd's delegated user@.service), using only the controllers enabled there already. Then, for a
    controller still missing, cgroup v1: a child of the grader's own cgroup in that controller's hierarchy (v1
    allows it; the grader's own limits then still hold)."""
    setting = env.get(CGROUP_ENV, "").strip()
    if setting.lower() in ("off", "0", "no", "false", "none"):
        return {}, f"{CGROUP_ENV}={setting}"
    mounts, own = _mountinfo(mountinfo), _own_cgroups(cgroup)
    candidates: list[tuple[Path, bool]] = []
    if setting and setting.lower() != "auto":
        candidates.append((Path(setting), True))
    elif "" in own:
        for fstype, point, root, _ in mounts:
            group = _group_dir(point, root, own[""]) if fstype == "cgroup2" else None
            if group is not None and group.is_dir():
                if group.name == NEST_LEAF:  # nested already (by this grader or an earlier one): the group above
                    group = group.parent
                elif group != Path(point) and (may_nest if may_nest is not None else _is_root()):
                    _nest(group)
                candidates.append((group, True))
                if group != Path(point) and allow_sibling:
                    candidates.append((group.parent, False))
                break
    plan: dict[str, tuple[int, Path]] = {}
    for parent, may_enable in candidates:
        usable = _v2_usable(parent, may_enable)
        if len(usable) > len(plan):
            plan = {c: (2, parent) for c in usable}
        if len(plan) == len(WANTED):
            break
    if not (setting and setting.lower() != "auto"):
        for c in WANTED:
            for fstype, point, root, options in mounts if c not in plan and c in own else ():
                group = _group_dir(point, root, own[c]) if fstype == "cgroup" and c in options else None
                if group is not None and (group / "cgroup.procs").is_file() and os.access(group, os.W_OK):
                    plan[c] = (1, group)
                    break
    missing = [c for c in WANTED if c not in plan]
    if not missing:
        return plan, ""
    where = f"in {setting}" if setting and setting.lower() != "auto" else "here"
    owner = "" if _is_root() else " (not root: a delegated cgroup2 folder is needed)"
    controllers = " and ".join(missing) + (" controllers" if len(missing) > 1 else " controller")
    return plan, f"no writable cgroup with the {controllers} {where}{owner}"


class _Cgroups:
    """One sandbox's cgroups: a folder named ``name`` under each planned parent (one for both controllers on v2),
    with the limits written. ``failed`` says which controller could not be set up, and why."""

    def __init__(self, name: str, plan: dict[str, tuple[int, Path]], memory_bytes: int, processes: int):
        self.dirs: dict[str, Path] = {}
        self.version: dict[str, int] = {}
        self.failed: dict[str, str] = {}
        for controller, (version, parent) in plan.items():
            folder = parent / name
            try:
                if folder not in self.dirs.values():
                    folder.mkdir()
                self.dirs[controller], self.version[controller] = folder, version
                if controller == "memory" and version == 2:
                    (folder / "memory.max").write_text(str(memory_bytes))
                    if (folder / "memory.swap.max").exists():
                        (folder / "memory.swap.max").write_text("0")
                elif controller == "memory":
                    (folder / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    if (folder / "memory.memsw.limit_in_bytes").exists():  # swap included, where it is accounted
                        (folder / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                else:
                    (folder / "pids.max").write_text(str(processes))
            except OSError as err:
                self.failed[controller] = f"cgroup {folder}: {err.strerror or err}"
                self.dirs.pop(controller, None)
                if folder not in self.dirs.values():
                    with contextlib.suppress(OSError):
                        folder.rmdir()

    def procs_files(self) -> list[Path]:
        return [folder / "cgroup.procs" for folder in dict.fromkeys(self.dirs.values())]

    def pids(self) -> set[int]:
        out = set()
        for path in self.procs_files():
            with contextlib.suppress(OSError, ValueError):
                out |= {int(line) for line in path.read_text().split()}
        return out

    @staticmethod
    def _field(path: Path, key: str) -> int:
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        return 0

    def counts(self) -> dict[str, int]:
        """``memory``: out-of-memory kills in the cgroup; ``processes``: forks and clones refused by pids.max."""
        out = {}
        if "memory" in self.dirs:
            folder = self.dirs["memory"]
            out["memory"] = self._field(folder / ("memory.events" if self.version["memory"] == 2
                                                  else "memory.oom_control"), "oom_kill")
        if "pids" in self.dirs:
            out["processes"] = self._field(self.dirs["pids"] / "pids.events", "max")
        return out

    def peak_bytes(self) -> int:
        folder = self.dirs["memory"]
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            with contextlib.suppress(OSError, ValueError):
                return int((folder / name).read_text())
        return 0

    def kill_all(self, timeout: float = 10) -> bool:
        """SIGKILL every process in the cgroups until none is left (a fork bomb's last children included)."""
        for controller, folder in self.dirs.items():  # v2 (5.14+): one write kills the whole cgroup
            if self.version[controller] == 2 and (folder / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (folder / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + timeout
        while pids := self.pids():
            if time.monotonic() > deadline:
                return False
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        return True

    def remove(self, timeout: float = 5) -> list[Path]:
        """Remove the folders (after :meth:`kill_all`); those that could not be, still busy or refused."""
        left = list(dict.fromkeys(self.dirs.values()))
        deadline = time.monotonic() + timeout
        while left:
            for folder in list(left):
                try:
                    folder.rmdir()
                    left.remove(folder)
                except FileNotFoundError:
                    left.remove(folder)
                except OSError:
                    pass
            if not left or time.monotonic() > deadline:
                break
            self.kill_all(timeout=1)
            time.sleep(0.05)
        return left

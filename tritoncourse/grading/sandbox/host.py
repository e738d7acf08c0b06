"""What a grading sandbox leaves on the host besides its processes and cgroups: the tmpfs mounted on its shared
folder, the owner record in its scratch folder, and their removal: at close or at the interpreter's exit
(:func:`_release`), or by the next sandbox made on the machine when the grader that made them was killed
(:func:`_sweep_stale`).
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import stat
import sys
from pathlib import Path

from .cgroups import _Cgroups, _mountinfo
from .config import _is_root


OWNER_FILE = "owner.json"  # in a sandbox's scratch folder (out of the learner's reach): who made it, what it holds


def _identity(pid: int) -> dict:
    """A process's pid, start time and PID namespace: a dead creator's pid may be reused, not all three."""
    try:
        start = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
        return {"pid": pid, "start": start, "pidns": os.stat(f"/proc/{pid}/ns/pid").st_ino}
    except (OSError, IndexError, ValueError):
        return {"pid": pid, "start": None, "pidns": None}


def _stale_record(root: Path) -> dict | None:
    """The owner record of sandbox folder ``root`` when the process that made it is gone (it was killed and never
    closed it); None when it lives, when that cannot be told (another PID namespace), or when the folder or its
    record is not this user's own (another user's file is never trusted)."""
    try:
        record_path = root / OWNER_FILE
        st_root, st_record = os.lstat(root), os.lstat(record_path)
        if not (stat.S_ISDIR(st_root.st_mode) and stat.S_ISREG(st_record.st_mode)) \
                or st_root.st_uid != os.geteuid() or st_record.st_uid != os.geteuid():
            return None
        record = json.loads(record_path.read_text())
        mine = _identity(os.getpid())
        if record.get("pidns") is None or record.get("pidns") != mine["pidns"]:
            return None
        now = _identity(int(record["pid"]))
        return record if now["start"] is None or now["start"] != record.get("start") else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sweep_stale(base: Path) -> None:
    """Remove what sandboxes of killed graders left (a grading process killed by a signal never runs close): their
    processes, the tmpfs mounted on their shared folder (its files hold memory), their cgroups, their scratch
    folders. Only sandbox folders whose owner.json (written by this code, as this user) names a creator that is
    gone: under ``base``, and wherever such a folder's shared tmpfs is mounted."""
    roots = set()
    for fstype, point, _, _ in _mountinfo():
        folder = Path(point).parent
        if fstype == "tmpfs" and point.endswith("/shared") and folder.name.startswith("tritoncourse-sandbox-"):
            roots.add(folder)
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if entry.name.startswith("tritoncourse-sandbox-") and entry.is_dir(follow_symlinks=False):
                roots.add(Path(entry.path))
    for root in roots:
        record = _stale_record(root)
        if record is None:
            continue
        cgroups = [Path(p) for p in record.get("cgroups", []) if Path(p).name == root.name]
        for folder in cgroups:
            with contextlib.suppress(OSError, ValueError):
                for pid in (folder / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
        for point in record.get("mounts", []):
            if Path(point) == root / "shared":
                _unmount(Path(point))
        shutil.rmtree(root, ignore_errors=True)
        for folder in cgroups:
            with contextlib.suppress(OSError):
                folder.rmdir()


_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(target: Path, size_mb: int, inodes: int) -> str | None:
    """Mount a tmpfs of ``size_mb`` on ``target``: None when done, else why not (not root, no CAP_SYS_ADMIN)."""
    options = f"size={size_mb}m,nr_inodes={inodes},mode=0755".encode()
    try:
        done = _libc().mount(b"tmpfs", os.fsencode(target), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) == 0
    except (OSError, AttributeError) as err:
        return f"mount unavailable: {err}"
    if done:
        return None
    return f"mounting a tmpfs failed: {os.strerror(ctypes.get_errno())}" + ("" if _is_root() else " (not root)")


def _unmount(target: Path) -> None:
    """Detach ``target``'s filesystem (freed once no process uses it any more)."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().umount2(os.fsencode(target), _MNT_DETACH)


def _release(cg: "_Cgroups | None", mounts: list[Path], root: Path) -> None:
    """Close's end, also run when a sandbox is dropped unclosed or the interpreter exits: every process in the
    cgroups killed, the mounts detached, the scratch folder and the cgroups removed."""
    if cg is not None:
        cg.kill_all()
    for target in mounts:
        _unmount(target)
    shutil.rmtree(root, ignore_errors=True)
    if cg is not None:
        left = cg.remove()
        if left:
            print(f"WARNING: the grading sandbox could not remove its cgroup(s) {', '.join(map(str, left))}",
                  file=sys.stderr)

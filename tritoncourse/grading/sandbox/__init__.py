"""The grading sandbox: every process that runs a learner's code during grading runs inside bubblewrap.
Trust role: trusted, the walls around every learner process at grading; it imports nothing of the course.

    sandbox = Sandbox("02_softmax-alice")          # a private scratch folder, limits, a uid of its own
    subprocess.Popen(sandbox.argv([python, "-I", "runner.py", workdir]), ...)
    sandbox.close()                                # everything it started is gone, the scratch removed

Why bubblewrap (Debian's ``bubblewrap``, as Flatpak uses it): it is an existing, small, audited sandbox that
needs no daemon and no image, starts in milliseconds (so it fits one process per kernel test), and runs the
same on the CPU machines and the GPU ones (NVIDIA device nodes bound in; compute-sanitizer works inside).
Containers are the other way (the instructor image, docs/CONTAINER.md), and the only one on macOS/Windows.

What a sandboxed process sees (docs/INSTRUCTORS.md, "Threat model"):
- read-only: the system (/usr, /etc), the Python environment (``sys.prefix``, ``sys.base_prefix``) and the
  course's helper package (``tritoncourse/``) alone, at their own paths; nothing else of the course: no
  ``source/``, gradebook, ``nbgrader_config.py``, ``submitted/`` or ``autograded/``, no instructor's home;
- writable: a private ``/tmp`` (a tmpfs of ``Limits.disk_mb``) and the sandbox's own ``shared`` folder (kernel
  connection files, the notebook's working folder, a runner's output), watched for size;
- read-only, the grader's own: the ``private`` folder beside ``shared`` (each kernel test's folder: the learner's
  definitions, the judge's socket). Nothing the grader (root, outside) opens, binds, writes, chmods or chowns lies in
  a folder a sandboxed process can write, but for what it makes directly in ``shared`` without following a link
  (``private_dir``, :func:`read_bounded`);
- no network: a network namespace of its own (loopback only, none of the host's ports); the notebook's kernel
  talks to the grader over Unix sockets in ``shared``;
- a user that is not the instructor's: as root, a uid of the sandbox's own (61000 + a random number, no
  capabilities, no new privileges); as another user, a user namespace (uid 1000 inside);
- limits: a cgroup of the sandbox's own (v2, or v1 where that is what the machine has) for memory of every kind
  (anonymous, memfd, tmpfs, page cache) and for processes, counted for all its processes together; a tmpfs of
  ``Limits.disk_mb`` mounted on ``shared`` (so that even unlinked files count); per process an address-space limit
  (CPU only: CUDA maps more than it uses), open files, file size, CPU time, and a resident-memory watchdog; a PID
  namespace, so that when the sandbox's first process ends, everything it started is killed, and ``kill_strays``
  ends every process but the given ones (after each notebook cell). Where no cgroup or mount can be made (not
  root, no delegated cgroup), only the rlimits and the watchdog hold: :func:`status` says which.

Which limit a learner's code reached: :meth:`Sandbox.limit_events`, in the learner's words.

Grading refuses to run without it (:func:`require`) unless the instructor sets the loudly named opt-out
``TRITONCOURSE_UNSANDBOXED_GRADING=i-accept-that-learners-can-forge-grades``.

This module holds :class:`Sandbox` and the availability checks (:func:`problem`, :func:`status`, :func:`require`);
its parts live beside it and are re-exported here: settings and host facts (sandbox/config.py), the command line
(sandbox/argv.py), limits and the watchdog (sandbox/limits.py), cgroups v1/v2 (sandbox/cgroups.py), the tmpfs, owner
records and clean-up (sandbox/host.py).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from .argv import SandboxCommandLine, _processes_of
from .cgroups import (CGROUP_ENV, NEST_LEAF, WANTED, _Cgroups, _cgroup_plan, _LAUNCHER, _mountinfo, _nest,
                      _own_cgroups)
from .config import (INSTALL_COMMAND, OPT_OUT_ENV, OPT_OUT_VALUE, PACKAGE, PASS_ENV, TMPFS_ENV,
                     UID_BASE, SandboxUnavailable, _gpu_devices, _is_root, bwrap_path, opted_out,
                     python_path_dirs, sandbox_env)
from .host import OWNER_FILE, _identity, _mount_tmpfs, _release, _sweep_stale, _unmount
from .limits import Limits, SandboxLimits

# The sandbox's names, by which the grader, the tests and the tools use them (most defined in the modules above).
__all__ = ["Sandbox", "Limits", "SandboxUnavailable", "problem", "status", "require", "opted_out", "bwrap_path",
           "python_path_dirs", "sandbox_env", "read_bounded", "kill_process_tree", "PACKAGE", "OPT_OUT_ENV",
           "OPT_OUT_VALUE", "INSTALL_COMMAND", "PASS_ENV", "UID_BASE", "CGROUP_ENV", "TMPFS_ENV",
           "USERNS_REFUSED", "USERNS_FIX", "WANTED", "NEST_LEAF", "OWNER_FILE", "_LAUNCHER", "_Cgroups",
           "_cgroup_plan", "_gpu_devices", "_is_root", "_mountinfo", "_nest", "_own_cgroups", "_processes_of",
           "_identity", "_unmount"]

@functools.lru_cache(maxsize=None)
def problem() -> str | None:
    """Why the sandbox cannot run here (None when it can): bubblewrap missing, or refused by the kernel."""
    bwrap = bwrap_path()
    if not bwrap:
        return "bubblewrap (bwrap) is not installed"
    if not shutil.which("prlimit"):
        return "prlimit (util-linux) is not installed"
    with tempfile.TemporaryDirectory(prefix="tritoncourse-sandbox-probe-") as tmp:
        box = Sandbox("probe", base=Path(tmp), watchdog=False)
        _PROBED["control"] = box.resource_control()
        try:
            proc = subprocess.run(box.argv([sys.executable, "-I", "-c", "import os; print(os.getuid())"]),
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bubblewrap could not start a process ({err})"
        finally:
            box.close()
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip())[:300]
        if USERNS_REFUSED.search(said):
            return f"bubblewrap could not start a process: {USERNS_FIX} (bwrap said: {said})"
        return f"bubblewrap could not start a process: {said}"
    return None


# bubblewrap's words where the kernel refuses an unprivileged user namespace: Ubuntu 23.10/24.04's AppArmor
# restriction ("setting up uid map: Permission denied"), an HPC node's user.max_user_namespaces=0 (ENOSPC), old
# Debian's unprivileged_userns_clone=0 ("No permissions to creat... namespace").
USERNS_REFUSED = re.compile(r"uid map|new namespace|max_\w*namespaces|unprivileged_userns|user namespace", re.I)
USERNS_FIX = (
    "this machine does not let a user who is not root create a user namespace, which the sandbox needs when it is "
    "not run as root. Ask an administrator for one of: on Ubuntu 23.10 or 24.04, an AppArmor profile that lets bwrap "
    "do it (docs/INSTRUCTORS.md, 'Machines that forbid user namespaces') or `sudo sysctl -w "
    "kernel.apparmor_restrict_unprivileged_userns=0`; on a node where user.max_user_namespaces is 0 (HPC), `sudo "
    "sysctl -w user.max_user_namespaces=15000`; on older Debian, `sudo sysctl -w kernel.unprivileged_userns_clone=1`. "
    "Or grade as root (sudo), where the sandbox uses a uid of its own and no user namespace")


_PROBED: dict[str, str] = {}  # what problem()'s probe found


def status() -> str:
    """One line for logs: how grading runs here, and what bounds each resource (cgroup, tmpfs, or the fallback)."""
    why = problem()
    if why is None:
        who = "per-sandbox uid" if _is_root() else "user namespace"
        return f"grading sandbox: bubblewrap ({bwrap_path()}), {who}; {_PROBED.get('control', '')}"
    return f"grading sandbox UNAVAILABLE: {why}" + (" (opted out: grading runs UNSANDBOXED)" if opted_out() else "")


def require(env=os.environ) -> bool:
    """True when grading runs sandboxed; False when the instructor opted out; SandboxUnavailable otherwise."""
    why = problem()
    if why is None:
        return True
    if opted_out(env):
        print(f"WARNING: grading runs UNSANDBOXED ({why}; {OPT_OUT_ENV} is set): a learner's code runs with your "
              "rights and can read the hidden tests and forge grades.", file=sys.stderr)
        return False
    raise SandboxUnavailable(
        f"Grading refuses to run unsandboxed: {why}.\n"
        f"Install the sandbox with:  {INSTALL_COMMAND}\n"
        f"(make test and tools/install-ci-deps.sh install it too). To grade without it anyway, knowing that any "
        f"learner can then read the hidden tests and forge grades, set {OPT_OUT_ENV}={OPT_OUT_VALUE}.")


# The kernel's list of each task's children (CONFIG_PROC_CHILDREN): the watchdog walks only the sandbox's own tree,
# 4 times a second, instead of reading every process of the machine as psutil's children() does (with ~370
# processes on a 2-core machine: 49 ms of CPU a second for each watched sandbox, 2026-11-27).
_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _descendant_pids(pid: int) -> list[int] | None:
    """The pids under ``pid``, its children first, from /proc/PID/task/TID/children; None where the kernel has no
    such file. A process that ends or is reparented meanwhile may be missed, as with psutil's own walk."""
    if not _PROC_CHILDREN:
        return None
    tree, seen = [pid], {pid}  # breadth first: each pid's children are appended as it is read
    for parent in tree:
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                continue
            tree += [kid for kid in kids if kid not in seen]
            seen.update(kids)
    return tree[1:]


@dataclass
class Sandbox(SandboxCommandLine, SandboxLimits):
    """One learner's sandbox: a scratch folder, a uid, limits; ``argv`` wraps a command to run inside it."""

    name: str
    limits: Limits = field(default_factory=Limits.from_env)
    gpu: bool | None = None  # None: bind the NVIDIA devices when there are any
    base: Path | None = None  # where the scratch folder is made (default: the system's temp folder)
    watchdog: bool = True

    def __post_init__(self):
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self.name)[:60]
        self.root = Path(tempfile.mkdtemp(prefix=f"tritoncourse-sandbox-{safe}-", dir=self.base))
        self.shared = self.root / "shared"
        self.shared.mkdir()
        # The grader's own folders (each kernel test's: definitions, the judge's socket), bound read-only inside:
        # nothing the grader opens, binds, writes or removes by path lies in a folder a sandboxed process can write.
        self.private = self.root / "private"
        self.private.mkdir(mode=0o755)
        self.private.chmod(0o755)
        self.root.chmod(0o755)
        self.uid = UID_BASE + secrets.randbelow(1_000_000_000) if _is_root() else None
        self.cgroups: list[Path] = []  # the cgroup folders made for this sandbox (removed at close)
        self.mounts: list[Path] = []  # the filesystems mounted for it (unmounted at close)
        self._why_not: dict[str, str] = {}  # resource -> why the kernel does not bound it here
        self._cg: _Cgroups | None = None
        if self.gpu is None:
            self.gpu = bool(_gpu_devices())
        # On a GPU no sibling cgroup: its device rules are the parent's, which may not give the NVIDIA devices. A
        # child of the grader's own group (nested, see _nest) has the grader's rules: CUDA starts there (H200, v2).
        plan, why = _cgroup_plan(allow_sibling=not self.gpu)
        _sweep_stale(self.root.parent)
        if plan:  # named as the scratch folder, whose owner.json lists them (for _sweep_stale)
            self._cg = _Cgroups(self.root.name, plan, self.limits.sandbox_memory_mb() << 20, self.limits.processes)
            self.cgroups = list(dict.fromkeys(self._cg.dirs.values()))
            why = "; ".join(filter(None, [why] + list(self._cg.failed.values())))
        for controller in ("memory", "pids"):
            if self._cg is None or controller not in self._cg.dirs:
                self._why_not[controller] = why or "no cgroup"
        if os.environ.get(TMPFS_ENV, "").lower() in ("off", "0", "no", "false"):
            self._why_not["disk"] = f"{TMPFS_ENV}={os.environ[TMPFS_ENV]}"
        else:
            failed = _mount_tmpfs(self.shared, self.limits.disk_mb, self.limits.inodes())
            if failed:
                self._why_not["disk"] = failed
            else:
                self.mounts.append(self.shared)
        # Whatever happens to the caller, the cgroups and mounts go at the latest when the interpreter exits; and if
        # it is killed, the next sandbox made on this machine removes them (_sweep_stale, by this record).
        self._release = weakref.finalize(self, _release, self._cg, list(self.mounts), self.root)
        record = {**_identity(os.getpid()), "cgroups": [str(p) for p in self.cgroups],
                  "mounts": [str(p) for p in self.mounts]}
        (self.root / OWNER_FILE).write_text(json.dumps(record))
        # HOME inside: made here, once (tests start from several threads); through the shared folder's descriptor,
        # as everything the grader makes in it (nothing runs inside yet, but no path below it is trusted).
        shared = os.open(self.shared, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.mkdir("home", dir_fd=shared)
            if self.uid is not None:
                os.fchown(shared, self.uid, self.uid)
                os.chown("home", self.uid, self.uid, dir_fd=shared, follow_symlinks=False)
        finally:
            os.close(shared)
        if self.gpu is None:
            self.gpu = bool(_gpu_devices())
        self._killed: list[str] = []  # what the watchdog or the cgroup stopped, and why
        self._events = {"memory_process": 0, "disk": 0, "files": 0}  # limits reached, seen by the watchdog
        self._disk_full = False  # the shared folder was full when last looked at
        self._tmp_full: set[int] = set()  # the watched processes whose /tmp was seen full
        self._oom_seen = 0  # the cgroup's OOM kills already told in ``killed``
        self._lock = threading.Lock()
        self._closed = False
        self._pids: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- the processes it runs
    def watch(self, pid: int) -> None:
        """Let the watchdog guard the process tree of ``pid`` (a process started from ``argv``)."""
        self._pids.add(pid)
        if self.watchdog and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name=f"sandbox-watchdog-{self.name}", daemon=True)
            self._thread.start()

    @staticmethod
    def descendants(pid: int) -> list:
        """The processes under ``pid`` (psutil.Process objects), its children first."""
        import psutil

        pids = _descendant_pids(pid)
        if pids is None:  # no /proc/PID/task/TID/children here: psutil reads every process's parent
            try:
                return psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                return []
        procs = []
        for child in pids:
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(child))
        return procs

    def kill_strays(self, outer_pid: int, keep: set[int]) -> list[str]:
        """Kill every process under ``outer_pid`` but those in ``keep``: what a notebook cell left running.

        Each is stopped first (SIGSTOP, pass after pass until a pass finds none it has not stopped: a stopped process
        forks no more), then named and killed. Killed one by one as found, a fork bomb's children refilled the slots
        as fast as they were freed: one call raced a bomb for 13 s, and the bomb burnt both cores for 20 s
        (2026-11-26)."""
        import psutil

        stopped: dict[int, psutil.Process] = {}
        for _ in range(100):  # a bound, in case a process escapes SIGSTOP (nothing in the sandbox can)
            fresh = [p for p in self.descendants(outer_pid) if p.pid not in keep and p.pid not in stopped]
            if not fresh:
                break
            for proc in fresh:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGSTOP)
                stopped[proc.pid] = proc
        killed = []
        for proc in stopped.values():
            with contextlib.suppress(psutil.Error):
                killed.append(" ".join(proc.cmdline())[:80] or proc.name())
                proc.kill()
        return killed

    def close(self) -> None:
        """Stop the watchdog, kill what is left (every process in the cgroup, watched or not), unmount the shared
        folder, remove the scratch folder and the cgroups. Calling it again does nothing."""
        import psutil

        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for pid in list(self._pids):
            with contextlib.suppress(psutil.Error):
                for proc in self.descendants(pid) + [psutil.Process(pid)]:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
        if self._cg is not None:
            self._cg.kill_all()
        elif self.uid is not None:  # no cgroup, but a uid of its own: every process of that uid is the sandbox's
            for proc in psutil.process_iter(["uids"]):
                with contextlib.suppress(psutil.Error, TypeError, AttributeError):
                    if proc.info["uids"].real == self.uid:
                        proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._release()


def read_bounded(path: Path, limit: int = 1 << 20) -> str:
    """A file a sandboxed process wrote, read by the grader: never through a symlink, at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return ""
    except OSError as err:  # a symlink (ELOOP), a fifo, no permission: nothing trustworthy was written
        return f"<unreadable: {err.strerror}>"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "<unreadable: not a regular file>"
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    text = data[:limit].decode("utf-8", errors="replace")
    return text + ("\n... (cut at %d bytes)" % limit if len(data) > limit else "")


def kill_process_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    import psutil

    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for proc in root.children(recursive=True) + [root]:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

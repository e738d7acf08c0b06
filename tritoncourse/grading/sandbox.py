"""The grading sandbox: every process that runs a learner's code during grading runs inside bubblewrap.

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
  connection files, the check's work folder, the notebook's working folder), watched for size;
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
"""
from __future__ import annotations

import contextlib
import ctypes
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
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # tritoncourse/
OPT_OUT_ENV = "TRITONCOURSE_UNSANDBOXED_GRADING"
OPT_OUT_VALUE = "i-accept-that-learners-can-forge-grades"
INSTALL_COMMAND = "sudo apt-get install -y bubblewrap"
# Environment variables a sandboxed process may inherit (everything else, tokens and keys included, is dropped).
PASS_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "TRITON_INTERPRET", "NBGRADER_EXECUTION",
            "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH",
            "CUDA_HOME", "CUDA_PATH", "TRITON_PTXAS_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
PASS_PREFIXES = ("TRITONCOURSE_", "PYTORCH_")
UID_BASE = 61000
# "off": no cgroup (rlimits and the watchdog only); a cgroup2 folder: make the sandboxes' cgroups there (delegated to
# the grader, with the memory and pids controllers); unset or "auto": found as the docstring of _cgroup_plan says.
CGROUP_ENV = "TRITONCOURSE_SANDBOX_CGROUP"
TMPFS_ENV = "TRITONCOURSE_SANDBOX_TMPFS"  # "off": the shared folder is not a filesystem of its own (watchdog only)


class SandboxUnavailable(RuntimeError):
    """Grading cannot run sandboxed here (and the instructor did not opt out)."""


@dataclass
class Limits:
    """What one sandbox may use. Every learner process of one notebook shares one sandbox."""

    memory_mb: int = 6144  # address space per process on the CPU; resident memory per process (watchdog) everywhere
    # Memory of every kind (anonymous, memfd, tmpfs files, page cache) of all the sandbox's processes together
    # (cgroup); 0: memory_mb for each test process a notebook may run at once (one per core), at most 3/4 of RAM.
    total_memory_mb: int = 0
    processes: int = 256  # processes and threads of the whole sandbox (cgroup; without one, of the sandbox's user)
    open_files: int = 4096
    file_mb: int = 1024  # the largest file a process may write
    cpu_seconds: int = 3600  # CPU time per process
    disk_mb: int = 1024  # each private /tmp, and the shared folder (both tmpfs of this size; without root, watched)

    @classmethod
    def from_env(cls, env=os.environ) -> "Limits":
        """Defaults, overridden by TRITONCOURSE_SANDBOX_<FIELD> (e.g. TRITONCOURSE_SANDBOX_MEMORY_MB=8192)."""
        values = {}
        for name in cls.__dataclass_fields__:
            raw = env.get(f"TRITONCOURSE_SANDBOX_{name.upper()}")
            if raw:
                values[name] = int(raw)
        return cls(**values)

    def sandbox_memory_mb(self) -> int:
        """The cgroup's memory limit for the whole sandbox, in MB (``total_memory_mb``, or its default)."""
        if self.total_memory_mb > 0:
            return self.total_memory_mb
        try:
            ram_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
        except (ValueError, OSError):
            ram_mb = 1 << 40
        return max(self.memory_mb, min(self.memory_mb * max(2, os.cpu_count() or 1), ram_mb * 3 // 4))

    def inodes(self) -> int:
        """Files and folders the shared folder's filesystem may hold."""
        return max(16384, self.disk_mb * 64)


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
    out = {k: v for k, v in env.items() if k in PASS_ENV or k.startswith(PASS_PREFIXES)}
    out.pop(OPT_OUT_ENV, None)
    if python_path_dirs(env):
        out["PYTHONPATH"] = os.pathsep.join(python_path_dirs(env))
    out.update(extra or {})
    return out


@dataclass
class Sandbox:
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
        (self.shared / "home").mkdir()  # HOME inside: made here, once (tests start from several threads)
        if self.uid is not None:
            os.chown(self.shared, self.uid, self.uid)
            os.chown(self.shared / "home", self.uid, self.uid)
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

    # ---- what bounds what, and which limits were reached
    def resource_control(self) -> str:
        """What bounds this sandbox's memory, processes and disk: the kernel (a cgroup, a filesystem of bounded size),
        or, where those cannot be used here, only the per-process rlimits and the watchdog, and why."""
        lim, parts = self.limits, []
        if self._cg is not None and "memory" in self._cg.dirs:
            parts.append(f"memory: cgroup v{self._cg.version['memory']} ({lim.sandbox_memory_mb()} MB for the whole "
                         f"sandbox, memfd, tmpfs and page cache included)")
        else:
            parts.append(f"memory: NO cgroup ({self._why_not.get('memory')}): only "
                         f"{'' if self.gpu else 'an address-space limit and '}a resident-memory watchdog per process "
                         f"({lim.memory_mb} MB), which count neither memfd nor tmpfs files nor page cache")
        if self._cg is not None and "pids" in self._cg.dirs:
            parts.append(f"processes: cgroup v{self._cg.version['pids']} ({lim.processes} for the whole sandbox)")
        else:
            whose = "uid" if self.uid is not None else "user (the instructor's own processes included)"
            parts.append(f"processes: NO cgroup ({self._why_not.get('pids')}): an rlimit on the processes of the "
                         f"sandbox's {whose}")
        if self.mounts:
            parts.append(f"disk: the shared folder is a tmpfs of {lim.disk_mb} MB, /tmp another (unlinked files "
                         f"count)")
        else:
            parts.append(f"disk: NO filesystem of its own for the shared folder ({self._why_not.get('disk')}): a "
                         f"watchdog adds up its files every 0.25 s (unlinked files are not counted); /tmp is a tmpfs "
                         f"of {lim.disk_mb} MB")
        return "; ".join(parts)

    @property
    def killed(self) -> list[str]:
        """What the sandbox stopped and why, in words for the learner's feedback: the watchdog's kills and the
        cgroup's out-of-memory kills (appended as they are noticed)."""
        self._notice_ooms()
        return self._killed

    def _notice_ooms(self) -> None:
        if self._cg is not None:
            with self._lock:
                ooms = self._cg.counts().get("memory", 0)
                if ooms > self._oom_seen:
                    self._oom_seen = ooms
                    self._killed.append(self._sentence("memory"))

    def limit_counts(self) -> dict[str, int]:
        """How often each limit was reached so far: ``memory`` (the cgroup's out-of-memory kills),
        ``memory_process`` (the watchdog's kills of one process), ``processes`` (new processes or threads the
        cgroup refused), ``disk`` (the shared folder or a /tmp found full), ``files`` (the shared folder out of
        inodes). A snapshot to pass to :meth:`limit_events` as ``since``."""
        self._check_disk()
        with self._lock:
            counts = dict(self._events)
        counts.update(self._cg.counts() if self._cg is not None else {})
        return counts

    def limit_events(self, since: dict[str, int] | None = None) -> list[str]:
        """Every limit the learner's code reached (since the snapshot ``since`` from :meth:`limit_counts`, or since the
        sandbox was made), one sentence each in the learner's words, e.g. "your code used more than 2048 MB of memory
        (counting files in memory) and was stopped". Empty when none was: a crash is then not the limits' doing."""
        counts, base = self.limit_counts(), since or {}
        order = ("memory", "memory_process", "processes", "disk", "files")
        return [self._sentence(k) for k in order if counts.get(k, 0) > base.get(k, 0)]

    def _sentence(self, what: str) -> str:
        lim = self.limits
        return {"memory": f"your code used more than {lim.sandbox_memory_mb()} MB of memory (counting files in "
                          f"memory) and was stopped",
                "memory_process": f"a process of your code used more than {lim.memory_mb} MB of memory and was stopped",
                "processes": f"your code started more than {lim.processes} processes or threads",
                "disk": f"your code wrote more than {lim.disk_mb} MB to disk",
                "files": f"your code made more than {lim.inodes()} files"}[what]

    def memory_peak_mb(self) -> int | None:
        """The most memory the sandbox's processes held at once (the cgroup's peak), in MB; None without a cgroup."""
        return self._cg.peak_bytes() >> 20 if self._cg is not None and "memory" in self._cg.dirs else None

    def _check_disk(self) -> bool:
        """Whether the shared folder is full now; a new episode of fullness is counted once."""
        if self.mounts:
            try:
                st = os.statvfs(self.shared)
            except OSError:
                return False
            no_space = st.f_bavail * st.f_frsize < (1 << 20)
            no_inodes = st.f_favail == 0
        else:
            limit = self.limits.disk_mb << 20
            no_space, no_inodes = _folder_bytes(self.shared, limit) > limit, False
        full = no_space or no_inodes
        with self._lock:
            if full and not self._disk_full:
                self._events["disk" if no_space else "files"] += 1
            self._disk_full = full
        return full

    # ---- the command line
    def _readonly_paths(self) -> list[str]:
        paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(
            sys.executable)))}
        paths |= set(python_path_dirs())
        paths.add(str(PACKAGE))
        # /usr holds the system's Python, compilers, CUDA and fonts; only what is elsewhere is added.
        return sorted(p for p in paths if not p.startswith("/usr/") and p not in ("/usr", "/"))

    def environment(self, env: dict | None = None, extra_env: dict | None = None) -> dict:
        """The whole environment inside: ``env`` (default: :func:`sandbox_env`), HOME, TMPDIR and the caches
        pointing into the shared folder, then ``extra_env``."""
        home = self.shared / "home"
        inner = dict(env if env is not None else sandbox_env())
        inner.update(HOME=str(home), TMPDIR="/tmp", MPLCONFIGDIR=str(home / ".matplotlib"),
                     TRITON_CACHE_DIR=str(home / ".triton"), IPYTHONDIR=str(home / ".ipython"),
                     JUPYTER_RUNTIME_DIR=str(home / ".jupyter-runtime"), XDG_CACHE_HOME=str(home / ".cache"),
                     PATH=os.pathsep.join([os.path.join(sys.prefix, "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
                     PYTHONDONTWRITEBYTECODE="1",
                     # The package bound inside is the one imported (an editable install may point elsewhere),
                     # then the PYTHONPATH folders bound beside the environment.
                     PYTHONPATH=os.pathsep.join([str(PACKAGE.parent)] + python_path_dirs()))
        inner.update(extra_env or {})
        return inner

    def private_dir(self, prefix: str) -> Path:
        """A new folder inside the shared folder, owned by the sandbox's user (a check's work folder)."""
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.shared))
        path.chmod(0o755)
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)
        return path

    def argv(self, command: list[str], *, cwd: str | Path | None = None, env: dict | None = None,
             extra_env: dict | None = None) -> list[str]:
        """``command`` wrapped in prlimit and bubblewrap. ``env`` (default: :func:`sandbox_env`) is the whole
        environment inside; HOME, TMPDIR and the caches point into the shared folder."""
        bwrap = bwrap_path()
        if not bwrap:
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
        inner = self.environment(env, extra_env)
        lim = self.limits
        nproc = lim.processes
        if self._cg is not None and "pids" in self._cg.dirs:
            nproc += 64  # the cgroup is the limit (and counts what it refuses); the rlimit only backs it up
        if self.uid is None:  # the limit counts every process of this user: leave room for those running now
            nproc += _processes_of(os.getuid())
        limits = [f"--nproc={nproc}", f"--nofile={lim.open_files}", f"--fsize={lim.file_mb << 20}",
                  f"--cpu={lim.cpu_seconds}", "--core=0"]
        if not self.gpu:
            limits.append(f"--as={lim.memory_mb << 20}")
        args = [shutil.which("prlimit"), *limits, "--", bwrap,
                "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--hostname", "sandbox",
                "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for link in ("bin", "sbin", "lib", "lib64", "lib32", "libx32"):
            target = Path("/") / link
            if target.is_symlink():
                args += ["--symlink", os.readlink(target), f"/{link}"]
            elif target.is_dir():
                args += ["--ro-bind", str(target), f"/{link}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        if self.gpu:
            for node in _gpu_devices():
                args += ["--dev-bind", node, node]
            args += ["--ro-bind", "/sys", "/sys"]
        args += ["--size", str(lim.disk_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
        made: set[str] = {"/", "/usr", "/etc", "/tmp", "/proc", "/dev"}
        mounted: set[str] = {"/usr", "/etc", "/proc", "/dev"}
        for path in self._readonly_paths():
            args += self._parents(path, made, mounted) + ["--ro-bind", path, path]
            made.add(path)
            mounted.add(path)
        args += self._parents(str(self.shared), made, mounted) + ["--bind", str(self.shared), str(self.shared)]
        args += ["--chdir", str(cwd or self.shared), "--clearenv"]
        for key, value in sorted(inner.items()):
            args += ["--setenv", key, str(value)]
        args.append("--")
        if self.uid is not None:  # root: the learner's code runs as a user of its own, without capabilities
            args[args.index("--unshare-ipc"):args.index("--unshare-ipc")] = ["--cap-add", "CAP_SETUID,CAP_SETGID"]
            args += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={self.uid}", f"--regid={self.uid}",
                     "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        else:
            args[args.index("--unshare-ipc"):args.index("--unshare-ipc")] = [
                "--unshare-user", "--uid", "1000", "--gid", "1000"]
        if self._cg is not None:  # the launcher enters the cgroups before anything else runs, then execs prlimit
            files = [str(f) for f in self._cg.procs_files()]
            args = [shutil.which("sh") or "/bin/sh", "-c", _LAUNCHER, "tritoncourse-sandbox-launcher", str(len(files)),
                    *files, *args]
        return args + list(command)

    @staticmethod
    def _parents(path: str, made: set[str], mounted: set[str]) -> list[str]:
        """bwrap arguments that make ``path``'s missing parent folders, readable by the sandbox's user.
        ``made`` holds the folders that exist inside already; ``mounted`` the real folders bound whole, whose
        subfolders exist too."""
        out = []
        parts = Path(path).parts
        for i in range(2, len(parts)):
            parent = str(Path(*parts[:i]))
            if parent in made or any(parent.startswith(m + "/") for m in mounted):
                continue
            out += ["--perms", "0755", "--dir", parent]
            made.add(parent)
        return out

    # ---- the processes it runs
    def watch(self, pid: int) -> None:
        """Let the watchdog guard the process tree of ``pid`` (a process started from ``argv``)."""
        self._pids.add(pid)
        if self.watchdog and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name=f"sandbox-watchdog-{self.name}", daemon=True)
            self._thread.start()

    def descendants(self, pid: int) -> list:
        import psutil

        try:
            return psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return []

    def kill_strays(self, outer_pid: int, keep: set[int]) -> list[str]:
        """Kill every process under ``outer_pid`` but those in ``keep``: what a notebook cell left running."""
        import psutil

        killed = []
        for proc in self.descendants(outer_pid):
            if proc.pid in keep:
                continue
            with contextlib.suppress(psutil.Error):
                killed.append(" ".join(proc.cmdline())[:80] or proc.name())
                proc.kill()
        return killed

    def _watch(self) -> None:
        import psutil

        limit_rss = self.limits.memory_mb << 20
        while not self._stop.wait(0.25):
            for pid in list(self._pids):
                if not psutil.pid_exists(pid):
                    self._pids.discard(pid)
                    continue
                for proc in self.descendants(pid):
                    with contextlib.suppress(psutil.Error):
                        rss = proc.memory_info().rss
                        if rss > limit_rss:  # the reason first: whoever sees the process gone reads it
                            self._killed.append(f"a process used more than {self.limits.memory_mb} MB of memory "
                                                f"({rss >> 20} MB) and was stopped")
                            with self._lock:
                                self._events["memory_process"] += 1
                            proc.kill()
            if self._check_disk():  # the shared folder is full: the grader could not write there either
                self._killed.append(f"the notebook wrote more than {self.limits.disk_mb} MB to disk and was stopped")
                for pid in list(self._pids):
                    for proc in self.descendants(pid):
                        with contextlib.suppress(psutil.Error):
                            proc.kill()
                if self._cg is not None:  # and every other process, which may hold unlinked files
                    self._cg.kill_all()
                _empty(self.shared, keep_sockets=True)
                self._check_disk()
            self._check_tmp()
            self._notice_ooms()

    def _check_tmp(self) -> None:
        """Count a watched process tree's private /tmp (bwrap's tmpfs) found full, once per tree."""
        for pid in list(self._pids):
            if pid in self._tmp_full:
                continue
            for proc in self.descendants(pid)[:1]:  # bwrap's first child: inside the sandbox's mount namespace
                with contextlib.suppress(OSError):
                    st = os.statvfs(f"/proc/{proc.pid}/root/tmp")
                    if st.f_bavail * st.f_frsize < (1 << 20) or st.f_favail == 0:
                        with self._lock:
                            self._tmp_full.add(pid)
                            self._events["disk"] += 1

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


# ------------------------------------------------------------------------------------------ cgroups and mounts

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


def _processes_of(uid: int) -> int:
    import psutil

    count = 0
    for proc in psutil.process_iter(["uids", "num_threads"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if proc.info["uids"].real == uid:
                count += proc.info["num_threads"] or 1
    return count


def _folder_bytes(folder: Path, stop_at: int) -> int:
    """The bytes under ``folder`` (symlinks not followed), counting no further than just past ``stop_at``."""
    total, stack = 0, [str(folder)]
    while stack and total <= stop_at:
        with contextlib.suppress(OSError):
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


def _empty(folder: Path, keep_sockets: bool) -> None:
    """Delete the files under ``folder`` (the kernel's connection sockets stay when ``keep_sockets``)."""
    for path in sorted(folder.rglob("*"), reverse=True):
        with contextlib.suppress(OSError):
            if path.is_socket() and keep_sockets:
                continue
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()


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

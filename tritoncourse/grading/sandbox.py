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
- limits: address space (CPU only: CUDA maps more than it uses), processes, open files, file size, CPU time,
  a memory and disk watchdog; a PID namespace, so that when the sandbox's first process ends, everything it
  started is killed, and ``kill_strays`` ends every process but the given ones (after each notebook cell).

Grading refuses to run without it (:func:`require`) unless the instructor sets the loudly named opt-out
``TRITONCOURSE_UNSANDBOXED_GRADING=i-accept-that-learners-can-forge-grades``.
"""
from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
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


class SandboxUnavailable(RuntimeError):
    """Grading cannot run sandboxed here (and the instructor did not opt out)."""


@dataclass
class Limits:
    """What one sandbox may use. Every learner process of one notebook shares one sandbox."""

    memory_mb: int = 6144  # address space per process on the CPU; resident memory per process (watchdog) everywhere
    processes: int = 256  # processes and threads of the sandbox's user (torch starts a thread per core)
    open_files: int = 4096
    file_mb: int = 1024  # the largest file a process may write
    cpu_seconds: int = 3600  # CPU time per process
    disk_mb: int = 1024  # the private /tmp, and the shared folder (watchdog)

    @classmethod
    def from_env(cls, env=os.environ) -> "Limits":
        """Defaults, overridden by TRITONCOURSE_SANDBOX_<FIELD> (e.g. TRITONCOURSE_SANDBOX_MEMORY_MB=8192)."""
        values = {}
        for name in cls.__dataclass_fields__:
            raw = env.get(f"TRITONCOURSE_SANDBOX_{name.upper()}")
            if raw:
                values[name] = int(raw)
        return cls(**values)


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
        try:
            proc = subprocess.run(box.argv([sys.executable, "-I", "-c", "import os; print(os.getuid())"]),
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bubblewrap could not start a process ({err})"
        finally:
            box.close()
    if proc.returncode != 0:
        return f"bubblewrap could not start a process: {(proc.stderr.strip() or proc.stdout.strip())[:300]}"
    return None


def status() -> str:
    """One line for logs: how grading runs here."""
    why = problem()
    if why is None:
        return f"grading sandbox: bubblewrap ({bwrap_path()}), {'per-sandbox uid' if _is_root() else 'user namespace'}"
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
        (self.shared / "home").mkdir()  # HOME inside: made here, once (tests start from several threads)
        if self.uid is not None:
            os.chown(self.shared, self.uid, self.uid)
            os.chown(self.shared / "home", self.uid, self.uid)
        if self.gpu is None:
            self.gpu = bool(_gpu_devices())
        self.killed: list[str] = []  # what the watchdog stopped, and why
        self._pids: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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
        limit_disk = self.limits.disk_mb << 20
        while not self._stop.wait(0.25):
            for pid in list(self._pids):
                if not psutil.pid_exists(pid):
                    self._pids.discard(pid)
                    continue
                for proc in self.descendants(pid):
                    with contextlib.suppress(psutil.Error):
                        rss = proc.memory_info().rss
                        if rss > limit_rss:
                            proc.kill()
                            self.killed.append(f"a process used more than {self.limits.memory_mb} MB of memory "
                                               f"({rss >> 20} MB) and was stopped")
            used = _folder_bytes(self.shared, limit_disk)
            if used > limit_disk:
                for pid in list(self._pids):
                    for proc in self.descendants(pid):
                        with contextlib.suppress(psutil.Error):
                            proc.kill()
                self.killed.append(f"the notebook wrote more than {self.limits.disk_mb} MB to disk and was stopped")
                _empty(self.shared, keep_sockets=True)

    def close(self) -> None:
        """Stop the watchdog, kill what is left, remove the scratch folder."""
        import psutil

        self._stop.set()
        for pid in list(self._pids):
            with contextlib.suppress(psutil.Error):
                for proc in self.descendants(pid) + [psutil.Process(pid)]:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=5)
        shutil.rmtree(self.root, ignore_errors=True)


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
        import stat

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

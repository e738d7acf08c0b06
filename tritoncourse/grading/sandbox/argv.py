"""The grading sandbox's command line: a command wrapped in the cgroup launcher, prlimit, bubblewrap (what is
bound read-only, what is writable, no network, a PID namespace) and setpriv or a user namespace, with the whole
environment inside (:class:`SandboxCommandLine`, a part of :class:`sandbox.Sandbox`).
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

from .cgroups import _LAUNCHER
from .config import PACKAGE, SandboxUnavailable, _gpu_devices, bwrap_path, python_path_dirs, sandbox_env


class SandboxCommandLine:
    """Sandbox's command line (a mixin of :class:`sandbox.Sandbox`, whose ``limits``, ``shared``, ``uid``, ``gpu``
    and ``_cg`` it uses)."""

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
        """A new folder directly in the shared folder, owned by the sandbox's user (the notebook's working folder).

        Made without following a link a sandboxed process may have planted: the shared folder (its own path is the
        grader's) opened once, the folder made in it by name and then changed through its own descriptor (``fchmod``,
        ``fchown``), never again by path."""
        shared = os.open(self.shared, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for _ in range(100):
                name = prefix + secrets.token_hex(6)
                try:
                    os.mkdir(name, 0o700, dir_fd=shared)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(f"no free name for a folder {prefix}* in {self.shared}")
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=shared)
        finally:
            os.close(shared)
        try:
            os.fchmod(fd, 0o755)
            if self.uid is not None:
                os.fchown(fd, self.uid, self.uid)
        finally:
            os.close(fd)
        return self.shared / name

    def grader_dir(self, prefix: str) -> Path:
        """A new folder in the grader's own ``private`` folder (a kernel test's: the learner's definitions, the
        judge's socket): the grader's, 0755, bound read-only inside, so that no sandboxed process (as the sandbox's
        uid, or as the grader's own uid in a user namespace) can replace anything in it or on its path."""
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.private))
        path.chmod(0o755)  # by path: no sandboxed process can write the folders above it
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
        if getattr(self, "private", None) is not None:  # the grader's own folders, read-only inside
            args += self._parents(str(self.private), made, mounted) + ["--ro-bind", str(self.private),
                                                                       str(self.private)]
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


def _processes_of(uid: int) -> int:
    import psutil

    count = 0
    for proc in psutil.process_iter(["uids", "num_threads"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if proc.info["uids"].real == uid:
                count += proc.info["num_threads"] or 1
    return count

"""What a grading sandbox may use (:class:`Limits`) and how reaching a limit is seen: the watchdog thread that
stops a process past its resident memory and a sandbox past its disk, the cgroup's counters, and the sentences that
tell the learner which limit their code reached (:class:`SandboxLimits`, a part of :class:`sandbox.Sandbox`).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

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
        return _from_env(cls, "TRITONCOURSE_SANDBOX_", env)

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


@dataclass
class JudgeLimits:
    """What one judge may use (judge.py: the instructor's checks, trusted, outside the sandbox, but working on what
    the learner's runner sends), and what one message from the runner may carry. Defaults, overridden by
    TRITONCOURSE_JUDGE_<FIELD> (e.g. TRITONCOURSE_JUDGE_MEMORY_MB=8192), as the runner's :class:`Limits` are by
    TRITONCOURSE_SANDBOX_<FIELD>. The test's wall-clock budget is the runner's (isolated.py kills both at the test's
    time limit: a "timeout" verdict). Its processes and threads, and its memory of every kind, are bounded by a cgroup of
    its own per test where one can be made (judge/cgroup.py: RLIMIT_NPROC counts every process of the judge's uid, the
    whole grader's, and root is exempt from it)."""

    # Address space of the judge process on the CPU (as the runner's); on a GPU its data segment (RLIMIT_DATA:
    # CUDA reserves far more address space than it uses, so RLIMIT_AS would stop it from starting); also the memory
    # of every kind of its cgroup (judge/cgroup.py), where there is one.
    memory_mb: int = 6144
    cpu_seconds: int = 1800  # CPU time of the judge process, all its threads (SIGXCPU: the test fails, said so)
    header_kb: int = 1024  # JSON in one message from the runner, beyond twice what the judge's waiting requests sent
    # Storages in one message from the runner beyond those the waiting requests sent; also all the storages the
    # runner makes (returned values, a callback's arguments) over one test, which the judge keeps.
    reply_extra_mb: int = 64
    requests: int = 10000  # the runner's calls of the judge's functions (timers, providers) in one test
    # Processes and threads of one judge together (its cgroup's pids.max; torch starts a thread per core, CUDA a few);
    # the judge starts no process on what the runner sends.
    processes: int = 512

    @classmethod
    def from_env(cls, env=os.environ) -> "JudgeLimits":
        return _from_env(cls, "TRITONCOURSE_JUDGE_", env)

    def apply(self, gpu: bool) -> None:
        """Set this process's rlimits (the judge's, first thing in its main): its memory and CPU time. The soft CPU
        limit raises SIGXCPU (the judge says which limit it reached), the hard one 10 s later kills."""
        import resource

        memory = resource.RLIMIT_DATA if gpu else resource.RLIMIT_AS
        _lower(memory, self.memory_mb << 20, self.memory_mb << 20)
        _lower(resource.RLIMIT_CPU, self.cpu_seconds, self.cpu_seconds + 10)

    def memory_words(self, gpu: bool) -> str:
        return f"{self.memory_mb} MB of {'data' if gpu else 'address space'}"


def _from_env(cls, prefix: str, env):
    """``cls``'s defaults, each field overridden by the integer in ``env[prefix + FIELD]`` where one is set."""
    return cls(**{name: int(env[prefix + name.upper()]) for name in cls.__dataclass_fields__
                  if env.get(prefix + name.upper())})


def _lower(which: int, soft: int, hard: int) -> None:
    """Lower an rlimit to ``soft``/``hard`` where it is higher (never raise one the grader was given)."""
    import resource

    old_soft, old_hard = resource.getrlimit(which)
    unlimited = resource.RLIM_INFINITY
    hard = hard if old_hard == unlimited else min(hard, old_hard)
    soft = min(soft, hard) if old_soft == unlimited else min(soft, old_soft, hard)
    resource.setrlimit(which, (soft, hard))


class SandboxLimits:
    """Sandbox's limits: what bounds what here, which limits were reached, and the watchdog (a mixin of
    :class:`sandbox.Sandbox`, whose ``limits``, ``_cg``, ``_events``, ``_pids`` and lock it uses)."""

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
        parts.append(self._judge_control())
        return "; ".join(parts)

    def _judge_control(self) -> str:
        """What bounds each test's judge besides its rlimits: a cgroup of its own made where this sandbox's are
        (judge/cgroup.py, the same plan), or nothing, and why."""
        judge, dirs = JudgeLimits.from_env(), (self._cg.dirs if self._cg is not None else {})
        bounds = [f"{judge.processes} processes or threads (cgroup v{self._cg.version['pids']})" if "pids" in dirs else
                  f"processes: NO cgroup ({self._why_not.get('pids')}): unbounded",
                  f"{judge.memory_mb} MB of memory (cgroup v{self._cg.version['memory']})" if "memory" in dirs else
                  f"memory: NO cgroup ({self._why_not.get('memory')}): its rlimit only"]
        return "each test's judge: " + ", ".join(bounds)

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

"""The processes of a kernel test, as the grader drives them: the client of a warm zygote (zygote.py) that forks
one child per test, this process's warm zygotes (the judge's may be one shared by the process that runs the private
gradings, zygote_server.py), and :class:`_Child`, a judge or a runner polled and killed the same way whether a
zygote forked it or it runs as a plain fresh process (in the sandbox or not).
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ZYGOTE = Path(__file__).with_name("zygote.py")
SHARED_JUDGE_ENV = "TRITONCOURSE_JUDGE_ZYGOTE"  # the socket of a shared judge zygote (zygote_server.py sets it)


class _Zygote:
    """Client of zygote.py: one warm process per grader, forking a fresh child for every test."""

    def __init__(self, sandbox=None):
        cmd = [sys.executable, "-I", "-B", str(ZYGOTE)]
        self.sandbox = sandbox
        if sandbox is not None:  # the zygote and every test it forks run inside the learner's sandbox
            cmd = sandbox.argv(cmd, extra_env={"TRITON_INTERPRET": "1"})
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        if sandbox is not None:
            sandbox.watch(self.proc.pid)
        self._talk(self.proc.stdout, self.proc.stdin)

    def _talk(self, replies, requests) -> None:
        """Wait for the zygote's ``ready`` on ``replies``, then read its replies there in a thread of their own."""
        self.requests = requests
        self.lock = threading.Lock()
        self.next_id = 0
        self.replies: dict[str, dict] = {}
        self.changed = threading.Condition(self.lock)
        first = replies.readline()
        self.ready = json.loads(first) if first else {}
        if not self.ready.get("ready"):
            raise RuntimeError("the test zygote did not start")
        threading.Thread(target=self._read, args=(replies,), daemon=True).start()

    def _read(self, replies=None) -> None:
        try:
            for line in self.proc.stdout if replies is None else replies:
                msg = json.loads(line)
                with self.changed:
                    self.replies.setdefault(msg["id"], {}).update(msg)
                    self.changed.notify_all()
        finally:  # the zygote is gone (or talks nonsense): wake everybody, who then run without it
            self._end()
            with self.changed:
                self.replies["dead"] = {}
                self.changed.notify_all()

    def _end(self) -> None:
        """Kill the zygote and wait for it."""
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=10)

    def alive(self) -> bool:
        return self.proc.poll() is None and "dead" not in self.replies

    def start(self, workdir: str, env: dict, out: str, entry: str = "runner", warm: tuple[str, ...] = (),
              argv: list[str] | None = None) -> str:
        """Fork a child running ``entry`` in ``workdir``; its id for :meth:`poll` and :meth:`kill`. ``warm``: what
        the zygote warms first, once (zygote.WARMERS). ``argv``: the arguments of nbgrader's entry."""
        with self.lock:
            if "dead" in self.replies:
                raise RuntimeError("the test zygote died")
            self.next_id += 1
            rid = str(self.next_id)
            req = {"id": rid, "workdir": workdir, "env": env, "out": out, "entry": entry}
            if warm:
                req["warm"] = list(warm)
            if argv is not None:
                req["argv"] = list(argv)
            self.requests.write((json.dumps(req) + "\n").encode())
            self.requests.flush()
        return rid

    def poll(self, rid: str) -> int | str | None:
        """The child's exit code (negative: a signal), None while it runs, "lost" when the zygote died first."""
        with self.lock:
            reply = self.replies.get(rid, {})
            if "exit" in reply:
                return reply["exit"]
            return "lost" if "dead" in self.replies else None

    def kill(self, rid: str) -> None:
        """Kill the child and its session (in a sandbox only the zygote can: pids are its PID namespace's)."""
        with contextlib.suppress(OSError, ValueError), self.lock:
            self.requests.write((json.dumps({"kill": rid}) + "\n").encode())
            self.requests.flush()
        self._kill_session(self.replies.get(rid, {}).get("pid"))

    def _kill_session(self, pid: int | None) -> None:
        """Unsandboxed, kill a child's session from here (in a sandbox its pids are not this namespace's)."""
        if self.sandbox is None and pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill the zygote and wait for it; unsandboxed, also the sessions of its children still running (in a
        sandbox, closing the sandbox kills those)."""
        with contextlib.suppress(OSError, ValueError):
            self.requests.close()
        self._end()
        with self.lock:
            running = [r["pid"] for r in self.replies.values() if "pid" in r and "exit" not in r]
        for pid in running:
            self._kill_session(pid)


class _SharedZygote(_Zygote):
    """Client of a judge zygote shared by the private gradings of one process (zygote_server.py), through its Unix
    socket: the same protocol and ids of this client's own. Closing the connection ends this client's children
    still running (the server kills their sessions); the zygote itself is its starter's to end."""

    def __init__(self, path: str):
        self.sandbox, self.proc = None, None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(10)
            self.sock.connect(path)
            self.sock.settimeout(None)
            self._talk(self.sock.makefile("rb"), self.sock.makefile("wb"))
        except BaseException:
            self.sock.close()
            raise

    def _end(self) -> None:
        """Hang up (the reading thread then sees the end; its file closes with it)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError, ValueError):
            self.requests.close()
        self.sock.close()

    def alive(self) -> bool:
        return "dead" not in self.replies


_zygotes: dict[str, _Zygote] = {}
_zygote_lock = threading.Lock()
_owner = os.getpid()  # the process whose warm zygotes these are (a forked child must not close its parent's)


@atexit.register
def _close_warm_zygotes() -> None:
    """This process's warm zygotes end with it, not after it: left alone, each would notice its closed stdin and
    exit on its own, up to a second or more later under load (torch's teardown), and so outlive the grader that
    started it (seen in the 500-notebook soak, 2026-11-26: one per grader run, still there when the run ended)."""
    if os.getpid() != _owner:
        return
    with _zygote_lock:
        zygotes = list(_zygotes.values())
        _zygotes.clear()
    for z in zygotes:
        z.close()


def _warm_zygote(entry: str = "runner") -> _Zygote | None:
    """This process's warm zygote for ``entry`` (started on first use, unsandboxed), or None where forking is not
    used. Grading gives the runner a zygote inside the learner's sandbox instead (IsolatedKernelTests). The judge's
    is the shared one named by ``TRITONCOURSE_JUDGE_ZYGOTE`` where it answers (a private grading's), else its own."""
    if os.environ.get("TRITONCOURSE_ZYGOTE", "1") == "0":
        return None
    with _zygote_lock:
        z = _zygotes.get(entry)
        if z is None or not z.alive():
            if z is not None:
                z.close()
                del _zygotes[entry]
            z = _start_zygote(entry)
            if z is not None:
                _zygotes[entry] = z
        return z


def _start_zygote(entry: str) -> _Zygote | None:
    shared = os.environ.get(SHARED_JUDGE_ENV) if entry == "judge" else None
    if shared:
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            return _SharedZygote(shared)
    try:
        return _Zygote()
    except (OSError, RuntimeError, ValueError):
        return None


class _Child:
    """A judge or a runner: a zygote's child or a plain process, polled and killed the same way."""

    def __init__(self, cmd, cwd, env, out: Path, entry: str, zygote: _Zygote | None, sandbox=None,
                 zygote_out: Path | None = None, warm: tuple[str, ...] = ()):
        """``out``: the output file in a folder of the grader's own (made here for a plain process, which writes
        through the descriptor it inherits: in a sandbox nothing is opened or chowned where a sandboxed process could
        plant a link). ``zygote_out``: where a zygote's child writes instead (a sandboxed zygote cannot write the
        grader's folder; the caller copies it), default ``out``. ``warm``: what a zygote warms before it forks this
        child (zygote.WARMERS; a plain process warms nothing)."""
        self.zygote, self.rid, self.proc, self.sandbox = None, None, None, sandbox
        if zygote is not None:
            try:
                self.rid = zygote.start(str(cwd), env, str(zygote_out or out), entry, warm)
                self.zygote = zygote
                return
            except (RuntimeError, OSError, ValueError):  # no zygote, or it died: a plain fresh process
                pass
        self._out = os.fdopen(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                                      0o600), "wb")
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env if sandbox is None else None, stdin=subprocess.DEVNULL,
                                     stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        if sandbox is not None:
            sandbox.watch(self.proc.pid)

    def poll(self):
        """Exit code (negative: a signal), None while running, "lost" when its zygote died under it."""
        if self.zygote is not None:
            return self.zygote.poll(self.rid)
        return self.proc.poll()

    def kill(self) -> None:
        if self.zygote is not None:
            self.zygote.kill(self.rid)
        elif self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self, seconds: float):
        deadline = time.monotonic() + seconds
        while (code := self.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return code

    def close(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=10)
            self._out.close()

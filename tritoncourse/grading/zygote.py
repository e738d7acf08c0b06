"""A warm process that forks one child per test, so torch and triton are imported once, not per test.

    python -I zygote.py                 # one client: requests on stdin, replies on stdout, one JSON object a line
    python -I zygote.py --socket PATH   # many clients, one a connection to the Unix socket PATH (zygote_server.py)

A request ``{"kill": id}`` kills that child's session (in a sandbox only the zygote can: the pids it reports
are its PID namespace's). A request ``{"id", "workdir", "env", "out", "entry"}`` forks a child that runs
``entry``'s ``main(workdir)`` (``runner``: the learner's kernels, in the sandbox; ``judge``: the checks, outside it)
with exactly ``env``, its output in ``out``, in a session of its own (so the caller can kill it and anything it
started). Replies: ``{"ready"}`` first, ``{"id", "pid"}`` at once, ``{"id", "exit"}`` when the child
ends (negative: killed by that signal). Ids are a client's own. The zygote itself never runs a learner's code: it
only imports the course's modules, then forks; each child starts from that clean state. Only used on the CPU
interpreter (CUDA must not be initialised before a fork).
"""
import json
import os
import select
import signal
import sys

PRELOAD = ("numpy", "torch", "triton", "triton.language", "tritoncourse.checking", "tritoncourse.checks",
           "tritoncourse.grading.rpc", "tritoncourse.grading.runner", "tritoncourse.grading.judge")
ENTRIES = ("runner", "judge")
# A pipe the zygote's SIGCHLD writes to (signal.set_wakeup_fd): a child's end wakes the loop at once, instead of at
# its next look (every 50 ms before: ~30 ms of each test's ~115 ms of overhead). Closed in every child.
_WAKE: tuple[int, int] | None = None
# The zygote's own descriptors besides the wake-up pipe (the socket server's listener and connections): a child
# closes them, so that it holds no other client's connection open.
_OWN_FDS: set[int] = set()


def _child(req: dict) -> None:
    code = 3
    try:
        if _WAKE is not None:  # the zygote's wake-up: not the child's
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (*(_WAKE or ()), *_OWN_FDS):
            try:
                os.close(fd)
            except OSError:
                pass
        os.setsid()
        out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["workdir"])
        import importlib

        entry = req.get("entry", "runner")
        if entry not in ENTRIES:
            raise ValueError(f"unknown entry {entry!r}")
        code = importlib.import_module(f"tritoncourse.grading.{entry}").main(req["workdir"])
    except BaseException:  # report anything, then leave without running the zygote's code
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class Client:
    """One client's session: its requests come in on ``rfd``, its replies go out through ``write``; its children
    by pid (with the ids it gave them). A request for an entry not in ``entries`` forks a child that reports it and
    exits 3."""

    def __init__(self, rfd: int, write, entries: tuple[str, ...] = ENTRIES):
        self.rfd, self.write, self.entries = rfd, write, entries
        self.buffer = b""
        self.children: dict[int, str] = {}
        self.gone = False  # a reply could not be sent: the client left (or stopped reading)

    def reply(self, obj: dict) -> None:
        try:
            self.write((json.dumps(obj) + "\n").encode())
        except OSError:
            self.gone = True

    def kill_children(self, rid: str | None = None) -> None:
        """Kill the session of this client's child ``rid`` (all its children when None): the child and everything
        it started."""
        for pid, r in list(self.children.items()):
            if rid is None or r == rid:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass

    def feed(self, chunk: bytes, owners: dict) -> None:
        """Handle the complete requests in ``chunk`` (with what was left of the last one)."""
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            req = json.loads(line)
            if "kill" in req:  # the grader's time limit: the child and everything in its session
                self.kill_children(str(req["kill"]))
                continue
            if req.get("entry", "runner") not in self.entries:
                req["entry"] = f"refused {req.get('entry', 'runner')!r}"
            pid = os.fork()
            if pid == 0:
                _child(req)
            self.children[pid] = req["id"]
            owners[pid] = self
            self.reply({"id": req["id"], "pid": pid})


def preload() -> None:
    """Import what every child needs, and arm the wake-up pipe."""
    global _WAKE
    # triton.language's own @jit functions (tl.max, tl.sum, ...) are made when triton is imported:
    # import it as the children will run it, on the interpreter.
    os.environ["TRITON_INTERPRET"] = "1"
    for name in PRELOAD:
        __import__(name)
    _WAKE = os.pipe()
    for fd in _WAKE:
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(_WAKE[1], warn_on_full_buffer=False)


def wait_ready(fds: list[int]) -> list[int]:
    """The descriptors of ``fds`` that can be read, once a request or a child's end (the wake-up pipe) comes; the
    timeout only in case a signal was missed."""
    ready = select.select([*fds, _WAKE[0]], [], [], 0.5)[0]
    if _WAKE[0] in ready:
        try:
            while os.read(_WAKE[0], 4096):
                pass
        except BlockingIOError:
            pass
    return [fd for fd in ready if fd != _WAKE[0]]


def reap(owners: dict) -> None:
    """Tell each ended child's client its exit code."""
    while owners:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        client = owners.pop(pid, None)
        if client is not None:
            client.reply({"id": client.children.pop(pid), "exit": os.waitstatus_to_exitcode(status)})


def serve() -> None:
    """One client on stdin and stdout; ends when stdin closes and its children have ended."""
    preload()
    client = Client(0, lambda data: os.write(1, data))
    owners: dict[int, Client] = {}
    client.reply({"ready": True})
    stdin_open = True
    while stdin_open or owners:
        if 0 in wait_ready([0] if stdin_open else []):
            chunk = os.read(0, 65536)
            if not chunk:
                stdin_open = False
            client.feed(chunk, owners)
        reap(owners)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if sys.argv[1:2] == ["--socket"]:
        from tritoncourse.grading import zygote_server  # it runs the imported copy of this module, not __main__

        zygote_server.serve_socket(sys.argv[2])
    else:
        serve()

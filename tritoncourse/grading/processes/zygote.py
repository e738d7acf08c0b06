"""A warm process that forks one child per test, so torch and triton are imported once, not per test.

    python -I zygote.py                 # one client: requests on stdin, replies on stdout, one JSON object a line
    python -I zygote.py --socket PATH   # many clients, each a connection to the Unix socket PATH

A request ``{"kill": id}`` kills that child's session (in a sandbox only the zygote can: the pids it reports
are its PID namespace's). A request ``{"id", "workdir", "env", "out", "entry"}`` forks a child that runs
``entry``'s ``main(workdir)`` (``runner``: the learner's kernels, in the sandbox; ``judge``: the checks, outside it)
with exactly ``env``, its output in ``out``, in a session of its own (so the caller can kill it and anything it
started). A judge's request may add ``"warm": [name, ...]`` (``WARMERS``): the zygote first warms itself that way,
once, so that this judge and every later one is forked warm. Replies: ``{"ready"}`` first, ``{"id", "pid"}`` at
once, ``{"id", "exit"}`` when the child ends (negative: killed by that signal). Ids are a client's own. The zygote
itself never runs a learner's code: it only imports the course's modules (and runs its own warm-ups), then forks;
each child starts from that clean state. Only used on the CPU
interpreter (CUDA must not be initialised before a fork). The socket's zygote is the judge's shared by the
private gradings of one process (zygote_server.py, which says why it opens no path to learner code): it forks
judges, and for the grading process the private gradings' ``nbgrader`` (``{"entry": "nbgrader", "argv"}``: nbgrader
runs no learner code either, its notebooks' kernels are sandboxed), refuses other uids, and kills the sessions of a
connection's children when the connection closes.
"""
import gc
import json
import os
import select
import signal
import socket
import struct
import sys

PRELOAD = ("numpy", "torch", "triton", "triton.language", "tritoncourse.checking", "tritoncourse.checks.common.launch",
           "tritoncourse.grading.channel.rpc", "tritoncourse.grading.runner.runner", "tritoncourse.grading.judge.judge")
ENTRIES = ("runner", "judge")
# What a judge's request may ask the zygote to warm before it forks (isolated.py asks for a test that needs it).
# "dynamo": torch.compile's first trace (import torch._dynamo ~1.0 s, then AOTAutograd's own lazy imports and first
# trace ~1.3 s; torch.optim's first step imports dynamo too) is paid once here instead of in every judge of a test
# that uses it (phase 7's compiled block: ~2.5 s of each judge's ~4 s of CPU; its training steps 1.3 s). Only on
# request: every zygote warmed would cost more than most ever save.
_warmed: set[str] = set()
# A pipe the zygote's SIGCHLD writes to (signal.set_wakeup_fd): a child's end wakes the loop at once, instead of at
# its next look (every 50 ms before: ~30 ms of each test's ~115 ms of overhead). Closed in every child.
_WAKE: tuple[int, int] | None = None
# The zygote's own descriptors besides the wake-up pipe (the socket server's listener and connections): a child
# closes them, so that it holds no other client's connection open.
_OWN_FDS: set[int] = set()


def _child(req: dict) -> None:
    code = 3
    gc.enable()
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
        # nbgrader's output follows the command line its grader wrote at the top of its log
        mode = os.O_APPEND if req.get("entry") == "nbgrader" else os.O_TRUNC
        out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | mode, 0o600)
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
        if entry == "nbgrader":
            code = _nbgrader(req["argv"])
        elif entry not in ENTRIES:
            raise ValueError(f"unknown entry {entry!r}")
        else:
            code = importlib.import_module(f"tritoncourse.grading.{entry}.{entry}").main(req["workdir"])
    except BaseException:  # report anything, then leave without running the zygote's code
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


FORKED_NBGRADER = "# forked by the grading process's zygote (a fresh process: TRITONCOURSE_FORK_NBGRADER=0)"


def _nbgrader(argv: list) -> int:
    """``python -m nbgrader ARGV`` in this forked child (a private grading's, zygote_server.py): nbgrader's import
    was paid once, by the zygote. The exit handlers run as at a normal exit (those of the zygote's own processes
    check whose they are); Python's modules are not torn down one by one."""
    import atexit

    from tritoncourse.grading.processes import zygote_client

    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: it dies with the zygote (which ends with its grader)
        libc.prctl(15, b"nbgrader")  # PR_SET_NAME: `ps -e`, `top` and psutil's name() say what it is

    zygote_client._owner = os.getpid()  # this process's warm zygotes (its judges' connection) close at its exit
    for path in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
        if path not in sys.path:
            sys.path.insert(0, path)
    sys.argv = ["nbgrader", *[str(a) for a in argv]]
    print(FORKED_NBGRADER, flush=True)
    from nbgrader.apps.nbgraderapp import main

    try:
        main()
        code = 0
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else (end.code is not None)
        if end.code is not None and not isinstance(end.code, int):
            print(end.code, file=sys.stderr)
    atexit._run_exitfuncs()
    return int(code)


# What the socket's zygote imports besides PRELOAD, so that the private gradings it forks start with nbgrader and the
# course's grading steps imported (about 1.8 s of CPU a grading otherwise: import and teardown).
NBGRADER_PRELOAD = ("nbgrader.apps.nbgraderapp", "nbgrader.apps.autogradeapp",
                    "tritoncourse.grading.autograde.nbgrader_plugin", "tritoncourse.classroom.feedback")


def _warm_dynamo() -> None:
    """torch.compile's machinery imported and run once (aot_eager, forward and backward of a tiny module on a
    2-element tensor: no thread pool started, none left), then its caches cleared, as a compiling check starts."""
    import torch
    import torch._dynamo

    lin = torch.nn.Linear(2, 2)
    torch.compile(lambda x: lin(x).relu().sum(), fullgraph=True, backend="aot_eager")(torch.ones(1, 2)).backward()
    torch._dynamo.reset()


WARMERS = {"dynamo": _warm_dynamo}


def warm(names) -> None:
    """Run each warm-up of ``names`` (WARMERS; others ignored) not yet run here. A warm-up that fails is not tried
    again; its judges then pay the cost themselves, as before."""
    for name in names if isinstance(names, list) else ():
        if name in WARMERS and name not in _warmed:
            _warmed.add(name)
            try:
                WARMERS[name]()
            except Exception:
                pass


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
            elif req.get("entry") == "judge":  # a judge only: the checks' own code, never in a learner's sandbox
                warm(req.get("warm"))
            gc.freeze()
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
    # The cyclic collector off for good here: importing torch and triton makes about a million objects, which it
    # would scan as they come (a sixth of the imports' CPU, 2026-11-29), and none of them is garbage. Each child turns
    # it back on, with what it inherits frozen before the fork (gc.freeze: its collections never scan, nor write to,
    # the zygote's objects, so those pages stay shared instead of being copied).
    gc.disable()
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


# ---- many clients on a Unix socket
def _peer_uid(conn: socket.socket) -> int:
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]


def serve_socket(path: str) -> None:
    """Serve this protocol to every connection to ``path``, each a client of its own; end (killing every child's session) when
    stdin closes. It listens before it imports, so that the gradings started meanwhile connect and wait for their
    ``ready`` instead of each starting a zygote of their own."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    os.write(1, b'{"listening": true}\n')
    preload()
    preload_nbgrader()
    _OWN_FDS.add(listener.fileno())
    clients: dict[int, tuple[Client, socket.socket]] = {}
    owners: dict[int, Client] = {}

    def drop(fd: int) -> None:
        client, conn = clients.pop(fd)
        client.kill_children()
        _OWN_FDS.discard(fd)
        conn.close()

    try:
        while True:
            ready = wait_ready([0, listener.fileno(), *clients])
            if 0 in ready and not os.read(0, 4096):
                return
            if listener.fileno() in ready:
                _accept(listener, clients)
            for fd in ready:
                if fd not in clients:
                    continue
                client, conn = clients[fd]
                try:
                    chunk = conn.recv(65536)
                    if chunk:
                        client.feed(chunk, owners)
                except (OSError, ValueError, KeyError, TypeError):  # gone, or talking nonsense: dropped
                    chunk = b""
                if not chunk or client.gone:
                    drop(fd)
            reap(owners)
            for fd in [fd for fd, (client, _) in clients.items() if client.gone]:
                drop(fd)
    finally:
        for client in set(owners.values()):
            client.kill_children()


_socket_entries: tuple[str, ...] = ("judge",)  # what the socket's clients may ask for: judges; nbgrader once imported


def preload_nbgrader() -> None:
    """Import nbgrader and the course's grading steps (NBGRADER_PRELOAD), so that the socket's clients (the grading
    process) may fork private gradings here too: nbgrader runs no learner code (its notebooks' kernels are
    sandboxed), as a judge runs none. Where any import fails, the zygote forks judges only."""
    global _socket_entries
    try:
        for name in NBGRADER_PRELOAD:
            __import__(name)
    except Exception:
        return
    _socket_entries = ("judge", "nbgrader")


def _accept(listener: socket.socket, clients: dict) -> None:
    conn, _ = listener.accept()
    if _peer_uid(conn) != os.getuid():  # the socket's folder is the grader's alone; this is the second wall
        conn.close()
        return
    conn.settimeout(10)  # a client that stops reading is dropped, not waited for by every other
    client = Client(conn.fileno(), conn.sendall, entries=_socket_entries)  # never a runner: no learner code
    clients[conn.fileno()] = (client, conn)
    _OWN_FDS.add(conn.fileno())
    client.reply({"ready": True, "entries": list(_socket_entries)})


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    if sys.argv[1:2] == ["--socket"]:
        serve_socket(sys.argv[2])
    else:
        serve()
    # Served: leave without tearing Python down (torch's modules freed one by one: about 0.5 s of CPU that its
    # starter, waiting for it at exit, would wait for too). Nothing is left to flush: replies go out with os.write.
    os._exit(0)

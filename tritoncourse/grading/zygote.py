"""A warm process that forks one child per test, so torch and triton are imported once, not per test.

    python -I zygote.py        # requests on stdin, replies on stdout, one JSON object per line

A request ``{"kill": id}`` kills that child's session (in a sandbox only the zygote can: the pids it reports
are its PID namespace's). A request ``{"id", "workdir", "env", "out", "entry"}`` forks a child that runs
``entry``'s ``main(workdir)`` (``runner``: the learner's kernels, in the sandbox; ``judge``: the checks, outside it)
with exactly ``env``, its output in ``out``, in a session of its own (so the caller can kill it and anything it
started). Replies: ``{"id", "pid"}`` at once, ``{"id", "exit"}`` when the child
ends (negative: killed by that signal). The zygote itself never runs a learner's code: it only imports
the course's modules, then forks; each child starts from that clean state. Only used on the CPU
interpreter (CUDA must not be initialised before a fork).
"""
import json
import os
import select
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

PRELOAD = ("numpy", "torch", "triton", "triton.language", "tritoncourse.checking", "tritoncourse.checks",
           "tritoncourse.grading.rpc", "tritoncourse.grading.runner", "tritoncourse.grading.judge")
ENTRIES = ("runner", "judge")
# A pipe the zygote's SIGCHLD writes to (signal.set_wakeup_fd): a child's end wakes the loop at once, instead of at
# its next look (every 50 ms before: ~30 ms of each test's ~115 ms of overhead). Closed in every child.
_WAKE: tuple[int, int] | None = None


def _child(req: dict) -> None:
    code = 3
    try:
        if _WAKE is not None:  # the zygote's wake-up: not the child's
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in _WAKE:
                os.close(fd)
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


def serve() -> None:
    # triton.language's own @jit functions (tl.max, tl.sum, ...) are made when triton is imported:
    # import it as the children will run it, on the interpreter.
    os.environ["TRITON_INTERPRET"] = "1"
    for name in PRELOAD:
        __import__(name)
    children: dict[int, str] = {}
    buffer = b""

    def reply(obj: dict) -> None:
        os.write(1, (json.dumps(obj) + "\n").encode())

    global _WAKE
    _WAKE = os.pipe()
    for fd in _WAKE:
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(_WAKE[1], warn_on_full_buffer=False)
    reply({"ready": True})
    stdin_open = True
    while stdin_open or children:
        # a request, or a child's end (the wake-up pipe); the timeout only in case a signal was missed
        ready = select.select([0, _WAKE[0]] if stdin_open else [_WAKE[0]], [], [], 0.5)[0]
        if _WAKE[0] in ready:
            try:
                while os.read(_WAKE[0], 4096):
                    pass
            except BlockingIOError:
                pass
        if 0 in ready:
            chunk = os.read(0, 65536)
            if not chunk:
                stdin_open = False
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                req = json.loads(line)
                if "kill" in req:  # the grader's time limit: the child and everything in its session
                    for pid, rid in list(children.items()):
                        if rid == req["kill"]:
                            try:
                                os.killpg(pid, 9)
                            except OSError:
                                pass
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(req)
                children[pid] = req["id"]
                reply({"id": req["id"], "pid": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reply({"id": children.pop(pid), "exit": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()

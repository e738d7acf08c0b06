"""The judge: runs one test cell (the instructor's checks, hidden cases included) against a runner's kernels.

    python -I judge.py DIR        # DIR: test_cell.py; TRITONCOURSE_RUNNER_DIR: the runner's folder

The judge never imports, unpickles or executes anything the learner wrote. It listens on
``<runner dir>/judge.sock``; the runner (runner.py, in the learner's sandbox during grading) connects and
names its kernels; in the test they are :class:`rpc.Remote` proxies, so that every launch sends the inputs (in
their guard buffers, from here) to the runner and copies the outputs back. The checks compare here and the
verdict goes to TRITONCOURSE_RESULT_FILE, in a folder no learner process can reach. A runner that crashes,
hangs, leaves without answering or answers nonsense fails its test.
"""
import json
import os
import socket
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

RUNNER_EXIT_FILE = "runner-exit"  # written by the parent when the runner has ended


def _write(verdict: dict) -> None:
    with open(os.environ["TRITONCOURSE_RESULT_FILE"], "w") as f:
        json.dump(verdict, f)


def _listen(runner_dir: str, judge_dir: str) -> socket.socket:
    """The listening socket in the runner's folder, bound by a relative name (socket names are short).

    In grading that folder is the grader's own (``Sandbox.grader_dir``: bound read-only into the sandbox, no
    sandboxed process can replace it or anything in it). The socket is made connectable by the sandbox's user
    through the umask at bind time (0666), never by a chmod of a path, which would follow a link put in its place."""
    from tritoncourse.grading.channel import SOCKET_NAME

    here = os.getcwd()
    os.chdir(runner_dir)
    try:
        if os.path.lexists(SOCKET_NAME):  # a retried test's (unlink never follows a link)
            os.unlink(SOCKET_NAME)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        mask = os.umask(0o111)
        try:
            sock.bind(SOCKET_NAME)
        finally:
            os.umask(mask)
        sock.listen(1)
    finally:
        os.chdir(here)
    return sock


def _accept(listener: socket.socket, judge_dir: str, limit: float = 300.0) -> socket.socket | None:
    """The runner's connection, or None when the runner ended before it connected."""
    listener.settimeout(0.1)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            conn, _ = listener.accept()
            conn.settimeout(None)
            return conn
        except socket.timeout:
            if os.path.exists(os.path.join(judge_dir, RUNNER_EXIT_FILE)):
                return None
    return None


def _as_assembled(kernels: dict, judge_dir: str) -> dict:
    """The runner's definitions, each taken as what its source says it is (kernel_kinds.json, read from the
    learner's source by the grader): a runner that calls a plain object a kernel is not believed."""
    from tritoncourse.grading.channel.rpc import Remote, RemoteAutotuner, RemoteFunction, RemoteJit

    with open(os.path.join(judge_dir, "kernel_kinds.json")) as f:
        kinds = json.load(f)
    classes = {"jit": RemoteJit, "autotuner": RemoteAutotuner, "function": RemoteFunction}
    out = {}
    for name, kind in kinds.items():
        value = kernels.get(name)
        if kind in classes:
            out[name] = classes[kind](value._ch, value._ref, value._info) if isinstance(value, Remote) else None
        elif not isinstance(value, Remote):  # a configuration value: data, never a live object
            out[name] = value
    return out


def _test_frames(err: BaseException, test_path: str) -> str:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == test_path]
    return "".join(traceback.format_list(frames[-2:]))


def _bounded(device: str):
    """Bound this judge: into the cgroup the grader made for it (its processes and threads, its memory: cgroup.py),
    then its memory and CPU time by rlimit (sandbox.limits.JudgeLimits); past its CPU time the test fails, said so.
    Its wall-clock time is the test's (isolated.py stops it at the test's time limit)."""
    import signal

    from tritoncourse.grading.judge.cgroup import join
    from tritoncourse.grading.sandbox.limits import JudgeLimits

    join()
    limits = JudgeLimits.from_env()
    limits.apply(gpu=device != "cpu")

    def past_cpu_time(signum, frame):
        _write({"ok": False, "kind": "timeout", "message": f"The test used more than {limits.cpu_seconds} s of the "
                                                             "grader's CPU time and was stopped; the test fails."})
        os._exit(1)

    signal.signal(signal.SIGXCPU, past_cpu_time)
    return limits


def main(judge_dir: str) -> int:
    from tritoncourse.device import infer_device

    device = infer_device()
    import math

    import torch
    import triton
    import triton.language as tl

    from tritoncourse.checking import KernelCheckError, stage
    from tritoncourse.grading.channel.rpc import (ChannelClosed, Channel, LimitExceeded, OutOfMemory, ProtocolError,
                                                  RemoteError)

    limits = _bounded(device)
    test_path = os.path.join(judge_dir, "test_cell.py")
    runner_dir = os.environ["TRITONCOURSE_RUNNER_DIR"]
    stage("starting your kernels' process")
    listener = _listen(runner_dir, judge_dir)
    conn = _accept(listener, judge_dir)
    if conn is None:
        _write({"ok": False, "kind": "runner-lost", "message": ""})
        return 1
    channel = Channel(conn, role="judge", limits=limits)
    ns = {"__name__": "__kernel_test__", "torch": torch, "triton": triton, "tl": tl, "math": math, "DEVICE": device}
    try:
        header, hello, _ = channel._recv()
        if not header.get("hello") or not isinstance(hello.get("kernels", {}), dict):
            raise ProtocolError("the runner did not start as expected")
        if hello.get("load_error"):
            err = hello["load_error"]
            _write({"ok": False, "kind": "error",
                    "message": (f"Your kernels could not be loaded: {err.get('type')}: {err.get('message')}\n"
                                f"{err.get('where', '')}")[-3000:]})
            return 1
        ns.update(_as_assembled(hello.get("kernels", {}), judge_dir))
        with open(test_path) as f:
            code = compile(f.read(), test_path, "exec")
        stage("running the test")
        exec(code, ns)
    except KernelCheckError as err:
        _write({"ok": False, "kind": "fail", "message": str(err)})
        return 1
    except ChannelClosed:
        _write({"ok": False, "kind": "runner-lost", "message": ""})
        return 1
    except LimitExceeded as err:
        cause = ("a value far larger than the test needs (a list, string or tensor returned or defined)"
                 if err.unit == "bytes" else "a loop that calls the timer or a provider without end")
        _write({"ok": False, "kind": "fail", "message": f"Your kernels' process sent {err.sent} {err.unit} "
                                                          f"({err.what}) where the grader expected at most "
                                                          f"{err.allowed}; the test fails.\nLikely cause: {cause}."})
        return 1
    except (MemoryError, OutOfMemory):
        _write({"ok": False, "kind": "fail", "message": f"Judging what your kernels' process sent took the grader past "
                                                          f"its {limits.memory_words(device != 'cpu')}; the test "
                                                          "fails."})
        return 1
    except ProtocolError as err:
        _write({"ok": False, "kind": "fail", "message": f"Your kernels' process sent the grader something it cannot "
                                                          f"read ({err}); the test fails."})
        return 1
    except BaseException as err:  # an error of the learner's code raised through a check, or of the test
        from tritoncourse.grading.judge.hidden_cases import error_name, in_hidden_case

        where = (err.where if isinstance(err, RemoteError) else "") + _test_frames(err, test_path)
        text = f"{type(err).__name__}: {err}"
        hint = ""
        if "illegal memory access" in text or "misaligned address" in text:
            hint = ("\nLikely cause: a load or store outside a tensor on the GPU; check that every "
                    "tl.load and tl.store is masked.")
        if in_hidden_case(err.__traceback__):  # its text may be the learner's own, quoting the hidden inputs
            where, text = "", (f"Your code raised {error_name(err)} on a hidden case of this test (its message "
                               "is not shown: it could quote the hidden inputs); every visible case before it passed.")
        _write({"ok": False, "kind": "error", "message": (where + text)[-3000:] + hint})
        return 1
    finally:
        for s in (conn, listener):
            try:
                s.close()
            except OSError:
                pass
    _write({"ok": True, "kind": "pass", "message": ""})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

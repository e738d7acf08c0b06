"""The judge apart from the runner (issue 31): no verdict a learner's process can write, no test it can read.

The lint refuses learner Python outside kernel bodies; these tests skip the lint on purpose (the assembly is
built by hand) to show the second wall: even when a runner runs arbitrary Python in the grading sandbox, it
cannot forge a verdict, read the hidden cases, or pass by answering the judge with made-up messages.
Each runner is sandboxed as in grading (bounded, its own uid, no network).
"""
from __future__ import annotations

import textwrap

import pytest

from conftest import DEVICE
from tritoncourse.grading import sandbox
from tritoncourse.grading.processes.isolated import Assembly, run_test

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="runs the CPU interpreter's path")

HIDDEN = "hidden_case_marker_7f3a"
TEST = textwrap.dedent(f'''
    """Full blocks."""
    from tritoncourse.checks.vector_add import check_vector_add

    check_vector_add(triton_vector_add_kernel, n=1024, block_size=256)
    ### BEGIN HIDDEN TESTS
    {HIDDEN} = 1
    check_vector_add(triton_vector_add_kernel, n=4096, block_size=1024)
    ### END HIDDEN TESTS
''')
EMPTY_KERNEL = textwrap.dedent('''
    @triton.jit
    def triton_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        pid = tl.program_id(0)
''')


@pytest.fixture
def box():
    assert sandbox.problem() is None, sandbox.problem()
    b = sandbox.Sandbox("judge-test")
    yield b
    b.close()


def judge(box, prelude: str, kernel: str = EMPTY_KERNEL, timeout: float = 60):
    """The test above against ``prelude`` (arbitrary Python, run when the runner loads it) and ``kernel``."""
    source = textwrap.dedent(prelude) + "\n" + kernel
    return run_test(TEST, Assembly(source, ["triton_vector_add_kernel"], []), timeout=timeout, seed=11,
                    device="cpu", sandbox=box)


def test_a_runner_cannot_write_the_verdict(box):
    """Learner code that writes a passing verdict wherever it can and leaves cleanly gets no point: the verdict
    file is the judge's, in a folder outside the sandbox, and the runner's env names none."""
    outcome = judge(box, '''
        import glob, json, os
        verdict = json.dumps({"ok": True, "kind": "pass", "message": ""})
        for name in ("TRITONCOURSE_RESULT_FILE", "TRITONCOURSE_STAGE_FILE"):
            assert name not in os.environ, name
        for folder in [os.getcwd(), "/tmp"] + glob.glob("/tmp/*") + glob.glob("/tmp/*/*"):
            try:
                with open(os.path.join(folder, "result.json"), "w") as f:
                    f.write(verdict)
            except OSError:
                pass
        os._exit(0)
    ''')
    assert not outcome.ok and outcome.kind == "crash", outcome.report()


def test_a_runner_cannot_read_the_hidden_cases(box):
    """The hidden cases live only in the judge's folder and process: a runner that searches the machine for
    them (every file it can read under /tmp, /proc of other processes) finds nothing, and the message shows
    nothing of them. Installed packages and git's objects are not searched: the judge writes none of them, and
    reading a virtual environment's files took most of this test's 23-83 s (waiting on the disk, 2026-11-28)."""
    outcome = judge(box, f'''
        import os
        marker = "{HIDDEN[:9]}" + "{HIDDEN[9:]}"  # never whole in this source
        found = []
        packages = {{".venv", "venv", "site-packages", "dist-packages", ".git", "node_modules", "__pycache__"}}
        for top in ("/tmp", "/proc", "/work", "/root", "/home"):
            for folder, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if d not in packages]
                if folder.startswith("/proc/") and folder.count("/") > 3:
                    dirs[:] = []
                for name in files:
                    path = os.path.join(folder, name)
                    try:
                        with open(path, "rb") as f:
                            if marker.encode() in f.read(1 << 16):
                                found.append(path)
                    except OSError:
                        pass
        print("FOUND:", found, flush=True)
        raise SystemExit(f"found {{found}}")
    ''', timeout=120)
    assert not outcome.ok
    assert "found []" in outcome.message, outcome.message
    assert HIDDEN not in outcome.message


def test_a_runner_that_answers_the_judge_itself_does_not_pass(box):
    """Learner code that connects to the judge and answers with made-up messages (a hello naming a kernel,
    then replies that claim success) gets no point: the runner's own connection comes first (before the
    learner's definitions are loaded), the judge accepts no other, and it compares outputs it holds."""
    outcome = judge(box, '''
        import json, socket, struct
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect("judge.sock")
        def send(h):
            data = json.dumps(dict(h, blobs=[])).encode()
            s.sendall(struct.pack(">I", len(data)) + data)
        send({"hello": True, "body": {"kernels": {"$d": [["triton_vector_add_kernel",
              {"$ref": 1, "kind": "jit", "type": "JITFunction"}]]}}, "storages": {}})
        for _ in range(20):  # answer whatever comes with "done", no storages back
            try:
                n = struct.unpack(">I", s.recv(4))[0]
                s.recv(n)
            except Exception:
                break
            send({"back": {}, "body": {"value": None}, "storages": {}})
    ''', timeout=30)
    assert not outcome.ok, outcome.report()


def test_nonsense_on_the_channel_is_refused_at_once():
    """Bytes that are no message (a header of 2 GB announced, not JSON, storages sent back that were never
    sent) raise ProtocolError at once: the judge neither waits for gigabytes nor trusts a made-up write-back."""
    import socket as sk
    import struct

    import torch

    from tritoncourse.grading.channel.rpc import Channel, ProtocolError, send_message

    for junk in (struct.pack(">I", 2**31) + b"x" * 10, struct.pack(">I", 5) + b"nope!"):
        a, b = sk.socketpair()
        b.sendall(junk)
        with pytest.raises(ProtocolError):
            Channel(a, role="judge")._recv()
        a.close(), b.close()
    a, b = sk.socketpair()
    judge_side = Channel(a, role="judge")
    sent = {1: {"index": 0, "nbytes": 16, "storage": torch.zeros(4).untyped_storage()}}
    with pytest.raises(ProtocolError):  # a write-back of another size than the storage sent
        judge_side._write_back(sent, {"back": {"0": 0}}, [bytearray(8)])
    send_message(b, {"back": {"5": 0}, "body": {}, "storages": {}}, [b"12345678"])
    header, _, raw = judge_side._recv()
    with pytest.raises(ProtocolError):  # a write-back of a storage that was never sent
        judge_side._write_back(sent, header, raw["blobs"])
    a.close(), b.close()


def test_the_judge_lends_the_runner_only_calls():
    """What the judge lends the runner (timers, providers, grids) can be called and nothing more: no attribute
    of it can be read, so the runner cannot walk from a timer to the judge's modules."""
    import socket as sk

    from tritoncourse.grading.channel.rpc import Channel, Remote

    a, b = sk.socketpair()
    judge_side, runner_side = Channel(a, role="judge"), Channel(b, role="runner")
    ref = judge_side._export(len)
    proxy = Remote(runner_side, ref, {"kind": "function"})
    import threading

    t = threading.Thread(target=judge_side.serve, daemon=True)
    t.start()
    assert proxy([1, 2, 3]) == 3
    with pytest.raises(PermissionError):
        proxy.__globals__
    with pytest.raises(PermissionError):
        proxy.__self__ = 1
    with pytest.raises(TypeError):  # the judge does not lend a module
        judge_side.encode(sk, [], {})
    b.close()
    t.join(5)

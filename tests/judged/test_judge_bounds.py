"""The judge bounded like the runner (issue 42): what a runner sends is checked against what the judge asked for
before the judge allocates memory for it, and the judge's own process is bounded (memory, CPU time, the test's
wall-clock budget).

Each hostile runner below runs arbitrary Python in the grading sandbox (the lint skipped on purpose, as in
test_judge.py) and talks to the real judge (a child of the warm judge zygote on the CPU, a plain process on a GPU,
where the runner runs under compute-sanitizer: all pass on an H200); the judge's peak resident memory (VmHWM) is
sampled while it runs. Before the bounds (2026-11-28), a lint-clean module-level value or a function's
return value of a million floats (15 MB of JSON) took the judge from ~170 MB to ~460 MB (three million: ~1050 MB)
and passed, an announced blob was allocated whole (1 GB here: 1194 MB) before a byte of it came, and a runner
calling the judge without end kept it busy to the test's time limit; now each is refused at once and the judge
stays at its size. Every such test fails with a message saying what was sent and what was expected, and the next
test in the same sandbox passes.
"""
from __future__ import annotations

import contextlib
import textwrap
import threading
import time

import psutil
import pytest

from conftest import DEVICE
from known_kernels import CORRECT_VECTOR_ADD, LAUNCH_VECTOR_ADD
from tritoncourse.grading import sandbox
from tritoncourse.grading.processes import zygote_client
from tritoncourse.grading.processes.isolated import Assembly, run_test

# On a GPU the judge is a plain process (no zygote), its memory bounded by RLIMIT_DATA, the runner under
# compute-sanitizer (slower to start: the wall-clock budgets below are longer there).
BUSY_BUDGET = 8 if DEVICE == "cpu" else 20  # past the sandboxed runner's start (~2 s, more on a loaded machine)
MARGIN = 16 if DEVICE == "cpu" else 64  # MB: a judge's peak from run to run (30 MB apart on an H200: CUDA's own)

LAUNCH_TEST = LAUNCH_VECTOR_ADD
CALL_TEST = textwrap.dedent('''
    """A learner's function, called by the checks."""
    value = f(3)
    assert isinstance(value, list)
''')
CORRECT_KERNEL = CORRECT_VECTOR_ADD
# Run in the runner when it loads the learner's definitions: its own channel's socket, taken over, and the
# protocol's framing written by hand (kernel_names.json names only the kernel, which is defined after this).
HIJACK = textwrap.dedent('''
    import gc, json, os, struct, threading, time
    s = next(o for o in gc.get_objects() if type(o).__name__ == "Channel").sock

    def send(header, blobs=(), announce=None):
        data = json.dumps(dict(header, blobs=[len(b) for b in blobs] if announce is None else announce)).encode()
        s.sendall(struct.pack(">I", len(data)) + data)
        for b in blobs:
            s.sendall(b)

    def exactly(n):
        got = bytearray()
        while len(got) < n:
            chunk = s.recv(min(n - len(got), 1 << 20))
            if not chunk:
                os._exit(0)
            got += chunk
        return bytes(got)

    def recv():
        header = json.loads(exactly(struct.unpack(">I", exactly(4))[0]))
        for size in header.get("blobs", []):
            exactly(size)
        return header

    def leave(after=1.5):  # give the sampler time to see the judge, then hang up
        time.sleep(after)
        os._exit(0)

    send({"hello": True, "body": {"kernels": {"$d": [["triton_vector_add_kernel",
          {"$ref": 1, "kind": "jit", "type": "JITFunction"}]]}}, "storages": {}})
    assert recv()["op"] == "getitem"  # kernel[grid]: a launcher comes back, then the launch with the tensors
    send({"back": {}, "body": {"value": {"$ref": 2, "kind": "object", "type": "launcher"}}, "storages": {}})
    launch = recv()
    assert launch["op"] == "call" and launch["blobs"], launch
''')


@pytest.fixture(scope="module")
def box():
    assert sandbox.problem() is None, sandbox.problem()
    b = sandbox.Sandbox("judge-bounds")
    yield b
    b.close()


def _status_mb(pid: int) -> dict[str, int]:
    """VmHWM (peak resident), VmSize (address space) and VmData of a process, in MB."""
    out = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in ("VmHWM", "VmSize", "VmData"):
                    out[key] = int(line.split()[1]) >> 10
    return out


def _judges() -> list:
    """The judges running now: the warm judge zygote's children on the CPU, this process's judge.py on a GPU."""
    with contextlib.suppress(psutil.Error):
        if DEVICE == "cpu":
            zygote = zygote_client._warm_zygote("judge")
            assert zygote is not None and zygote.proc is not None, "the judge's zygote did not start"
            return psutil.Process(zygote.proc.pid).children()
        return [p for p in psutil.Process().children() if "judge.py" in " ".join(p.cmdline())]
    return []


def judged(box, source: str, names: list[str], body: str = LAUNCH_TEST, timeout: float = 30):
    """(outcome, the judge's peaks in MB: VmHWM, VmSize, VmData): ``body`` judged against ``source``, the judge
    sampled every 10 ms."""
    peak, stop = {"VmHWM": 0, "VmSize": 0, "VmData": 0}, threading.Event()

    def sample():
        while not stop.is_set():
            for judge in _judges():
                for key, mb in _status_mb(judge.pid).items():
                    peak[key] = max(peak[key], mb)
            stop.wait(0.01)

    _judges()  # the zygote started before the sampling
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        outcome = run_test(body, Assembly(source, names, []), timeout=timeout, seed=7, device=DEVICE, sandbox=box)
    finally:
        stop.set()
        sampler.join(5)
    return outcome, peak


@pytest.fixture(scope="module")
def judge_size(box) -> dict[str, int]:
    """The judge's peaks on a correct kernel (its size as forked from the zygote or started, plus the test's)."""
    outcome, peak = judged(box, CORRECT_KERNEL, ["triton_vector_add_kernel"])
    assert outcome.ok, outcome.report()
    assert peak["VmHWM"] > 0, peak
    return peak


@pytest.fixture(scope="module")
def baseline(judge_size) -> int:
    return judge_size["VmHWM"]


def hostile(box, prelude: str, names=("triton_vector_add_kernel",), body: str = LAUNCH_TEST, **kw):
    outcome, peak = judged(box, prelude + "\n" + CORRECT_KERNEL, list(names), body, **kw)
    print(f"\n{outcome.kind}: {outcome.message[:300]!r}; judge peak {peak['VmHWM']} MB")
    return outcome, peak["VmHWM"]


def refused(outcome, sent: int | None = None) -> None:
    assert not outcome.ok and outcome.kind == "fail", outcome.report()
    assert "Your kernels' process sent" in outcome.message and "the test fails" in outcome.message, outcome.message
    if sent is not None:
        assert f"sent {sent} bytes" in outcome.message, outcome.message


def test_a_huge_header_is_refused_before_it_is_read(box, baseline):
    """(a) A header of 60 MB announced (the old limit was 64 MB), a little of it sent: refused on its length."""
    outcome, peak = hostile(box, HIJACK + textwrap.dedent('''
        s.sendall(struct.pack(">I", 60 << 20) + b"{" * 1024)
        leave()
    '''))
    refused(outcome, 60 << 20)
    assert peak < baseline + MARGIN, (peak, baseline)


def test_blobs_far_larger_than_the_judge_sent_are_refused(box, baseline):
    """(b) A launch's reply announcing 1 GB of storages (the judge sent a few KB; the old limit was 8 GB)."""
    outcome, peak = hostile(box, HIJACK + textwrap.dedent('''
        send({"back": {}, "body": {"value": None}, "storages": {}}, announce=[1 << 30])
        s.sendall(b"x" * 1024)
        leave()
    '''))
    refused(outcome, 1 << 30)
    assert peak < baseline + MARGIN, (peak, baseline)


def test_a_size_that_lies_about_its_content_allocates_nothing(box, baseline):
    """(c) A reply announcing 48 MB of storage (within what a reply may carry), then 1 KB and silence: the judge
    holds what arrived, not what was announced, and the test fails once the runner leaves."""
    outcome, peak = hostile(box, HIJACK + textwrap.dedent('''
        send({"back": {}, "body": {"value": None}, "storages": {}}, announce=[48 << 20])
        s.sendall(b"x" * 1024)
        leave()
    '''))
    assert not outcome.ok and outcome.kind == "crash", outcome.report()
    assert peak < baseline + MARGIN, (peak, baseline)


def test_a_huge_return_value_is_refused(box, baseline):
    """(d) A lint-clean function returning a million floats (15 MB of JSON) to the checks that call it."""
    outcome, peak = hostile(box, textwrap.dedent('''
        def f(x):
            return [0.5] * 1_000_000
    '''), names=["f"], body=CALL_TEST)
    refused(outcome)
    assert peak < baseline + MARGIN, (peak, baseline)


def test_a_huge_configuration_value_is_refused(box, baseline):
    """(d) The same as a lint-clean module-level value the runner names in its hello."""
    outcome, peak = hostile(box, textwrap.dedent('''
        BLOCK_SIZES = [0.5] * 1_000_000
    '''), names=["triton_vector_add_kernel", "BLOCK_SIZES"])
    refused(outcome)
    assert peak < baseline + MARGIN, (peak, baseline)


FLOOD = HIJACK + textwrap.dedent('''
    def drain():
        while True:
            recv()
    threading.Thread(target=drain, daemon=True).start()
    while True:  # the judge's objects cannot be called: each request costs it a refusal, forever
        send({"op": "call", "ref": 12345, "body": {}, "storages": {}})
''')
# The same with requests of 900 KB (within a message's budget): each costs the judge ~30 ms of decoding.
HEAVY_FLOOD = FLOOD.replace('send({"op": "call", "ref": 12345, "body": {}, "storages": {}})',
                            'send({"op": "call", "ref": 12345, "body": {"0": {"$l": [0] * 300_000}}, "storages": {}})')


def test_a_judge_called_without_end_fails_the_test(box):
    """(e) A runner that never answers but sends the judge requests without end fails its test at the judge's
    10000th (JudgeLimits.requests: each costs the judge work, and what it returns is kept), not at the wall-clock
    budget; before, it ran to that budget."""
    start = time.monotonic()
    outcome, _ = hostile(box, FLOOD, timeout=60)
    assert not outcome.ok and outcome.kind == "fail", outcome.report()
    assert "sent 10001 requests (calls of the grader's functions)" in outcome.message, outcome.message
    assert time.monotonic() - start < 30


def test_a_judge_kept_busy_fails_its_test_at_its_budget(box):
    """(e) Requests that each cost the judge real work, fewer than that: the judge works until the test's
    wall-clock budget (isolated.py's time limit), then that test fails as timed out."""
    outcome, _ = hostile(box, HEAVY_FLOOD, timeout=BUSY_BUDGET)
    assert not outcome.ok and outcome.kind == "timeout", outcome.report()
    assert f"did not finish within {BUSY_BUDGET} s" in outcome.message
    assert "while running `triton_vector_add_kernel`" in outcome.message  # the judge was waiting on the launch


def test_the_next_test_is_unaffected(box, baseline):
    """After every hostile runner above, in the same sandbox, a correct kernel passes with the judge at its size."""
    outcome, peak = judged(box, CORRECT_KERNEL, ["triton_vector_add_kernel"])
    assert outcome.ok, outcome.report()
    assert peak["VmHWM"] < baseline + MARGIN, (peak, baseline)


def test_past_its_cpu_time_the_judge_fails_the_test(box, monkeypatch):
    """The judge's CPU time is bounded (RLIMIT_CPU, set first in the judge): the heavy flood above with a CPU
    budget of 1 s (10 s on a GPU, where starting CUDA costs seconds) and a wall-clock budget of 120 s ends at the
    CPU's, the test failed and the limit named."""
    cpu = 1 if DEVICE == "cpu" else 10
    monkeypatch.setenv("TRITONCOURSE_JUDGE_CPU_SECONDS", str(cpu))
    start = time.monotonic()
    outcome, _ = hostile(box, HEAVY_FLOOD, timeout=120)
    assert not outcome.ok and outcome.kind == "timeout", outcome.report()
    assert f"more than {cpu} s of the grader's CPU time" in outcome.message, outcome.message
    assert time.monotonic() - start < 30 + 5 * cpu


def test_past_its_memory_the_judge_fails_the_test(box, judge_size, baseline, monkeypatch):
    """The judge's memory is bounded (set first in the judge: RLIMIT_AS on the CPU, RLIMIT_DATA on a GPU): with the
    protocol's allowance raised to 4 GB, a runner that really sends 1 GB of storage gets the judge to its limit
    (here its size on a correct kernel plus 400 MB), and the test fails, said so."""
    kind, words = ("VmSize", "address space") if DEVICE == "cpu" else ("VmData", "data")
    limit = judge_size[kind] + 400
    monkeypatch.setenv("TRITONCOURSE_JUDGE_REPLY_EXTRA_MB", "4096")
    monkeypatch.setenv("TRITONCOURSE_JUDGE_MEMORY_MB", str(limit))
    outcome, peak = hostile(box, HIJACK + textwrap.dedent('''
        send({"back": {}, "body": {"value": None}, "storages": {}}, announce=[1 << 30])
        zeros = bytes(1 << 20)
        for _ in range(1024):
            s.sendall(zeros)
        leave()
    '''))
    assert not outcome.ok and outcome.kind == "fail", outcome.report()
    assert f"past its {limit} MB of {words}" in outcome.message, outcome.message
    assert peak < baseline + 450, (peak, baseline)


def _framed(header: dict, blobs=(), announce=None) -> bytes:
    import json
    import struct

    data = json.dumps(dict(header, blobs=[len(x) for x in blobs] if announce is None else announce)).encode()
    return struct.pack(">I", len(data)) + data + b"".join(blobs)


def _runner_says(header: dict, blobs=(), announce=None):
    """A judge's channel and what a runner sent on it (nothing read yet)."""
    import socket

    from tritoncourse.grading.channel.rpc import Channel

    a, b = socket.socketpair()
    data = _framed(header, blobs, announce)
    if len(data) < 1 << 16:  # fits the socket's buffer: sent before anything else is
        b.sendall(data)
    else:
        threading.Thread(target=b.sendall, args=(data,), daemon=True).start()
    return Channel(a, role="judge"), b


def test_a_view_far_larger_than_its_bytes_is_refused():
    """A tensor of 2**40 elements over a storage of 4 bytes (stride 0): whatever a check did with it would allocate
    terabytes. Refused as it is decoded."""
    from tritoncourse.grading.channel.rpc import LimitExceeded

    spec = {"storage": 0, "offset": 0, "shape": [1 << 40], "stride": [0], "dtype": "float32", "ref": 1}
    judge_side, peer = _runner_says({"body": {"value": {"$tensor": spec}},
                                     "storages": {"0": {"nbytes": 4, "device": "cpu", "fence": None}}}, [b"\0" * 4])
    with pytest.raises(LimitExceeded, match="a tensor of 4398046511104 bytes"):
        judge_side._recv()
    peer.close()


def test_a_header_nested_too_deeply_is_refused():
    """JSON nested 200000 deep (400 KB, within the header's budget) is a protocol error, not a crash."""
    import socket
    import struct

    from tritoncourse.grading.channel.rpc import Channel, ProtocolError

    a, b = socket.socketpair()
    data = b'{"body": {"value": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}"
    threading.Thread(target=b.sendall, args=(struct.pack(">I", len(data)) + data,), daemon=True).start()
    with pytest.raises(ProtocolError, match="nested too deeply"):
        Channel(a, role="judge")._recv()
    a.close(), b.close()


def test_what_was_announced_is_not_allocated_before_it_arrives():
    """32 MB of storage announced (within the reply's allowance), 1 KB sent, the runner gone: the judge held what
    arrived (Python's allocations traced), not what was announced."""
    import tracemalloc

    from tritoncourse.grading.channel.rpc import ChannelClosed

    judge_side, peer = _runner_says({"body": {}, "storages": {}}, announce=[32 << 20])
    peer.sendall(b"x" * 1024)
    peer.close()
    tracemalloc.start()
    try:
        with pytest.raises(ChannelClosed):
            judge_side._recv()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak


def test_what_the_runner_made_is_bounded_over_the_test():
    """Tensors the runner makes (a callback's arguments, returned values) stay in the judge's ``received`` for the
    test: bounded in all (here 1 MB), not only per message."""
    from tritoncourse.grading.channel.rpc import Channel, LimitExceeded
    from tritoncourse.grading.sandbox.limits import JudgeLimits

    spec = {"storage": 0, "offset": 0, "shape": [150_000], "stride": [1], "dtype": "float32", "ref": 1}
    header = {"body": {"value": {"$tensor": spec}}, "storages": {"0": {"nbytes": 600_000, "device": "cpu",
                                                                        "fence": None}}}
    judge_side, peer = _runner_says(header, [bytes(600_000)])
    judge_side.limits = JudgeLimits(reply_extra_mb=1)
    judge_side._recv()
    threading.Thread(target=peer.sendall, args=(_framed(header, [bytes(600_000)]),), daemon=True).start()
    with pytest.raises(LimitExceeded, match="tensors it made, in all of 1200000 bytes"):
        judge_side._recv()
    peer.close()

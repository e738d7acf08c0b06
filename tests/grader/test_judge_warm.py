"""The judge's zygote warms dynamo once, when a test that uses it asks (zygote.WARMERS).

Phase 7's compiled block traces with torch.compile and its training steps take torch.optim's first step, which
imports dynamo; each judge of them paid that itself (the compiled block ~2.5 s of its ~4 s of CPU, the training steps
1.3 s), and each of its other judges 0.24 s (autograd's backward with a given gradient imports sympy), every fixture
again. Now isolated.py asks the judge's zygote to warm dynamo before it forks a phase-7 test's judge; the zygote does
it once, leaving no thread behind (a forked child must not inherit one), and only for a judge: a runner's zygote, in
the learner's sandbox, never runs the warm-up, and a request naming anything else warms nothing. Phase 7's fixtures
through the warm judge: tests/judged/test_verdicts.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import nbformat
import pytest

from conftest import DEVICE
from course import ROOT
from tritoncourse.grading.processes.isolated import is_kernel_test, judge_warm_ups

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the zygotes serve the CPU interpreter only")

# In a fresh process: the zygote's preload, then requests fed to its client with fork stubbed (the parent's side:
# what the zygote does before it forks), the state after each printed.
FEED = textwrap.dedent('''
    import json, os, sys, threading
    sys.path.insert(0, {root!r})
    from tritoncourse.grading.processes import zygote
    zygote.preload()
    zygote.os.fork = lambda: 10**6  # the parent's side only: no child

    def tasks():
        return len(os.listdir("/proc/self/task"))

    def state():
        return {{"dynamo": "torch._dynamo" in sys.modules, "aot": "torch._functorch.aot_autograd" in sys.modules,
                 "sympy": "torch.fx.experimental.symbolic_shapes" in sys.modules,
                 "tasks": tasks(), "threads": threading.active_count()}}

    client = zygote.Client(0, lambda data: None)
    before = state()
    out = {{"before": before}}
    for n, (entry, warm) in enumerate([("runner", ["dynamo"]), ("judge", ["nonsense"]), ("judge", "dynamo"),
                                       ("judge", ["dynamo"])]):
        client.feed(json.dumps({{"id": str(n), "workdir": "/", "env": {{}}, "out": "/dev/null", "entry": entry,
                                 "warm": warm}}).encode() + b"\\n", {{}})
        out[f"{{entry}} {{warm}}"] = state()
    print(json.dumps(out))
''')


def test_only_a_judges_request_warms_dynamo_and_no_thread_is_left():
    """A runner's request, an unknown name and a name not in a list warm nothing; a judge's ["dynamo"] imports
    dynamo, AOTAutograd and symbolic_shapes (autograd's, with a given gradient) in the zygote with its threads as
    before (the children forked after it hold only the one that forked them)."""
    proc = subprocess.run([sys.executable, "-I", "-c", FEED.format(root=str(ROOT))], capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    before = seen.pop("before")
    assert not before["dynamo"] and not before["aot"] and not before["sympy"], before
    for request in ("runner ['dynamo']", "judge ['nonsense']", "judge dynamo"):
        assert seen[request] == before, (request, seen[request])
    warm = seen["judge ['dynamo']"]
    assert warm["dynamo"] and warm["aot"] and warm["sympy"], warm
    assert (warm["tasks"], warm["threads"]) == (before["tasks"], before["threads"]), (before, warm)


def test_phase_7s_tests_alone_ask_for_dynamo():
    """Of every phase's kernel tests (hidden cases included), exactly phase 7's ask for the warm-up: its compiled
    block and training steps (torch.optim's first step imports dynamo) use dynamo, and every one of its checks takes
    autograd's backward with a given gradient, which imports what the warm-up imports (symbolic_shapes, sympy)."""
    asking = {}
    for path in sorted((ROOT / "source").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if cell.cell_type == "code" and gid and is_kernel_test(cell.source):
                asking[path.parent.name, gid] = judge_warm_ups(cell.source)
    phase7 = {key for key in asking if key[0] == "07_attention_backward"}
    assert ("07_attention_backward", "test_attention_compiled_block") in phase7 and len(phase7) == 13, phase7
    assert {key for key, warm in asking.items() if warm == ("dynamo",)} == phase7, asking
    assert all(warm in ((), ("dynamo",)) for warm in asking.values()), asking

"""Every grading ends, and output is bounded while it is received (issue 31, items 3 and 5).

ResilientExecute runs one notebook's kernel in the grading sandbox (real kernels here, each test a few seconds):

* A single display message of 400 MB (built inside the sandbox) made the grader grow by 1.2 GB: the output limit
  applied after the message had been received and decoded. Now every socket of the kernel's client refuses a frame
  larger than ``message_limit`` as it arrives (ZMQ_MAXMSGSIZE), and the cell says so.
* Grading hung forever with the main thread in ``zmq_ctx_term``: a zmq context finalized by the garbage collector
  while one of its sockets was still open (pyzmq #1167) waits forever. Injected here into a cell's run: the
  notebook's watchdog stops the kernel at ``notebook_timeout`` and then wakes the stuck thread; the notebook fails
  alone, with a message. Every zmq context a run makes is destroyed explicitly, and the kernel's process reaped.
"""
from __future__ import annotations

import gc
import signal
import threading
import time

import psutil
import pytest
import zmq
from nbformat.v4 import new_code_cell, new_notebook

from tritoncourse.grading.autograde import nbgrader_plugin
from tritoncourse.grading.autograde.nbgrader_plugin import ResilientExecute

MB = 1 << 20


def _notebook(*sources: str):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


class _Peak:
    """The largest resident size of this process while the block runs: sampled every 10 ms, and the process's
    high-water mark if the block raised it."""

    def __enter__(self):
        import resource

        self.proc, self.stop = psutil.Process(), threading.Event()
        self.start = self.peak = self.proc.memory_info().rss
        self.maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.stop.wait(0.01):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __exit__(self, *exc):
        import resource

        self.stop.set()
        self.thread.join()
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        if maxrss > self.maxrss:  # a new high-water mark of this process: a peak the sampling may have missed
            self.peak = max(self.peak, maxrss)

    @property
    def growth(self) -> int:
        return self.peak - self.start


def _run(nb, **traits):
    ex = ResilientExecute(**{"timeout": 60, "probe_timeout": 5, **traits})
    start = time.monotonic()
    nb, resources = ex.preprocess(nb, {})
    return ex, nb, resources, time.monotonic() - start


def _outputs(cell) -> str:
    return "\n".join(o.get("text", "") + o.get("evalue", "") + o.get("ename", "") for o in cell.get("outputs", []))


def test_a_huge_message_is_refused_as_it_arrives():
    """A cell displays one message of 400 MB: the grader's memory grows by far less than 300 MB, the cell says it
    sent more than the grader accepts, later cells are not run, and the run ends within seconds."""
    nb = _notebook("print('before')",
                   "from IPython.display import display\nprint('HUGE', flush=True)\n"
                   "display({'text/plain': 'x' * (400 << 20)}, raw=True)\nprint('after the message')",
                   "print('later cell')")
    with _Peak() as peak:
        ex, nb, resources, seconds = _run(nb)
    assert peak.growth < 300 * MB, f"the grader grew by {peak.growth / MB:.0f} MB"
    assert "before" in _outputs(nb.cells[0])
    text = _outputs(nb.cells[1])
    assert "OutputTooLarge" in text and f"more than {ex.message_limit // MB} MB" in text, text
    assert nb.cells[2].outputs == []
    assert resources["tritoncourse"]["kernel_died_at"] == 1
    assert seconds < 120, seconds


@pytest.mark.waits
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the wake-up, raised in __del__
def test_a_grader_stuck_in_zmq_ctx_term_ends_at_the_notebook_bound(monkeypatch):
    """While a cell runs, the garbage collector finalizes a zmq context whose socket is still open (in a reference
    cycle with it): zmq_ctx_term then waits forever in the grading thread. The watchdog stops the kernel at
    notebook_timeout, then wakes the thread; the notebook fails at that cell with its bound named."""
    monkeypatch.setattr(nbgrader_plugin._Watchdog, "__init__", _short_grace(nbgrader_plugin._Watchdog.__init__))
    # No automatic collection from here on, in any thread: one could finalize the garbage before the hook below, in
    # whichever thread allocated (under pytest-xdist, its I/O thread: that thread then waited and the run did not;
    # seen on 2026-11-26). The autouse fixture turns the collector back on.
    gc.disable()
    rescue = _cyclic_garbage_with_an_open_socket()
    # the test's own rescue: if the grader does not come back, close the socket from here (term then returns)
    timer = threading.Timer(150, lambda: rescue.close(linger=0))
    timer.daemon = True
    real_output = ResilientExecute.output
    collected = []

    def output(self, outs, msg, display_id, cell_index):
        if cell_index == 1 and not collected:
            collected.append(time.monotonic())
            gc.collect()  # finalizes the context: zmq_ctx_term waits for the socket that is still open
        return real_output(self, outs, msg, display_id, cell_index)

    monkeypatch.setattr(ResilientExecute, "output", output)
    timer.start()
    try:
        ex, nb, resources, seconds = _run(_notebook("print('before')", "print('a cell with output')",
                                                    "print('later cell')"), notebook_timeout=20)
    finally:
        gc.enable()
        timer.cancel()
        rescue.close(linger=0)
    assert collected, "the injected garbage collection did not run"
    assert seconds < 90, f"{seconds:.0f} s: the watchdog did not end the stuck run (the test's rescue did)"
    assert "NotebookTimeout" in _outputs(nb.cells[1]) and "longer than 20 s" in _outputs(nb.cells[1])
    assert nb.cells[2].outputs == []
    assert resources["tritoncourse"]["kernel_died_at"] == 1
    assert signal.getsignal(nbgrader_plugin._WAKE) in (signal.SIG_DFL, None, signal.SIG_IGN)


def test_a_cell_whose_reply_arrives_after_the_bound_still_stops_the_notebook_there(monkeypatch):
    """The bound passes while a cell's reply is already queued (the kernel answered before the watchdog's kill):
    nbclient then ends that cell normally. The notebook still stops at that cell with its bound named, and no later
    cell runs (before, the next cell met the dead kernel and got the message: seen in CI on 2026-11-26)."""
    real_output = ResilientExecute.output

    def output(self, outs, msg, display_id, cell_index):
        if cell_index == 1:
            self._watchdog.expired = "time"  # as the watchdog marks it; the kernel is left alive to answer
        return real_output(self, outs, msg, display_id, cell_index)

    monkeypatch.setattr(ResilientExecute, "output", output)
    ex, nb, resources, seconds = _run(_notebook("print('before')", "print('a cell with output')",
                                                "print('later cell')"), notebook_timeout=600)
    assert "before" in _outputs(nb.cells[0]) and "NotebookTimeout" not in _outputs(nb.cells[0])
    assert "NotebookTimeout" in _outputs(nb.cells[1]) and "longer than 600 s" in _outputs(nb.cells[1])
    assert nb.cells[2].outputs == []
    assert resources["tritoncourse"]["kernel_died_at"] == 1


@pytest.mark.waits
def test_a_notebook_past_its_bound_stops_alone_and_everything_it_made_is_ended():
    """A cell that ignores the interrupt and never ends, under a cell time-out longer than the notebook's bound: the
    notebook stops at its bound with a message; every zmq context the run made is closed (none is left for the
    garbage collector), its kernel's process is reaped, and no watchdog thread is left."""
    made = []
    real_context = ResilientExecute._context

    def context(self, cls):
        made.append(real_context(self, cls))
        return made[-1]

    ResilientExecute._context = context
    try:
        stuck = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)"
        ex, nb, resources, seconds = _run(_notebook("print('before')", stuck, "print('later cell')"),
                                          notebook_timeout=15)
    finally:
        ResilientExecute._context = real_context
    assert "NotebookTimeout" in _outputs(nb.cells[1]), nb.cells[1].outputs
    assert nb.cells[2].outputs == []
    assert seconds < 60, seconds
    assert len(made) == 2 and all(ctx.closed for ctx in made)
    gc.collect()
    left = [o for o in gc.get_objects() if issubclass(type(o), zmq.Context) and not o.closed]
    assert not left, left
    zombies = [p for p in psutil.Process().children() if p.status() == psutil.STATUS_ZOMBIE]
    assert not zombies, zombies
    assert not [t for t in threading.enumerate() if t.name == "tritoncourse-notebook-watchdog"]


def _short_grace(init):
    def short(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.grace = 2.0
    return short


class _Sock(zmq.Socket):
    pass


class _Ctx(zmq.Context):
    _socket_class = _Sock


def _cyclic_garbage_with_an_open_socket():
    """A zmq context and an open socket of it in a reference cycle, unreachable: the garbage collector's next run
    finalizes the context first (weak references to the socket are already cleared), and its term() waits for the
    socket. Returns a shadow of the socket, outside the cycle, to close it."""
    ctx = _Ctx()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 1000
    sock.connect("inproc://tritoncourse-test-nobody")
    holder = type("Holder", (), {})()
    holder.ctx, holder.sock, holder.me = ctx, sock, holder
    object.__setattr__(sock, "holder", holder)
    return zmq.Socket.shadow(sock.underlying)


@pytest.fixture(autouse=True)
def _no_leftover_gc_state():
    yield
    gc.enable()


# ---- the whole run's bound, under both graders

@pytest.mark.waits
def test_plain_nbgrader_run_stops_at_its_bound():
    """In the nbgrader command, ResilientExecute.run_timeout bounds the whole process: past it the notebook being
    run is stopped and the run ends as on Ctrl-C (KeyboardInterrupt, which nbgrader handles: what was graded stays)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys, time
        sys.argv[0] = "nbgrader"  # as the nbgrader command runs it
        from nbformat.v4 import new_code_cell, new_notebook
        from tritoncourse.grading.autograde.nbgrader_plugin import ResilientExecute
        nb = new_notebook(cells=[new_code_cell("import time\\nwhile True:\\n    time.sleep(0.1)")])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        ex = ResilientExecute(timeout=600, run_timeout=int(sys.argv[1]))
        start = time.monotonic()
        try:
            ex.preprocess(nb, {})
        except KeyboardInterrupt as err:
            print(f"STOPPED after {time.monotonic() - start:.0f} s: {err}; outputs {nb.cells[0].outputs}", flush=True)
            sys.exit(130)
        print("NOT STOPPED", flush=True)
    """)
    # the bound counts from the process's start: give it the time to import and start a kernel (a loaded machine)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script, "25"], capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    assert proc.returncode == 130 and "STOPPED" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "run_timeout" in proc.stdout, proc.stdout[-2000:]
    assert seconds < 120, seconds


def test_course_grade_stops_at_its_run_bound(tmp_path):
    """`python -m tritoncourse grade --run-timeout`: past the bound the gradings in flight are stopped, the state is
    saved and the run ends (exit 3), saying that a rerun goes on."""
    import io

    import nbformat

    from tritoncourse.classroom.workflow import Course, Grader, RunResult

    A = "01_vector_add"
    root = tmp_path / "course"
    for student in ("ann", "bob", "cid"):
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        nbformat.write(new_notebook(cells=[new_code_cell("1")]), folder / f"{A}.ipynb")

    class Stuck(Grader):
        def _snapshot(self):
            return tmp_path / "template.db"

        def run_one(self, task, template):  # a grading that would take a minute
            self._stopping.wait(60)
            return RunResult(False, 0.0, "stopped", tmp_path, tmp_path / "log")

    out = io.StringIO()
    grader = Stuck(Course(root), jobs=2, out=out, run_timeout=2)
    grader._run_deadline = time.monotonic() + grader.run_timeout
    start = time.monotonic()
    code = grader._grade([(A, s, [A]) for s in ("ann", "bob", "cid")], force=True, retry_failed=False)
    assert code == 3 and time.monotonic() - start < 15, out.getvalue()
    assert "passed its bound of 2 s (--run-timeout)" in out.getvalue() and "Run the same command again" in out.getvalue()

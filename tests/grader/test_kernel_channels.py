"""The grader never connects where a notebook's kernel points it (issue 42): the kernel's ipc sockets live in the
sandbox's shared folder, which the kernel (the learner's code) can write, so a socket file replaced by a link to a
Unix socket outside the sandbox, followed by a reconnection, would have the grader's client (root, outside the
sandbox) connect to that socket, again and again through the heartbeat.

The hostile class's learner tests/hostile/01_vector_add/hostile_socket_links.py is such a notebook: its cells after
the kernel are graded here by ResilientExecute (the course's nbgrader step) alone, with a listener on the host path its
links name: it links all five socket files, stops itself for 2 s (the heartbeat), then drops its stdin and control
connections. Before the fix the listener saw the grader connect
(the heartbeat's new sockets, then every dropped channel's reconnection); now the grader connects each channel once,
after checking each socket file is the kernel's and before any cell runs, never again, and runs no heartbeat: the
listener sees nothing, the stopped kernel goes on, and the notebook whose channel was dropped is stopped there with a
message that says so.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from servers import UnixListener
from tritoncourse.grading import sandbox
from tritoncourse.grading.autograde.nbgrader_plugin import ResilientExecute

pytestmark = pytest.mark.slow
HOSTILE = Path(__file__).resolve().parents[1] / "hostile" / "01_vector_add" / "hostile_socket_links.py"


def test_the_grader_never_connects_where_the_kernel_points_it(tmp_path):
    assert sandbox.problem() is None, sandbox.problem()
    host = tmp_path / "host.sock"
    text = HOSTILE.read_text().replace("{{host_socket}}", str(host)).replace("{{course}}", str(tmp_path / "course"))
    cells = text.split("# %% append\n")[1:]  # the learner's cells after its kernel
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    listener = UnixListener(host)
    try:
        start = time.monotonic()
        nb, resources = ResilientExecute(timeout=20, probe_timeout=4).preprocess(nb, {})
        seconds = time.monotonic() - start
        time.sleep(1)  # a reconnection after the run would come now
    finally:
        listener.close()
    outputs = [nbformat.writes(new_notebook(cells=[c])) for c in nb.cells]
    assert listener.connections == 0, f"the grader connected {listener.connections} times to the kernel's link"
    assert "resumed" in outputs[0], outputs[0]  # no heartbeat: a kernel stopped for a while is not given up
    assert "dropped 3" in outputs[1] and "KernelConnectionLost" in outputs[1], outputs[1]
    assert not nb.cells[2].outputs, "the notebook goes on after a channel was lost"
    assert resources["tritoncourse"]["kernel_died_at"] == 1, resources
    assert seconds < 60, seconds

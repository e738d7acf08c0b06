# A notebook (cells split at "# %%") whose kernel points the grader's connections at a Unix socket outside the
# sandbox: each of its five ipc socket files becomes a link to {{host_socket}} (a path that exists only outside),
# then it makes the grader's client connect again: it stops itself for 3 s (a heartbeat that is not answered is
# reconnected), then drops its stdin and control connections, the client's and the manager's (zmq reconnects a dropped
# connection by the same path).
# tests/test_kernel_channels.py listens on {{host_socket}}: the grader (outside the sandbox) must never connect there.
import json
import os
import socket
import subprocess

from ipykernel.connect import get_connection_file

assert not os.path.exists("{{host_socket}}"), "not sandboxed: doing nothing"
info = json.load(open(get_connection_file()))
assert info["transport"] == "ipc", info["transport"]
CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
paths = {name: f"{info['ip']}-{info[name + '_port']}" for name in CHANNELS}
for path in paths.values():
    os.symlink("{{host_socket}}", path + ".lnk")
    os.replace(path + ".lnk", path)
print("linked", sorted(paths), flush=True)
subprocess.Popen(["sh", "-c", f"sleep 3; kill -CONT {os.getpid()}"])
os.kill(os.getpid(), 19)  # SIGSTOP: the heartbeat goes unanswered for 3 s
print("resumed", flush=True)
# %%
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
time.sleep(2)  # zmq reconnects a dropped connection after 0.1 s
print("still here", flush=True)
# %%
print("after")

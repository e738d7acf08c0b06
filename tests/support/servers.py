"""What the tests share about the servers they start (JupyterLab, Jupyter Server, JupyterHub, PostgreSQL, Slurm)."""
from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable


def free_port() -> int:
    """A loopback port no process listens on now (the servers of parallel test workers never share one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_answers(probe: Callable[[], object], proc: subprocess.Popen, timeout: float, what: str,
                       log: Callable[[], str]) -> None:
    """Call ``probe`` (a request that raises OSError until the server answers) until it returns, while ``proc``
    runs; fail with the server's log if it exits or does not answer within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}:\n{log()}")
        try:
            probe()
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{what} did not answer within {timeout:.0f} s:\n{log()}")


class UnixListener:
    """A Unix socket outside any sandbox (in the test's scratch folder) that counts every connection made to it."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()

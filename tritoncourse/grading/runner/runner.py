"""The runner: the only process that runs a learner's code while a test is judged. ``python -I runner.py DIR``.

DIR holds ``learner_kernels.py`` (only the learner's definitions, linted beforehand) and ``kernel_names.json``.
The runner loads them, connects to the judge's socket ``DIR/judge.sock`` and does what the judge asks (launch
this kernel on these buffers, call this function) until the judge closes the channel. It never sees the test,
the references or the verdict: it has nothing to forge. In grading it runs inside the learner's sandbox.
"""
import json
import os
import socket
import sys
import time

# -I keeps the working directory and PYTHONPATH off sys.path: only the course's own package is found.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from tritoncourse.grading.channel import SOCKET_NAME  # noqa: E402
CONNECT_SECONDS = 120.0


def connect(workdir: str) -> socket.socket:
    """The judge's socket, by a relative path (a full path may pass the 108 bytes a socket's name may have)."""
    os.chdir(workdir)
    deadline = time.monotonic() + CONNECT_SECONDS
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(SOCKET_NAME)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def main(workdir: str) -> int:
    sys.dont_write_bytecode = True  # -I ignores PYTHONDONTWRITEBYTECODE
    from tritoncourse.device import setup_device

    setup_device()
    import importlib.util

    from tritoncourse.grading.channel.rpc import Channel

    kernels_path = os.path.join(workdir, "learner_kernels.py")
    with open(os.path.join(workdir, "kernel_names.json")) as f:
        names = json.load(f)
    sock = connect(workdir)
    channel = Channel(sock, role="runner", learner_files={kernels_path})
    try:
        spec = importlib.util.spec_from_file_location("learner_kernels", kernels_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        hello = {"kernels": {name: getattr(module, name) for name in names}}
    except BaseException as err:  # the definitions could not even be loaded: the judge says so
        from tritoncourse.grading.channel.rpc import describe_error

        hello = {"load_error": describe_error(err, {kernels_path})}
    channel._send({"hello": True}, hello)
    channel.serve()
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""The hub run for a term (issue 41): hub/tritonhub.service as systemd reads it (`systemd-analyze verify`, with this
checkout's path as docs/JUPYTERHUB.md installs it), and hub/nginx-tritonhub.conf served for real by nginx with a
test certificate in front of a stand-in for the hub: plain HTTP is sent to https, https reaches the hub with the
Host and X-Forwarded-Proto it needs, and a websocket upgrade (a kernel's channels) passes both ways — which the same
file without its Upgrade and Connection headers does not (so the check can fail). About a second; skipped without
systemd-analyze, nginx (Debian's nginx-light) or openssl."""
from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from nginx_front import HOST, example_site, make_certificate, needs_nginx, run_nginx, wait_port
from servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_the_service_unit_verifies(tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    text = (ROOT / "hub" / "tritonhub.service").read_text()
    assert "ExecStart=/usr/bin/python3 /opt/triton-kernels/hub/tritonhub.py start --state /srv/tritonhub" in text
    assert "Delegate=yes" in text  # the learners' cgroups below the unit's (hub/tritonhub_limits.py)
    unit = tmp_path / "tritonhub.service"
    unit.write_text(text.replace("/opt/triton-kernels", str(ROOT)))  # as docs/JUPYTERHUB.md's sed installs it
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and not proc.stderr.strip() and not proc.stdout.strip(), proc.stdout + proc.stderr
    unit.write_text(text.replace("Delegate=yes", "Delegat=yes").replace("/opt/triton-kernels", str(ROOT)))
    typo = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=30)
    assert "Delegat" in typo.stderr  # a key systemd does not know is reported: the check above can fail


class Backend(threading.Thread):
    """A stand-in for the hub on 127.0.0.1: answers a request with the headers it got, or an Upgrade with 101 and
    then echoes in capitals what comes through (a websocket's frames, as far as nginx is concerned: bytes)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    def run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            headers = data.split(b"\r\n\r\n")[0].decode().lower()
            if "upgrade: websocket" in headers and "connection: upgrade" in headers:
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
                while chunk := conn.recv(4096):
                    conn.sendall(chunk.upper())
            else:
                body = headers.encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)


def upgrade(context: ssl.SSLContext, port: int) -> tuple[bytes, bytes]:
    """A kernel channel's websocket handshake through nginx; (the status line, what came back for b'ping')."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=HOST) as tls:
        tls.sendall(f"GET /user/a/api/kernels/k/channels HTTP/1.1\r\nHost: {HOST}\r\nUpgrade: websocket\r\n"
                    "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    "Sec-WebSocket-Version: 13\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += tls.recv(4096)
        status = head.split(b"\r\n")[0]
        if b" 101 " not in status:
            return status, b""
        tls.sendall(b"ping")
        return status, tls.recv(4096)


def test_the_nginx_example_serves_the_hub_over_tls_with_websockets(tmp_path):
    needs_nginx()
    cert, key = make_certificate(tmp_path)
    backend = Backend()
    backend.start()
    http_port, https_port = free_port(), free_port()
    site = example_site(cert, key, f"127.0.0.1:{http_port}", f"127.0.0.1:{https_port}", backend.port)
    context = ssl.create_default_context(cafile=str(cert))
    nginx = run_nginx(tmp_path, site)
    try:
        wait_port(https_port, nginx)
        plain = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
        plain.request("GET", "/hub/login", headers={"Host": HOST})
        moved = plain.getresponse()
        assert moved.status == 301 and moved.getheader("Location") == f"https://{HOST}/hub/login"
        with socket.create_connection(("127.0.0.1", https_port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname=HOST) as tls:  # the certificate is checked for HOST
            tls.sendall(f"GET /hub/login HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
        head, _, seen = answer.decode().partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 200") and "strict-transport-security" in head.lower(), head
        assert f"host: {HOST}" in seen and "x-forwarded-proto: https" in seen, seen
        assert upgrade(context, https_port) == (b"HTTP/1.1 101 Switching Protocols", b"PING")
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
    without = "\n".join(line for line in site.splitlines()
                        if not ("proxy_set_header" in line and ("Upgrade" in line or "Connection" in line)))
    assert len(without.splitlines()) == len(site.splitlines()) - 2
    nginx = run_nginx(tmp_path, without)
    try:
        wait_port(https_port, nginx)
        status, _ = upgrade(context, https_port)
        assert b" 101 " not in status  # without those two headers the kernel's websocket is never opened
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        backend.sock.close()

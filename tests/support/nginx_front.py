"""hub/nginx-tritonhub.conf served for real by nginx (Debian's nginx-light) with a test certificate for HOST: the
example's file with only its certificate paths, its two listening addresses and the hub's port replaced. Used by
tests/units/test_hub_proxy.py (a stand-in hub behind it) and tests/system/test_hub_term.py (the real hub, in Chromium)."""
from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOST = "hub.example.edu"


def needs_nginx() -> None:
    if not (shutil.which("nginx") and shutil.which("openssl")):
        pytest.skip("needs nginx (Debian's nginx-light: tools/system-deps.sh) and openssl")


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for HOST (a day), and its key."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={HOST}",
                    "-addext", f"subjectAltName=DNS:{HOST}"], check=True, capture_output=True)
    return cert, key


def example_site(cert: Path, key: Path, http: str, https: str, hub_port: int) -> str:
    """hub/nginx-tritonhub.conf listening on ``http`` and ``https`` (address:port) in front of 127.0.0.1:hub_port."""
    site = (ROOT / "hub" / "nginx-tritonhub.conf").read_text()
    for old, new in ((f"/etc/letsencrypt/live/{HOST}/fullchain.pem", str(cert)),
                     (f"/etc/letsencrypt/live/{HOST}/privkey.pem", str(key)),
                     ("listen 80;", f"listen {http};"),
                     ("listen 443 ssl;", f"listen {https} ssl;"),
                     ("proxy_pass http://127.0.0.1:8000;", f"proxy_pass http://127.0.0.1:{hub_port};")):
        assert site.count(old) == 1, old
        site = site.replace(old, new)
    return site


def run_nginx(folder: Path, site: str) -> subprocess.Popen:
    """nginx in the foreground with ``site`` as its only server configuration, every file of its own in ``folder``."""
    conf = folder / "nginx.conf"
    temp = "".join(f"{k}_temp_path {folder / k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (folder / "site.conf").write_text(site)
    conf.write_text(f"daemon off;\nmaster_process off;\npid {folder / 'nginx.pid'};\n"
                    f"error_log {folder / 'error.log'};\nevents {{}}\n"
                    f"http {{\naccess_log off;\n{temp}include {folder / 'site.conf'};\n}}\n")
    checked = subprocess.run(["nginx", "-t", "-c", str(conf), "-p", str(folder)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    return subprocess.Popen(["nginx", "-c", str(conf), "-p", str(folder)], stderr=subprocess.PIPE)


def wait_port(port: int, proc: subprocess.Popen, address: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("nginx did not listen")


@contextlib.contextmanager
def nginx(folder: Path, site: str, port: int, address: str = "127.0.0.1"):
    """nginx serving ``site`` until the block ends (then stopped, by its own pid)."""
    proc = run_nginx(folder, site)
    try:
        wait_port(port, proc, address)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)

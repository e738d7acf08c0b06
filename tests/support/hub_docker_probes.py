"""What tests/system/test_hub_docker.py does as learner A: an HTTP session with the hub as JupyterLab's page holds one
(``Learner``: log-in, the REST handlers, code run in a kernel through its websocket), and the code A's kernel runs in
A's container: the paths of the host A must not reach (``_probe_code``), TCP connections to other servers
(``_net_probe_code``) and a bounded fork loop to the container's pids limit (``_fork_probe_code``)."""
from __future__ import annotations

import asyncio
import http.cookiejar
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

from hub_docker import COURSE_ID, DockerHub
from hub_env import PHASE


class Learner:
    """A learner's HTTP session with the hub, as JupyterLab's page holds one: the hub's and the server's cookies,
    and the server's XSRF token sent with every request that changes something."""

    def __init__(self, base: str, name: str):
        self.base, self.name = base, name
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def xsrf(self, path: str) -> str | None:
        found = [c for c in self.jar if c.name == "_xsrf" and path.startswith(c.path)]
        return max(found, key=lambda c: len(c.path)).value if found else None

    def request(self, method: str, path: str, form: dict | None = None, body: dict | None = None,
                timeout: float = 120) -> tuple[int, str, bytes]:
        headers, data = {}, None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        elif form is not None:
            data, headers["Content-Type"] = urllib.parse.urlencode(form).encode(), "application/x-www-form-urlencoded"
        if method not in ("GET", "HEAD") and self.xsrf(path.split("?")[0]):
            headers["X-XSRFToken"] = self.xsrf(path.split("?")[0])
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with self.opener.open(req, timeout=timeout) as resp:
                return resp.status, urllib.parse.urlparse(resp.geturl()).path, resp.read()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: {e.code} {e.read()[-2000:]!r}") from None

    def json(self, method: str, path: str, **kw):
        return json.loads(self.request(method, path, **kw)[2])

    def cookie_header(self, path: str) -> str:
        return "; ".join(f"{c.name}={c.value}" for c in self.jar if path.startswith(c.path))

    def log_in(self, password: str) -> str:
        self.request("GET", "/hub/login")
        _, landed, page = self.request("POST", "/hub/login", form={
            "username": self.name, "password": password, "_xsrf": self.xsrf("/hub/login") or ""})
        assert not landed.startswith("/hub/login"), f"the log-in failed: {page[-1500:]!r}"
        return landed

    def execute(self, kernel_id: str, code: str, timeout: float = 120) -> str:
        """Run ``code`` in the kernel through its websocket (as JupyterLab's notebook does); return its stdout."""
        return asyncio.run(self._execute(kernel_id, code, timeout))

    async def _execute(self, kernel_id: str, code: str, timeout: float) -> str:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        path = f"/user/{self.name}/api/kernels/{kernel_id}/channels"
        url = self.base.replace("http://", "ws://") + path + f"?session_id={uuid.uuid4().hex}"
        conn = await asyncio.wait_for(websocket_connect(HTTPRequest(url, headers={
            "Cookie": self.cookie_header(path)})), 60)
        msg_id = uuid.uuid4().hex
        conn.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": self.name, "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out, deadline = [], time.monotonic() + timeout
        try:
            while True:
                raw = await asyncio.wait_for(conn.read_message(), max(1.0, deadline - time.monotonic()))
                assert raw is not None, "the kernel's websocket closed"
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg.get("msg_type")
                if kind == "stream":
                    out.append(msg["content"]["text"])
                elif kind == "error":
                    raise AssertionError("the probe raised in the kernel:\n" + "\n".join(msg["content"]["traceback"]))
                elif kind == "status" and msg["content"]["execution_state"] == "idle":
                    return "".join(out)
        finally:
            conn.close()


def _probe_code(hub: DockerHub, a_home: Path, b_home: Path) -> str:
    """What learner A's kernel tries, in A's container: paths of the host that A must not reach there."""
    targets = {
        "own_home": (a_home, True),
        "course_source": (hub.course / "source" / PHASE / f"{PHASE}.ipynb", False),
        "gradebook": (hub.course / "gradebook.db", False),
        "course_dir": (hub.course, True),
        "instructor_home": (hub.course.parent, True),
        "other_home": (b_home, True),
        "other_file": (b_home / "notes.txt", False),
        "inbound": (Path(hub.settings["exchange"]) / COURSE_ID / "inbound", True),
    }
    paths = {k: (str(p), listing) for k, (p, listing) in targets.items()}
    return (
        "import json, os, pwd, sys\n"
        "def probe(path, listing):\n"
        "    try:\n"
        "        os.listdir(path) if listing else open(path, 'rb').read(1)\n"
        "        return 'read'\n"
        "    except Exception as e:\n"
        "        return type(e).__name__\n"
        "import tritoncourse\n"
        "print(json.dumps({\n"
        "    'uid': os.getuid(), 'gid': os.getgid(), 'user': pwd.getpwuid(os.getuid()).pw_name,\n"
        "    'prefix': sys.prefix, 'interpret': os.environ.get('TRITON_INTERPRET'),\n"
        "    'tritoncourse': tritoncourse.__file__, 'passwd': open('/etc/passwd').read(),\n"
        "    'pid1': open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode(),\n"
        "    'process_uids': sorted({os.stat(f'/proc/{p}').st_uid for p in os.listdir('/proc') if p.isdigit()}),\n"
        f"    **{{k: probe(p, l) for k, (p, l) in {paths!r}.items()}},\n"
        "}))\n")


def _net_probe_code(targets: dict) -> str:
    """Python that opens a TCP connection to each ``(host, port)`` of ``targets`` at once (3 s each: Docker drops what
    inter-container communication off forbids, so a refused one answers at once and a dropped one times out) and asks
    each URL (the hub's API) for its JSON's version; prints {name: connected | timeout | the error's name | version}."""
    return (
        "import json, socket, threading, urllib.request\n"
        f"targets = {targets!r}\n"
        "seen = {}\n"
        "def one(name, target):\n"
        "    try:\n"
        "        if isinstance(target, str):\n"
        "            seen[name] = json.loads(urllib.request.urlopen(target, timeout=30).read())['version']\n"
        "        else:\n"
        "            socket.create_connection(tuple(target), timeout=3).close()\n"
        "            seen[name] = 'connected'\n"
        "    except socket.timeout:\n"
        "        seen[name] = 'timeout'\n"
        "    except Exception as e:\n"
        "        seen[name] = type(e).__name__\n"
        "threads = [threading.Thread(target=one, args=item) for item in targets.items()]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(json.dumps(seen))\n")


# Forks children that wait on a pipe until ``cap`` of them or ``seconds`` have passed or a fork fails; then closes
# the pipe (every child exits) and reaps them. Prints how many, why it stopped, and the pids cgroup's counters as the
# container sees them (cgroup v1's pids hierarchy, or v2's unified one). Its children exit with it, even killed.
FORK_LOOP = r"""
import errno, json, os, sys, time
cap, seconds = int(sys.argv[1]), float(sys.argv[2])
def cgroup(name):
    for path in ('/sys/fs/cgroup/pids/' + name, '/sys/fs/cgroup/' + name):
        try:
            return open(path).read().strip()
        except OSError:
            pass
r, w = os.pipe()
children, stopped, current = [], None, None
start = time.monotonic()
try:
    while len(children) < cap and time.monotonic() - start < seconds:
        try:
            pid = os.fork()
        except OSError as e:
            stopped, current = errno.errorcode.get(e.errno, str(e.errno)), cgroup('pids.current')
            break
        if pid == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        children.append(pid)
finally:
    os.close(w)
    for pid in children:
        os.waitpid(pid, 0)
print(json.dumps({'forked': len(children), 'stopped': stopped, 'pids_current_then': current,
                  'pids_max': cgroup('pids.max'), 'seconds': round(time.monotonic() - start, 2)}))
"""


def _fork_probe_code(cap: int, seconds: float) -> str:
    """What A's kernel runs: FORK_LOOP in a process of its own (in A's container), killed past 2 x ``seconds``."""
    return (
        "import json, subprocess, sys\n"
        f"p = subprocess.run([sys.executable, '-c', {FORK_LOOP!r}, '{cap}', '{seconds}'], capture_output=True, "
        f"text=True, timeout={2 * seconds})\n"
        "print(p.stdout.strip().splitlines()[-1] if p.returncode == 0 else "
        "json.dumps({'rc': p.returncode, 'stderr': p.stderr[-3000:]}))\n")

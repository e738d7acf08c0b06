"""A learner's session on the real hub that tools/hub-vm-try.sh runs in a Debian 12 virtual machine (systemd, cgroup v2
only), with the hub venv's Python, once `systemctl enable --now tritonhub` has started JupyterHub from
hub/tritonhub.service: the learner logs in through the hub's form (PAM), the hub starts their server with its limits
(hub/tritonhub_limits.py), and code run in the learner's own kernel (over the kernel's websocket, as JupyterLab runs a
cell) reaches each limit; then the kernel is shut down and the server left idle until jupyterhub-idle-culler stops it.
What it saw goes to OUT as JSON (read by the try script after the VM powers off).

    /opt/tritonhub/venv/bin/python tools/hub_vm_session.py NAME PASSWORD OUT
"""
from __future__ import annotations

import asyncio
import http.cookiejar
import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

HUB = "http://127.0.0.1:8000"
NAME, PASSWORD, OUT = sys.argv[1], sys.argv[2], Path(sys.argv[3])
TOKEN = Path("/srv/tritonhub/api-token").read_text().strip()  # root's, as the hub's configuration makes it
seen: dict = {}
T0 = time.monotonic()


def stamp(what: str) -> None:
    seen.setdefault("times", {})[what] = round(time.monotonic() - T0, 1)
    OUT.write_text(json.dumps(seen, indent=1))


def api(method: str, path: str, body: dict | None = None, token: str = TOKEN):
    req = urllib.request.Request(f"{HUB}/hub/api{path}", method=method, headers={"Authorization": f"token {token}"},
                                 data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        text = r.read().decode()
    return json.loads(text) if text else None


JAR = http.cookiejar.CookieJar()


def log_in(password: str) -> tuple[int, str]:
    """The hub's log-in form, as a browser posts it: the _xsrf field of the page, then the name and password."""
    jar = http.cookiejar.CookieJar() if password != PASSWORD else JAR
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{HUB}/hub/login", timeout=60).read().decode()
    xsrf = re.search(r'name="_xsrf"[^>]*value="([^"]+)"', page)
    form = {"username": NAME, "password": password, **({"_xsrf": xsrf.group(1)} if xsrf else {})}
    try:
        with opener.open(f"{HUB}/hub/login?next=", urllib.parse.urlencode(form).encode(), timeout=120) as r:
            return r.status, r.url
    except urllib.error.HTTPError as err:
        return err.code, err.url


def server() -> dict | None:
    return (api("GET", f"/users/{NAME}").get("servers") or {}).get("")


async def kernel_session(token: str, cells: list[tuple[str, str]]) -> dict:
    """A kernel of the learner's server, each cell executed through its channels websocket; what each printed."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    headers = {"Authorization": f"token {token}"}
    req = urllib.request.Request(f"{HUB}/user/{NAME}/api/kernels", method="POST", data=b"{}", headers=headers)
    kernel = json.loads(urllib.request.urlopen(req, timeout=300).read())
    ws = await websocket_connect(HTTPRequest(f"ws://127.0.0.1:8000/user/{NAME}/api/kernels/{kernel['id']}/channels",
                                             headers=headers, request_timeout=300))
    out = {}
    for name, code in cells:
        msg_id = uuid.uuid4().hex
        await ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": NAME, "session": uuid.uuid4().hex, "msg_type": "execute_request",
                       "version": "5.3"}, "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        text, deadline = [], time.monotonic() + 600
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(ws.read_message(), timeout=600)
            if raw is None:
                text.append("<websocket closed>")
                break
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "stream":
                text.append(msg["content"]["text"])
            elif kind == "error":
                text.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                break
        out[name] = "".join(text).strip()
        stamp(f"cell {name}")
    ws.close()
    req = urllib.request.Request(f"{HUB}/user/{NAME}/api/kernels/{kernel['id']}", method="DELETE", headers=headers)
    urllib.request.urlopen(req, timeout=120)
    return out


GROUP = "import pathlib\ng = pathlib.Path('/sys/fs/cgroup' + open('/proc/self/cgroup').read().split('::')[1].strip())\n"
CELLS = [
    ("who", GROUP + "import os\nprint(os.getuid(), g)\nfor f in ('memory.max', 'memory.swap.max', 'pids.max', "
                    "'cpu.max'):\n    print(f, (g / f).read_text().strip())\n"),
    ("memory", GROUP + "import subprocess, sys\nhog = 'b = []\\nfor i in range(64):\\n    b.append(bytearray(32 << 20))"
                       "\\n    print(len(b) * 32, flush=True)\\n'\np = subprocess.run([sys.executable, '-c', hog], "
                       "capture_output=True, text=True)\nprint('exit', p.returncode, 'last MB', (p.stdout.split() or "
                       "['0'])[-1])\nprint((g / 'memory.events').read_text())\n"),
    ("pids", GROUP + "import os\nr, w = os.pipe()\nn = 0\ntry:\n    for _ in range(256):\n        if os.fork() == 0:\n"
                     "            os.close(w); os.read(r, 1); os._exit(0)\n        n += 1\nexcept BlockingIOError as e:\n"
                     "    print('refused after', n, 'forks:', e)\nelse:\n    print('all', n)\nos.close(w)\n"
                     "for _ in range(n):\n    os.wait()\nprint((g / 'pids.events').read_text().strip(), "
                     "'current', (g / 'pids.current').read_text())\n"),
    ("cpu", GROUP + "import subprocess, sys, time\nst = lambda: dict(l.split() for l in (g / 'cpu.stat').read_text()"
                    ".splitlines())\na, t = st(), time.monotonic()\nbusy = 'import time\\nend = time.time() + 3\\n"
                    "while time.time() < end: pass\\n'\nps = [subprocess.Popen([sys.executable, '-c', busy]) for _ in "
                    "range(2)]\n[p.wait() for p in ps]\nb = st()\nprint('wall', round(time.monotonic() - t, 2), "
                    "'cpu', (int(b['usage_usec']) - int(a['usage_usec'])) / 1e6, 'throttled', "
                    "int(b['nr_throttled']) - int(a['nr_throttled']))\n"),
]


def main() -> None:
    seen["wrong_password"] = log_in(PASSWORD + "x")
    seen["login"] = log_in(PASSWORD)
    stamp("logged in")
    deadline = time.monotonic() + 900
    while not (s := server()) or not s.get("ready"):
        if time.monotonic() > deadline:
            raise SystemExit("the server was not ready in 900 s")
        time.sleep(2)
    stamp("server ready")
    pid = int(subprocess.run(["pgrep", "-u", NAME, "-f", "jupyterhub-singleuser"], capture_output=True,
                             text=True).stdout.split()[0])
    seen["server_cgroup"] = Path(f"/proc/{pid}/cgroup").read_text().strip()
    # a token of the learner's, asked for with the learner's log-in cookie (as JupyterHub's token page does)
    xsrf = next(c.value for c in JAR if c.name == "_xsrf")
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(JAR))
    req = urllib.request.Request(f"{HUB}/hub/api/users/{NAME}/tokens", method="POST", data=json.dumps(
        {"expires_in": 3600, "note": "hub-vm-try"}).encode(), headers={"X-XSRFToken": xsrf,
                                                                          "Content-Type": "application/json"})
    token = json.loads(opener.open(req, timeout=120).read())["token"]
    seen["cells"] = asyncio.run(kernel_session(token, CELLS))
    seen["hub_after"] = api("GET", "/")  # the hub answers
    group = Path("/sys/fs/cgroup" + seen["server_cgroup"].split("::")[1])
    last = time.monotonic()
    stamp("kernel shut down; idle from here")
    while (s := server()) is not None and time.monotonic() < last + 900:
        seen["last_activity_known_to_the_hub"] = s.get("last_activity")
        time.sleep(2)
    seen["culled_at"] = time.strftime("%H:%M:%S")
    seen["culled_after_idle_s"] = round(time.monotonic() - last, 1) if server() is None else None
    seen["group_left"] = group.exists()
    stamp("end")


try:
    main()
except BaseException as err:  # recorded: the try script reads OUT
    import traceback

    seen["error"] = traceback.format_exc()
OUT.write_text(json.dumps(seen, indent=1))

"""The hub run for a term (issue 41), on the running hub of tests/support/hub_env.py: a learner behind the nginx example in
Chromium, and a restore from a backup as an instructor would do it.

- TLS in front: hub/nginx-tritonhub.conf served by nginx with a self-signed certificate for hub.example.edu, on
  ports 80 and 443 of a loopback address of its own (Chromium maps the name there), as it is served for real (on 443
  the browser's Origin and the Host nginx passes agree, which Jupyter's websockets check). Learner A opens
  http://hub.example.edu/, is sent to https, logs in, gets their server, opens a notebook and runs a cell: the
  kernel's websocket (wss://) goes through nginx, the only way to the hub the browser has.
- Backup and restore: learners hand in and the instructor collects; `tritonhub.py backup` while the hub runs; the hub
  stopped with `tritonhub.py stop`; then the course directory, the exchange, learner A's work and learner B's whole
  account are lost; `tritonhub.py restore` (refused while the hub ran) puts back the course, the gradebook, the
  exchange, A's home and B's account and home, each file with its owner, mode and bytes; `tritonhub.py start
  --daemon`, B logs in with the new password restore gave, B's server starts, B hands in again and the instructor
  collects B's new notebook.

Root only (Unix accounts, the hub); needs nginx and openssl (tools/system-deps.sh), Chromium and playwright.
"""
from __future__ import annotations

import csv
import os
import pwd
import re
import secrets
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from hub_class import _wait, finished, submit_as
from hub_env import PHASE, Hub, running_hub
from hub_learners import marked_notebook, owner_of
from learner_lab import CHROMIUM, CHROMIUM_ARGS
from nginx_front import HOST, example_site, make_certificate, needs_nginx, nginx

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "hub-term"
TOOL = [sys.executable, str(ROOT / "hub" / "tritonhub.py")]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub():
    needs_nginx()
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    with running_hub(ARTIFACTS) as h:
        try:
            yield h
        finally:  # a hub restarted by the restore test runs from its pid file, not as h.proc
            subprocess.run(TOOL + ["stop", *h.args], capture_output=True, timeout=120)
            if (h.state / "jupyterhub.log").exists():  # its log (`start --daemon`)
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                shutil.copy(h.state / "jupyterhub.log", ARTIFACTS / "jupyterhub-restarted.log")


def tool(hub: Hub, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(TOOL + [*args, *hub.args], capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------------ a learner behind nginx, in Chromium

CODE = "import os; print('ran as', os.getuid(), 6 * 7)"


def test_a_learner_runs_a_cell_through_the_nginx_front(hub, tmp_path):
    """Does learner A, at http://hub.example.edu/, get https, log in, start their server and run a cell whose
    kernel speaks to the page over a websocket through nginx?"""
    from playwright.sync_api import expect, sync_playwright

    started = time.monotonic()
    address = f"127.{secrets.randbelow(200) + 20}.{secrets.randbelow(250) + 1}.{secrets.randbelow(250) + 1}"
    cert, key = make_certificate(tmp_path)
    site = example_site(cert, key, f"{address}:80", f"{address}:443", hub.port)
    user = hub.learners["a"]
    sockets: list[str] = []
    with nginx(tmp_path, site, 443, address), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=CHROMIUM_ARGS + [f"--host-resolver-rules=MAP {HOST} {address}"])
        try:
            context = browser.new_context(ignore_https_errors=True, viewport={"width": 1400, "height": 950})
            page = context.new_page()
            page.set_default_timeout(120_000)
            page.on("websocket", lambda ws: sockets.append(ws.url))
            console: list[str] = []  # what the page logged, to say why a cell did not run
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"[:300]) if m.type in ("error", "warning")
                    else None)
            first = page.goto(f"http://{HOST}/hub/login")
            assert page.url == f"https://{HOST}/hub/login", page.url  # nginx's redirect to https
            tls = first.security_details() or {}
            assert tls.get("subjectName") == HOST and tls.get("protocol", "").startswith("TLS"), tls
            page.fill("#username_input", user)
            page.fill("#password_input", hub.passwords[user])
            page.click("#login_submit")
            page.wait_for_url(re.compile(rf"^https://{re.escape(HOST)}/user/{re.escape(user)}/lab"), timeout=180_000)
            page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
            # As a learner waits for the new notebook's kernel (on a loaded machine it takes its time) before typing:
            # the status bar names it once the page holds it (the toolbar's indicator says idle before that).
            indicator = page.locator(".jp-Notebook-ExecutionIndicator")
            page.get_by_text(re.compile(r"\(ipykernel\) \| Idle$")).wait_for(timeout=180_000)
            cell = page.locator(".jp-Cell .cm-content").first
            cell.click()
            page.keyboard.type(CODE)
            expect(cell).to_have_text(CODE)  # all of it in the cell, nothing lost to a page still loading
            page.keyboard.press("Shift+Enter")
            prompt = page.locator(".jp-CodeCell .jp-InputArea-prompt").first
            try:  # run: '[*]:' then '[1]:'
                expect(prompt).not_to_have_text("[ ]:", timeout=20_000)
            except AssertionError:  # JupyterLab let the run go (seen once under load): a learner runs it again
                print("the first Shift+Enter did not run the cell; ran it again")
                cell.click()
                page.keyboard.press("Shift+Enter")
            output = page.locator(".jp-OutputArea-output", has_text="ran as")
            try:
                output.wait_for(timeout=120_000)
            except Exception as err:
                page.screenshot(path=str(ARTIFACTS / "a-ran-no-cell-behind-nginx.png"), full_page=True)
                raise AssertionError(f"the cell did not print within 120 s: kernel "
                                     f"{indicator.first.get_attribute('data-status')!r}, cell {cell.inner_text()!r}, "
                                     f"prompt {prompt.inner_text()!r}, "
                                     f"websockets {sockets}, console {console[-15:]}") from err
            page.screenshot(path=str(ARTIFACTS / "a-ran-a-cell-behind-nginx.png"), full_page=True)
            said = output.inner_text()
        finally:
            browser.close()
    assert said.strip() == f"ran as {pwd.getpwnam(user).pw_uid} 42", said
    kernels = [u for u in sockets if u.startswith(f"wss://{HOST}/user/{user}/api/kernels/")]
    assert kernels, f"no kernel websocket through nginx: {sockets}"
    print(f"a learner behind nginx: {time.monotonic() - started:.1f} s")


# ------------------------------------------------------------------ backup, stop, loss, restore, start

def tree(folder: Path, skip: tuple[str, ...] = ()) -> dict:
    """Each path under ``folder`` (but those under ``skip``): type, mode, owner's name, bytes or link target."""
    out = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        rel = str(path.relative_to(folder))
        if any(rel == s or rel.startswith(s + "/") for s in skip) or stat.S_ISSOCK(path.lstat().st_mode):
            continue
        st = path.lstat()
        what = os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else "dir"
        out[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), pwd.getpwuid(st.st_uid).pw_name, what)
    return out


def gradebook(hub: Hub) -> list[str]:
    db = sqlite3.connect(f"file:{hub.course / 'gradebook.db'}?mode=ro", uri=True)
    try:
        return list(db.iterdump())
    finally:
        db.close()


def answers(hub: Hub) -> bool:
    try:
        return hub.api("GET", "/")[0] == 200
    except OSError:  # urllib's errors: not listening yet
        return False


def log_in(hub: Hub, user: str, password: str) -> int:
    """The hub's log-in form posted as a browser does (its _xsrf cookie and field); the status it ends with."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    form = opener.open(f"{hub.base}/hub/login", timeout=60).read().decode()
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', form).group(1)
    data = urllib.parse.urlencode({"username": user, "password": password, "_xsrf": xsrf}).encode()
    try:
        with opener.open(f"{hub.base}/hub/login", data=data, timeout=120) as page:
            return page.status
    except urllib.error.HTTPError as err:
        return err.code


def stop_server(hub: Hub, user: str) -> None:
    """The learner's server stopped through the hub's API, if it runs."""
    try:
        hub.api("DELETE", f"/users/{user}/server")
    except urllib.error.HTTPError as err:
        assert err.code in (400, 404), err  # not running, or a user the hub does not know yet
    _wait(lambda: not any(u["name"] == user and u["servers"] for u in hub.api("GET", "/users")[1]), 60,
          f"{user}'s server did not stop")


def test_restore_from_a_backup_brings_the_class_back(hub):
    """After a backup, the hub stopped and the course, the exchange, A's work and B's account lost: does `restore`
    bring back every file as it was, and does the restarted hub let B log in, hand in and be collected?"""
    a, b = hub.learners["a"], hub.learners["b"]
    started = time.monotonic()
    for key in "ab":
        rc, log = finished(submit_as(hub, hub.learners[key], marked_notebook(f"{key}-before")))
        assert rc == 0, f"{key}'s hand-in failed: {log[-3000:]}"
    hub.as_user(a, "sh", "-c", "mkdir ~/notes && echo my notes > ~/notes/today.txt && ln -s /etc/passwd ~/notes/passwd")
    collect = hub.as_user(hub.instructor, "nbgrader", "collect", PHASE, "--log-level=WARN", cwd=hub.course, check=False)
    assert collect.returncode == 0, collect.stderr[-3000:]
    stop_server(hub, a)  # no server writing in A's home while it is copied and compared (B never logged in)
    volatile = (".local/share/jupyter/runtime", ".cache", ".ipython")
    before = {"course": tree(hub.course, ("gradebook.db",)), "exchange": tree(Path(hub.settings["exchange"])),
              "a": tree(hub.home(a), volatile), "b": tree(hub.home(b), volatile), "gradebook": gradebook(hub)}
    backups = hub.scratch / "backups"
    made = tool(hub, "backup", str(backups))  # while the hub runs
    assert made.returncode == 0, made.stderr
    (folder,) = backups.iterdir()
    refused = tool(hub, "restore", str(folder))
    assert refused.returncode == 1 and "stop it first" in refused.stderr, refused.stderr
    asked = time.monotonic()
    stopped = tool(hub, "stop")
    assert stopped.returncode == 0 and "stopped the hub" in stopped.stdout, stopped.stderr
    took = time.monotonic() - asked  # the hub was started with SIGINT ignored (hub_env): its services stop at its SIGINT
    assert took < 20, (f"`tritonhub.py stop` took {took:.0f} s: do the hub's services (idle culler, hand-in service) "
                       "ignore the SIGINT it stops them with (inherited ignored from the hub's start)?")
    # the loss: the course directory, the exchange's course folder, A's work, B's account and home
    shutil.rmtree(hub.course)
    shutil.rmtree(Path(hub.settings["exchange"]) / hub.settings["course_id"])
    shutil.rmtree(hub.home(a) / PHASE)
    shutil.rmtree(hub.home(a) / "notes")
    subprocess.run(["userdel", "--remove", b], check=True, capture_output=True)
    restored = tool(hub, "restore", str(folder))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    for aside in re.findall(r"set aside as (\S+)", restored.stdout):  # the homes found there: not kept
        if Path(aside).parent != hub.scratch and Path(aside).name.startswith(hub.prefix + "-"):
            shutil.rmtree(aside)
    after = {"course": tree(hub.course, ("gradebook.db",)), "exchange": tree(Path(hub.settings["exchange"])),
             "a": tree(hub.home(a), volatile), "b": tree(hub.home(b), volatile), "gradebook": gradebook(hub)}
    for what in before:
        assert after[what] == before[what], f"{what} is not as it was at the backup"
    assert os.readlink(hub.home(a) / "notes" / "passwd") == "/etc/passwd"  # a link, still a link
    with open(hub.state / "passwords.csv") as f:
        hub.passwords[b] = dict(csv.reader(f))[b]  # B's account was made again, with a new password
    began = tool(hub, "start", "--daemon")
    assert began.returncode == 0, began.stderr
    _wait(lambda: answers(hub), 90, "the restarted hub does not answer")
    assert log_in(hub, b, "not-" + hub.passwords[b]) == 403
    assert log_in(hub, b, hub.passwords[b]) == 200  # the log-in form, as a browser posts it; the server spawns
    _wait(lambda: hub.api("GET", f"/users/{b}")[1]["servers"].get("", {}).get("ready"), 120,
          "B's server did not start on the restored hub")
    rc, log = finished(submit_as(hub, b, marked_notebook("b-after")))
    assert rc == 0, f"B's hand-in after the restore failed: {log[-3000:]}"
    collect = hub.as_user(hub.instructor, "nbgrader", "collect", PHASE, "--update", "--log-level=WARN",
                          cwd=hub.course, check=False)
    assert collect.returncode == 0, collect.stderr[-3000:]
    assert owner_of(hub.course / "submitted" / b / PHASE / f"{PHASE}.ipynb") == "b-after"
    assert owner_of(hub.course / "submitted" / a / PHASE / f"{PHASE}.ipynb") == "a-before"
    print(f"backup, stop, restore, start, hand-in: {time.monotonic() - started:.1f} s")

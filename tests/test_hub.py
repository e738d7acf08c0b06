"""The course on JupyterHub (issue 30), as people use it, in headless Chromium: hub/ set up by hub/tritonhub.py,
PAM log-ins of throw-away Unix accounts, each user's JupyterLab as that user, nbgrader's exchange.

Learner A fetches 01_vector_add in the Assignment List, fills it with the reference solution and submits; learner B
submits a wrong kernel (tests/submissions/01_vector_add/wrong_no_mask.py); the instructor collects and autogrades
in Formgrader (its own browser tab: JupyterHub >= 4.1 forbids Formgrader's iframe), grades the key question, and
generates and releases feedback; A fetches the feedback, which shows no hidden test line. Every test's score of A
and B equals the one serial `nbgrader autograde` gives in a course copy of the test's own. The separation between
users is checked as learner A's own processes. Screenshots: tests/artifacts/hub/.

Root only (it makes Unix accounts, named th<random>-*, and deletes only those); needs configurable-http-proxy
(`bash tools/system-deps.sh hub`), Debian's chromium and playwright (as tests/test_browser.py). The hub's servers
run from a copy of this interpreter outside /root (learners cannot run /root's) with .venv's packages.
"""
from __future__ import annotations

import html
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from course import SUBMISSIONS, Course, Fixture
from servers import wait_until_answers
from test_browser import CHROMIUM, CHROMIUM_ARGS, learner_notebook

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts" / "hub"
PHASE = "01_vector_add"
WRONG = "wrong_no_mask"
KEY_QUESTION, KEY_POINTS = "mask_question", 2
PORTABLE = Path("/opt/tritonhub-test")  # this interpreter, copied where every user may run it (kept between runs)

pytestmark = pytest.mark.slow


def _skip_unless_possible() -> str:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the hub test makes Unix accounts and spawns servers as them: Linux and root only (CI is root)")
    chp = shutil.which("configurable-http-proxy")
    if not chp:
        pytest.skip("configurable-http-proxy (npm) is not installed: `bash tools/system-deps.sh hub` installs it")
    if not (Path(CHROMIUM).exists() and shutil.which("useradd") and shutil.which("chpasswd")):
        pytest.skip(f"needs {CHROMIUM}, useradd and chpasswd (tools/system-deps.sh)")
    if not (Path(sys.executable).parent / "jupyterhub-singleuser").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements" / "hub.txt")],
                       check=True)
    return chp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"


# ------------------------------------------------------------------ an environment every user can run

def portable_venv() -> Path:
    """A venv usable by every user: this interpreter's installation copied under /opt (without its site-packages),
    .venv's packages hard-linked into it, and .venv's console scripts with this venv's interpreter."""
    base = PORTABLE / "python"
    if not (base / "bin" / "python3").exists():
        src = Path(sys.base_prefix)
        tmp = PORTABLE / "python.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, symlinks=True, ignore=lambda d, names: [
            n for n in names if n in ("__pycache__", "test") or (n == "site-packages" and Path(d).name.startswith("python"))])
        _runpath_to_origin(tmp, src)
        tmp.rename(base)
    venv = PORTABLE / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([str(base / "bin" / "python3"), "-m", "venv", "--without-pip", str(venv)], check=True)
    course_venv = Path(sys.prefix)
    site = course_venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    # .venv's packages and Jupyter files, hard-linked (instant, no copy) inside this venv: the grading sandbox shows
    # a runner only its environment's own folders
    for shared in (site.relative_to(course_venv), Path("etc"), Path("share")):  # share/jupyterhub: its templates
        (venv / shared).parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(venv / shared, ignore_errors=True)
        subprocess.run(["cp", "-al", str(course_venv / shared), str(venv / shared)], check=True)
    for script in (course_venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            head, _, rest = script.read_bytes().partition(b"\n")
            if head.startswith(b"#!") and b"python" in head and not (venv / "bin" / script.name).exists():
                (venv / "bin" / script.name).write_bytes(b"#!" + str(venv / "bin" / "python").encode() + b"\n" + rest)
                (venv / "bin" / script.name).chmod(0o755)
    for path in [PORTABLE, *PORTABLE.parents]:
        if path != Path("/") and not (path.stat().st_mode & 0o001):
            raise AssertionError(f"{path} is not searchable by other users")
    return venv


def _runpath_to_origin(copy: Path, src: Path) -> None:
    """A copied interpreter whose RUNPATH names the original's lib/ (pyenv builds: /root/..., unreadable to others)
    finds the copy's libpython instead: the path is overwritten in place by $ORIGIN/../lib, padded with NULs."""
    old = str(src / "lib").encode() + b"\0"
    new = b"$ORIGIN/../lib"
    for exe in (copy / "bin").glob("python3*"):
        if exe.is_symlink() or not exe.is_file():
            continue
        data = exe.read_bytes()
        if data.count(old) == 1 and len(new) < len(old):
            exe.write_bytes(data.replace(old, new.ljust(len(old), b"\0")))


# ------------------------------------------------------------------ the hub and its accounts

class Hub:
    def __init__(self, scratch: Path, chp: str):
        self.prefix = "th" + secrets.token_hex(3)
        self.instructor = f"{self.prefix}-instr"
        self.learners = {k: f"{self.prefix}-{k}" for k in ("a", "b")}
        self.passwords = {name: secrets.token_urlsafe(12) for name in [self.instructor, *self.learners.values()]}
        self.scratch, self.state = scratch, scratch / "state"
        self.port = _free_port()
        self.venv = portable_venv()
        self.tool = [sys.executable, str(ROOT / "hub" / "tritonhub.py")]
        self.args = ["--state", str(self.state)]
        self.made_users: list[str] = []
        self.proc = None
        self.chp = chp

    def setup(self) -> None:
        scratch, chp = self.scratch, self.chp
        setup = self.tool + ["setup", *self.args, "--existing-venv", "--venv", str(self.venv), "--exchange",
                             str(scratch / "exchange"), "--instructor", self.instructor, "--learners-group",
                             self.prefix, "--assignments", PHASE, "--chp", chp, "--port", str(self.port),
                             "--hub-port", str(_free_port()), "--proxy-api-port", str(_free_port())]
        self.made_users.append(self.instructor)
        _run(setup)
        subprocess.run(["chpasswd"], input=f"{self.instructor}:{self.passwords[self.instructor]}\n", text=True,
                       check=True)
        roster = scratch / "roster.csv"
        roster.write_text("id,first_name,last_name,email,password\n" + "".join(
            f"{n},Learner,{k.upper()},,{self.passwords[n]}\n" for k, n in self.learners.items()))
        self.made_users += list(self.learners.values())
        _run(self.tool + ["users", str(roster), *self.args])
        self.settings = json.loads((self.state / "settings.json").read_text())
        self.course = Path(pwd.getpwnam(self.instructor).pw_dir) / self.settings["course_id"]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def as_user(self, user: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        pw = pwd.getpwnam(user)
        role = "instructor" if user == self.instructor else "learner"
        env = {"PATH": f"{self.venv}/bin:/usr/bin:/bin", "HOME": pw.pw_dir, "USER": user, "LANG": "C.UTF-8",
               "JUPYTER_CONFIG_PATH": str(self.state / "etc" / role)}
        return subprocess.run(list(cmd), user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd=pw.pw_dir, env=env,
                              capture_output=True, text=True, check=check)

    def start(self) -> None:
        env = dict(os.environ, TRITONHUB_SETTINGS=str(self.state / "settings.json"),
                   PATH=f"{self.venv}/bin:{os.environ.get('PATH', '')}")
        self.log = open(self.scratch / "jupyterhub.log", "wb")
        self.proc = subprocess.Popen([str(self.venv / "bin" / "jupyterhub"), "-f", str(ROOT / "hub" / "jupyterhub_config.py")],
                                     cwd=self.state, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        wait_until_answers(lambda: urllib.request.urlopen(f"{self.base}/hub/api/", timeout=5).read(), self.proc, 90,
                           "jupyterhub", self.log_text)

    def log_text(self) -> str:
        self.log.flush()
        return (self.scratch / "jupyterhub.log").read_text(errors="replace")[-8000:]

    def stop(self) -> None:
        """The hub (which stops every user's server), then whatever the test's own accounts still run; then only
        the accounts and group this test made."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for user in self.made_users:
            try:
                pwd.getpwnam(user)
            except KeyError:
                continue
            assert user.startswith(self.prefix + "-")
            subprocess.run(["pkill", "-KILL", "-u", user], check=False)
            time.sleep(0.2)
            subprocess.run(["userdel", "--remove", user], check=False, capture_output=True)
        subprocess.run(["groupdel", self.prefix], check=False, capture_output=True)

    def pids_of(self, user: str) -> list[int]:
        out = subprocess.run(["pgrep", "-u", user], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]


@pytest.fixture
def hub():
    chp = _skip_unless_possible()
    scratch = Path(tempfile.mkdtemp(prefix="tritonhub-test-"))
    scratch.chmod(0o711)
    h = None
    try:
        h = Hub(scratch, chp)
        h.setup()
        h.as_user(h.instructor, "nbgrader", "release_assignment", PHASE, "--log-level=WARN")
        h.start()
        yield h
    finally:
        if h is not None:
            (ARTIFACTS / "jupyterhub.log").parent.mkdir(parents=True, exist_ok=True)
            if h.proc:
                (ARTIFACTS / "jupyterhub.log").write_text(h.log_text())
            h.stop()
        shutil.rmtree(scratch, ignore_errors=True)


# ------------------------------------------------------------------ what serial nbgrader gives

def notebooks() -> dict[str, nbformat.NotebookNode]:
    release = nbformat.read(ROOT / "release" / PHASE / f"{PHASE}.ipynb", as_version=4)
    source = nbformat.read(ROOT / "source" / PHASE / f"{PHASE}.ipynb", as_version=4)
    return {"a": learner_notebook(PHASE), "b": Fixture.load(SUBMISSIONS / PHASE / f"{WRONG}.py").notebook(release, source)}


def serial_scores(path: Path, nbs: dict, out: dict) -> None:
    try:
        course = Course(path, [PHASE])
        for key, nb in nbs.items():
            course.submit(key, PHASE, nb)
        course.autograde(PHASE)
        out.update({key: course.scores(PHASE, key) for key in nbs})
    except BaseException as err:  # noqa: BLE001 - reported by the test
        out["error"] = repr(err)


def hidden_lines() -> list[str]:
    text = (ROOT / "source" / PHASE / f"{PHASE}.ipynb").read_text()
    lines, inside = [], False
    for cell in json.loads(text)["cells"]:
        for line in "".join(cell["source"]).splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and len(line.strip()) > 12:
                lines.append(line.strip())
    visible = (ROOT / "release" / PHASE / f"{PHASE}.ipynb").read_text()
    lines = [line for line in lines if json.dumps(line)[1:-1] not in visible]  # also in a visible test: not hidden
    assert lines, "source/01_vector_add has no hidden test lines to look for"
    return lines


# ------------------------------------------------------------------ the browser

def login(browser, hub: Hub, user: str, shot):
    context = browser.new_context(viewport={"width": 1400, "height": 950})
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{hub.base}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.passwords[user])
    shot(page, "login")
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf"/user/{re.escape(user)}/lab"), timeout=180_000)
    page.locator("#jp-main-dock-panel").wait_for()
    return context, page


def open_assignment_list(page):
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Nbgrader$")).click()
    page.locator('li[data-command="nbgrader:open-assignment-list"]').click()
    page.locator("#released_assignments_list").wait_for()


def rows(page, name: str, count: int):
    from playwright.sync_api import expect

    items = page.locator(f"#{name}_assignments_list > .list_item")
    expect(items).to_have_count(count, timeout=120_000)
    return items


def learner_submits(browser, hub: Hub, key: str, nb, shot) -> None:
    user = hub.learners[key]
    context, page = login(browser, hub, user, lambda p, n: shot(p, f"{key}-{n}"))
    try:
        open_assignment_list(page)
        rows(page, "released", 1).first.locator(".item_status button").click()
        rows(page, "fetched", 1)
        shot(page, f"{key}-fetched")
        home = Path(pwd.getpwnam(user).pw_dir)
        target = home / PHASE / f"{PHASE}.ipynb"
        assert target.exists(), f"the fetch did not write {target}"
        tmp = hub.scratch / f"{key}.ipynb"
        nbformat.write(nb, tmp)
        tmp.chmod(0o644)
        hub.as_user(user, "cp", str(tmp), str(target))  # the learner's work, written as the learner
        page.locator('#fetched_assignments_list .item_status button:text("Submit")').click()
        rows(page, "submitted", 1)
        shot(page, f"{key}-submitted")
    finally:
        context.close()


def click_and_wait_modal(frame, selector: str, what: str, timeout_s: float = 600) -> str:
    frame.locator(selector).first.click()
    modal = frame.locator("#success-modal, #error-modal")
    modal.first.wait_for(timeout=timeout_s * 1000)
    text = modal.first.inner_text()
    assert frame.locator("#success-modal").count() == 1, f"{what} failed in Formgrader:\n{text[-4000:]}"
    frame.locator("#success-modal button.close, #success-modal .modal-footer button").first.click()
    modal.first.wait_for(state="detached", timeout=30_000)
    return text


def instructor_grades(browser, hub: Hub, shot) -> None:
    context, page = login(browser, hub, hub.instructor, lambda p, n: shot(p, f"instructor-{n}"))
    try:
        fg = f"{hub.base}/user/{hub.instructor}/formgrader"
        page.goto(f"{fg}/manage_assignments")
        row = f"tr:has(td.name:has-text('{PHASE}'))"
        page.locator(row).wait_for()
        shot(page, "instructor-assignments")
        click_and_wait_modal(page, f"{row} td.collect a", "collect")
        page.goto(f"{fg}/manage_submissions/{PHASE}")
        autograde = page.locator("td.autograde a")
        page.locator("td.student-id").first.wait_for()
        assert autograde.count() == 2, page.inner_text("body")
        for i in range(2):
            click_and_wait_modal(page, f"tr:nth-child({i + 1}) td.autograde a", "autograde")
        shot(page, "instructor-autograded")
        submission = _submission_id(hub, hub.learners["a"])
        page.goto(f"{fg}/submissions/{submission}")
        page.wait_for_load_state("networkidle")  # Formgrader binds its score boxes once it has the grades
        score = page.locator(f"input.score#{KEY_QUESTION}")
        with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT",
                                  timeout=60_000) as saved:
            score.fill(str(KEY_POINTS))
            score.blur()  # Formgrader saves a score on its change event
        assert saved.value.ok, f"Formgrader could not save the key question's points: {saved.value.status}"
        deadline = time.monotonic() + 60  # Formgrader saves on change; its tick fades too fast to wait for
        while gradebook_scores(hub, hub.learners["a"]).get(KEY_QUESTION) != KEY_POINTS:
            assert time.monotonic() < deadline, "Formgrader did not save the key question's points"
            time.sleep(1)
        shot(page, "instructor-key-question")
        page.goto(f"{fg}/manage_assignments")
        page.locator(row).wait_for()
        click_and_wait_modal(page, f"{row} td.generate-feedback a", "generate feedback")
        click_and_wait_modal(page, f"{row} td.release-feedback a", "release feedback")
        shot(page, "instructor-feedback-released")
    finally:
        context.close()


def _submission_id(hub: Hub, student: str) -> str:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{hub.course / 'gradebook.db'}") as gb:
        return gb.find_submission_notebook(PHASE, PHASE, student).id


def gradebook_scores(hub: Hub, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{hub.course / 'gradebook.db'}") as gb:
        sub = gb.find_submission_notebook(PHASE, PHASE, student)
        return {g.name: g.score for g in sub.grades}


def learner_reads_feedback(browser, hub: Hub, shot) -> str:
    user = hub.learners["a"]
    context, page = login(browser, hub, user, lambda p, n: shot(p, f"a-feedback-{n}"))
    try:
        open_assignment_list(page)
        page.locator('#submitted_assignments_list button:text("Fetch Feedback")').first.click()
        found = list((Path(pwd.getpwnam(user).pw_dir) / PHASE / "feedback").glob(f"*/{PHASE}.html"))
        deadline = time.monotonic() + 60
        while not found and time.monotonic() < deadline:
            time.sleep(1)
            found = list((Path(pwd.getpwnam(user).pw_dir) / PHASE / "feedback").glob(f"*/{PHASE}.html"))
        assert len(found) == 1, "the learner's Fetch Feedback wrote no feedback page"
        rel = found[0].relative_to(pwd.getpwnam(user).pw_dir)
        page.goto(f"{hub.base}/user/{user}/files/{rel.as_posix()}")
        page.wait_for_load_state("load")
        shot(page, "a-feedback")
        return page.content()
    finally:
        context.close()


# ------------------------------------------------------------------ separation, as learner A

def check_separation(hub: Hub) -> None:
    a, b = hub.learners["a"], hub.learners["b"]
    exchange = Path(hub.settings["exchange"]) / hub.settings["course_id"] / "inbound"
    probes = {
        "the instructor's home": f"os.listdir({str(hub.course.parent)!r})",
        "source/": f"open({str(hub.course / 'source' / PHASE / (PHASE + '.ipynb'))!r}).read()",
        "the gradebook": f"open({str(hub.course / 'gradebook.db')!r}, 'rb').read()",
        "learner B's home": f"os.listdir({pwd.getpwnam(b).pw_dir!r})",
        "the exchange's inbound": f"os.listdir({str(exchange)!r})",
    }
    b_pids = hub.pids_of(b)
    if b_pids:
        probes["learner B's processes"] = f"os.kill({b_pids[0]}, 0)"
    for what, code in probes.items():
        out = hub.as_user(a, str(hub.venv / "bin" / "python"), "-c",
                          f"import os\ntry:\n    {code}\n    print('READ')\nexcept PermissionError:\n    print('DENIED')",
                          check=False)
        assert out.stdout.strip() == "DENIED", f"learner A could reach {what}: {out.stdout} {out.stderr[-2000:]}"
    assert oct(Path(pwd.getpwnam(a).pw_dir).stat().st_mode & 0o777) == "0o700"
    assert oct(Path(hub.settings["exchange"]).stat().st_mode & 0o7777) == "0o1777"


# ------------------------------------------------------------------ the test

def test_class_on_jupyterhub_from_login_to_feedback(hub, tmp_path):
    """Do two learners and the instructor get, through the hub's pages, the grades serial nbgrader gives?"""
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    nbs = notebooks()
    baseline: dict = {}
    serial = threading.Thread(target=serial_scores, args=(tmp_path / "serial", nbs, baseline), daemon=True)
    serial.start()
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    step = iter(range(1, 100))

    def shot(page, name: str) -> None:
        page.screenshot(path=str(ARTIFACTS / f"{next(step):02d}-{name}.png"), full_page=True)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            learner_submits(browser, hub, "a", nbs["a"], shot)
            learner_submits(browser, hub, "b", nbs["b"], shot)
            # both learners' servers run now, each as its own user
            pids = {k: hub.pids_of(u) for k, u in hub.learners.items()}
            assert pids["a"] and pids["b"] and not set(pids["a"]) & set(pids["b"])
            check_separation(hub)
            instructor_grades(browser, hub, shot)
            page_html = learner_reads_feedback(browser, hub, shot)
        finally:
            browser.close()
    serial.join(timeout=900)
    assert "error" not in baseline, baseline.get("error")
    hub_a, hub_b = gradebook_scores(hub, hub.learners["a"]), gradebook_scores(hub, hub.learners["b"])
    tests = [gid for gid in baseline["a"] if gid.startswith("test_")]
    assert tests, baseline
    (ARTIFACTS / "grades.json").write_text(json.dumps(
        {"hub": {"a": hub_a, "b": hub_b}, "serial": baseline, "seconds": round(time.monotonic() - started)},
        indent=1))
    assert {g: hub_a[g] for g in tests} == {g: baseline["a"][g] for g in tests}
    assert {g: hub_b[g] for g in tests} == {g: baseline["b"][g] for g in tests}
    assert any(hub_b[g] < baseline["a"][g] for g in tests), "the wrong kernel lost no points"
    assert hub_a[KEY_QUESTION] == KEY_POINTS
    text = html.unescape(page_html)
    leaked = [line for line in hidden_lines() if line in text]
    assert not leaked, f"the feedback shows hidden test lines: {leaked[:5]}"
    assert "Vector addition" in text and "One or more full blocks" in text, "the feedback page shows no notebook"

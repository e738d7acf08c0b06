"""The course on JupyterHub (issue 30), as people use it, in headless Chromium: hub/ set up by hub/tritonhub.py,
PAM log-ins of throw-away Unix accounts, each user's JupyterLab as that user, nbgrader's exchange (tests/hub_env.py).

In the browser: learner A fetches 01_vector_add in the Assignment List, fills it with the reference solution and
submits; learner B first presses Submit on another phase's notebook and on a text file (each refused in the
Assignment List's dialog with its reason, nothing handed in, the file kept), then submits the reference, then a wrong
kernel (tests/submissions/01_vector_add/wrong_no_mask.py): the latest is collected and graded; hostile learner C submits the reference kernel with tests/hostile's gradebook
forger and secrets reader and test_inert_pages's payloads (tests/hub_learners.py). The instructor collects and
autogrades in Formgrader (its own browser tab: JupyterHub >= 4.1 forbids Formgrader's iframe), grades the key
question, finds Formgrader's page for C inert, and generates and releases feedback; A fetches the feedback, which
shows no hidden test line. Every test's score of A and B equals the one serial `nbgrader autograde` gives the same
kernels (the session's serial baseline, tests/baseline.py); C keeps the reference's points and changed nothing else. The separation between
users is checked as learner A's own processes. Screenshots: tests/artifacts/hub/.

Then learner E (an account of its own) presses Submit in the Assignment List while the hub's REST API stops E's server
mid-copy (the test freezes the server once its copy into the exchange has begun, so the stop lands there on any
machine): E is told it was not submitted and why, the exchange keeps E's previous submission and nothing of the cut
one, E's notebook is kept, JupyterLab then says the server is gone, and after its Restart a resubmission is collected.

Without the browser, on the same hub: learner D's bad input through nbgrader's own commands as D (another
assignment's notebook, a text file, a notebook with a file beside it, a submission while the hub stops D's server),
and 30 learners added from a roster submitting at once (tests/hub_learners.py's markers say whose each is).

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
import subprocess
import threading
import time
from pathlib import Path

import nbformat
import pytest

from course import SUBMISSIONS, Fixture
from hub_env import PHASE, Hub, running_hub
from hub_learners import hostile_learner, marked_notebook, owner_of
from test_browser import CHROMIUM, CHROMIUM_ARGS, learner_notebook
from test_inert_pages import LeakServer, _formgrader_paths, assert_inert, probe

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts" / "hub"
WRONG = "wrong_no_mask"
KEY_QUESTION, KEY_POINTS = "mask_question", 2
LOAD_LEARNERS = 30

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub():
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    with running_hub(ARTIFACTS) as h:
        yield h


# ------------------------------------------------------------------ what serial nbgrader gives

def notebooks() -> dict[str, nbformat.NotebookNode]:
    release = nbformat.read(ROOT / "release" / PHASE / f"{PHASE}.ipynb", as_version=4)
    source = nbformat.read(ROOT / "source" / PHASE / f"{PHASE}.ipynb", as_version=4)
    return {"a": learner_notebook(PHASE), "b": Fixture.load(SUBMISSIONS / PHASE / f"{WRONG}.py").notebook(release, source)}


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


def learner_submits(browser, hub: Hub, key: str, nbs: list, shot, refused: tuple = ()) -> None:
    """The learner fetches in the Assignment List, then for each notebook of ``nbs`` in turn writes it (as the learner)
    and presses Submit: one more submission listed each time. First, each file of ``refused`` ((content, words of the
    reason)) is written there and Submit pressed: the Assignment List's dialog gives the reason, nothing is handed in
    and the file is kept."""
    user = hub.learners[key]
    context, page = login(browser, hub, user, lambda p, n: shot(p, f"{key}-{n}"))
    try:
        open_assignment_list(page)
        rows(page, "released", 1).first.locator(".item_status button").click()
        rows(page, "fetched", 1)
        shot(page, f"{key}-fetched")
        target = hub.home(user) / PHASE / f"{PHASE}.ipynb"
        assert target.exists(), f"the fetch did not write {target}"
        for i, (content, said) in enumerate(refused):
            tmp = hub.scratch / f"{key}-refused-{i}.ipynb"
            tmp.write_bytes(content)
            tmp.chmod(0o644)
            hub.as_user(user, "cp", str(tmp), str(target))
            page.locator('#fetched_assignments_list .item_status button:text("Submit")').click()
            message = page.locator("#submission-message")  # nbgrader's "Invalid Submission" dialog
            message.wait_for(timeout=120_000)
            text = message.inner_text()
            shot(page, f"{key}-refused-{i}")
            assert f"{PHASE} was not submitted: {PHASE}.ipynb cannot be graded: {said}" in text, text
            assert "are unchanged" in text, text
            page.locator(".jp-Dialog .jp-mod-accept").first.click()
            message.wait_for(state="detached", timeout=30_000)
            assert _inbound(hub, user) == [] and learner_submissions(hub, user) == []
            assert target.read_bytes() == content
        for i, nb in enumerate(nbs):
            tmp = hub.scratch / f"{key}-{i}.ipynb"
            nbformat.write(nb, tmp)
            tmp.chmod(0o644)
            hub.as_user(user, "cp", str(tmp), str(target))  # the learner's work, written as the learner
            page.locator('#fetched_assignments_list .item_status button:text("Submit")').click()
            rows(page, "submitted", 1)  # one row per assignment, its submissions inside
            deadline = time.monotonic() + 120
            while len(learner_submissions(hub, user)) != i + 1:  # what the Assignment List lists
                assert time.monotonic() < deadline, f"submission {i + 1} of {key} is not recorded"
                time.sleep(0.5)
        shot(page, f"{key}-submitted")
    finally:
        context.close()


def learner_submissions(hub: Hub, user: str) -> list[str]:
    """The learner's record of its submissions (nbgrader's cache, which the Assignment List lists)."""
    cache = hub.home(user) / ".local" / "share" / "jupyter" / "nbgrader_cache" / hub.settings["course_id"]
    return sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []


def click_and_wait_modal(frame, selector: str, what: str, timeout_s: float = 600) -> str:
    frame.locator(selector).first.click()
    modal = frame.locator("#success-modal, #error-modal")
    modal.first.wait_for(timeout=timeout_s * 1000)
    text = modal.first.inner_text()
    assert frame.locator("#success-modal").count() == 1, f"{what} failed in Formgrader:\n{text[-4000:]}"
    frame.locator("#success-modal button.close, #success-modal .modal-footer button").first.click()
    modal.first.wait_for(state="detached", timeout=30_000)
    return text


def instructor_grades(browser, hub: Hub, shot) -> dict:
    """Collect, autograde, grade the key question, generate and release feedback, all in Formgrader; returns the
    instructor's log-in (cookies)."""
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
        assert autograde.count() == len(hub.learners) - 1, page.inner_text("body")  # A, B, C (D is tested apart)
        for i in range(autograde.count()):
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
        logged_in = context.storage_state()  # for the probe of C's page, in a browser of its own
        page.goto(f"{fg}/manage_assignments")
        page.locator(row).wait_for()
        click_and_wait_modal(page, f"{row} td.generate-feedback a", "generate feedback")
        click_and_wait_modal(page, f"{row} td.release-feedback a", "release feedback")
        shot(page, "instructor-feedback-released")
    finally:
        context.close()
    return logged_in


def probe_c_page(hub: Hub, leak: LeakServer, logged_in: dict) -> dict:
    """Formgrader's page for C, loaded logged in as the instructor by tests/test_inert_pages.py's probe: what ran,
    what was requested."""
    prefix = f"/user/{hub.instructor}"
    return probe(f"{hub.base}{prefix}/formgrader/submissions/{_submission_id(hub, hub.learners['c'])}/", leak,
                 same_origin_ok=lambda path: path.startswith(prefix) and _formgrader_paths(path[len(prefix):]),
                 storage_state=logged_in)


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
    assert oct(Path(hub.settings["exchange"]).stat().st_mode & 0o7777) == "0o755"  # root's (issue 41)


# ------------------------------------------------------------------ the test

def test_class_on_jupyterhub_from_login_to_feedback(hub, serial_baseline):
    """Do three learners and the instructor get, through the hub's pages, the grades serial nbgrader gives, with the
    latest submission graded, and does hostile learner C cost only its own points and run no script of its own in
    the instructor's Formgrader?"""
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    nbs = notebooks()
    # What serial plain nbgrader gives the same kernels: the session's serial baseline (tests/baseline.py), whose class
    # holds the reference and WRONG (its phase 1 scaled down, which changes no test's verdict or points)
    baseline = {"a": serial_baseline.course.scores(PHASE, "reference"), "b": serial_baseline.course.scores(PHASE, WRONG)}
    marker, leak = "m" + secrets.token_hex(4), LeakServer()
    step = iter(range(1, 100))

    def shot(page, name: str) -> None:
        page.screenshot(path=str(ARTIFACTS / f"{next(step):02d}-{name}.png"), full_page=True)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            learner_submits(browser, hub, "a", [nbs["a"]], shot)
            # B first presses Submit on another phase's notebook and on a text file (each refused in the
            # Assignment List's dialog, nothing handed in), then resubmits: the wrong one counts
            learner_submits(browser, hub, "b", [nbs["a"], nbs["b"]], shot, refused=(
                ((ROOT / "release" / "02_softmax" / "02_softmax.ipynb").read_bytes(), f"it is not the {PHASE} notebook"),
                (b"kernel in kernel.py, see you tomorrow\n", "it is not a notebook (not JSON")))
            learner_submits(browser, hub, "c", [hostile_learner(hub.course, marker, leak.url)], shot)
            # the learners' servers run now, each as its own user
            pids = {k: hub.pids_of(u) for k, u in hub.learners.items()}
            assert pids["a"] and pids["b"] and not set(pids["a"]) & set(pids["b"])
            check_separation(hub)
            logged_in = instructor_grades(browser, hub, shot)
            page_html = learner_reads_feedback(browser, hub, shot)
        finally:
            browser.close()
    try:
        inert = probe_c_page(hub, leak, logged_in)
    finally:
        leak.close()
    hub_scores = {k: gradebook_scores(hub, hub.learners[k]) for k in "abc"}
    tests = [gid for gid in baseline["a"] if gid.startswith("test_")]
    assert tests, baseline
    (ARTIFACTS / "grades.json").write_text(json.dumps(
        {"hub": hub_scores, "serial": baseline, "seconds": round(time.monotonic() - started)}, indent=1))
    assert {g: hub_scores["a"][g] for g in tests} == {g: baseline["a"][g] for g in tests}
    assert {g: hub_scores["b"][g] for g in tests} == {g: baseline["b"][g] for g in tests}
    assert any(hub_scores["b"][g] < baseline["a"][g] for g in tests), "the wrong kernel lost no points"
    assert hub_scores["a"][KEY_QUESTION] == KEY_POINTS
    check_latest_collected(hub, "b", submissions=2)
    # C: the reference kernel keeps the reference's points; its cells changed nothing and read nothing
    assert {g: hub_scores["c"][g] for g in tests} == {g: baseline["a"][g] for g in tests}
    check_nothing_forged(hub, marker)
    check_secrets_unread(hub, "c")
    assert_inert(inert, "Formgrader's page for hostile learner C, behind JupyterHub")
    text = html.unescape(page_html)
    leaked = [line for line in hidden_lines() if line in text]
    assert not leaked, f"the feedback shows hidden test lines: {leaked[:5]}"
    assert "Vector addition" in text and "One or more full blocks" in text, "the feedback page shows no notebook"


def _inbound(hub: Hub, user: str) -> list[Path]:
    """The learner's submissions in the exchange, as collect's pattern finds them (root lists inbound/)."""
    return sorted((Path(hub.settings["exchange"]) / hub.settings["course_id"] / "inbound").glob(f"{user}+{PHASE}+*"))


def check_latest_collected(hub: Hub, key: str, submissions: int) -> None:
    """Every submission of the learner is still in the exchange (nothing lost), and the one collected (and graded)
    is the latest."""
    found = _inbound(hub, hub.learners[key])
    assert len(found) == submissions, [p.name for p in found]
    stamps = sorted((p / "timestamp.txt").read_text() for p in found)
    collected = hub.course / "submitted" / hub.learners[key] / PHASE / "timestamp.txt"
    assert collected.read_text() == stamps[-1], (collected.read_text(), stamps)


def check_nothing_forged(hub: Hub, marker: str) -> None:
    """tests/hostile's gradebook forger (in C's notebook, aimed at the real gradebook, retrying for 40 s from a
    detached child): no grade raised, no comment written, no table made."""
    import sqlite3

    con = sqlite3.connect(f"file:{hub.course / 'gradebook.db'}?mode=ro", uri=True)
    try:
        forged = con.execute("SELECT count(*) FROM grade WHERE manual_score = 999 OR extra_credit = 999").fetchone()
        comments = con.execute("SELECT count(*) FROM comment WHERE manual_comment = ?", (marker,)).fetchone()
        tables = con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'forged%'").fetchall()
    finally:
        con.close()
    assert forged == (0,) and comments == (0,) and tables == [], (forged, comments, tables)


def check_secrets_unread(hub: Hub, key: str) -> None:
    """The secrets reader's output in C's autograded notebook (what the instructor and C's feedback see) holds no
    hidden test and no gradebook: it ran, in the sandbox, and found nothing of the course."""
    nb = nbformat.read(hub.course / "autograded" / hub.learners[key] / PHASE / f"{PHASE}.ipynb", as_version=4)
    outputs = [json.dumps(c.outputs) for c in nb.cells if c.cell_type == "code" and "HOSTILE-RAN read_secrets"
               in c.source]  # its outputs may be cut (nbgrader's LimitOutput), its last line with them
    assert len(outputs) == 1 and outputs[0] != "[]", "C's secrets reader did not run"
    text = outputs[0]
    leaked = [line for line in hidden_lines() if json.dumps(line)[1:-1] in text]
    assert not leaked and "SQLite format 3" not in text, f"C's cell read the course: {leaked[:3]}"


# ------------------------------------------------------------------ bad input and load, through nbgrader's commands

def write_as(hub: Hub, user: str, nb: nbformat.NotebookNode | bytes, *extra: tuple[str, str]) -> None:
    """``user`` writes ``nb`` (and ``extra`` files: (name, text)) into ~/01_vector_add, as that user."""
    files = [(f"{PHASE}.ipynb", nb if isinstance(nb, bytes) else nbformat.writes(nb).encode())]
    files += [(name, text.encode()) for name, text in extra]
    for name, data in files:
        (hub.scratch / f"{user}-{name}").write_bytes(data)
        (hub.scratch / f"{user}-{name}").chmod(0o644)
    folder = hub.home(user) / PHASE
    hub.as_user(user, "sh", "-c", 'd="$1"; shift; mkdir -p "$d" && for f; do cp "$f" "$d/${f##*/'
                + user + '-}"; done', "sh", str(folder), *[str(hub.scratch / f"{user}-{n}") for n, _ in files])


def submit_as(hub: Hub, user: str, nb: nbformat.NotebookNode | bytes, *extra: tuple[str, str]):
    """``user`` writes its work (:func:`write_as`), then starts `nbgrader submit 01_vector_add` as that user with
    the learners' configuration; returns the process."""
    write_as(hub, user, nb, *extra)
    return hub.as_user(user, "nbgrader", "submit", PHASE, popen=True)


def finished(proc) -> tuple[int, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out + err


def test_bad_input_through_the_exchange(hub):
    """Does learner D get a clear refusal for another assignment's notebook and for a text file, with its file kept and
    nothing handed in; a warning for a file beside the notebook; and does a submission while the hub stops D's
    server leave either that submission or the previous one collected whole, never a part?"""
    d = hub.learners["d"]
    mine = hub.home(d) / PHASE / f"{PHASE}.ipynb"
    started = time.monotonic()
    hub.api("POST", f"/users/{d}")  # the hub knows a user once logged in, or added so
    hub.api("POST", f"/users/{d}/server")  # D's server starts while D hands in bad input from a shell
    for content, said in [((ROOT / "release" / "02_softmax" / "02_softmax.ipynb").read_bytes(),
                           f"it is not the {PHASE} notebook"),
                          (b"kernel in kernel.py, see you tomorrow\n", "it is not a notebook (not JSON")]:
        rc, log = finished(submit_as(hub, d, content))
        assert rc != 0 and f"{PHASE} was not submitted: {PHASE}.ipynb cannot be graded: {said}" in log, log
        assert "are unchanged" in log and mine.read_bytes() == content, log
        assert _inbound(hub, d) == []
    rc, log = finished(submit_as(hub, d, marked_notebook("d-1"), ("notes.txt", "my notes")))
    assert rc == 0 and "Not graded, handed in as they are (only notebooks are graded): notes.txt" in log, log
    (first,) = _inbound(hub, d)
    # D's server runs; the hub's API stops it while D's next submission runs, which the stop's signal ends too
    deadline = time.monotonic() + 300
    while not hub.api("GET", f"/users/{d}")[1]["servers"].get("", {}).get("ready"):
        assert time.monotonic() < deadline, "D's server did not start"
        time.sleep(1)
    # The hub's standard input is open (a pipe here, root's terminal under `make hub`); D's server does not share it
    assert os.readlink(f"/proc/{hub.proc.pid}/fd/0").startswith("pipe:")
    assert os.readlink(f"/proc/{_server_pid(hub, d)}/fd/0") == "/dev/null"
    proc = submit_as(hub, d, marked_notebook("d-2"), ("notes.txt", "my notes"), ("data.bin", "0" * (32 << 20)))
    assert hub.api("DELETE", f"/users/{d}/server")[0] in (202, 204)
    inbound = Path(hub.settings["exchange"]) / hub.settings["course_id"] / "inbound"
    while proc.poll() is None and not any(p.name.startswith(".incoming-") for p in inbound.iterdir()):
        time.sleep(0.001)
    proc.send_signal(signal.SIGHUP)  # mid-copy, as a terminal's processes get it when their server stops
    rc, log = finished(proc)
    while hub.api("GET", f"/users/{d}")[1]["servers"]:
        assert time.monotonic() < deadline, "D's server did not stop"
        time.sleep(1)
    subs = _inbound(hub, d)
    assert first in subs and len(subs) <= 2, subs
    for sub in subs:  # each one whole: timestamp, secret, the notebook and the file beside it
        assert {p.name for p in sub.iterdir()} >= {"timestamp.txt", "submission_secret.txt", f"{PHASE}.ipynb",
                                                  "notes.txt"}, sub
        nbformat.read(sub / f"{PHASE}.ipynb", as_version=4)
    listed = learner_submissions(hub, d)
    # D's Assignment List (nbgrader's cache) never shows a submission the instructor cannot collect
    assert all(any(sub.name.startswith(name + "+") for sub in subs) for name in listed), (listed, subs)
    collect = hub.as_user(hub.instructor, "nbgrader", "collect", PHASE, "--update", "--log-level=INFO",
                          cwd=hub.course, check=False)
    assert collect.returncode == 0, collect.stderr[-3000:]
    got = hub.course / "submitted" / d / PHASE
    assert owner_of(got / f"{PHASE}.ipynb") == ("d-2" if len(subs) == 2 else "d-1")
    assert (got / "notes.txt").read_text() == "my notes"
    print(f"bad input and a stopped server: {time.monotonic() - started:.0f} s; the submission under way when the "
          f"server stopped: {'handed in whole' if len(subs) == 2 else 'cut short, nothing of it collected'} "
          f"(exit {rc})")


def test_thirty_learners_submit_at_once(hub):
    """Do 30 learners, added from a roster, submitting at the same moment, each get their own notebook collected,
    none lost or mixed up?"""
    names = [f"{hub.prefix}-l{i:02d}" for i in range(LOAD_LEARNERS)]
    accounts_s = hub.add_learners(names, "Load")
    for name in names:
        write_as(hub, name, marked_notebook(name))
    started = time.monotonic()
    many = subprocess.run([str(hub.venv / "bin" / "python"), str(ROOT / "tests" / "hub_submit_many.py"), PHASE,
                           str(hub.state / "etc" / "learner"), *names], capture_output=True, text=True, timeout=900)
    submit_s = time.monotonic() - started
    assert many.returncode == 0, many.stderr[-3000:]
    results = json.loads(many.stdout.strip().splitlines()[-1])
    failed = {n: rc for n, (rc, _) in results.items() if rc != 0}
    assert sorted(results) == sorted(names) and not failed, (failed, many.stderr[-3000:])
    started = time.monotonic()
    collect = hub.as_user(hub.instructor, "nbgrader", "collect", PHASE, "--log-level=WARN", cwd=hub.course,
                          check=False)
    collect_s = time.monotonic() - started
    assert collect.returncode == 0, collect.stderr[-3000:]
    owners = {n: owner_of(hub.course / "submitted" / n / PHASE / f"{PHASE}.ipynb") for n in names}
    assert owners == {n: n for n in names}
    record = {"learners": LOAD_LEARNERS, "accounts_s": round(accounts_s, 1), "submit_all_s": round(submit_s, 1),
              "slowest_submit_s": max(t for _, t in results.values()),
              "collect_s": round(collect_s, 1), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (ARTIFACTS / "load.json").write_text(json.dumps(record, indent=1))
    print(record)


# ------------------------------------------------------------------ a server stopped mid-submission, in the browser

STOP_DATA_MB = 64  # beside the notebook, so the copy into the exchange takes a moment (under nbgrader's 100 MB limit)


def _server_pid(hub: Hub, user: str) -> int:
    """The learner's jupyterhub-singleuser process (LocalProcessSpawner runs it as the learner)."""
    found = [pid for pid in hub.pids_of(user)
             if b"jupyterhub-singleuser" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(found) == 1, found
    return found[0]


def _freeze(pid: int) -> None:
    """SIGSTOP, and wait until the process is stopped."""
    os.kill(pid, signal.SIGSTOP)
    _wait(lambda: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t"), 10,
          "the server did not stop on SIGSTOP")


def _pending(pid: int) -> int:
    """The signals pending for the process (its own and its thread group's), as a mask."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)


def test_server_stopped_while_the_assignment_list_submits(hub):
    """Learner E presses Submit in the Assignment List, and the hub (as an admin through its REST API) stops E's
    server while the submission is being copied into the exchange: what does E see, is the exchange left with E's
    previous submission or the whole new one (never a part), is E's notebook kept, and does a resubmission after
    E starts the server again reach the instructor?"""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    user = f"{hub.prefix}-e"
    seen: dict = {"account_s": round(hub.add_learners([user], "Stopped"), 1)}
    inbound = Path(hub.settings["exchange"]) / hub.settings["course_id"] / "inbound"
    folder = hub.home(user) / PHASE
    step = iter(range(40, 100))

    def shot(page, name: str) -> None:
        page.screenshot(path=str(ARTIFACTS / f"{next(step):02d}-e-{name}.png"), full_page=True)

    def hidden_of_e() -> list[Path]:
        """E's copies under way in the exchange (root lists inbound/)."""
        found = []
        for entry in os.scandir(inbound):
            try:
                if entry.name.startswith(f".incoming-{user}+"):  # the hand-in service's folder of E's hand-in
                    found.append(Path(entry.path))
            except FileNotFoundError:
                pass  # renamed or deleted meanwhile
        return found

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            t = time.monotonic()
            context, page = login(browser, hub, user, shot)
            seen["login_s"] = round(time.monotonic() - t, 1)
            open_assignment_list(page)
            rows(page, "released", 1).first.locator(".item_status button").click()
            rows(page, "fetched", 1)
            submit = page.locator('#fetched_assignments_list .item_status button:text("Submit")')
            write_as(hub, user, marked_notebook("e-1"))
            submit.click()
            rows(page, "submitted", 1)
            _wait(lambda: len(learner_submissions(hub, user)) == 1, 60, "E's first submission is not recorded")
            (first,) = _inbound(hub, user)
            # the second: a notebook and 64 MB of data beside it (sparse in E's home; the copy writes it all)
            write_as(hub, user, marked_notebook("e-2"))
            hub.as_user(user, "truncate", "-s", f"{STOP_DATA_MB}M", str(folder / "data.bin"))
            mine = (folder / f"{PHASE}.ipynb").read_bytes()
            pid = _server_pid(hub, user)
            submit.click()
            deadline = time.monotonic() + 60
            while not hidden_of_e():  # the copy has begun: freeze E's server there
                assert time.monotonic() < deadline, "E's submission did not begin"
            _freeze(pid)
            stopped: list = []
            try:
                hidden = hidden_of_e()
                assert len(hidden) == 1, "E's copy ended before the test froze the server: a bigger STOP_DATA_MB"
                hidden = hidden[0]  # still there: the submission is not handed in yet

                def copied() -> int:
                    return sum(p.stat().st_size for p in hidden.rglob("data.bin"))

                for _ in range(1000):  # let it on, 2 ms at a time, until part of the data is in the exchange
                    if copied() or not hidden.exists():
                        break
                    os.kill(pid, signal.SIGCONT)
                    time.sleep(0.002)
                    _freeze(pid)
                seen["copied_mb_when_stopped"] = round(copied() / 2**20, 1) if hidden.exists() else "all"
                stop_sent = time.monotonic()
                stopper = threading.Thread(target=lambda: stopped.append(hub.api("DELETE", f"/users/{user}/server")))
                stopper.start()
                _wait(lambda: _pending(pid) & (1 << (signal.SIGINT - 1)), 30, "the hub sent E's server no SIGINT")
                seen["hub_interrupt_s"] = round(time.monotonic() - stop_sent, 2)
            finally:
                os.kill(pid, signal.SIGCONT)
            # what E sees: nbgrader's dialog, or the button's own error line
            message = page.locator("#submission-message")
            failed = page.locator("#fetched_assignments_list", has_text="Error submitting assignment")
            _wait(lambda: message.count() or failed.count() or len(learner_submissions(hub, user)) == 2, 60,
                  "the Assignment List showed nothing")
            shot(page, "stopped-mid-submission")
            seen["learner_sees"] = (message.inner_text() if message.count() else
                                    failed.inner_text() if failed.count() else "the submission listed")
            _wait(lambda: not hub.api("GET", f"/users/{user}")[1]["servers"], 60, "E's server did not stop")
            stopper.join(timeout=60)
            seen["server_gone_s"] = round(time.monotonic() - stop_sent, 2)
            seen["api_status"] = stopped[0][0] if stopped else None
            if message.count():  # E presses its Ok (JupyterLab's own dialog below may already be over it)
                page.locator(".jp-Dialog", has=message).locator(".jp-mod-accept").dispatch_event("click")
            # E looks at what runs (JupyterLab's Running panel, Refresh List): the hub answers that the server is not
            # running, and JupyterLab says so (its own poll of the server, every 10 s, would too)
            gone = page.locator(".jp-Dialog", has_text="Server unavailable or unreachable")
            try:
                if not gone.count():
                    page.locator('li[data-id="jp-running-sessions"]').click(timeout=10_000)
                    page.locator('#jp-running-sessions [title="Refresh List"]').first.click(timeout=10_000)
            except PlaywrightTimeout:
                assert gone.count(), "E could not refresh JupyterLab's Running panel"  # the poll's dialog came first
            gone.wait_for(timeout=60_000)
            seen["lab_says_gone_s"] = round(time.monotonic() - stop_sent, 1)
            seen["lab_says"] = gone.inner_text()
            shot(page, "server-gone")
            assert "is not running" in seen["lab_says"], seen["lab_says"]
            # nothing lost: the exchange holds the previous submission or the whole new one, never a part
            subs = _inbound(hub, user)
            seen["outcome"] = "handed in whole" if len(subs) == 2 else "not handed in"
            assert first in subs and len(subs) <= 2, subs
            if len(subs) == 1:  # told so, in words (hub/checked_submit.py), not as nbgrader's KeyboardInterrupt
                said = seen["learner_sees"]
                assert (f"{PHASE} was not submitted: your server was stopped while it was being handed in" in said
                        and "are unchanged" in said and "Start My Server" in said), said
                assert "KeyboardInterrupt" not in said, said
            for sub in subs:
                assert {p.name for p in sub.iterdir()} >= {"timestamp.txt", "submission_secret.txt",
                                                          f"{PHASE}.ipynb"}, sub
            if len(subs) == 2:
                assert (subs[-1] / "data.bin").stat().st_size == STOP_DATA_MB << 20
            assert hidden_of_e() == [], "a partial copy was left in the exchange"
            listed = learner_submissions(hub, user)
            assert len(listed) == len(subs), (listed, subs)
            assert (folder / f"{PHASE}.ipynb").read_bytes() == mine, "E's notebook changed"
            assert (folder / "data.bin").stat().st_size == STOP_DATA_MB << 20
            # E presses the dialog's Restart (JupyterLab opens the hub's spawn page in a new tab), then submits again
            restart = time.monotonic()
            with context.expect_page() as opened:
                gone.locator("button", has_text="Restart").click()
            page = opened.value
            page.set_default_timeout(120_000)
            page.wait_for_url(re.compile(rf"/user/{re.escape(user)}/lab"), timeout=180_000)
            page.locator("#jp-main-dock-panel").wait_for()
            seen["restart_s"] = round(time.monotonic() - restart, 1)
            open_assignment_list(page)
            rows(page, "fetched", 1)
            submit = page.locator('#fetched_assignments_list .item_status button:text("Submit")')
            t = time.monotonic()
            submit.click()
            try:
                _wait(lambda: len(learner_submissions(hub, user)) == len(subs) + 1, 120,
                      "E's resubmission is not recorded")
                page.locator('button:text("submitting...")').wait_for(state="detached")
                seen["resubmit_s"] = round(time.monotonic() - t, 1)
            finally:
                shot(page, "resubmitted")
            context.close()
        finally:
            browser.close()
    t = time.monotonic()
    collect = hub.as_user(hub.instructor, "nbgrader", "collect", PHASE, "--update", "--log-level=WARN",
                          cwd=hub.course, check=False)
    seen["collect_s"] = round(time.monotonic() - t, 1)
    assert collect.returncode == 0, collect.stderr[-3000:]
    got = hub.course / "submitted" / user / PHASE
    assert owner_of(got / f"{PHASE}.ipynb") == "e-2"
    assert (got / "data.bin").stat().st_size == STOP_DATA_MB << 20
    found = _inbound(hub, user)  # every submission whole in the exchange, the latest collected
    assert len(found) == len(subs) + 1, found
    latest = sorted((p / "timestamp.txt").read_text() for p in found)[-1]
    assert (got / "timestamp.txt").read_text() == latest
    seen["seconds"] = round(time.monotonic() - started, 1)
    (ARTIFACTS / "stopped.json").write_text(json.dumps(seen, indent=1))
    print(seen)


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)

"""The course on JupyterHub (issue 30), as people use it, in headless Chromium: hub/ set up by hub/tritonhub.py,
PAM log-ins of throw-away Unix accounts, each user's JupyterLab as that user, nbgrader's exchange
(tests/support/hub_env.py).

In the browser: learner A fetches 01_vector_add in the Assignment List, fills it with the reference solution and
submits; learner B first presses Submit on another phase's notebook and on a text file (each refused in the
Assignment List's dialog with its reason, nothing handed in, the file kept), then submits the reference, then a wrong
kernel (tests/submissions/01_vector_add/wrong_no_mask.py): the latest is collected and graded; hostile learner C submits
the reference kernel with tests/hostile's gradebook forger and secrets reader and test_inert_pages's payloads
(tests/support/hub_learners.py). The instructor collects and autogrades in Formgrader (its own browser tab: JupyterHub
>= 4.1 forbids Formgrader's iframe), grades the key question, finds Formgrader's page for C inert, and generates and
releases feedback; A fetches the feedback, which shows no hidden test line. Every test's score of A and B equals the one
serial `nbgrader autograde` gives the same kernels (the session's serial baseline, tests/support/baseline.py); C keeps
the reference's points and changed nothing else. The separation between users is checked as learner A's own processes.
Screenshots: tests/artifacts/hub/.

Then learner E (an account of its own) presses Submit in the Assignment List while the hub's REST API stops E's server
mid-copy (the test freezes the server once its copy into the exchange has begun, so the stop lands there on any
machine): E is told it was not submitted and why, the exchange keeps E's previous submission and nothing of the cut
one, E's notebook is kept, JupyterLab then says the server is gone, and after its Restart a resubmission is collected.

Without the browser, on the same hub: learner D's bad input through nbgrader's own commands as D (another
assignment's notebook, a text file, a notebook with a file beside it, a submission while the hub stops D's server),
and 30 learners added from a roster submitting at once (tests/support/hub_learners.py's markers say whose each is).

Root only (it makes Unix accounts, named th<random>-*, and deletes only those); needs configurable-http-proxy
(`bash tools/system-deps.sh hub`), Debian's chromium and playwright (as tests/system/test_browser.py). The hub's servers
run from a copy of this interpreter outside /root (learners cannot run /root's) with .venv's packages.
The steps: tests/support/hub_class.py (outside the browser) and tests/support/hub_browser.py (in the pages).
"""
from __future__ import annotations

import html
import json
import os
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

from hub_browser import (instructor_grades, learner_reads_feedback, learner_submissions, learner_submits, login,
                         open_assignment_list, probe_c_page, rows)
from hub_class import (ARTIFACTS, KEY_POINTS, KEY_QUESTION, ROOT, WRONG, _freeze, _inbound, _pending, _server_pid,
                       _wait, check_latest_collected, check_nothing_forged, check_secrets_unread, check_separation,
                       finished, gradebook_scores, hidden_lines, notebooks, submit_as, write_as)
from hub_env import PHASE, running_hub
from hub_learners import hostile_learner, marked_notebook, owner_of
from inert_probe import LeakServer, assert_inert
from learner_lab import CHROMIUM, CHROMIUM_ARGS

LOAD_LEARNERS = 30

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub():
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    with running_hub(ARTIFACTS) as h:
        yield h


# ------------------------------------------------------------------ the test

def test_class_on_jupyterhub_from_login_to_feedback(hub, serial_baseline):
    """Do three learners and the instructor get, through the hub's pages, the grades serial nbgrader gives, with the
    latest submission graded, and does hostile learner C cost only its own points and run no script of its own in
    the instructor's Formgrader?"""
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    nbs = notebooks()
    # What serial plain nbgrader gives the same kernels: the session's serial baseline (tests/support/baseline.py),
    # whose class holds the reference and WRONG (its phase 1 scaled down, which changes no test's verdict or points)
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


# ------------------------------------------------------------------ bad input and load, through nbgrader's commands

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
    many = subprocess.run([str(hub.venv / "bin" / "python"), str(ROOT / "tests" / "support" / "hub_submit_many.py"), PHASE,
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

"""tests/system/test_hub.py's steps in the hub's pages (headless Chromium through playwright): a log-in, the Assignment
List (fetch, and Submit pressed for each notebook, or for a file it must refuse), the instructor's Formgrader
(collect, autograde, the key question graded, feedback generated and released), Formgrader's page for hostile
learner C probed as tests/grader/test_inert_pages.py does, and learner A's feedback fetched and read."""
from __future__ import annotations

import pwd
import re
import time
from pathlib import Path

import nbformat

from hub_class import KEY_POINTS, KEY_QUESTION, _inbound, _submission_id, gradebook_scores
from hub_env import PHASE, Hub
from inert_probe import LeakServer, _formgrader_paths, probe


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
    """Formgrader's page for C, loaded logged in as the instructor by tests/grader/test_inert_pages.py's probe: what
    ran, what was requested."""
    prefix = f"/user/{hub.instructor}"
    return probe(f"{hub.base}{prefix}/formgrader/submissions/{_submission_id(hub, hub.learners['c'])}/", leak,
                 same_origin_ok=lambda path: path.startswith(prefix) and _formgrader_paths(path[len(prefix):]),
                 storage_state=logged_in)


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

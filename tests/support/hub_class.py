"""What tests/system/test_hub.py reads and does outside the browser: the learners' notebooks and the hidden test lines
to look for, the gradebook's scores, the separation between users (as learner A's processes), the exchange
(each learner's submissions in inbound/, the latest collected, nothing forged, no secret read), a learner's work
written and submitted as that learner through nbgrader's commands, and a learner's server frozen mid-copy.
The pages, in the browser: tests/support/hub_browser.py."""
from __future__ import annotations

import json
import os
import pwd
import signal
import time
from pathlib import Path

import nbformat

from course import SUBMISSIONS, Fixture
from hub_env import PHASE, Hub
from learner_lab import learner_notebook

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "hub"
WRONG = "wrong_no_mask"
KEY_QUESTION, KEY_POINTS = "mask_question", 2


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


def _submission_id(hub: Hub, student: str) -> str:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{hub.course / 'gradebook.db'}") as gb:
        return gb.find_submission_notebook(PHASE, PHASE, student).id


def gradebook_scores(hub: Hub, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{hub.course / 'gradebook.db'}") as gb:
        sub = gb.find_submission_notebook(PHASE, PHASE, student)
        return {g.name: g.score for g in sub.grades}


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


# ------------------------------------------------------------------ the exchange

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


# ------------------------------------------------------------------ a server stopped mid-submission

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


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)

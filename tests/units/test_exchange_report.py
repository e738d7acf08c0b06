"""The hand-ins the hub's exchange refused appear in the instructor's report (issue 41): `grade`'s summary and
`export`'s `not_collected` column name each refused learner and assignment, the reason in plain words, and what was
graded instead; what a learner named is shown inert. Fast: the refusals are written by the exchange's own
`record_refusal`, or by its real collect through nbgrader's API (as Formgrader's button calls it), no hub."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from inbound_plants import plant_hand_in
from tritoncourse.classroom import refusals
from tritoncourse.classroom.course import Course
from tritoncourse.classroom.export import export_csv
from tritoncourse.classroom.grader import Grader

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hub"))
import course_exchange  # noqa: E402

A = "01_vector_add"
COURSE = "triton-kernels"
EVIL = "x\x1b[2J\n[INFO] Collected good\u202e"  # a name that would clear a terminal and forge a log line
EARLY, LATE = "2026-11-27 10:00:00.000000 UTC", "2026-11-28 07:00:00.000000 UTC"


@pytest.fixture(autouse=True)
def alembic_on_path(monkeypatch):
    """nbgrader's Gradebook runs this venv's alembic by name."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")


def test_the_report_reads_what_the_exchange_writes():
    assert (refusals.RECORDS, refusals.STUDENT.pattern, refusals.SHOWN) == \
        (course_exchange.REFUSED_RECORDS, course_exchange.STUDENT.pattern, course_exchange.SHOWN)


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory) -> Path:
    """A gradebook with the assignment (one notebook, one test of 2 points), made once: tests copy it."""
    from nbgrader.api import Gradebook

    path = tmp_path_factory.mktemp("gradebook") / "gradebook.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
        with Gradebook(f"sqlite:///{path}", COURSE) as gb:
            gb.add_assignment(A)
            gb.update_or_create_notebook(A, A)
            gb.update_or_create_grade_cell("test_a", A, A, max_score=2, cell_type="code")
    return path


def make_course(root: Path, gradebook: Path, students: list[str]) -> Course:
    from nbgrader.api import Gradebook

    root.mkdir(exist_ok=True)
    shutil.copy(gradebook, root / "gradebook.db")
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", COURSE) as gb:
        for s in students:
            gb.add_student(s)
    return Course(root)


def collected(course: Course, student: str, dated: str) -> None:
    """What an earlier collect left in submitted/."""
    folder = course.submitted / student / A
    folder.mkdir(parents=True)
    (folder / "timestamp.txt").write_text(dated)


def summary(course: Course, state: dict, assignments=None) -> tuple[int, list[str]]:
    out = io.StringIO()
    g = Grader(course, out=out)
    g.assignments = assignments
    code = g._summary(state, [(A, s, [A]) for s in ("big", "late") if f"{A}/{s}" in state["entries"]], 0, 0.0)
    return code, out.getvalue().splitlines()


def test_grades_summary_and_export_name_each_refused_hand_in(tmp_path, gradebook):
    course = make_course(tmp_path / "course", gradebook, ["big", "linked", "late"])
    from nbgrader.api import Gradebook
    with Gradebook(course.db_url, COURSE) as gb:
        gb.add_submission(A, "big")
    collected(course, "big", EARLY)
    collected(course, "late", LATE)
    state = {"version": 1, "entries": {f"{A}/big": {"status": "graded", "score": 1, "max_score": 2},
                                       f"{A}/late": {"status": "graded", "score": 2, "max_score": 2}}}
    Grader(course).save_state(state)
    root = str(course.root)
    for _ in range(2):  # collected twice: one line in the report, counted
        course_exchange.record_refusal(root, "big", A, f"big+{A}+{LATE}+r",
                                       "data.bin is 10737.4 MB, more than 100 MB; nothing of it was collected")
    course_exchange.record_refusal(root, "linked", A, f"linked+{A}+{LATE}+r",
                                   f"{A}.ipynb is a symbolic link; nothing of it was collected")
    course_exchange.record_refusal(root, "late", A, f"late+{A}+{EARLY}+r",
                                   "sub/x is a FIFO; nothing of it was collected")
    course_exchange.record_refusal(root, EVIL, A, f"{EVIL}<script>+{A}+{LATE}+r", "its name names no learner")
    course_exchange.record_refusal(root, "linked", "02_softmax", f"linked+02_softmax+{LATE}+r", "dated 2099")

    code, lines = summary(course, Grader(course).load_state(), [A])
    assert code == 0, lines  # the learners' refusals are no grading failure
    start = lines.index(next(line for line in lines if line.startswith("Not collected by the hub's exchange")))
    report = lines[start:]
    assert report[0].startswith("Not collected by the hub's exchange (4 hand-in(s) of 4 learner(s) refused"), report
    assert len(report) == 5 and not any("02_softmax" in line for line in report), report
    big, late, linked, evil = [next(line for line in report if line.startswith(f"  not collected: {A}/{who}"))
                               for who in ("big", "late", "linked", "x")]
    assert ", 2 times): it is too large (data.bin is 10737.4 MB, more than 100 MB; nothing of it was collected)" in big
    assert big.endswith(f"Graded instead: their hand-in collected earlier (dated {EARLY}): graded 1/2."), big
    assert f"Superseded: a later hand-in (dated {LATE}) was collected, and it is what is graded: graded 2/2." in late
    assert "it holds a link to a file elsewhere" in linked and linked.endswith(
        "Nothing of theirs was collected: no grade for this assignment until they hand in again."), linked
    assert "\\x1b[2J\\n[INFO] Collected good\\u202e" in evil and "No learner's grade changed" in evil, evil
    shown = "\n".join(lines) + (course.root / "exchange-refused.log").read_text()
    assert not any(ch in shown for ch in "\x1b\u202e") and "\n[INFO] Collected" not in shown
    assert len((course.root / "exchange-refused.log").read_text().splitlines()) == 6

    out = tmp_path / "grades.csv"
    assert export_csv(course, out, [A]) == 0
    rows = {row["student"]: row for row in csv.DictReader(out.open())}
    assert next(csv.reader(out.open()))[-1] == "not_collected"
    assert set(rows) == {"big", "linked", "late"}  # nobody named by a folder that names no learner
    assert rows["big"]["status"] == "graded" and "Graded instead: their hand-in collected earlier" in \
        rows["big"]["not_collected"]
    assert rows["linked"]["status"] == "not collected" and "symbolic link" in rows["linked"]["not_collected"]


def test_nothing_to_grade_says_which_hand_ins_were_refused(tmp_path, gradebook, capsys):
    """Every hand-in refused: `grade` has nothing to grade, and says why, before any sandbox is needed."""
    from tritoncourse.cli import main

    course = make_course(tmp_path / "course", gradebook, ["linked"])
    course_exchange.record_refusal(str(course.root), "linked", A, f"linked+{A}+{LATE}+r",
                                   f"{A}.ipynb is a symbolic link; nothing of it was collected")
    assert main(["grade", "--course", str(course.root)]) == 2
    out = capsys.readouterr().out
    assert "Nothing to grade" in out and f"  not collected: {A}/linked: refused at collect" in out, out


def test_a_long_record_is_bounded_and_a_broken_line_skipped(tmp_path):
    course = Course(tmp_path)
    course_exchange.record_refusal(str(course.root), "a", A, "a" + "+x" * 5000, "y" * 5000)
    with open(course.root / refusals.RECORDS, "a") as f:
        f.write('{"not": "a refusal"}\n[1, 2\n' + json.dumps({k: ["list"] for k in ("time", "student", "assignment",
                                                                                     "folder", "reason")}) + "\n")
    lines = refusals.report_lines(course, None, {})
    assert len(lines) == 3 and max(map(len, lines)) < 1200, lines  # the header, a's, the list-valued record
    assert "\u2026" in lines[1]


def test_the_real_collect_feeds_the_report(tmp_path):
    """nbgrader's collect API with the hub's Collect (as in test_hub_exchange_rules): good collected, a classmate's
    forged folder (as root: it needs chown), a link, an oversized file and an unprintable name refused, then `grade`'s
    summary names each."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    course = Course(tmp_path / "course")
    collected(course, "big", EARLY)
    inbound = tmp_path / "exchange" / COURSE / "inbound"
    inbound.mkdir(parents=True)
    now = time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime())
    root = os.geteuid() == 0
    hand_ins = [("big", "sparse"), ("linked", "link"), ("good", None), (EVIL, None)] + [("good", "forged")] * root
    for student, extra in hand_ins:
        when = now.replace(".000000", ".500000") if extra == "forged" else now
        sub = plant_hand_in(inbound, student, A, when, extra)
        if extra == "forged":
            os.chown(sub, 54321, 54321)  # a classmate's folder, newer, in good's name
    c = Config()
    c.Exchange.root = str(tmp_path / "exchange")
    c.CourseDirectory.course_id = COURSE
    c.CourseDirectory.root = str(course.root)
    c.ExchangeFactory.collect = "course_exchange.Collect"
    result = NbGraderAPI(config=c).collect(A)
    assert result["success"], result
    assert "\x1b" not in result["log"] and "\\x1b[2J\\n[INFO] Collected good" in result["log"]
    assert sorted(p.name for p in course.submitted.iterdir()) == ["big", "good"]
    code, lines = summary(course, {"version": 1, "entries": {}}, [A])
    report = {line.split(":", 2)[1].strip(): line for line in lines if line.startswith("  not collected:")}
    assert sorted(report) == sorted([f"{A}/big", f"{A}/linked", f"{A}/x\\x1b[2J\\n[INFO] Collected good\\u202e"]
                                    + [f"{A}/good"] * root)
    assert "it is too large" in report[f"{A}/big"] and f"their hand-in collected earlier (dated {EARLY})" in \
        report[f"{A}/big"]
    assert "Nothing of theirs was collected" in report[f"{A}/linked"]
    if not root:
        return
    assert "someone else made it in this learner's name" in report[f"{A}/good"]
    assert f"Graded instead: their hand-in collected earlier (dated {now}): not graded yet." in report[f"{A}/good"]

"""The hub exchange's rules in-process (fast; no hub): what the hand-in service (hub/exchange_service.py) takes and
refuses, the bounded copy and the collect of hub/course_exchange.py, and the exchange that set-up makes. The same
code runs behind the hub in tests/system/test_hub_exchange.py, where a learner's own account attacks it."""
from __future__ import annotations

import io
import json
import os
import pwd
import shutil
import sys
import time
from pathlib import Path

import pytest

from inbound_plants import plant_hand_in

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hub"))
import checked_submit  # noqa: E402
import course_exchange  # noqa: E402
import exchange_service as es  # noqa: E402

A = "01_vector_add"
COURSE = "triton-kernels"
ME = pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def exchange(tmp_path) -> es.Exchange:
    (tmp_path / COURSE / "inbound").mkdir(parents=True)
    (tmp_path / COURSE / "outbound" / A).mkdir(parents=True)
    return es.Exchange(str(tmp_path), COURSE, ME, None)


def request(*files: tuple[str, int], course=COURSE, assignment=A) -> dict:
    return {"course": course, "assignment": assignment, "files": [list(f) for f in files]}


def stream(req: dict, data: bytes) -> io.BytesIO:
    return io.BytesIO(json.dumps(req).encode() + b"\n" + data)


def test_the_bounds_agree():
    """The learner's submit refuses what the service would: the same bounds on both sides."""
    assert (checked_submit.SOCKET, checked_submit.MAX_FILES, checked_submit.MAX_FILE, checked_submit.MAX_TOTAL) == \
        (es.SOCKET, es.MAX_FILES, es.MAX_FILE, es.MAX_TOTAL)


@pytest.mark.parametrize("req, said", [
    (request(("x.ipynb", 1), course="another"), "takes the course 'triton-kernels', not 'another'"),
    (request(("x.ipynb", 1), assignment="../inbound"), "is not an assignment's name"),
    (request(("x.ipynb", 1), assignment="02_softmax"), "02_softmax has not been released"),
    (request(("../../etc/cron.d/x", 1)), "is not a name a hand-in can hold"),
    (request(("/etc/passwd", 1)), "is not a name a hand-in can hold"),
    (request(("a/./b", 1)), "is not a name a hand-in can hold"),
    (request(("timestamp.txt", 1)), "is not a name a hand-in can hold"),
    (request(("x", 1), ("x", 1)), "x is named twice"),
    (request(("x", 1), ("x/y", 1)), "x/y is named twice"),
    (request(("big", 10 ** 10)), "big is 10000.0 MB: at most 100 MB a file"),
    (request(("neg", -1)), "neg is -0.0 MB"),
    (request(*[(f"f{i}", 1) for i in range(es.MAX_FILES + 1)]), f"at most {es.MAX_FILES} are handed in"),
    (request(("a", es.MAX_FILE), ("b", 1)), "MB in all: at most 100 MB a hand-in"),
    (request(), "no files to hand in"),
], ids=["course", "assignment-path", "unreleased", "dotdot", "absolute", "dot", "reserved", "twice", "file-and-dir",
        "oversize", "negative", "count", "total", "empty"])
def test_the_service_refuses_what_it_cannot_hold(exchange, req, said):
    with pytest.raises(es.Refused) as err:
        exchange.hand_in(os.geteuid(), stream(req, b""))
    assert said in str(err.value)
    assert os.listdir(exchange.inbound) == []


def test_a_hand_in_is_named_by_the_service(exchange):
    """The learner's name from the uid, the time from the service's clock, a secret of its own; whole."""
    before = time.time()
    answer = exchange.hand_in(os.geteuid(), stream(request((f"{A}.ipynb", 5), ("sub/notes.txt", 2)), b"hello" b"hi"))
    (name,) = os.listdir(exchange.inbound)
    assert name == answer["name"] and name.startswith(f"{ME}+{A}+") and answer["student"] == ME
    sub = Path(exchange.inbound) / name
    assert (sub / f"{A}.ipynb").read_bytes() == b"hello" and (sub / "sub" / "notes.txt").read_bytes() == b"hi"
    assert (sub / "timestamp.txt").read_text() == answer["timestamp"] == name.split("+")[2]
    from nbgrader.utils import parse_utc
    stamp = parse_utc(answer["timestamp"]).replace(tzinfo=__import__("datetime").timezone.utc).timestamp()
    assert before - 1 <= stamp <= time.time() + 1
    assert (sub / "submission_secret.txt").read_text() == answer["secret"] and len(answer["secret"]) == 128


def test_a_hand_in_cut_short_leaves_nothing_and_only_the_newest_are_kept(exchange):
    with pytest.raises(es.Refused, match="ended before all of big came"):
        exchange.hand_in(os.geteuid(), stream(request(("big", 1000)), b"x" * 10))
    assert os.listdir(exchange.inbound) == []
    names = [exchange.hand_in(os.geteuid(), stream(request(("n", 1)), b"x"))["name"] for _ in range(es.KEEP + 2)]
    assert sorted(os.listdir(exchange.inbound)) == sorted(names[-es.KEEP:])


def test_only_the_learners_group_hands_in(exchange):
    exchange.learners_group = "no-such-group-tritonhub"
    with pytest.raises(es.Refused, match="learners' group no-such-group-tritonhub is missing"):
        exchange.learner(os.geteuid())
    exchange.learners_group = None
    with pytest.raises(es.Refused, match="has no account here"):
        exchange.learner(2 ** 31 - 5)


# ------------------------------------------------------------------------------------------- the bounded copy

def copy(src: Path, dest: Path, **bounds):
    limits = dict(ignore=[".ipynb_checkpoints"], max_files=10, max_file=1000, max_total=1500) | bounds
    return course_exchange.bounded_copy(str(src), str(dest), limits["ignore"], limits["max_files"],
                                        limits["max_file"], limits["max_total"])


@pytest.mark.parametrize("make, said", [
    (lambda d: os.symlink("/etc/passwd", d / "nb.ipynb"), "nb.ipynb is a symbolic link"),
    (lambda d: os.symlink("/dev/zero", d / "data.bin"), "data.bin is a symbolic link"),
    (lambda d: os.mkfifo(d / "pipe"), "pipe is a FIFO"),
    (lambda d: os.symlink("/", d / "up"), "up is a symbolic link"),
    (lambda d: open(d / "sparse", "wb").truncate(10 << 30), "sparse is 10737.4 MB, more than 0 MB"),
    (lambda d: [open(d / f"f{i}", "wb").close() for i in range(11)], "more than 10 files"),
    (lambda d: os.link(d / "ok.txt", d / "second-name"), "has 2 names"),
    (lambda d: (d / "a" / "b" / "c" / "d" / "e" / "f" / "g" / "h" / "i").mkdir(parents=True), "more than 8 folders"),
    (lambda d: [(d / f"m{i}").write_bytes(b"x" * 900) for i in range(2)], "or the submission than its bound"),
], ids=["link", "dev-zero", "fifo", "link-to-folder", "sparse", "count", "hard-link", "depth", "total"])
def test_the_bounded_copy_refuses(tmp_path, make, said):
    src = tmp_path / "sub"
    src.mkdir()
    (src / "ok.txt").write_text("ok")
    make(src)
    with pytest.raises(course_exchange.NotCopied, match=said.replace("(", r"\(").replace(")", r"\)")):
        copy(src, tmp_path / "out")


def test_the_bounded_copy_copies_regular_files(tmp_path):
    src = tmp_path / "sub"
    (src / "d" / ".ipynb_checkpoints").mkdir(parents=True)
    (src / "nb.ipynb").write_text("{}")
    (src / "d" / "notes.txt").write_text("notes")
    (src / "d" / ".ipynb_checkpoints" / "x").write_text("skipped")
    assert copy(src, tmp_path / "out") == 7
    assert sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*")) == \
        ["d", "d/notes.txt", "nb.ipynb"]


# ------------------------------------------------------------------------------------------- collect

def test_collect_costs_a_bad_submission_only_its_learner(tmp_path, monkeypatch):
    """One learner's oversized file, one's link, one's future date, one's name that is no learner's: each refused in
    one line of the log Formgrader's collect dialog shows (its API, as Formgrader's button calls it); the good one
    collected; collect succeeds."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")  # gradebook's alembic
    inbound = tmp_path / "exchange" / COURSE / "inbound"
    inbound.mkdir(parents=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime())
    for student, extra in [("big", "sparse"), ("linked", "link"), ("good", None), ("future", None), ("..", None),
                           ("-rf", None)]:
        when = "2099-01-01 00:00:00.000000 UTC" if student == "future" else stamp
        plant_hand_in(inbound, student, A, when, extra)
    c = Config()
    c.Exchange.root = str(tmp_path / "exchange")
    c.CourseDirectory.course_id = COURSE
    c.CourseDirectory.root = str(tmp_path / "course")
    c.ExchangeFactory.collect = "course_exchange.Collect"
    (tmp_path / "course").mkdir()
    result = NbGraderAPI(config=c).collect(A)
    assert result["success"], result
    log = result["log"]
    submitted = tmp_path / "course" / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == ["good"]
    assert f"[ERROR] Not collected: big's {A} (big+{A}+{stamp}+r): data.bin is 10737.4 MB, more than 100 MB" in log
    assert f"[ERROR] Not collected: linked's {A}" in log and "01_vector_add.ipynb is a symbolic link" in log, log
    assert f"[ERROR] Not collected: future's {A}" in log and "in the future: ignored" in log, log
    assert f"[ERROR] Not collected: -rf's {A}" in log and "its name names no learner" in log, log
    assert not (tmp_path / "course" / A).exists()  # "..+01_vector_add+...": a hidden name, never read
    assert len((tmp_path / "course" / "exchange-refused.log").read_text().splitlines()) == 4


# ------------------------------------------------------------------------------------------- set-up

@pytest.mark.skipif(os.geteuid() != 0, reason="set-up chowns folders: root only")
def test_setup_makes_the_exchange_and_moves_a_claimed_course_aside(tmp_path, capsys):
    root = tmp_path / "exchange"
    (root / COURSE).mkdir(parents=True)
    os.chown(root / COURSE, 54321, 54321)  # a learner made it first on a world-writable exchange
    es.prepare(str(root), COURSE, ME)
    uid = pwd.getpwnam(ME).pw_uid
    modes = {p.name: (oct(p.stat().st_mode & 0o7777), p.stat().st_uid)
             for p in [root, root / COURSE, *(root / COURSE).iterdir()]}
    assert modes == {"exchange": ("0o755", 0), COURSE: ("0o755", uid), "outbound": ("0o755", uid),
                     "inbound": ("0o700", uid), "feedback": ("0o711", uid)}
    (aside,) = [p for p in root.iterdir() if p.name.startswith(f"{COURSE}.claimed-54321-")]
    assert "was not the instructor's (uid 54321): moved aside" in capsys.readouterr().out
    shutil.rmtree(aside)

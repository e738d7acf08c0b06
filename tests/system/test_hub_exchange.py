"""The hub's exchange against a learner who attacks it (issue 41), on the running hub of tests/support/hub_env.py, from
the learner's own Unix account with nbgrader's own commands and plain files: hand in as a classmate (``--student``, or
the hand-in socket spoken to directly), write, date or delete in ``inbound/``, hand in a link to the instructor's
``source/`` notebook, a link to ``/dev/zero``, a sparse 10 GB file, claim a folder of the exchange before a release.
Each fails for the attacker with a clear message and costs the classmates nothing: their submissions are collected as
theirs (and their feedback keys stay theirs), collection goes on for everyone, release succeeds.

``inbound/`` is closed to learners now; what nbgrader's shared folder let them leave there (and an exchange upgraded
in mid-term still holds) is planted by root, owned by the attacker, to show that collect refuses it one submission at
a time: a name that is not its maker's, a date in the future, a link, a device, an oversized file.

Root only (Unix accounts, the hub); one hub for every attack, no browser. docs/JUPYTERHUB.md, "The exchange".
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from hub_env import PHASE, Hub, running_hub
from hub_learners import marked_notebook, owner_of

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "hub-exchange"
FUTURE = "2099-01-01 00:00:00.000000 UTC"
BOUND = ["prlimit", "--fsize=300000000", "timeout", "120"]  # a collect that follows /dev/zero stops at 300 MB

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub():
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    with running_hub(ARTIFACTS) as h:
        yield h


def sh(hub: Hub, user: str, script: str):
    return hub.as_user(user, "sh", "-c", script, check=False)


def inbound(hub: Hub) -> Path:
    return Path(hub.settings["exchange"]) / hub.settings["course_id"] / "inbound"


def subs(hub: Hub, student: str) -> list[Path]:
    return sorted(inbound(hub).glob(f"{student}+{PHASE}+*"))


def write(hub: Hub, user: str, nb, *extra: tuple[str, bytes]) -> Path:
    """``user`` writes its notebook (and ``extra`` files) into ~/01_vector_add, as that user; returns the folder."""
    folder = hub.home(user) / PHASE
    sh(hub, user, f"rm -rf '{folder}' && mkdir -p '{folder}'")
    for name, data in [(f"{PHASE}.ipynb", nbformat.writes(nb).encode()), *extra]:
        tmp = hub.scratch / f"{user}-{name}"
        tmp.write_bytes(data)
        tmp.chmod(0o644)
        assert sh(hub, user, f"cp '{tmp}' '{folder / name}'").returncode == 0
    return folder


def submit(hub: Hub, user: str, *args: str) -> tuple[int, str]:
    proc = hub.as_user(user, "nbgrader", "submit", PHASE, *args, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def collect(hub: Hub, *args: str) -> str:
    proc = hub.as_user(hub.instructor, *BOUND, "nbgrader", "collect", PHASE, "--update", *args, cwd=hub.course,
                       check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"collect failed for the whole class (exit {proc.returncode}):\n{log[-4000:]}"
    return log


def collected_owner(hub: Hub, student: str) -> str | None:
    nb = hub.course / "submitted" / student / PHASE / f"{PHASE}.ipynb"
    return owner_of(nb) if nb.is_file() else None


def plant(hub: Hub, owner: str, name: str, files: dict[str, str]) -> Path:
    """A folder of ``inbound/`` as nbgrader's shared folder let ``owner`` leave it (root plants it, owned by
    ``owner``): ``files`` maps a name to 'notebook:<marker>', 'link:<target>' or 'sparse:<bytes>'."""
    folder = inbound(hub) / name
    folder.mkdir()
    for fname, what in files.items():
        kind, arg = what.split(":", 1)
        if kind == "notebook":
            nbformat.write(marked_notebook(arg), folder / fname)
        elif kind == "link":
            os.symlink(arg, folder / fname)
        else:
            with open(folder / fname, "wb") as f:
                f.truncate(int(arg))
    (folder / "timestamp.txt").write_text(name.split("+")[2])
    pw = pwd.getpwnam(owner)
    for path in [folder, *folder.iterdir()]:
        os.chown(path, pw.pw_uid, pw.pw_gid, follow_symlinks=False)
    return folder


def now_stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime())


def speak(hub: Hub, user: str, request: dict, data_from: str | None = None):
    """``user``'s own Python speaks to the hand-in socket directly (no nbgrader): ``request``, then the bytes of the
    file ``data_from`` (relative to the user's home); returns the process and the service's answer."""
    code = (f"import json, socket\ns = socket.socket(socket.AF_UNIX)\n"
            f"s.connect({hub.settings['exchange'] + '/hand-in.sock'!r})\n"
            f"s.sendall(json.dumps({request!r}).encode() + b'\\n')\n"
            + (f"s.sendall(open({data_from!r}, 'rb').read())\n" if data_from else "")
            + "print(s.makefile().readline())")
    out = hub.as_user(user, str(hub.venv / "bin" / "python"), "-c", code, check=False)
    return out, json.loads(out.stdout)


def cached_secret(hub: Hub, user: str) -> set[str]:
    cache = hub.home(user) / ".local" / "share" / "jupyter" / "nbgrader_cache" / hub.settings["course_id"]
    return {p.read_text() for p in cache.glob("*/submission_secret.txt")}


# ------------------------------------------------------------------------------------------- the attacks, in order

def test_the_classmates_hand_in(hub):
    """A and B hand in through nbgrader's own command: each submission is theirs, named by the service."""
    for key in ("a", "b"):
        user = hub.learners[key]
        write(hub, user, marked_notebook(key))
        rc, log = submit(hub, user)
        assert rc == 0, log
        (sub,) = subs(hub, user)
        assert owner_of(sub / f"{PHASE}.ipynb") == key


def test_submit_as_a_classmate(hub):
    """C hands in a blank notebook as A: with ``--student`` (refused, saying why), and by speaking to the hand-in
    socket itself with A's name in the request (the service names the kernel's uid: it is C's)."""
    a, c = hub.learners["a"], hub.learners["c"]
    before = subs(hub, a)
    write(hub, c, marked_notebook("c-as-a"))
    rc, log = submit(hub, c, "--student", a)
    assert rc != 0 and f"you hand in only as yourself ({c}), not as {a}" in log, log
    size = (hub.home(c) / PHASE / f"{PHASE}.ipynb").stat().st_size
    request = {"course": hub.settings["course_id"], "assignment": PHASE, "student": a,
               "files": [[f"{PHASE}.ipynb", size]]}
    out, answer = speak(hub, c, request, f"{PHASE}/{PHASE}.ipynb")
    assert answer["ok"] and answer["student"] == c and answer["name"].startswith(f"{c}+"), out
    assert subs(hub, a) == before and owner_of(before[0] / f"{PHASE}.ipynb") == "a"


def test_inbound_is_closed_to_learners(hub):
    """C cannot list, write, date or delete in ``inbound/``, nor claim a folder of the exchange: each try is refused
    by the kernel (Permission denied), and A's submission stays."""
    a, c = hub.learners["a"], hub.learners["c"]
    exchange = Path(hub.settings["exchange"])
    a_sub = subs(hub, a)[0]
    tries = {
        "list inbound/": f"ls '{inbound(hub)}'",
        "a future-dated folder for A": f"mkdir '{inbound(hub)}/{a}+{PHASE}+{FUTURE}+x'",
        "delete A's submission": f"rm -rf '{a_sub}'",
        "a course folder before its release": f"mkdir '{exchange}/another-course'",
        "a folder in outbound/": f"mkdir '{exchange}/{hub.settings['course_id']}/outbound/x'",
        "a file in feedback/": f"touch '{exchange}/{hub.settings['course_id']}/feedback/x.html'",
    }
    could = {}
    for what, script in tries.items():
        out = sh(hub, c, script)
        if out.returncode == 0 or "Permission denied" not in out.stderr:
            could[what] = (out.returncode, out.stderr[-300:])
    assert not could, f"C could: {could}"
    assert a_sub.is_dir() and owner_of(a_sub / f"{PHASE}.ipynb") == "a"
    assert oct(exchange.stat().st_mode & 0o7777) == "0o755" and exchange.stat().st_uid == 0


@pytest.mark.parametrize("what, make, said", [
    ("a link to the instructor's source notebook", "ln -sf '{source}' {PHASE}.ipynb",
     f"{PHASE}.ipynb cannot be handed in: it is a symbolic link"),
    ("a link to /dev/zero", "ln -s /dev/zero data.bin", "data.bin cannot be handed in: it is a symbolic link"),
    ("a sparse 10 GB file", "truncate -s 10G data.bin", "data.bin cannot be handed in: it is 10737.4 MB, more than"),
], ids=["source-link", "dev-zero", "sparse-10G"])
def test_links_devices_and_oversize_are_refused_at_hand_in(hub, what, make, said):
    """C's ``nbgrader submit`` of each: refused, saying which file and why; nothing of it reaches the exchange."""
    c = hub.learners["c"]
    before = subs(hub, c)
    folder = write(hub, c, marked_notebook("c"))
    source = hub.course / "source" / PHASE / f"{PHASE}.ipynb"
    assert sh(hub, c, f"cd '{folder}' && " + make.format(source=source, PHASE=PHASE)).returncode == 0
    rc, log = submit(hub, c)
    assert rc != 0 and said in log and "Only regular files are handed in" in log, (what, log)
    assert subs(hub, c) == before


def test_the_service_bounds_what_it_is_sent(hub):
    """A request for a 10 GB file, spoken to the socket directly, is refused before any byte is written."""
    c = hub.learners["c"]
    request = {"course": hub.settings["course_id"], "assignment": PHASE, "files": [["big.bin", 10 ** 10]]}
    out, answer = speak(hub, c, request)
    assert not answer["ok"] and "big.bin is 10000.0 MB: at most 100 MB a file" in answer["error"], out


@pytest.mark.parametrize("what, files, said", [
    ("a link to the instructor's source notebook", {f"{PHASE}.ipynb": "link:{source}"},
     f"{PHASE}.ipynb is a symbolic link"),
    ("a sparse 10 GB file", {f"{PHASE}.ipynb": "notebook:c", "data.bin": f"sparse:{10 << 30}"},
     "data.bin is 10737.4 MB, more than 100 MB"),
    ("a link to /dev/zero", {f"{PHASE}.ipynb": "notebook:c", "data.bin": "link:/dev/zero"},
     "data.bin is a symbolic link"),
], ids=["source-link", "sparse-10G", "dev-zero"])
def test_collect_refuses_what_the_shared_folder_let_learners_leave(hub, what, files, said):
    """In ``inbound/`` (planted, as nbgrader's shared folder let C leave them): C's newest submission holding each,
    a folder named for A and dated in the future, and one named for A now. Collect refuses each, one line each,
    C's only; A's and B's real submissions are collected as theirs; the solutions stay in ``source/``."""
    a, b, c = (hub.learners[k] for k in "abc")
    source = hub.course / "source" / PHASE / f"{PHASE}.ipynb"
    files = {k: v.replace("{source}", str(source)) for k, v in files.items()}
    bad = plant(hub, c, f"{c}+{PHASE}+{now_stamp()}+bad", files)
    frozen = plant(hub, c, f"{a}+{PHASE}+{FUTURE}+frozen", {f"{PHASE}.ipynb": "notebook:c-frozen"})
    forged = plant(hub, c, f"{a}+{PHASE}+{now_stamp()}+forged", {f"{PHASE}.ipynb": "notebook:c-forged"})
    try:
        log = collect(hub)
    finally:
        for folder in (bad, frozen, forged):
            shutil.rmtree(folder)
    assert f"Not collected: {c}'s {PHASE} ({bad.name}): {said}" in log, log
    assert f"Not collected: {a}'s {PHASE} ({frozen.name}): dated {FUTURE}, in the future: ignored" in log, log
    assert f"Not collected: {a}'s {PHASE} ({forged.name}): it was made by uid {pwd.getpwnam(c).pw_uid}" in log, log
    assert (collected_owner(hub, a), collected_owner(hub, b)) == ("a", "b")
    got = hub.course / "submitted" / c / PHASE
    assert not any(p.is_symlink() for p in got.rglob("*")) and not (got / "data.bin").exists()
    assert source.read_bytes() not in {p.read_bytes() for p in got.rglob("*.ipynb")}
    assert f"{bad.name}" in (hub.course / "exchange-refused.log").read_text()


def test_the_classmates_keep_everything_and_release_succeeds(hub):
    """After all of it: A hands in again and that one is collected (no date froze A's grade); the secrets that key A's
    and C's feedback are each their own; release succeeds (--force: again)."""
    a, c = hub.learners["a"], hub.learners["c"]
    write(hub, a, marked_notebook("a-2"))
    rc, log = submit(hub, a)
    assert rc == 0, log
    collect(hub)
    assert collected_owner(hub, a) == "a-2"
    secret = (hub.course / "submitted" / a / PHASE / "submission_secret.txt").read_text()
    assert secret in cached_secret(hub, a) and secret not in cached_secret(hub, c)
    c_secret = (hub.course / "submitted" / c / PHASE / "submission_secret.txt").read_text()  # its socket hand-in's
    assert c_secret != secret and c_secret not in cached_secret(hub, a)
    out = hub.as_user(hub.instructor, "nbgrader", "release_assignment", PHASE, "--force", cwd=hub.course, check=False)
    assert out.returncode == 0, out.stderr[-3000:]

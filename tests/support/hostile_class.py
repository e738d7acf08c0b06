"""The hostile class of tests/workflows/test_sandbox_hostile.py: every learner of tests/hostile/01_vector_add/ handed in
between two correct learners, graded once by plain `nbgrader autograde` and once by `python -m tritoncourse grade`,
each in a course copy of its own with its own copy of the package (``HostileClass``); which learners each grader
grades (``graders_of``), the limits they grade under, and what the tests read back (scores, outputs, logs, leaks)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import psutil
from nbformat.v4 import new_code_cell

from course import BIN, ROOT, Course, Fixture
from sandboxes import _marked
from servers import UnixListener
from tritoncourse.device import infer_device

A = "01_vector_add"
HOSTILE = Path(__file__).resolve().parents[1] / "hostile" / A
KERNEL_TESTS = ["test_vector_add_full_blocks", "test_vector_add_ragged_sizes", "test_vector_add_block_sizes",
                "test_vector_add_large", "test_vector_add_fp16"]
# Limits for the hostile graders: far below the defaults, so that a hog or a filler that the sandbox lets
# through (a bug) costs this shared machine little; correct kernels' checks fit well inside them.
# On a GPU a checking process under compute-sanitizer holds more than 2 GB resident (CUDA's context and the
# sanitizer's shadow memory), and there only the watchdog limits memory (no address-space limit: CUDA maps far more
# than it uses).
ON_GPU = infer_device() == "cuda"
# TRITONCOURSE_HOSTILE_FIXTURES=name,name grades only those hostile learners (with the two correct ones around
# them): a GPU run short of device time re-checks the few that changed; every other one's test is skipped, saying so.
ONLY_HOSTILE = {name for name in os.environ.get("TRITONCOURSE_HOSTILE_FIXTURES", "").split(",") if name}
HOSTILE_LIMITS = {"TRITONCOURSE_SANDBOX_MEMORY_MB": "8192" if ON_GPU else "2048", "TRITONCOURSE_SANDBOX_DISK_MB": "256",
                  # the whole sandbox (cgroup): on a GPU the default (checks under compute-sanitizer hold GBs each)
                  "TRITONCOURSE_SANDBOX_TOTAL_MEMORY_MB": "0" if ON_GPU else "3072"}
# One learner's grading, and the whole hostile class, must end well inside the usual time-outs.
GRADING_TIMEOUT = 900


def _env(course: Path, **extra) -> dict:
    # The course's own package first; then whatever PYTHONPATH already held other than this checkout (the GPU
    # machines carry nbgrader there), so that graded code never imports this checkout's package.
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.realpath(p) != str(ROOT)]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join([str(course)] + kept), PYTHONDONTWRITEBYTECODE="1", **extra)
    env.pop("TRITONCOURSE_SEED", None)
    return env


def _copy(template: Path, dest: Path) -> Course:
    shutil.copytree(template, dest, symlinks=True)
    return Course.existing(dest)


def digest(root: Path) -> dict[str, str]:
    """Every file of the course but what grading writes (autograded/ with the state folder, the gradebook,
    nbgrader's log) and feedback/: path -> sha256 (symlinks by their target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in ("autograded", "feedback") or str(rel) in ("gradebook.db", ".nbgrader.log"):
            continue
        if path.is_symlink():
            out[str(rel)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[str(rel)] = "dir"
    return out


class Listener:
    """A loopback port that records every connection made to it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    self.received.append(conn.recv(1024) or b"<connected>")

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


class HostileClass:
    """One hostile class graded twice: by plain nbgrader autograde and by course grade."""

    def __init__(self, tmp: Path, template: Path):
        self.marker = "m" + secrets.token_hex(8)
        self.token = "AKIA" + secrets.token_hex(8).upper()  # a fake key in the grader's environment
        # and secrets under the course's own prefixes, which once passed into the sandboxes whole
        # (grading/sandbox/config.py)
        self.planted = {"TRITONCOURSE_GRADEBOOK_PASSWORD": "pg" + secrets.token_hex(8),
                        "PYTORCH_SECRET_HOOK": "pt" + secrets.token_hex(8)}
        self.listener = Listener()
        (tmp / "sockets").mkdir()  # hostile_socket_links' links aim here: one listener per grader
        self.unix = {kind: UnixListener(tmp / "sockets" / f"{kind}.sock") for kind in GRADERS}
        self.fixtures = [Fixture.load(p) for p in sorted(HOSTILE.glob("*.py")) if not ONLY_HOSTILE or p.stem in ONLY_HOSTILE]
        self.private = {name: f"private note of {name}: {secrets.token_hex(8)}" for name in ("aaa_before", "zzz_after")}
        self.courses = {"nbgrader": _copy(template, tmp / "plain"), "course_grade": _copy(template, tmp / "classroom")}
        for course in self.courses.values():
            self.submit_all(course)
        self.digests = {k: digest(c.path) for k, c in self.courses.items()}
        self.secrets = self.hidden_lines()
        self.procs, self.seconds = {}, {}
        start = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(self.grade, self.courses))
        self.wall = time.monotonic() - start
        self.left_running = [" ".join(p.cmdline()) for p in _marked(self.marker)]
        for proc in _marked(self.marker):  # if the sandbox failed: stop what this test started, then report
            with contextlib.suppress(psutil.Error):
                proc.kill()
        time.sleep(2)  # a forger that outlived grading would write now
        self.feedback = {k: self.run_feedback(c) for k, c in self.courses.items()}
        self.listener.close()
        for unix in self.unix.values():
            unix.close()

    def fill(self, text: str, course: Course) -> str:
        kind = next(k for k, c in self.courses.items() if c is course)
        return (text.replace("{{course}}", str(course.path)).replace("{{marker}}", self.marker)
                .replace("{{host_socket}}", str(self.unix[kind].path))
                .replace("{{port}}", str(self.listener.port)).replace("{{before}}", "aaa_before"))

    def submit_all(self, course: Course) -> None:
        release, source = course.release_notebook(A), course.source_notebook(A)
        for name, note in self.private.items():
            nb = nbformat.from_dict(source)
            nb.cells.append(new_code_cell(f"# {note}"))
            course.submit(name, A, nb)
        kind = next(k for k, c in self.courses.items() if c is course)
        for fx in self.fixtures:
            if kind not in graders_of(fx.name):
                continue
            nb = fx.notebook(release, source)
            for cell in nb.cells:
                cell.source = self.fill(cell.source, course)
            course.submit(fx.name, A, nb)
        folder = course.path / "submitted"
        links = folder / "hostile_symlinks" / A
        if links.is_dir():
            self.plant_links(course, links)
        dotdot = folder / "hostile_dotdot_names" / A
        for name in ("..\\..\\gradebook.db", "..%2F..%2Fgradebook.db", "...", ".. .ipynb") if dotdot.is_dir() else ():
            (dotdot / name).write_text(f"{self.marker}\n")

    def plant_links(self, course: Course, links: Path) -> None:
        folder = course.path / "submitted"
        (links / "source_link").symlink_to(course.path / "source")
        (links / "gradebook_link.db").symlink_to(course.path / "gradebook.db")
        (links / "classmate_link.ipynb").symlink_to(folder / "aaa_before" / A / f"{A}.ipynb")

    def hidden_lines(self) -> set[str]:
        from tritoncourse.classroom.feedback import hidden_secrets

        c = self.courses["nbgrader"].path
        return hidden_secrets(c / "source", c / "release", A)[A]

    def grade(self, kind: str) -> None:
        course = self.courses[kind]
        env = _env(course.path, AWS_SECRET_ACCESS_KEY=self.token, **self.planted, **HOSTILE_LIMITS)
        if kind == "nbgrader":
            cmd = [sys.executable, "-m", "nbgrader", "autograde", A, "--force", "--log-level=INFO"]
        else:
            cmd = [sys.executable, "-m", "tritoncourse", "grade", A, "--course", str(course.path), "--jobs", "2"]
        start = time.monotonic()
        self.procs[kind] = subprocess.run(cmd, cwd=course.path, env=env, capture_output=True, text=True,
                                          timeout=GRADING_TIMEOUT)
        self.seconds[kind] = time.monotonic() - start

    def run_feedback(self, course: Course) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tritoncourse", "feedback", A, "--course", str(course.path)],
                              cwd=course.path, env=_env(course.path), capture_output=True, text=True, timeout=600)

    # ---- what the tests ask
    def scores(self, kind: str, student: str) -> dict[str, float]:
        return self.courses[kind].scores(A, student)

    def outputs(self, kind: str, student: str, tests: bool = True) -> str:
        """The outputs of the learner's autograded notebook (its sources hold the instructor's tests); without
        ``tests``, those of the learner's own cells only (a failed test's traceback may quote a hidden line of
        its own: HideHiddenTests blanks those in feedback)."""
        path = self.courses[kind].path / "autograded" / student / A / f"{A}.ipynb"
        nb = nbformat.read(path, as_version=4)
        return json.dumps([c.get("outputs", []) for c in nb.cells
                           if tests or not c.get("metadata", {}).get("nbgrader", {}).get("grade")])

    def logs(self, kind: str) -> str:
        course = self.courses[kind].path
        text = self.procs[kind].stdout + self.procs[kind].stderr
        for log in (course / "autograded" / ".classroom" / "logs").rglob("*.log"):
            text += log.read_text(errors="replace")
        if (course / ".nbgrader.log").exists():
            text += (course / ".nbgrader.log").read_text(errors="replace")
        return text

    def leaks(self, text: str) -> list[str]:
        """The secrets in ``text``: hidden test lines, another learner's note, the grader's key, the gradebook."""
        from tritoncourse.classroom.secrets import normal

        plain = normal(text.replace("\\n", "\n").replace('\\"', '"'))
        found = [s for s in self.secrets if s in plain]
        found += [note for note in self.private.values() if note in text]
        found += [s for s in (self.token, *self.planted.values(), "CREATE TABLE grade", "SQLite format 3") if s in text]
        return found



GRADERS = ["nbgrader", "course_grade"]
# hostile_kernel_*: a kernel that runs Python in the checking process, refused by the lint (grading/lint/lint.py) before
# anything of it runs, the same code under either grader: graded by plain nbgrader only (tests/units/test_source.py
# checks each refusal fast). Every other hostile learner acts on the notebook's run, the sandbox or the files, which the
# two graders lay out differently (one process for the class; a private course copy per learner, two at a time).
LINT_REFUSED = "hostile_kernel_"
# One of them graded (2026-11-29, for CI's time): the lint's refusal inside a real grading is the same step for each,
# and tests/units/test_source.py proves each one refused, naming its mechanism, before anything of it runs.
LINT_REFUSED_GRADED = "hostile_kernel_decorator"
# The learners that the kernel's own bounds of the notebook's sandbox contain (its memory cgroup, which counts memfds
# and tmpfs pages; the bounded filesystem of its folders; its network namespace): the same sandbox, made by the same
# plugin inside `nbgrader autograde` whichever grader started it. Graded by `course grade` only, two at a time beside
# each other as in a class; the memory hog still under both graders, so that plain nbgrader's limits (HOSTILE_LIMITS,
# from its environment) are proved to reach the sandbox too. The fork bomb (the pids cgroup, made by the same Limits
# beside the memory's) by `course grade` only since 2026-11-29 (CI's time): a learner graded beside it is the stronger
# witness that it costs only its own points.
KERNEL_BOUNDED = {"hostile_memfd_hog", "hostile_tmpfs_hog", "hostile_disk_filler", "hostile_unlinked_disk",
                  "hostile_network", "hostile_fork_bomb"}


# Issue 42's learners that act in the grader's own steps outside the notebook's run (the judge's hidden-case
# messages, its bounds, the lint's decoys): the same code under either grader, so graded by one only, the cheapest
# that shows it (CI's time). hostile_socket_links acts through the notebook's run, in ResilientExecute, the same
# code in the `nbgrader autograde` either grader runs: under plain nbgrader only since 2026-11-29, where one process
# runs every learner's notebook (a connection a learner's links won from a later notebook's contexts would show only
# there); before, under both, its attack succeeded against the package from before its fix under each.
# Under course grade (two at a time) where either would do: plain nbgrader's side grades one at a time, CI's longer.
# Three more whose attack reaches only what the same plugin makes inside `nbgrader autograde` under either grader:
# the kills (ppid and pid 1, kill -9 -1) reach only the sandbox's own pid namespace and user, and the notebook's
# dead kernel is ResilientExecute's, so under plain nbgrader, where one process grades the whole class (a kill that
# got out would end it: zzz_after, graded after them by that process, would be missing); the 400 MB message is
# refused as it arrives by ResilientExecute.message_limit, in the `nbgrader autograde` process either grader runs.
ONE_GRADER = {"hostile_decoy_torch": "nbgrader",  # the lint, as the hostile_kernel_* learners
              "hostile_prints_hidden_then_crashes": "course_grade",  # its feedback HTML, as `course feedback` writes it
              "hostile_judge_memory": "course_grade",  # each test's seconds in its private grading's log
              "hostile_kill_parent": "nbgrader", "hostile_kill_everything": "nbgrader",
              "hostile_socket_links": "nbgrader",
              "hostile_huge_output": "course_grade"}


def graders_of(name: str) -> list[str]:
    """The graders that grade hostile learner ``name``."""
    if name in ONE_GRADER:
        return [ONE_GRADER[name]]
    if name.startswith(LINT_REFUSED):
        return GRADERS[:1] if name == LINT_REFUSED_GRADED else []
    return GRADERS[1:] if name in KERNEL_BOUNDED else GRADERS

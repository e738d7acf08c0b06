"""Soak: every grading ends within its bound, hundreds of notebooks at a time (issue 31, item 4). Opt-in:

    TRITONCOURSE_SOAK=500 python -m pytest tests/test_soak.py -q      # 500 notebooks (docs/INSTRUCTORS.md)

Skipped unless TRITONCOURSE_SOAK=<notebooks> is set. Half of the notebooks are graded by plain ``nbgrader autograde``
and half by ``python -m tritoncourse grade``, each in a course copy of its own (with its own copy of the package),
both at once: cheap phase-1 learners (correct and wrong fixtures of tests/submissions/) with hostile ones mixed in
(kernels killed by their own cells, a memory hog, a fork bomb, a 400 MB output, a forger, a course patcher, links
to a classmate's notebook). Bounds: each notebook's run (ResilientExecute.notebook_timeout), each learner's whole
grading (--notebook-timeout; measured from plain nbgrader's log), and each whole run (ResilientExecute.run_timeout,
--run-timeout). Checked: both runs end within their bound with exit 0, every learner is graded within theirs with
the grades their fixture expects, and nothing any learner started is left running.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from course import BIN, ROOT, SUBMISSIONS, Course, Fixture

COUNT = int(os.environ.get("TRITONCOURSE_SOAK", "0") or 0)
pytestmark = pytest.mark.skipif(COUNT <= 0, reason="opt-in soak test: TRITONCOURSE_SOAK=<notebooks> grades that many")

A = "01_vector_add"
HOSTILE = Path(__file__).resolve().parent / "hostile" / A
# The learners, in turn: mostly cheap ones, a hostile one in every few.
ROTATION = [SUBMISSIONS / A / "correct_other_zero.py", SUBMISSIONS / A / "wrong_no_mask.py",
            HOSTILE / "hostile_kill_parent.py", SUBMISSIONS / A / "wrong_empty_kernel.py",
            SUBMISSIONS / A / "correct_pointer_blocks.py", "link_to_classmate",
            SUBMISSIONS / A / "wrong_mask_off_by_one.py", HOSTILE / "hostile_huge_output.py",
            SUBMISSIONS / A / "wrong_segfault.py", HOSTILE / "hostile_memory_hog.py",
            SUBMISSIONS / A / "wrong_syntax_error.py", HOSTILE / "hostile_kill_everything.py",
            SUBMISSIONS / A / "correct_other_zero.py", HOSTILE / "hostile_forge_gradebook.py",
            SUBMISSIONS / A / "wrong_not_implemented.py", HOSTILE / "hostile_fork_bomb.py",
            SUBMISSIONS / A / "wrong_compile_error.py", HOSTILE / "hostile_patch_course_files.py"]
TESTS = {"test_vector_add_full_blocks": 2, "test_vector_add_ragged_sizes": 3, "test_vector_add_block_sizes": 2,
         "test_vector_add_large": 2, "test_vector_add_fp16": 1}
NOTEBOOK_BOUND = 300  # one notebook's run in its kernel (ResilientExecute.notebook_timeout)
LEARNER_BOUND = 600  # one learner's whole grading (grade --notebook-timeout; plain nbgrader: measured)
LIMITS = {"TRITONCOURSE_SANDBOX_MEMORY_MB": "2048", "TRITONCOURSE_SANDBOX_DISK_MB": "256"}


def _env(course: Path) -> dict:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(course),
               PYTHONDONTWRITEBYTECODE="1", **LIMITS)
    env.pop("TRITONCOURSE_SEED", None)
    return env


def _learners(per_grader: int) -> list[tuple[str, object]]:
    out = []
    for i in range(per_grader):
        item = ROTATION[i % len(ROTATION)]
        name = item if isinstance(item, str) else item.stem
        out.append((f"s{i:04d}_{name}", item))
    return out


def _expected(item) -> dict[str, float]:
    if isinstance(item, str):  # a link: refused, every test 0
        return {t: 0 for t in TESTS}
    fx = Fixture.load(item)
    return {t: 0 if t in fx.expect_fail else points for t, points in TESTS.items()}


class Soak:
    def __init__(self, tmp: Path, per_grader: int):
        self.tmp = tmp
        self.learners = _learners(per_grader)
        template = Course(tmp / "template", [A])
        shutil.copytree(ROOT / "tritoncourse", template.path / "tritoncourse",
                        ignore=shutil.ignore_patterns("__pycache__"))
        self.courses = {k: tmp / k for k in ("nbgrader", "course_grade")}
        for course in self.courses.values():
            shutil.copytree(template.path, course, symlinks=True)
            self.submit(course)
        self.run_bound = max(1800, 60 * per_grader)
        self.procs, self.seconds = {}, {}
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(self.grade, self.courses))
        self.left_running = []
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if any(str(tmp) in part for part in proc.info["cmdline"] or []):
                    self.left_running.append(" ".join(proc.info["cmdline"]))
                    proc.kill()

    def submit(self, course: Path) -> None:
        c = Course.__new__(Course)
        c.path = course
        release, source = c.release_notebook(A), c.source_notebook(A)
        first = None
        for name, item in self.learners:
            if isinstance(item, str):
                continue
            nb = Fixture.load(item).notebook(release, source)
            for cell in nb.cells:
                cell.source = cell.source.replace("{{course}}", str(course)).replace("{{marker}}", "soak" + name)
            c.submit(name, A, nb)
            first = first or name
        for name, item in self.learners:
            if isinstance(item, str):  # a symbolic link to a classmate's notebook
                folder = course / "submitted" / name / A
                folder.mkdir(parents=True)
                (folder / f"{A}.ipynb").symlink_to(course / "submitted" / first / A / f"{A}.ipynb")

    def grade(self, kind: str) -> None:
        course = self.courses[kind]
        flags = [f"--ResilientExecute.notebook_timeout={NOTEBOOK_BOUND}", "--IsolatedKernelTests.timeout_factor=3"]
        if kind == "nbgrader":
            cmd = [sys.executable, "-m", "nbgrader", "autograde", A, "--force", "--log-level=INFO",
                   f"--ResilientExecute.run_timeout={self.run_bound}",
                   "--Application.log_format=%(asctime)s [%(name)s | %(levelname)s] %(message)s", *flags]
        else:
            cmd = [sys.executable, "-m", "tritoncourse", "grade", A, "--course", str(course), "--jobs", "2",
                   "--notebook-timeout", str(LEARNER_BOUND), "--run-timeout", str(self.run_bound),
                   *[f"--nbgrader={f}" for f in flags]]
        start = time.monotonic()
        self.procs[kind] = subprocess.run(cmd, cwd=course, env=_env(course), capture_output=True, text=True,
                                          timeout=self.run_bound + 600)
        self.seconds[kind] = time.monotonic() - start

    def scores(self, kind: str, student: str) -> dict[str, float]:
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.courses[kind] / 'gradebook.db'}") as gb:
            sub = gb.find_submission_notebook(A, A, student)
            return {g.name: g.score for g in sub.grades if g.name in TESTS}

    def plain_learner_seconds(self) -> dict[str, float]:
        """Each learner's grading in plain nbgrader's log: from 'Creating/updating student' to the permissions step
        that ends it."""
        stamp = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
        starts, out = {}, {}
        current = None
        text = self.procs["nbgrader"].stdout + self.procs["nbgrader"].stderr
        for line in text.splitlines():
            m = re.match(stamp + r".*Creating/updating student with ID '([^']+)'", line)
            if m:
                current = m.group(2)
                starts[current] = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
                continue
            m = re.match(stamp + r".*Setting destination file permissions", line)
            if m and current:
                out[current] = (dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S") - starts[current]).total_seconds()
                current = None
        return out


@pytest.fixture(scope="module")
def soak(tmp_path_factory) -> Soak:
    return Soak(tmp_path_factory.mktemp("soak"), (COUNT + 1) // 2)


@pytest.mark.slow
def test_every_grading_ends_within_its_bound(soak):
    report = {k: f"{len(soak.learners)} learners in {soak.seconds[k]:.0f} s" for k in soak.courses}
    print(f"soak: {report} (run bound {soak.run_bound} s, each learner {LEARNER_BOUND} s)")
    for kind, proc in soak.procs.items():
        assert proc.returncode == 0, (kind, proc.stdout[-3000:], proc.stderr[-5000:])
        assert soak.seconds[kind] < soak.run_bound, (kind, soak.seconds[kind])
    plain = soak.plain_learner_seconds()
    state = json.loads((soak.courses["course_grade"] / "autograded" / ".classroom" / "state.json").read_text())
    slow = {}
    for name, _ in soak.learners:
        entry = state["entries"][f"{A}/{name}"]
        assert entry["status"] == "graded" and entry["attempts"] == 1, (name, entry)
        assert name in plain, (name, "no end of grading in plain nbgrader's log")
        for kind, seconds in (("course_grade", entry["seconds"]), ("nbgrader", plain[name])):
            assert seconds < LEARNER_BOUND, (kind, name, seconds)
            slow[f"{kind}/{name}"] = seconds
    print("slowest:", sorted(slow.items(), key=lambda kv: -kv[1])[:5])
    assert not soak.left_running, soak.left_running


@pytest.mark.slow
def test_every_learner_gets_the_grades_its_fixture_expects(soak):
    wrong = []
    for kind in soak.courses:
        for name, item in soak.learners:
            got, want = soak.scores(kind, name), _expected(item)
            if got != want:
                wrong.append((kind, name, got, want))
    assert not wrong, wrong

"""The grading sandbox's hostile suite: every learner of tests/hostile/01_vector_add/ (patches the course, forges the
gradebook, reads the hidden tests, calls the grader's machine, fork bomb, memory hog, memory in memfds and in a tmpfs
of its own, disk filler, unlinked files, kills its parents, symlinks and ../ names) is graded, between two correct
learners, once by plain `nbgrader autograde` and once by `python -m tritoncourse grade`, each in a course copy of its
own, with its own copy of the package, so that nothing here can touch this checkout (those the lint refuses by plain
nbgrader only, those the sandbox's kernel-enforced bounds contain by `course grade` only: KERNEL_BOUNDED; those whose
attack reaches only what is the same under both, by one: ONE_GRADER; tests/support/hostile_class.py). Then: each loses only
its own points, the course is unchanged, no output shows a hidden test or another learner's work, nothing is left
running, grading ends in time. Issue 42's learners (the grader's own plumbing: the notebook kernel's socket links, a
crash on a hidden case, a huge value for the judge, a decoy for the lint) have tests of their own below.

Finally grading refuses to run without bubblewrap, naming the command that installs it, unless opted out.
The sandbox's unit tests: tests/grader/test_sandbox_isolation.py, test_sandbox_bounds.py, test_sandbox_cgroups.py.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from course import ROOT, Course, Fixture
from hostile_class import (A, GRADERS, GRADING_TIMEOUT, HOSTILE, HOSTILE_LIMITS, KERNEL_TESTS, ON_GPU, ONLY_HOSTILE,
                           HostileClass, _copy, _env, digest, graders_of)
from sandboxes import _path_without, sandbox_works  # noqa: F401 (fixture)
from tritoncourse.grading.lint.kernel_test_cell import DEFAULT_TIMEOUT
from tritoncourse.grading.sandbox import INSTALL_COMMAND, OPT_OUT_ENV


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A generated course with its own copy of the package (graded code never touches this checkout)."""
    course = Course(tmp_path_factory.mktemp("sandbox-template") / "course", [A], scaled_down=True)
    # TRITONCOURSE_HOSTILE_PACKAGE=/tmp/prefix/tritoncourse grades the class with another package (a checkout from
    # before a fix: the attack must succeed there)
    package = Path(os.environ.get("TRITONCOURSE_HOSTILE_PACKAGE") or ROOT / "tritoncourse")
    shutil.copytree(package, course.path / "tritoncourse", ignore=shutil.ignore_patterns("__pycache__"))
    return course.path


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, template) -> HostileClass:
    return HostileClass(tmp_path_factory.mktemp("hostile"), template)


def _hostile_params():
    return [pytest.param(kind, Fixture.load(p), id=f"{kind}/{p.stem}",
                         marks=[pytest.mark.skip("not in TRITONCOURSE_HOSTILE_FIXTURES")]
                         if ONLY_HOSTILE and p.stem not in ONLY_HOSTILE else [])
            for kind in GRADERS for p in sorted(HOSTILE.glob("*.py")) if kind in graders_of(p.stem)]


# What each hostile cell must report, or the grader must say, when the sandbox held.
CONTAINED = {"hostile_patch_course_files": "patch_course_files: 0 changed",
             "hostile_fork_bomb": "then BlockingIOError",
             # the CPU's address-space limit raises MemoryError; on a GPU the watchdog stops the kernel
             "hostile_memory_hog": "MB of memory" if ON_GPU else "then MemoryError",
             # the watchdog stops the kernel past DISK_MB, or the shared folder's filesystem refuses first (seen
             # here, 2026-11-28: 240 MB, then OSError): either way its working folder holds no more
             "hostile_disk_filler": (f"wrote more than {HOSTILE_LIMITS['TRITONCOURSE_SANDBOX_DISK_MB']} MB to disk",
                                     re.compile(r"disk_filler: /\S+/shared/work-\S+ \d+ MB, then OSError")),
             # the shared folder's filesystem refuses past DISK_MB, or the watchdog stops the kernel first if its
             # look falls while the file is still held (seen on CI, 2026-11-26): either way it is contained
             "hostile_unlinked_disk": ("MB, then OSError",
                                       f"wrote more than {HOSTILE_LIMITS['TRITONCOURSE_SANDBOX_DISK_MB']} MB to disk"),
             # the cgroup stops them at TOTAL_MEMORY_MB on the CPU; a GPU's default sandbox limit is above their 6 GB
             "hostile_memfd_hog": "" if ON_GPU else "3072 MB of memory (counting files in memory)",
             "hostile_tmpfs_hog": "" if ON_GPU else "3072 MB of memory (counting files in memory)",
             "hostile_kill_parent": "DeadKernelError",
             "hostile_kill_everything": "DeadKernelError",
             "hostile_symlinks": "symlinks: 0 read",
             # refused as it arrives (ResilientExecute.message_limit): the grader does not grow by the message
             "hostile_huge_output": "OutputTooLarge",
             # issue 42's: what each must be told (the other checks: tests below)
             "hostile_socket_links": "KernelConnectionLost",
             "hostile_prints_hidden_then_crashes": "on a hidden case of this test",
             "hostile_judge_memory": "Your kernels' process sent",
             "hostile_decoy_torch": "`torch` is a name the grader provides (the module torch); rename your variable"}


@pytest.mark.slow
@pytest.mark.parametrize("kind,fixture", _hostile_params())
def test_hostile_learner_loses_only_its_own_points(hostile, kind, fixture):
    """An empty kernel that tries to gain points gets 0; a right kernel keeps full marks whatever else its
    notebook does; the hostile cell really ran, inside the sandbox."""
    scores = hostile.scores(kind, fixture.name)
    outputs = hostile.outputs(kind, fixture.name)
    for t in KERNEL_TESTS:
        want = 0 if t in fixture.expect_fail else {"test_vector_add_ragged_sizes": 3, "test_vector_add_fp16": 1}.get(t, 2)
        assert scores[t] == want, (t, scores, outputs[-3000:])
    if not (ON_GPU and fixture.name == "hostile_memory_hog"):  # on a GPU the watchdog kills it before it can print
        assert "HOSTILE-RAN " + fixture.name.removeprefix("hostile_") in outputs, outputs[-3000:]
    assert "UNSANDBOXED" not in outputs and "CONNECTED" not in outputs
    # ../ paths reach only the sandbox's own /tmp (the grader's /tmp is checked in test_nothing_is_left_running...)
    assert not re.search(r"(gradebook\.db|\.ipynb): written", outputs), outputs[-3000:]
    contained = CONTAINED.get(fixture.name, "")
    assert any(c.search(outputs) if isinstance(c, re.Pattern) else c in outputs
               for c in ((contained,) if isinstance(contained, str) else contained)), outputs[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind,fixture", _hostile_params())
def test_hostile_learner_sees_no_secret(hostile, kind, fixture):
    """No hidden test, no other learner's note, no key of the grader's, no gradebook in anything handed back:
    the autograded notebook's outputs, the other files of its folder, the feedback HTML and folder."""
    course = hostile.courses[kind].path
    assert not hostile.leaks(hostile.outputs(kind, fixture.name, tests=False))
    for folder in (course / "autograded" / fixture.name, course / "feedback" / fixture.name):
        assert folder.is_dir(), folder
        for path in sorted(folder.rglob("*")):
            assert not path.is_symlink(), f"a symlink was handed back: {path} -> {os.readlink(path)}"
            # the verdicts log (instructor's only, never in feedback) may quote a failed test's own line
            if path.is_file() and not path.name.endswith((".ipynb", ".verdicts.json")):
                data = path.read_bytes()
                from tritoncourse.classroom.feedback import html_text

                text = html_text(path) if path.suffix == ".html" else data.decode("utf-8", "replace")
                assert not hostile.leaks(text), f"{path.relative_to(course)}: {hostile.leaks(text)[:3]}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
def test_learners_before_and_after_keep_full_marks(hostile, kind):
    for student in ("aaa_before", "zzz_after"):
        scores = hostile.scores(kind, student)
        assert all(scores[t] > 0 for t in KERNEL_TESTS), (student, scores)
        assert sum(scores.values()) == 10, (student, scores)
        assert hostile.marker not in hostile.outputs(kind, student)


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
def test_gradebook_holds_no_forged_value(hostile, kind):
    db = hostile.courses[kind].path / "gradebook.db"
    with sqlite3.connect(db) as con:
        dump = "\n".join(con.iterdump())
        forged = con.execute("SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL "
                             "OR extra_credit IS NOT NULL").fetchone()[0]
    assert hostile.marker not in dump
    assert forged == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
def test_course_tree_is_unchanged(hostile, kind):
    """Every file of the course (source/, release/, submitted/, the configuration, the package) is as it was."""
    before, after = hostile.digests[kind], digest(hostile.courses[kind].path)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, changed


@pytest.mark.slow
def test_nothing_is_left_running_or_written_outside(hostile):
    """No process a learner started outlives grading; nothing was written to the grader's /tmp, the package,
    the Python environment; no connection reached the grader's loopback port."""
    import sysconfig

    assert not hostile.left_running, hostile.left_running
    leftovers = [str(p) for p in Path("/tmp").glob(f"*{hostile.marker}*")]
    leftovers += [str(p) for p in Path(sysconfig.get_paths()["purelib"]).glob("sitecustomize.py")]
    leftovers += [str(p) for p in (ROOT / "tritoncourse").rglob("sitecustomize.py")]
    assert not leftovers, leftovers
    assert not hostile.listener.received, hostile.listener.received


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRADERS)
def test_grading_ends_in_time_and_logs_show_no_secret(hostile, kind):
    proc = hostile.procs[kind]
    students = ["aaa_before", "zzz_after"] + [fx.name for fx in hostile.fixtures if kind in graders_of(fx.name)]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"{kind}: {len(students)} notebooks in {hostile.seconds[kind]:.0f} s "
          f"(both graders at once: {hostile.wall:.0f} s wall)")
    assert hostile.seconds[kind] < GRADING_TIMEOUT
    if kind == "course_grade":
        state = json.loads((hostile.courses[kind].path / "autograded" / ".classroom" / "state.json").read_text())
        for s in students:
            entry = state["entries"][f"{A}/{s}"]
            assert entry["status"] == "graded" and entry["attempts"] == 1, (s, entry)
            assert entry["seconds"] < 300, (s, entry)
    logs = hostile.logs(kind)
    assert not hostile.leaks(logs)
    # hostile_forge_gradebook's exit handler: nothing of a learner's runs after its notebook's last cell (its kernel is
    # killed then, ResilientExecute.shutdown_kernel; asked to shut down, its Python ran the handler, and its output
    # reached this log, 2026-11-29)
    assert "HOSTILE-ATEXIT" not in logs, logs[max(0, logs.find("HOSTILE-ATEXIT") - 2000):][:3000]
    fb = hostile.feedback[kind]
    assert fb.returncode == 0, fb.stdout[-3000:] + fb.stderr[-3000:]


# ------------------------------------------------------------------------------ issue 42: the grader's own plumbing

@pytest.mark.slow
@pytest.mark.parametrize("kind", graders_of("hostile_socket_links"))
def test_the_grader_never_connects_where_a_notebooks_kernel_points_it(hostile, kind):
    """hostile_socket_links: its kernel's five socket files linked to a Unix socket this test listens on outside the
    sandbox, a stop of 2 s (the heartbeat), two dropped channels: the grader never connected there (before, with the
    package of 7dbe71d: 131 connections under plain nbgrader, 133 under course grade; under plain nbgrader only since
    2026-11-29: ONE_GRADER), the kernel was not given up while stopped, and the notebook was stopped at the cell that
    lost a channel, its kernel tests graded outside (full marks: the generic test)."""
    name = "hostile_socket_links"
    if ONLY_HOSTILE and name not in ONLY_HOSTILE:
        pytest.skip("not in TRITONCOURSE_HOSTILE_FIXTURES")
    assert hostile.unix[kind].connections == 0, f"the grader connected {hostile.unix[kind].connections} times"
    outputs = hostile.outputs(kind, name, tests=False)
    assert "resumed" in outputs and "KernelConnectionLost" in outputs, outputs[-3000:]
    assert "NOT-STOPPED" not in outputs, "the notebook went on after a channel was lost"


def _feedback_text(course: Path, student: str) -> str:
    from tritoncourse.classroom.feedback import html_text

    pages = sorted((course / "feedback" / student).rglob("*.html"))
    assert pages, f"no feedback for {student}"
    return "\n".join(html_text(p) for p in pages)


@pytest.mark.slow
def test_a_crash_on_a_hidden_case_is_told_without_its_inputs(hostile):
    """hostile_prints_hidden_then_crashes (course grade): its feedback says it crashed on a hidden case and names
    the seed, and quotes neither what its kernel printed nor the case's size (before: '... (n_elements=9973,
    BLOCK_SIZE=128, float32, seed ...) ... Last output: SEENSIZE [1000] ... SEENSIZE [9973]'). nbgrader's gradebook
    holds no outputs (before and after alike: nothing to check there)."""
    name = "hostile_prints_hidden_then_crashes"
    if ONLY_HOSTILE and name not in ONLY_HOSTILE:
        pytest.skip("not in TRITONCOURSE_HOSTILE_FIXTURES")
    course = hostile.courses["course_grade"].path
    text = _feedback_text(course, name)
    assert "on a hidden case of this test" in text and "seed" in text, text[-3000:]
    # (its own "Try it" cell prints SEENSIZE with a size of its choosing: its output, shown as it should be)
    for leak in ("9973", "Last output"):
        assert leak not in text, (leak, text[-3000:])


@pytest.mark.slow
def test_a_huge_value_for_the_judge_fails_its_tests_in_bounded_time(hostile):
    """hostile_judge_memory (course grade): a lint-clean value of a million floats that its kernel names fails every
    test with the judge's bound (the generic test; before, each judge decoded and held it, ~460 MB, and every test
    passed), and the refusal costs no wait: each of its kernel tests ends within a quarter of the test's time limit
    (DEFAULT_TIMEOUT, 120 s), as its grader's log reports it. A judge that refused but kept the channel open would
    leave the runner blocked sending the rest until the limit killed both. (Until 2026-11-29 the bound was twice a
    correct learner's whole grading plus 10 s: 47.4 s against 16.9 on CI under load, a failure with nothing wrong;
    the learner's extra seconds are its runner encoding 15 MB of JSON per test, under load.)"""
    name = "hostile_judge_memory"
    if ONLY_HOSTILE and name not in ONLY_HOSTILE:
        pytest.skip("not in TRITONCOURSE_HOSTILE_FIXTURES")
    course = hostile.courses["course_grade"].path
    state = json.loads((course / "autograded" / ".classroom" / "state.json").read_text())
    log = (course / state["entries"][f"{A}/{name}"]["log"]).read_text()
    seconds = {t: float(s) for t, s in re.findall(r"\] (\w+): \w+ \(([\d.]+) s, seed", log)}
    print(f"seconds of each test: {seconds}")
    assert sorted(seconds) == sorted(KERNEL_TESTS), log[-3000:]
    assert max(seconds.values()) < DEFAULT_TIMEOUT / 4, seconds


# ------------------------------------------------------------------------------------------ no sandbox, no grading

@pytest.mark.slow
def test_grading_refuses_to_run_unsandboxed(template, tmp_path):
    """With bwrap hidden from PATH: plain autograde fails the notebook naming the install command, course
    grade exits 2 with it; with the opt-out, course grade grades (unsandboxed). Its flag sets the opt-out variable
    (OPT_OUT_ENV) for the private `nbgrader autograde` it runs for each learner, the very command and variable an
    instructor runs plain nbgrader with: that one grading proves both (2026-11-29; plain nbgrader was given the
    variable in a course copy of its own before, a second unsandboxed grading of the reference)."""
    path = _path_without("bwrap", tmp_path)
    courses = {k: _copy(template, tmp_path / k) for k in ("plain", "classroom", "classroom_opt_out")}
    for c in courses.values():
        c.submit("reference", A, c.source_notebook(A))

    def run(kind):
        c = courses[kind]
        env = dict(_env(c.path), PATH=path)
        if kind == "plain":
            cmd = [sys.executable, "-m", "nbgrader", "autograde", A, "--force"]
        else:
            cmd = [sys.executable, "-m", "tritoncourse", "grade", A, "--course", str(c.path), "--jobs", "1"]
            if kind == "classroom_opt_out":
                cmd.append("--unsandboxed-learners-can-forge-grades")
        return subprocess.run(cmd, cwd=c.path, env=env, capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(2) as pool:
        procs = dict(zip(courses, pool.map(run, courses)))
    plain = procs["plain"]
    assert plain.returncode != 0 and INSTALL_COMMAND in plain.stdout + plain.stderr, plain.stderr[-3000:]
    assert not (courses["plain"].path / "autograded" / "reference" / A / f"{A}.ipynb").exists()
    classroom = procs["classroom"]
    assert classroom.returncode == 2 and INSTALL_COMMAND in classroom.stdout, classroom.stdout + classroom.stderr
    assert not (courses["classroom"].path / "autograded" / "reference").exists()
    p = procs["classroom_opt_out"]
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    assert "UNSANDBOXED" in p.stdout + p.stderr
    assert sum(courses["classroom_opt_out"].scores(A, "reference").values()) == 10
    # the private grading's own log: plain nbgrader, warned by the variable's check itself (grading/sandbox)
    logs = "".join(log.read_text(errors="replace") for log in
                   (courses["classroom_opt_out"].path / "autograded" / ".classroom" / "logs").rglob("*.log"))
    assert f"{OPT_OUT_ENV} is set" in logs, logs[-3000:]

"""Running one test cell in a fresh Python process, against the learner's kernels only.

Used the same way by the ``%%kernel_test`` cells in a learner's notebook, by ``tritoncourse check``
and by the nbgrader preprocessor: the verdict never depends on the state of the learner's kernel
(monkeypatched torch, input transformers, dead kernels), a kernel that never ends is killed at a
time limit, and a kernel that crashes its process (segfault, illegal address) costs only this test.

This module runs a test (:func:`run_test`, :func:`run_cell`); the cell's text is kernel_test_cell.py's, the verdict
verdict.py's, the processes zygote_client.py's (their names re-exported here).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess  # noqa: F401  (isolated.subprocess: the tests watch the processes started through it)
import sys
import tempfile
import time
from pathlib import Path

from ...seeds import fresh_seed
from ..lint.kernel_test_cell import DEFAULT_TIMEOUT, MAGIC, hidden_only, is_kernel_test, parse_cell, test_title
from ..lint.source import Assembly, assemble, parse
from ..judge.cgroup import JudgeCgroup
from ..judge.verdict import (GRADER_ERROR, OUT_OF_BOUNDS_HINT, UNMASKED_LOAD_HINT, Outcome, _outcome,
                             _silent_sanitizer_crash, grader_error_outcome)
from .zygote_client import ZYGOTE, _Child, _warm_zygote

# The names the grader, the learner's magic, the tools and the tests import from here.
__all__ = ["run_test", "run_cell", "runs_a_runner", "definition_kinds", "sanitizer_enabled", "Outcome", "GRADER_ERROR",
           "grader_error_outcome", "MAGIC", "DEFAULT_TIMEOUT", "KERNEL_HEADER", "PROVIDED", "RUNNER", "JUDGE",
           "ZYGOTE", "Assembly", "is_kernel_test", "parse_cell", "hidden_only", "test_title", "UNMASKED_LOAD_HINT",
           "OUT_OF_BOUNDS_HINT"]

RUNNER = Path(__file__).parent.parent / "runner" / "runner.py"
JUDGE = Path(__file__).parent.parent / "judge" / "judge.py"
# The modules a learner's definitions may use (see source.py's lint): imported for them.
KERNEL_HEADER = "import math\nimport statistics\n\nimport torch\nimport triton\nimport triton.language as tl\n\n"
# Names the runner defines for every test; never taken from the learner's notebook.
PROVIDED = {"torch", "triton", "tl", "math", "DEVICE"}
# A test whose checks use dynamo (its text names one of these): torch.compile, and torch.optim, whose first step
# imports torch._dynamo (1.3 s of CPU); and every test of phase 7, whose checks compute their references by autograd
# with a given gradient (torch.autograd imports torch.fx.experimental.symbolic_shapes, and sympy with it, for that:
# 0.24 s a judge, which the warm-up imports too), so that its first test, not the compiled block, warms the zygote.
# Its judge is forked from a zygote that has warmed dynamo once (zygote.WARMERS), not paying for it itself.
USES_DYNAMO = ("torch.compile", "torch.optim", "check_compiled_attention", "check_training_step",
               "tritoncourse.checks.attention_backward")


def judge_warm_ups(body: str) -> tuple[str, ...]:
    """What the judge's zygote should warm before it forks the judge of ``body`` (the test's text, the grader's)."""
    return ("dynamo",) if any(word in body for word in USES_DYNAMO) else ()


def sanitizer_enabled(env=os.environ) -> bool:
    """On a GPU, tests run under compute-sanitizer (memcheck) when it is installed, unless
    TRITONCOURSE_SANITIZER=0: it is the GPU's fence, the only way to see an unmasked load whose
    values are never stored."""
    setting = env.get("TRITONCOURSE_SANITIZER", "auto")
    return setting != "0" and shutil.which("compute-sanitizer") is not None



def definition_kinds(source: str) -> dict[str, str]:
    """What each assembled definition is, read from its source (never from the runner, which could lie): "jit",
    "autotuner" (@triton.autotune over @triton.jit), "function" (a plain def) or "value" (a configuration)."""
    import ast

    kinds = {}
    for node in parse(source).body:
        if isinstance(node, ast.FunctionDef):
            names = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
            if not names:
                kinds[node.name] = "function"
            elif any(n.endswith("autotune") for n in names):
                kinds[node.name] = "autotuner"
            else:
                kinds[node.name] = "jit"
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            kinds[node.targets[0].id] = "value"
    return kinds


def _limit_counts(sandbox):
    """The sandbox's limit counters now, so that a test is told only of the limits reached while it ran."""
    try:
        return sandbox.limit_counts() if sandbox is not None else None
    except Exception:
        return None


def _limit_events(sandbox, since=None) -> list[str]:
    """What the sandbox stopped and why (a limit the learner's code reached), in the learner's words."""
    if sandbox is None:
        return []
    try:
        return list(sandbox.limit_events(since=since))
    except Exception:
        return list(getattr(sandbox, "killed", []))


def run_test(body: str, assembly: Assembly, *, timeout: float = DEFAULT_TIMEOUT,
             seed: int | None = None, device: str | None = None, sandbox=None, zygote=None) -> Outcome:
    """Run one test: the judge (the test's checks, no learner code) against a runner (the learner's kernels only).

    Both are fresh processes (forked from warm zygotes on the CPU). The judge runs outside any sandbox and
    writes the verdict in a folder of its own; the runner runs in ``sandbox`` (a :class:`sandbox.Sandbox`) in
    grading, forked by ``zygote`` (a :class:`_Zygote` inside that sandbox) on the CPU; the learner's own checks
    run both unsandboxed, on their machine."""
    from ...device import infer_device

    title = test_title(body)
    seed = fresh_seed() if seed is None else seed
    if hidden_only(body):
        return Outcome(True, "hidden", "", seed, 0.0, title)
    if assembly.problems:
        return Outcome(False, "invalid", "\n".join(assembly.problems), seed, 0.0, title)
    device = device or infer_device()
    with _workdir(sandbox) as tmp, tempfile.TemporaryDirectory(prefix="tritoncourse-judge-") as jtmp:
        rdir, jdir = Path(tmp), Path(jtmp)
        (rdir / "learner_kernels.py").write_text(KERNEL_HEADER + assembly.source)
        (rdir / "kernel_names.json").write_text(json.dumps(assembly.kernels))
        (jdir / "test_cell.py").write_text(body)
        (jdir / "kernel_kinds.json").write_text(json.dumps(definition_kinds(assembly.source)))
        renv = sandbox.environment() if sandbox is not None else dict(os.environ)
        renv.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        for name in ("TRITONCOURSE_SEED", "TRITONCOURSE_RESULT_FILE", "TRITONCOURSE_STAGE_FILE"):
            renv.pop(name, None)  # nothing of the test's reaches the runner
        jenv = dict(os.environ)
        jenv.update(TRITONCOURSE_SEED=str(seed), TRITONCOURSE_RESULT_FILE=str(jdir / "result.json"),
                    TRITONCOURSE_STAGE_FILE=str(jdir / "stage.txt"), TRITONCOURSE_RUNNER_DIR=str(rdir),
                    PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        for env in (renv, jenv):
            if device == "cpu":
                env["TRITON_INTERPRET"] = "1"
            else:
                env.pop("TRITON_INTERPRET", None)
        rcmd = [sys.executable, "-I", "-B", str(RUNNER), str(rdir)]
        use_sanitizer = device == "cuda" and sanitizer_enabled(renv)
        if use_sanitizer:
            renv.update(PYTORCH_NO_CUDA_MEMORY_CACHING="1")
            jenv.update(TRITONCOURSE_SANITIZER="1")
            rcmd = [shutil.which("compute-sanitizer"), "--tool", "memcheck", "--padding", "65536",
                    "--error-exitcode", "86"] + rcmd
        if sandbox is not None:
            rcmd = sandbox.argv(rcmd, cwd=rdir, env=renv)
        jcmd = [sys.executable, "-I", "-B", str(JUDGE), str(jdir)]
        if sandbox is None:
            zygote = _warm_zygote("runner") if device == "cpu" else None
        elif device != "cpu":
            zygote = None
        judge_zygote = _warm_zygote("judge") if device == "cpu" else None
        start = time.monotonic()
        counts = _limit_counts(sandbox)
        for attempt in (1, 2):
            # In grading, the judge's processes and memory in a cgroup of its own; none for a learner's own check
            # (their kernels run unsandboxed there: nothing to protect, and no cgroup to ask of their machine).
            group = JudgeCgroup(gpu=device != "cpu") if sandbox is not None else None
            try:
                runner_code, judge_code = _run_pair(jcmd, {**jenv, **(group.env() if group else {})}, jdir,
                                                    judge_zygote, rcmd, renv, rdir, zygote, sandbox, timeout,
                                                    warm=judge_warm_ups(body))
                breach = group.breach() if group else None
            finally:
                if group:
                    group.close()
            if breach or not (attempt == 1 and use_sanitizer and _silent_sanitizer_crash(runner_code, rdir, jdir)):
                break
            # Under compute-sanitizer a loaded GPU machine has killed the checking process of a correct kernel
            # with a signal and an empty report (seen on an H200, grading four phases at once). A kernel's own
            # invalid access gives a report and exit code 86, so a silent crash is retried once, same seed.
            for path in (jdir / "result.json", jdir / "stage.txt", jdir / "runner-exit", rdir / "out.txt"):
                path.unlink(missing_ok=True)
        seconds = time.monotonic() - start
        if breach:  # a bound of the judge's cgroup reached: the test fails, whatever the judge wrote
            what, sentence = breach
            if what == "processes":
                return grader_error_outcome("judging this test", sentence + ".", seed, title)
            return Outcome(False, "fail", sentence, seed, seconds, title)
        return _outcome(runner_code, judge_code, rdir, jdir, _limit_events(sandbox, counts), timeout, seed, seconds,
                        title)


def _run_pair(jcmd, jenv, jdir: Path, judge_zygote, rcmd, renv, rdir: Path, zygote, sandbox, timeout: float,
              warm: tuple[str, ...] = ()):
    """Start the judge (``warm``: what its zygote warms first), then the runner; wait for the judge (the runner is
    told when the runner ends first); then give the runner a moment to leave. Returns (runner's code, judge's code);
    the judge's is None when the time limit stopped it."""
    judge = _Child(jcmd, jdir, jenv, jdir / "judge-out.txt", "judge", judge_zygote, warm=warm)
    # The runner's output: a zygote's child (inside the sandbox) writes it in the shared folder, copied into the
    # grader's folder afterwards; a plain process writes through a descriptor the grader opened in its own folder.
    shared_out = sandbox.shared / f"{rdir.name}.out" if sandbox is not None and zygote is not None else None
    runner = _Child(rcmd, rdir, renv, rdir / "out.txt", "runner", zygote, sandbox, zygote_out=shared_out)
    deadline = time.monotonic() + timeout
    told = False
    try:
        while (judge_code := judge.poll()) is None and time.monotonic() < deadline:
            if not told and runner.poll() is not None:
                (jdir / "runner-exit").write_text(str(runner.poll()))
                told = True
            time.sleep(0.01)
        if judge_code is None:
            judge.kill()
            runner.kill()
            return runner.wait(10), None
        runner_code = runner.wait(60 if "compute-sanitizer" in " ".join(map(str, rcmd)) else 10)
        if runner_code is None:
            runner.kill()
            runner_code = runner.wait(10)
            runner_code = "killed-after" if runner_code is None or runner_code == -9 else runner_code
        return runner_code, judge_code
    finally:
        for child in (judge, runner):
            if child.poll() is None:
                child.kill()
            child.close()
        if runner.zygote is not None and shared_out is not None:
            _copy_output(shared_out, rdir / "out.txt")


def _copy_output(src: Path, dest: Path, limit: int = (1 << 20) + 1) -> None:
    """The runner's output, written by a sandboxed process in the shared folder, copied into the grader's folder:
    read without following a link (the shared folder's own path is the grader's), at most ``limit`` bytes of a
    regular file, then removed by name."""
    data = b""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        fd = None
    if fd is not None:
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                data = os.read(fd, limit)
        finally:
            os.close(fd)
    with os.fdopen(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600),
                   "wb") as f:
        f.write(data)
    with contextlib.suppress(OSError):
        os.unlink(src)  # unlink never follows the last component; the folder above is the grader's


@contextlib.contextmanager
def _workdir(sandbox):
    """A test's private folder: a temporary one, or the grader's own folder in the learner's sandbox (read-only
    inside, removed afterwards) and what the runner wrote in the shared folder."""
    if sandbox is None:
        with tempfile.TemporaryDirectory(prefix="tritoncourse-") as tmp:
            yield tmp
        return
    path = sandbox.grader_dir("test-")
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(sandbox.shared / f"{path.name}.out")



def run_cell(cell_source: str, kernels, plain, *, seed: int | None = None,
             timeout_factor: float = 1.0, sandbox=None, zygote=None) -> Outcome | None:
    """Run a ``%%kernel_test`` cell's test against ``kernels``; None if the cell is not a kernel test."""
    parsed = parse_cell(cell_source)
    if parsed is None:
        return None
    options, body = parsed
    assembly = assemble(body, kernels, plain, PROVIDED)
    return run_test(body, assembly, timeout=options["timeout"] * timeout_factor, seed=seed, sandbox=sandbox,
                    zygote=zygote)


def runs_a_runner(cell_source: str, kernels, plain) -> bool:
    """Whether :func:`run_cell` starts a runner for this cell: not for a cell that is no kernel test, one whose cases
    are all hidden (the learner's own check), nor one whose definitions the lint refuses (run_test's verdict comes
    before any process then). The same parse and lint as run_cell's, so the same answer."""
    parsed = parse_cell(cell_source)
    if parsed is None:
        return False
    body = parsed[1]
    return not hidden_only(body) and not assemble(body, kernels, plain, PROVIDED).problems

"""Running one test cell in a fresh Python process, against the learner's kernels only.

Used the same way by the ``%%kernel_test`` cells in a learner's notebook, by ``tritoncourse check``
and by the nbgrader preprocessor: the verdict never depends on the state of the learner's kernel
(monkeypatched torch, input transformers, dead kernels), a kernel that never ends is killed at a
time limit, and a kernel that crashes its process (segfault, illegal address) costs only this test.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..checking import fresh_seed
from .source import Assembly, assemble, parse

RUNNER = Path(__file__).with_name("runner.py")
JUDGE = Path(__file__).with_name("judge.py")
ZYGOTE = Path(__file__).with_name("zygote.py")
MAGIC = "%%kernel_test"
DEFAULT_TIMEOUT = 120.0
# The modules a learner's definitions may use (see source.py's lint): imported for them.
KERNEL_HEADER = "import math\nimport statistics\n\nimport torch\nimport triton\nimport triton.language as tl\n\n"
# Names the runner defines for every test; never taken from the learner's notebook.
PROVIDED = {"torch", "triton", "tl", "math", "DEVICE"}


@dataclass
class Outcome:
    ok: bool
    kind: str  # pass | fail | error | crash | timeout | invalid | hidden | grader-error
    message: str
    seed: int
    seconds: float
    title: str = ""

    def report(self) -> str:
        """The text a learner sees under the test cell."""
        head = f"{'PASSED' if self.ok else 'FAILED'}: {self.title}" if self.title else \
            ("PASSED" if self.ok else "FAILED")
        if self.kind == "hidden":
            return f"HIDDEN: {self.title}  [its cases are hidden tests: they run when the notebook is graded]"
        if self.ok:
            return f"{head}  [fresh process, {self.seconds:.1f} s, seed {self.seed}]"
        return (f"{head}\n{self.message}\n"
                f"[seed {self.seed}: rerun with TRITONCOURSE_SEED={self.seed} to reproduce]")


GRADER_ERROR = "grader-error"


def grader_error_outcome(what: str, detail: str, seed: int, title: str = "") -> Outcome:
    """The failed verdict of a test the grader could not judge because the grader itself failed."""
    return Outcome(False, GRADER_ERROR,
                   f"GRADER ERROR: the grader itself failed while {what}: {detail}\n"
                   "This is not a verdict on your kernel: your notebook was kept; ask your instructor to regrade it.",
                   seed, 0.0, title)


def _first_line(cell_source: str) -> str:
    """The first line that is not a comment (nbgrader puts a note before the magic of a restored cell)."""
    text = cell_source.lstrip()
    while text.startswith("#"):
        text = text.partition("\n")[2].lstrip()
    return text


def is_kernel_test(cell_source: str) -> bool:
    """Whether a cell is a ``%%kernel_test`` cell; never raises, even where parse_cell would."""
    words = _first_line(cell_source).partition("\n")[0].split()
    return bool(words) and words[0] == MAGIC


def parse_cell(cell_source: str) -> tuple[dict, str] | None:
    """Split a ``%%kernel_test [--timeout S]`` cell into (options, test body); None if it is not one."""
    first, _, body = _first_line(cell_source).partition("\n")
    parts = shlex.split(first)
    if not parts or parts[0] != MAGIC:
        return None
    options = {"timeout": DEFAULT_TIMEOUT}
    args = parts[1:]
    while args:
        flag = args.pop(0)
        if flag == "--timeout" and args:
            options["timeout"] = float(args.pop(0))
    return options, body


def hidden_only(body: str) -> bool:
    """True when the cell checks nothing visible: its cases are hidden tests, run only at grading."""
    import ast

    try:
        tree = parse(body)
    except SyntaxError:
        return False
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            continue
        return False
    return True


def test_title(body: str) -> str:
    """The first line of the test's docstring."""
    import ast

    try:
        doc = ast.get_docstring(parse(body))
    except SyntaxError:
        doc = None
    return (doc or "").strip().splitlines()[0] if doc else ""


_CRASH_HINTS = {
    signal.SIGSEGV: "a segmentation fault",
    signal.SIGBUS: "a bus error",
    signal.SIGABRT: "an abort",
    signal.SIGILL: "an illegal instruction",
    signal.SIGFPE: "a floating-point exception",
    signal.SIGKILL: "being killed (out of memory?)",
}


# The likely causes of a memory fault, shared by the CPU fence's crash message and compute-sanitizer's verdict.
UNMASKED_LOAD_HINT = ("Likely cause: an unmasked load: a tl.load reads past the end (or before the start) of an "
                      "input. Every lane must be masked (offsets < n_elements, say), even lanes whose values you "
                      "never store.")
OUT_OF_BOUNDS_HINT = ("Likely cause: a load or store outside a tensor: an unmasked load or store (a tl.load or "
                      "tl.store without a mask, or with a mask that lets lanes past the end through).")


def _crash_message(returncode: int, stage: str) -> str:
    try:
        sig = signal.Signals(-returncode)
        what = f"{_CRASH_HINTS.get(sig, 'a signal')} ({sig.name})"
    except ValueError:
        what = f"exit code {returncode}"
    msg = f"Your kernel crashed the checking process with {what}"
    if stage.startswith("FENCE-READ"):
        return f"{msg} while {stage[len('FENCE-READ: '):]}.\n{UNMASKED_LOAD_HINT}"
    msg += f" while {stage}." if stage else "."
    return f"{msg}\n{OUT_OF_BOUNDS_HINT} On the interpreter such an access reads or writes host memory."


class _Zygote:
    """Client of zygote.py: one warm process per grader, forking a fresh child for every test."""

    def __init__(self, sandbox=None):
        cmd = [sys.executable, "-I", "-B", str(ZYGOTE)]
        self.sandbox = sandbox
        if sandbox is not None:  # the zygote and every test it forks run inside the learner's sandbox
            cmd = sandbox.argv(cmd, extra_env={"TRITON_INTERPRET": "1"})
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        if sandbox is not None:
            sandbox.watch(self.proc.pid)
        self.lock = threading.Lock()
        self.next_id = 0
        self.replies: dict[str, dict] = {}
        self.changed = threading.Condition(self.lock)
        first = self.proc.stdout.readline()
        if not first or not json.loads(first).get("ready"):
            raise RuntimeError("the test zygote did not start")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                msg = json.loads(line)
                with self.changed:
                    self.replies.setdefault(msg["id"], {}).update(msg)
                    self.changed.notify_all()
        finally:  # the zygote is gone (or talks nonsense): wake everybody, who then run without it
            if self.proc.poll() is None:
                self.proc.kill()
            with self.changed:
                self.replies["dead"] = {}
                self.changed.notify_all()

    def alive(self) -> bool:
        return self.proc.poll() is None and "dead" not in self.replies

    def start(self, workdir: str, env: dict, out: str, entry: str = "runner") -> str:
        """Fork a child running ``entry`` in ``workdir``; its id for :meth:`poll` and :meth:`kill`."""
        with self.lock:
            if "dead" in self.replies:
                raise RuntimeError("the test zygote died")
            self.next_id += 1
            rid = str(self.next_id)
            self.proc.stdin.write((json.dumps({"id": rid, "workdir": workdir, "env": env, "out": out,
                                               "entry": entry}) + "\n").encode())
            self.proc.stdin.flush()
        return rid

    def poll(self, rid: str) -> int | str | None:
        """The child's exit code (negative: a signal), None while it runs, "lost" when the zygote died first."""
        with self.lock:
            reply = self.replies.get(rid, {})
            if "exit" in reply:
                return reply["exit"]
            return "lost" if "dead" in self.replies else None

    def kill(self, rid: str) -> None:
        """Kill the child and its session (in a sandbox only the zygote can: pids are its PID namespace's)."""
        with contextlib.suppress(OSError, ValueError), self.lock:
            self.proc.stdin.write((json.dumps({"kill": rid}) + "\n").encode())
            self.proc.stdin.flush()
        pid = self.replies.get(rid, {}).get("pid")
        if self.sandbox is None and pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=10)


_zygotes: dict[str, _Zygote] = {}
_zygote_lock = threading.Lock()


def _warm_zygote(entry: str = "runner") -> _Zygote | None:
    """This process's warm zygote for ``entry`` (started on first use, unsandboxed), or None where forking is not
    used. Grading gives the runner a zygote inside the learner's sandbox instead (IsolatedKernelTests)."""
    if os.environ.get("TRITONCOURSE_ZYGOTE", "1") == "0":
        return None
    with _zygote_lock:
        z = _zygotes.get(entry)
        if z is None or not z.alive():
            try:
                z = _zygotes[entry] = _Zygote()
            except (OSError, RuntimeError, ValueError):
                return None
        return z


def sanitizer_enabled(env=os.environ) -> bool:
    """On a GPU, tests run under compute-sanitizer (memcheck) when it is installed, unless
    TRITONCOURSE_SANITIZER=0: it is the GPU's fence, the only way to see an unmasked load whose
    values are never stored."""
    setting = env.get("TRITONCOURSE_SANITIZER", "auto")
    return setting != "0" and shutil.which("compute-sanitizer") is not None


class _Child:
    """A judge or a runner: a zygote's child or a plain process, polled and killed the same way."""

    def __init__(self, cmd, cwd, env, out: Path, entry: str, zygote: _Zygote | None, sandbox=None):
        self.zygote, self.rid, self.proc, self.sandbox = None, None, None, sandbox
        if zygote is not None:
            try:
                self.rid = zygote.start(str(cwd), env, str(out), entry)
                self.zygote = zygote
                return
            except (RuntimeError, OSError, ValueError):  # no zygote, or it died: a plain fresh process
                pass
        self._out = open(out, "wb")
        if sandbox is not None and sandbox.uid is not None:
            os.chown(out, sandbox.uid, sandbox.uid)
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env if sandbox is None else None, stdin=subprocess.DEVNULL,
                                     stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        if sandbox is not None:
            sandbox.watch(self.proc.pid)

    def poll(self):
        """Exit code (negative: a signal), None while running, "lost" when its zygote died under it."""
        if self.zygote is not None:
            return self.zygote.poll(self.rid)
        return self.proc.poll()

    def kill(self) -> None:
        if self.zygote is not None:
            self.zygote.kill(self.rid)
        elif self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self, seconds: float):
        deadline = time.monotonic() + seconds
        while (code := self.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return code

    def close(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=10)
            self._out.close()


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
    from ..device import infer_device

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
            runner_code, judge_code = _run_pair(jcmd, jenv, jdir, judge_zygote, rcmd, renv, rdir, zygote, sandbox,
                                                timeout)
            if not (attempt == 1 and use_sanitizer and _silent_sanitizer_crash(runner_code, rdir, jdir)):
                break
            # Under compute-sanitizer a loaded GPU machine has killed the checking process of a correct kernel
            # with a signal and an empty report (seen on an H200, grading four phases at once). A kernel's own
            # invalid access gives a report and exit code 86, so a silent crash is retried once, same seed.
            for path in (jdir / "result.json", jdir / "stage.txt", jdir / "runner-exit", rdir / "out.txt"):
                path.unlink(missing_ok=True)
        seconds = time.monotonic() - start
        return _outcome(runner_code, judge_code, rdir, jdir, _limit_events(sandbox, counts), timeout, seed, seconds,
                        title)


def _run_pair(jcmd, jenv, jdir: Path, judge_zygote, rcmd, renv, rdir: Path, zygote, sandbox, timeout: float):
    """Start the judge, then the runner; wait for the judge (the runner is told when the runner ends first);
    then give the runner a moment to leave. Returns (runner's code, judge's code); the judge's is None when the
    time limit stopped it."""
    judge = _Child(jcmd, jdir, jenv, jdir / "judge-out.txt", "judge", judge_zygote)
    runner = _Child(rcmd, rdir, renv, rdir / "out.txt", "runner", zygote, sandbox)
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


def _outcome(runner_code, judge_code, rdir: Path, jdir: Path, limits: list[str], timeout: float,
             seed: int, seconds: float, title: str) -> Outcome:
    """The verdict: the judge's, with the runner's crash, time-out, sanitizer report or exhausted ``limits``."""
    stage = _read(jdir / "stage.txt")
    if judge_code is None:
        return Outcome(False, "timeout",
                       f"The test did not finish within {timeout:.0f} s and was stopped"
                       f"{' while ' + stage if stage else ''}.\n"
                       + (f"The grading sandbox stopped your code: {'; '.join(limits)}." if limits else
                          "Likely cause: a loop in your kernel never ends (check its bounds and step)."),
                       seed, seconds, title)
    result = _read(jdir / "result.json")
    output = _read(rdir / "out.txt")
    try:
        verdict = json.loads(result) if result else None
    except ValueError:
        verdict = None
    if runner_code == 86:
        return Outcome(False, "fail", _sanitizer_message(output, result, stage), seed, seconds, title)
    if verdict is None:  # the judge is ours: no verdict from it is the grader's failure
        return grader_error_outcome("judging this test",
                                    f"the judging process exited with code {judge_code} without a verdict."
                                    + ("\nLast output:\n" + _tail(_read(jdir / "judge-out.txt"), 1500)
                                       if _read(jdir / "judge-out.txt").strip() else ""), seed, title)
    if verdict.get("kind") == "runner-lost":
        if limits and (runner_code in (-9, "lost", "killed-after") or runner_code is None):
            message = (f"The grading sandbox stopped your code while {stage or 'the test ran'}: "
                       f"{'; '.join(limits)}.\nLikely cause: your code used more than the limits allow "
                       "(see the message); a correct kernel stays far below them.")
        elif isinstance(runner_code, int) and runner_code < 0:
            message = _crash_message(runner_code, stage)
        else:
            code = runner_code if isinstance(runner_code, int) else "unknown"
            message = (f"Your kernels' process ended (exit code {code}) before the test was done, while "
                       f"{stage or 'the test ran'}.\n{OUT_OF_BOUNDS_HINT}")
        if output.strip():
            message += "\nLast output:\n" + _tail(output, 1500)
        return Outcome(False, "crash", message, seed, seconds, title)
    return Outcome(bool(verdict.get("ok")) and judge_code == 0, str(verdict.get("kind", "fail")),
                   str(verdict.get("message", "")), seed, seconds, title)


def _sanitizer_message(output: str, result: str, stage: str) -> str:
    """compute-sanitizer's verdict in the words of the CPU's fence: what was read or written out of bounds, the
    first report (not its host backtrace), and, when the check itself also failed, the check's own diagnosis."""
    lines = [line.removeprefix("=========").rstrip() for line in output.splitlines() if line.startswith("=========")]
    first, errors = [], [line for line in lines if line.strip().startswith("Invalid ")]
    for line in lines:
        if first and ("Saved host backtrace" in line or line.strip().startswith("Invalid ")):
            break
        if first or line.strip().startswith("Invalid "):
            first.append(line)
    summary = next((line.strip() for line in lines if "ERROR SUMMARY" in line), "")
    report = "\n".join(first[:6]) if first else _tail(output, 1500)
    if len(errors) > 1:
        report += f"\n  ... and {len(errors) - 1} more like it ({summary or 'see the full log'})"
    reads = any("read" in line for line in errors)
    writes = any("write" in line for line in errors)
    if reads and not writes:
        cause = UNMASKED_LOAD_HINT
    elif writes and not reads:
        cause = ("Likely cause: an unmasked store: a tl.store writes past the end (or before the start) of the "
                 "output. Mask every store with the same bounds as its load.")
    else:
        cause = OUT_OF_BOUNDS_HINT
    where = stage.removeprefix("FENCE-READ: ")
    text = (f"compute-sanitizer found invalid memory accesses{' while ' + where if where else ''}:\n{report}\n"
            f"{cause}")
    try:
        verdict = json.loads(result) if result else None
    except ValueError:
        verdict = None
    if verdict and not verdict.get("ok") and verdict.get("message"):
        text = f"{verdict['message']}\n{text}"
    return text


def _silent_sanitizer_crash(returncode, rdir: Path, jdir: Path) -> bool:
    """A runner under compute-sanitizer that ended by a signal before the judge was done while the sanitizer
    reported no error: nothing points at the kernel."""
    if not isinstance(returncode, int) or returncode >= 0 or '"runner-lost"' not in _read(jdir / "result.json"):
        return False
    report = [line for line in _read(rdir / "out.txt").splitlines() if line.startswith("=========")]
    return not any(("invalid" in line.lower() or "error" in line.lower()) and " 0 errors" not in line
                   for line in report)


@contextlib.contextmanager
def _workdir(sandbox):
    """A test's private folder: a temporary one, or one inside the learner's sandbox (removed afterwards)."""
    if sandbox is None:
        with tempfile.TemporaryDirectory(prefix="tritoncourse-") as tmp:
            yield tmp
        return
    path = sandbox.private_dir("test-")
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _read(path: Path) -> str:
    """A file the checking process wrote: never through a symlink, at most 1 MB (it may be the learner's)."""
    from .sandbox import read_bounded

    return read_bounded(path)


def _tail(text: str, n: int) -> str:
    return text if len(text) <= n else "..." + text[-n:]


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

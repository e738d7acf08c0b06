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
        cmd = [sys.executable, "-I", str(ZYGOTE)]
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

    def run(self, workdir: str, env: dict, out: str, timeout: float) -> int | None:
        """The child's exit code (negative for a signal), or None when it was killed at ``timeout``."""
        with self.lock:
            self.next_id += 1
            rid = str(self.next_id)
            self.proc.stdin.write((json.dumps({"id": rid, "workdir": workdir, "env": env, "out": out}) + "\n")
                                  .encode())
            self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        with self.changed:
            while "exit" not in self.replies.get(rid, {}):
                left = deadline - time.monotonic()
                if left <= 0 or "dead" in self.replies:
                    break
                self.changed.wait(min(left, 1.0))
            reply = self.replies.get(rid, {})
        if "exit" in reply:
            return reply["exit"]
        if "pid" in reply:  # the zygote kills it: in a sandbox the pid is the sandbox's own PID namespace's
            with contextlib.suppress(OSError, ValueError), self.lock:
                self.proc.stdin.write((json.dumps({"kill": rid}) + "\n").encode())
                self.proc.stdin.flush()
            if self.sandbox is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(reply["pid"], signal.SIGKILL)
        if "dead" in self.replies:
            raise RuntimeError("the test zygote died")
        return None

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=10)


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def _warm_zygote() -> _Zygote | None:
    """The process's zygote (started on first use), or None where forking is not used."""
    global _zygote
    if os.environ.get("TRITONCOURSE_ZYGOTE", "1") == "0":
        return None
    with _zygote_lock:
        if _zygote is None or not _zygote.alive():
            try:
                _zygote = _Zygote()
            except (OSError, RuntimeError, ValueError):
                return None
        return _zygote


def sanitizer_enabled(env=os.environ) -> bool:
    """On a GPU, tests run under compute-sanitizer (memcheck) when it is installed, unless
    TRITONCOURSE_SANITIZER=0: it is the GPU's fence, the only way to see an unmasked load whose
    values are never stored."""
    setting = env.get("TRITONCOURSE_SANITIZER", "auto")
    return setting != "0" and shutil.which("compute-sanitizer") is not None


def run_test(body: str, assembly: Assembly, *, timeout: float = DEFAULT_TIMEOUT,
             seed: int | None = None, device: str | None = None, sandbox=None, zygote=None) -> Outcome:
    """Run one test body against the assembled kernels in a fresh process and return the verdict.

    In grading, ``sandbox`` (a :class:`sandbox.Sandbox`) holds the process, and ``zygote`` (a :class:`_Zygote`
    inside that sandbox, on the CPU) forks it; the learner's own checks run unsandboxed, on their machine."""
    from ..device import infer_device

    title = test_title(body)
    seed = fresh_seed() if seed is None else seed
    if hidden_only(body):
        return Outcome(True, "hidden", "", seed, 0.0, title)
    if assembly.problems:
        return Outcome(False, "invalid", "\n".join(assembly.problems), seed, 0.0, title)
    device = device or infer_device()
    with _workdir(sandbox) as tmp:
        tmpd = Path(tmp)
        (tmpd / "learner_kernels.py").write_text(KERNEL_HEADER + assembly.source)
        (tmpd / "test_cell.py").write_text(body)
        (tmpd / "kernel_names.json").write_text(json.dumps(assembly.kernels))
        env = sandbox.environment() if sandbox is not None else dict(os.environ)
        env.update(TRITONCOURSE_SEED=str(seed), TRITONCOURSE_RESULT_FILE=str(tmpd / "result.json"),
                   TRITONCOURSE_STAGE_FILE=str(tmpd / "stage.txt"), PYTHONUNBUFFERED="1",
                   PYTHONDONTWRITEBYTECODE="1")
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        cmd = [sys.executable, "-I", str(RUNNER), str(tmpd)]
        use_sanitizer = device == "cuda" and sanitizer_enabled(env)
        if use_sanitizer:
            env.update(PYTORCH_NO_CUDA_MEMORY_CACHING="1", TRITONCOURSE_SANITIZER="1")
            cmd = [shutil.which("compute-sanitizer"), "--tool", "memcheck", "--padding", "65536",
                   "--error-exitcode", "86"] + cmd
        if sandbox is not None:
            cmd = sandbox.argv(cmd, cwd=tmpd, env=env)
        start = time.monotonic()
        if sandbox is None:
            zygote = _warm_zygote() if device == "cpu" else None
        elif device != "cpu":
            zygote = None
        returncode = None
        for attempt in (1, 2):
            try:
                if zygote is None:
                    raise RuntimeError("no zygote")
                returncode = zygote.run(str(tmpd), env, str(tmpd / "out.txt"), timeout)
            except (RuntimeError, OSError):  # no zygote, or it died (a broken pipe): a plain fresh process
                returncode = _run_subprocess(cmd, tmp, env, tmpd / "out.txt", timeout, sandbox)
            if not (attempt == 1 and use_sanitizer and _silent_sanitizer_crash(returncode, tmpd)):
                break
            # Under compute-sanitizer a loaded GPU machine has killed the checking process of a correct kernel
            # with a signal and an empty report (seen on an H200, grading four phases at once). A kernel's own
            # invalid access gives a report and exit code 86, so a silent crash is retried once, same seed.
            for name in ("result.json", "stage.txt", "out.txt"):
                (tmpd / name).unlink(missing_ok=True)
        if returncode is None:
            seconds = time.monotonic() - start
            stage = _read(tmpd / "stage.txt")
            return Outcome(False, "timeout",
                           f"The test did not finish within {timeout:.0f} s and was stopped"
                           f"{' while ' + stage if stage else ''}.\n"
                           "Likely cause: a loop in your kernel never ends (check its bounds and step).",
                           seed, seconds, title)
        seconds = time.monotonic() - start
        result = _read(tmpd / "result.json")
        output = _read(tmpd / "out.txt")
        if returncode == 86:
            return Outcome(False, "fail", _sanitizer_message(output, result, _read(tmpd / "stage.txt")),
                           seed, seconds, title)
        if returncode > 0 and not result and not use_sanitizer:
            # The runner reports every exception of the learner's kernel or the test; a signal is a crash. An
            # exit code without a verdict is the runner itself failing (a bug of ours, a broken install).
            return grader_error_outcome("starting the checking process",
                                        f"it exited with code {returncode} without a verdict."
                                        + ("\nLast output:\n" + _tail(output, 1500) if output.strip() else ""),
                                        seed, title)
        if returncode < 0 or not result:
            return Outcome(False, "crash", _crash_message(returncode, _read(tmpd / "stage.txt"))
                           + ("\nLast output:\n" + _tail(output, 1500) if output.strip() else ""),
                           seed, seconds, title)
        verdict = json.loads(result)
        return Outcome(bool(verdict["ok"]) and returncode == 0, verdict["kind"], verdict["message"],
                       seed, seconds, title)


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


def _silent_sanitizer_crash(returncode: int | None, tmpd: Path) -> bool:
    """A checking process under compute-sanitizer that ended without a verdict (by a signal, say) while the
    sanitizer reported no error: nothing points at the kernel."""
    if returncode is None or returncode in (0, 86) or _read(tmpd / "result.json"):
        return False
    report = [line for line in _read(tmpd / "out.txt").splitlines() if line.startswith("=========")]
    return not any(("invalid" in line.lower() or "error" in line.lower()) and " 0 errors" not in line
                   for line in report)


def _run_subprocess(cmd, cwd, env, out_path: Path, timeout: float, sandbox=None) -> int | None:
    """Run ``cmd`` in a session of its own; its exit code, or None when killed at ``timeout``."""
    with open(out_path, "wb") as out:
        if sandbox is not None and sandbox.uid is not None:
            os.chown(out_path, sandbox.uid, sandbox.uid)
        proc = subprocess.Popen(cmd, cwd=cwd, env=env if sandbox is None else None, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        if sandbox is not None:
            sandbox.watch(proc.pid)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None


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

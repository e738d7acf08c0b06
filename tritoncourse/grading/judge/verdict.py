"""A kernel test's verdict (:class:`Outcome`), and how it is read from what the judge and the runner left: the
judge's result file, the runner's exit code and output, compute-sanitizer's report, the sandbox's limits reached
(:func:`_outcome`), in the learner's words, with the likely cause.
"""
from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

from .hidden_cases import read_stage

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
HIDDEN_CASE = "a hidden case of this test (its inputs are not shown; every visible case before it passed)"
RUNNER_SENT = "Your kernels' process sent "  # judge.py's words for a LimitExceeded or a ProtocolError
HIDDEN_OUTPUT = ("Your kernels' output is not shown: a hidden case had begun, and it could quote that case's inputs. "
                 "Rerun the visible cases, and think of other sizes and inputs.")


def grader_error_outcome(what: str, detail: str, seed: int, title: str = "") -> Outcome:
    """The failed verdict of a test the grader could not judge because the grader itself failed."""
    return Outcome(False, GRADER_ERROR,
                   f"GRADER ERROR: the grader itself failed while {what}: {detail}\n"
                   "This is not a verdict on your kernel: your notebook was kept; ask your instructor to regrade it.",
                   seed, 0.0, title)


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


def _crash_message(returncode: int, stage: str, hidden: str = "") -> str:
    try:
        sig = signal.Signals(-returncode)
        what = f"{_CRASH_HINTS.get(sig, 'a signal')} ({sig.name})"
    except ValueError:
        what = f"exit code {returncode}"
    msg = f"Your kernel crashed the checking process with {what}"
    if hidden == "now":  # what it ran on is the hidden case's: said in words only
        cause = UNMASKED_LOAD_HINT if stage.startswith("FENCE-READ") else OUT_OF_BOUNDS_HINT
        return f"{msg} on {HIDDEN_CASE}.\n{cause}"
    if stage.startswith("FENCE-READ"):
        return f"{msg} while {stage[len('FENCE-READ: '):]}.\n{UNMASKED_LOAD_HINT}"
    msg += f" while {stage}." if stage else "."
    return f"{msg}\n{OUT_OF_BOUNDS_HINT} On the interpreter such an access reads or writes host memory."


def _outcome(runner_code, judge_code, rdir: Path, jdir: Path, limits: list[str], timeout: float,
             seed: int, seconds: float, title: str) -> Outcome:
    """The verdict: the judge's, with the runner's crash, time-out, sanitizer report or exhausted ``limits``.
    Nothing of the runner's output, and nothing of what a hidden case ran on, is quoted once a hidden case began
    (hidden_cases.py): that is said in words."""
    stage, hidden = read_stage(_read(jdir / "stage.txt"))
    during = f" on {HIDDEN_CASE}" if hidden == "now" else (f" while {stage}" if stage else "")
    if judge_code is None:
        return Outcome(False, "timeout",
                       f"The test did not finish within {timeout:.0f} s and was stopped{during}.\n"
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
        return Outcome(False, "fail", _sanitizer_message(output, result, stage, hidden), seed, seconds, title)
    if verdict is None:  # the judge is ours: no verdict from it is the grader's failure
        return grader_error_outcome("judging this test",
                                    f"the judging process exited with code {judge_code} without a verdict."
                                    + ("\nLast output:\n" + _tail(_read(jdir / "judge-out.txt"), 1500)
                                       if _read(jdir / "judge-out.txt").strip() else ""), seed, title)
    if verdict.get("kind") == "runner-lost":
        if limits and (runner_code in (-9, "lost", "killed-after") or runner_code is None):
            message = (f"The grading sandbox stopped your code{during or ' while the test ran'}: "
                       f"{'; '.join(limits)}.\nLikely cause: your code used more than the limits allow "
                       "(see the message); a correct kernel stays far below them.")
        elif isinstance(runner_code, int) and runner_code < 0:
            message = _crash_message(runner_code, stage, hidden)
        else:  # an exit code is the learner's to choose: not shown on a hidden case
            code = runner_code if isinstance(runner_code, int) and hidden != "now" else "unknown"
            message = (f"Your kernels' process ended (exit code {code}) before the test was done"
                       f"{during or ' while the test ran'}.\n{OUT_OF_BOUNDS_HINT}")
        if hidden:
            message += f"\n{HIDDEN_OUTPUT}"
        elif output.strip():
            message += "\nLast output:\n" + _tail(output, 1500)
        return Outcome(False, "crash", message, seed, seconds, title)
    message = str(verdict.get("message", ""))
    if hidden == "now" and message.startswith(RUNNER_SENT):  # its counts and quotes are the runner's to choose
        cause = message.partition("\nLikely cause:")[2]
        message = (f"{RUNNER_SENT}the grader more than it allows, or something it cannot read, on {HIDDEN_CASE}; "
                   "the test fails (what and how much are not shown: your code chooses them)."
                   + (f"\nLikely cause:{cause}" if cause else ""))
    return Outcome(bool(verdict.get("ok")) and judge_code == 0, str(verdict.get("kind", "fail")), message, seed,
                   seconds, title)


def _sanitizer_message(output: str, result: str, stage: str, hidden: str = "") -> str:
    """compute-sanitizer's verdict in the words of the CPU's fence: what was read or written out of bounds, the
    first report (not its host backtrace), and, when the check itself also failed, the check's own diagnosis. Only
    the sanitizer's own lines are quoted, none once a hidden case began (threads, blocks and addresses)."""
    lines = [line.removeprefix("=========").rstrip() for line in output.splitlines() if line.startswith("=========")]
    first, errors = [], [line for line in lines if line.strip().startswith("Invalid ")]
    for line in lines:
        if first and ("Saved host backtrace" in line or line.strip().startswith("Invalid ")):
            break
        if first or line.strip().startswith("Invalid "):
            first.append(line)
    summary = next((line.strip() for line in lines if "ERROR SUMMARY" in line), "")
    report = "\n".join(first[:6]) if first else "\n".join(lines[-8:])
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
    during = f" while {where}" if where else ""
    if hidden:
        report = ("Neither your kernels' output nor compute-sanitizer's report (threads, blocks, addresses, counts) "
                  "is shown: a hidden case had begun, and they could tell that case's inputs. Rerun the visible cases, "
                  "and think of other sizes and inputs.")
        during = f" on {HIDDEN_CASE}" if hidden == "now" else during
    text = f"compute-sanitizer found invalid memory accesses{during}:\n{report}\n{cause}"
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


def _read(path: Path) -> str:
    """A file the checking process wrote: never through a symlink, at most 1 MB (it may be the learner's)."""
    from ..sandbox import read_bounded

    return read_bounded(path)


def _tail(text: str, n: int) -> str:
    return text if len(text) <= n else "..." + text[-n:]

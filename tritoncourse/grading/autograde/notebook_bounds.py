"""The bounds of one notebook's run in ResilientExecute (time, the grader's memory growth) and of the whole
``nbgrader`` command's run (``ResilientExecute.run_timeout``): :class:`_Watchdog` and :class:`_RunBound`.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time


class _NotebookExpired(BaseException):
    """Raised in the grading thread (by :class:`_Watchdog`'s signal) when a notebook's grading is past its bound and
    the thread is still waiting somewhere: a BaseException, so that no ``except Exception`` on the way swallows it."""


_WAKE = signal.SIGURG  # default action: ignored; so a wake-up that arrives after the watchdog is gone does nothing


class _Watchdog:
    """Bounds one notebook's run in ResilientExecute: its time (``notebook_timeout``), the whole run's time
    (``run_timeout``, :class:`_RunBound`) and the grader's own memory growth while the notebook runs.

    Past a bound it stops the notebook's kernel (its process tree is killed: nbclient then sees a dead kernel within
    a second, and the notebook fails at that cell with the reason). If the grading thread has still not come back
    ``grace`` seconds later (it waits in something that ignores a dead kernel, as ``zmq_ctx_term`` in a garbage
    collector does: pyzmq #1167), the thread is woken by a signal every few seconds, whose handler raises
    :class:`_NotebookExpired` there: every wait returns (EINTR), so that no notebook can keep the grader forever.
    The signal needs the main thread (plain nbgrader grades in it); elsewhere only the kernel is stopped."""

    poll = 0.05

    def __init__(self, stop_kernel, seconds: float, memory_bytes: int, log, grace: float = 10.0):
        self.stop_kernel, self.seconds, self.memory_bytes, self.log, self.grace = \
            stop_kernel, seconds, memory_bytes, log, grace
        self.expired: str | None = None  # "time", "memory" or "run" once a bound is passed
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._main = threading.current_thread() is threading.main_thread()
        self._ident = threading.get_ident()
        self._old_handler = None
        self._thread = threading.Thread(target=self._run, name="tritoncourse-notebook-watchdog", daemon=True)

    def __enter__(self):
        if self._main:
            self._old_handler = signal.signal(_WAKE, self._on_signal)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:  # no wake-up is sent once this is set
            self._done.set()
        self._thread.join(timeout=5)
        if self._main:
            signal.signal(_WAKE, self._old_handler if self._old_handler is not None else signal.SIG_DFL)

    def _on_signal(self, signum, frame):
        if self.expired and not self._done.is_set():
            raise _NotebookExpired(self.expired)

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        start = time.monotonic()
        base = me.memory_info().rss
        expired_at = next_wake = 0.0
        while not self._done.wait(self.poll):
            now = time.monotonic()
            try:
                if self.expired is None:
                    why = ("time" if self.seconds and now - start > self.seconds else
                           "memory" if self.memory_bytes and me.memory_info().rss - base > self.memory_bytes else
                           "run" if _RunBound.passed() else None)
                    if why:
                        self.expired, expired_at, next_wake = why, now, now + self.grace
                        self.log.error("Notebook watchdog: %s bound passed; stopping the notebook's kernel.", why)
                        self.stop_kernel()
                elif now >= next_wake:
                    next_wake = now + 5
                    with self._lock:
                        if not self._done.is_set() and self._main:
                            self.log.error("Notebook watchdog: the grader still waits %.0f s after the %s bound; "
                                           "interrupting it.", now - expired_at, self.expired)
                            signal.pthread_kill(self._ident, _WAKE)
            except Exception:  # the watchdog itself must never stop watching
                self.log.error("Notebook watchdog error", exc_info=True)


def _is_nbgrader_command() -> bool:
    """Whether this process is the ``nbgrader`` command (``nbgrader ...``, ``python -m nbgrader ...``), where one run
    is the whole process; not a Jupyter server running formgrader, a test, or ``tritoncourse check``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return (os.path.basename(sys.argv[0] if sys.argv else "") in ("nbgrader", "jupyter-nbgrader")
            or getattr(spec, "name", "") in ("nbgrader", "nbgrader.__main__"))


class _RunBound:
    """The whole grading run's bound (``ResilientExecute.run_timeout``) in the ``nbgrader`` command, counted from
    the process's start: plain ``nbgrader autograde`` grades every learner in one process. Once past it, the
    notebook being run is stopped (its watchdog sees :meth:`passed`) and ResilientExecute raises KeyboardInterrupt,
    which nbgrader handles as Ctrl-C: the run ends, what was graded stays, a rerun without --force goes on. If the
    process is still there ``grace`` seconds later (stuck outside ResilientExecute), its main thread gets SIGINT;
    ``2 * grace`` seconds later the process kills its own children and exits with status 124. In any other process
    (a Jupyter server, a test) there is no run bound: each notebook still has its own."""

    _thread: threading.Thread | None = None
    _deadline: float | None = None  # time.time() at which the run's bound passes
    _active = 0  # notebooks being run now (their own watchdogs stop them)
    grace = 60.0

    @classmethod
    def start(cls, seconds: float, log) -> None:
        if seconds <= 0 or cls._thread is not None or not _is_nbgrader_command():
            return
        import psutil

        cls._deadline = psutil.Process().create_time() + seconds
        cls._thread = threading.Thread(target=cls._run, args=(seconds, log, threading.main_thread().ident),
                                       name="tritoncourse-run-bound", daemon=True)
        cls._thread.start()

    @classmethod
    def passed(cls) -> bool:
        return cls._deadline is not None and time.time() > cls._deadline

    @classmethod
    def _run(cls, seconds: float, log, main: int) -> None:
        while not cls.passed():
            time.sleep(min(30.0, max(0.1, cls._deadline - time.time())))
        log.error("The grading run passed its bound (ResilientExecute.run_timeout = %s s): it stops; a rerun goes "
                  "on with the learners not graded yet.", seconds)
        time.sleep(cls.grace if cls._active else 1.0)
        with contextlib.suppress(Exception):
            signal.pthread_kill(main, signal.SIGINT)
        time.sleep(2 * cls.grace)
        log.error("The grading run did not stop after SIGINT: its processes are killed.")
        with contextlib.suppress(Exception):
            import psutil

            for child in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
        os._exit(124)

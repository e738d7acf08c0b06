"""nbgrader's submit for the hub's learners: a clear refusal of what cannot be graded, and all or nothing.

hub/tritonhub.py copies this file into the learners' Jupyter configuration folder, whose nbgrader_config.py names
``CheckedSubmit`` as the exchange's submit (``c.ExchangeFactory.submit``): the Assignment List's Submit button and
``nbgrader submit`` in a terminal both run it. Standard library, nbformat and nbgrader only (the hub's venv).

What nbgrader 0.9's own submit does not do:

- **Hand in through the exchange's service, as oneself**: nbgrader copies the folder into ``inbound/``, which every
  learner may write, under a name that says who submitted and when (``--student`` picks any name). Here nothing of
  the exchange is written by the learner: the files go over the Unix socket ``<exchange>/hand-in.sock`` to the
  hand-in service (hub/exchange_service.py, run by the hub as root), which learns from the kernel who is asking and
  writes the submission, whole, under that learner's name and its own clock. ``--student`` naming anyone else is
  refused. The service's answer (its time and the submission's secret, the key of the learner's feedback) is then
  recorded in nbgrader's cache, which the Assignment List shows. A hand-in cut short (the learner's server stopped,
  the process killed) is dropped by the service: nothing of it is collected.
- **Refuse what cannot be handed in or graded**, saying why, before anything is sent: a link, a device or anything
  else that is not a regular file (each is opened without following a link), a file over the service's bounds
  (``MAX_FILE``, ``MAX_FILES``, ``MAX_TOTAL``); a released notebook's file that is not a notebook (not JSON, or JSON
  of something else), or a notebook of another assignment (none of its graded cells is there). nbgrader would hand
  these in, and the learner would learn it from a 0 in the feedback. The learner's files are left as they are. Other
  files beside the notebook are handed in as nbgrader does, with a warning that they are not graded.

And one thing nbgrader's Assignment List gets wrong: its Submit runs inside the learner's server, which the hub stops
with SIGINT, and it catches every exception of a submit, KeyboardInterrupt included. A server stopped mid-submission
would show the learner an "Invalid Submission" traceback ending in ``KeyboardInterrupt`` and keep running until the
hub's SIGTERM (JupyterHub's ``interrupt_timeout``, 30 s; the server took 28.5 s to stop in tests/system/test_hub.py).
Here, inside a server, the learner is told what happened instead, and the interrupt is raised again half a second later
(the answer on its way), so the server stops as the hub asked. In a terminal (``nbgrader submit``) an interrupt stays an
interrupt.
"""
from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import signal
import socket
import stat

import nbformat
from nbgrader.exchange.abc.exchange import ExchangeError
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import find_all_notebooks, get_username

from course_exchange import RootMade, kind

# The hand-in service's socket (in the exchange's root) and bounds: hub/exchange_service.py's, which enforces them
SOCKET = "hand-in.sock"
MAX_FILES = 200
MAX_FILE = 100_000_000
MAX_TOTAL = 100_000_000


def graded_ids(nb) -> set:
    """grade_ids of the graded cells (tests, written answers): each phase's own (setup and helper cells share ids)."""
    return {c.metadata.nbgrader["grade_id"] for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade") and "grade_id" in c.metadata.nbgrader}


def read_or_why(path: str):
    """(notebook, None) or (None, why it is not a notebook), in a learner's words."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        return None, f"it cannot be read ({err.strerror})"
    if not data.strip():
        return None, "it is empty (0 bytes)"
    try:
        json.loads(data)
    except ValueError:
        return None, "it is not a notebook (not JSON: was another file saved under its name?)"
    try:
        return nbformat.reads(data.decode("utf-8", errors="replace"), as_version=4), None
    except Exception as err:  # JSON, but not a notebook
        return None, f"it is JSON but not a notebook ({type(err).__name__})"


class CheckedSubmit(RootMade, ExchangeSubmit):
    _handed_in = False  # the service answered: the submission is in inbound/, whole

    def start(self):
        try:
            return super().start()  # an interrupt before the service's answer: the service drops the hand-in
        except KeyboardInterrupt:
            try:
                loop = asyncio.get_running_loop()  # inside a server: the Assignment List's Submit
            except RuntimeError:
                loop = None  # `nbgrader submit` in a terminal
            if loop is None:
                raise
            loop.call_later(0.5, signal.raise_signal, signal.SIGINT)  # the server then stops as it was asked
        assignment = self.coursedir.assignment_id
        if self._handed_in:  # the stop came after the service's answer (while the cache copy ran): it is in
            self.log.warning("%s was handed in (%s) just before your server was stopped", assignment, self.timestamp)
            return
        self.fail(f"{assignment} was not submitted: your server was stopped while it was being handed in, and "
                  "nothing of it reached the instructor (your previous submission, if any, is still the one "
                  f"collected). Your files in {self._where()} are unchanged. Start your server again (File > Hub "
                  "Control Panel, then Start My Server) and submit again.")

    def _where(self) -> str:
        assignment = self.coursedir.assignment_id
        src = getattr(self, "src_path", None) or os.path.join("~", assignment)  # unset if stopped before init_src
        return f"~/{assignment}/" if src.startswith((os.path.expanduser("~"), "~")) else src

    def check_filename_diff(self):
        self.check_notebooks()
        super().check_filename_diff()

    def check_notebooks(self) -> None:
        assignment = self.coursedir.assignment_id
        where = self._where()
        for rel in find_all_notebooks(self.release_path):
            mine = os.path.join(self.src_path, rel)
            if not os.path.isfile(mine):
                continue  # nbgrader's own check says which notebooks are missing
            nb, why = read_or_why(mine)
            if why is None:
                theirs, _ = read_or_why(os.path.join(self.release_path, rel))
                if theirs is not None and graded_ids(theirs) and not graded_ids(nb) & graded_ids(theirs):
                    why = (f"it is not the {assignment} notebook: none of its graded cells is there "
                           "(a notebook of another assignment, or a new notebook saved under its name?)")
            if why is not None:
                self.fail(f"{assignment} was not submitted: {rel} cannot be graded: {why}. Your files in {where} "
                          "are unchanged. Put your work for this assignment into that notebook (Fetch the "
                          "assignment again into an empty folder if you need a fresh copy) and submit again.")
        others = sorted(os.path.relpath(os.path.join(d, n), self.src_path) for d, _, names in os.walk(self.src_path)
                        for n in names if not n.endswith(".ipynb") and ".ipynb_checkpoints" not in d)
        if others:
            self.log.warning("Not graded, handed in as they are (only notebooks are graded): %s", ", ".join(others))

    def init_dest(self):
        """The course and the learner; no folder of the exchange is written here (the hand-in service does it)."""
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        me = get_username()
        if self.coursedir.student_id not in ("*", "", me):
            self.fail(f"{self.coursedir.assignment_id} was not submitted: you hand in only as yourself ({me}), "
                      f"not as {self.coursedir.student_id} (--student): the exchange names the learner who submits")
        self.cache_path = os.path.join(self.cache, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.root, self.coursedir.course_id, "inbound")  # nbgrader's messages only
        self.assignment_filename = f"{me}+{self.coursedir.assignment_id}+{self.timestamp}"

    def copy_files(self):
        """Hand the files in through the exchange's service (regular files only, bounded, read as the learner), then
        record the submission in nbgrader's cache (the Assignment List) under the service's name and time."""
        self.init_release()
        files = self.files_to_hand_in()  # links and devices first: a notebook that is a link is never read
        self.check_filename_diff()
        answer = hand_in(os.path.join(self.root, SOCKET), self.coursedir.course_id, self.coursedir.assignment_id,
                         files, self.src_path)
        self._handed_in = True
        self.timestamp = answer["timestamp"]
        cache_path = os.path.join(self.cache_path, f"{answer['student']}+{self.coursedir.assignment_id}+"
                                  f"{answer['timestamp']}")
        os.makedirs(self.cache_path, exist_ok=True)
        self.do_copy(self.src_path, cache_path)
        for name, text in (("timestamp.txt", answer["timestamp"]), ("submission_secret.txt", answer["secret"])):
            with open(os.path.join(cache_path, name), "w") as fh:
                fh.write(text)
        self.log.info("Submitted as: %s %s %s", self.coursedir.course_id, self.coursedir.assignment_id,
                      answer["timestamp"])

    def files_to_hand_in(self) -> list[tuple[str, int]]:
        """(relative path, size) of every file handed in (nbgrader's ignore and include patterns apply); refuses,
        saying which, a link, a device or any file that is not a regular one, and what is over the bounds."""
        assignment, where = self.coursedir.assignment_id, self._where()
        exclude, include = self.coursedir.ignore, self.coursedir.include
        found, total = [], 0
        for dirpath, dirnames, filenames in os.walk(self.src_path):
            dirnames[:] = sorted(d for d in dirnames if not any(fnmatch.fnmatch(d, g) for g in exclude))
            for name in sorted(dirnames) + sorted(filenames):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, self.src_path)
                st = os.lstat(path)
                if name in dirnames and stat.S_ISDIR(st.st_mode):
                    continue
                if any(fnmatch.fnmatch(name, g) for g in exclude) or not any(fnmatch.fnmatch(name, g) for g in include):
                    continue
                why = (None if stat.S_ISREG(st.st_mode) else f"it is {kind(st.st_mode)}" if name not in dirnames
                       else "it is a symbolic link to a folder")
                if why is None and st.st_size > MAX_FILE:
                    why = f"it is {st.st_size / 1e6:.1f} MB, more than the {MAX_FILE / 1e6:.0f} MB a file may be"
                if why:
                    self.fail(f"{assignment} was not submitted: {rel} cannot be handed in: {why}. Only regular "
                              f"files are handed in. Your files in {where} are unchanged. Remove it (or replace it "
                              "with the file itself) and submit again.")
                found.append((rel, st.st_size))
                total += st.st_size
        if len(found) > MAX_FILES or total > MAX_TOTAL:
            self.fail(f"{assignment} was not submitted: {len(found)} files, {total / 1e6:.1f} MB in all: at most "
                      f"{MAX_FILES} files and {MAX_TOTAL / 1e6:.0f} MB are handed in. Your files in {where} are "
                      "unchanged. Move what is not part of your work out of the folder and submit again.")
        return found


def read_chunk(fd: int, n: int) -> bytes:
    return os.read(fd, n)


def hand_in(sock_path: str, course: str, assignment: str, files: list[tuple[str, int]], src: str) -> dict:
    """Send ``files`` (relative to ``src``) to the exchange's service; returns its answer or raises ExchangeError
    with its reason. Each file is opened without following a link and sent as the size it had when listed."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(120)
        try:
            conn.connect(sock_path)
        except OSError as err:
            raise ExchangeError(f"{assignment} was not submitted: the course's exchange service does not answer "
                                f"({err.strerror}); tell your instructor (is the hub running?)") from None
        header = {"course": course, "assignment": assignment, "files": [[rel, size] for rel, size in files]}
        conn.sendall(json.dumps(header).encode() + b"\n")
        for rel, size in files:
            fd = os.open(os.path.join(src, rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                left = size
                while left:
                    chunk = read_chunk(fd, min(left, 1 << 20))
                    if not chunk:
                        raise ExchangeError(f"{assignment} was not submitted: {rel} changed while it was handed in; "
                                            "submit again")
                    conn.sendall(chunk)
                    left -= len(chunk)
            finally:
                os.close(fd)
        reply = conn.makefile("rb").readline(1 << 16)
    except BrokenPipeError:
        reply = conn.makefile("rb").readline(1 << 16)  # the service refused before reading everything: why
    finally:
        conn.close()
    try:
        answer = json.loads(reply)
    except ValueError:
        raise ExchangeError(f"{assignment} was not submitted: the exchange service gave no answer") from None
    if not answer.get("ok"):
        raise ExchangeError(f"{assignment} was not submitted: {answer.get('error')}")
    return answer

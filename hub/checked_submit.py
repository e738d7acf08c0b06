"""nbgrader's submit for the hub's learners: a clear refusal of what cannot be graded, and all or nothing.

hub/tritonhub.py copies this file into the learners' Jupyter configuration folder, whose nbgrader_config.py names
``CheckedSubmit`` as the exchange's submit (``c.ExchangeFactory.submit``): the Assignment List's Submit button and
``nbgrader submit`` in a terminal both run it. Standard library, nbformat and nbgrader only (the hub's venv).

Two things nbgrader 0.9's own submit does not do:

- **Refuse a notebook that cannot be graded**, saying why, before anything is copied: a released notebook's file
  that is not a notebook (not JSON, or JSON of something else), or a notebook of another assignment (none of its
  graded cells is there). nbgrader would hand either in, and the learner would learn it from a 0 in the feedback.
  The learner's files are left as they are. Other files beside the notebook are handed in as nbgrader does,
  with a warning that they are not graded.
- **Hand in all or nothing**: nbgrader copies the folder straight into ``inbound/<name>`` and then writes its
  timestamp; a submission cut short (the learner's server stopped, the process killed) left a partial folder
  that ``collect`` takes as the newest one. Here the copy is made in a hidden folder of ``inbound/`` (collect's
  pattern skips names starting with a dot) and renamed into place, complete, before the learner's own record of
  it (nbgrader's cache, which the Assignment List shows) is written.

And one thing nbgrader's Assignment List gets wrong: its Submit runs inside the learner's server, which the hub stops
with SIGINT, and it catches every exception of a submit, KeyboardInterrupt included. A server stopped mid-submission
would show the learner an "Invalid Submission" traceback ending in ``KeyboardInterrupt`` and keep running until the
hub's SIGTERM (JupyterHub's ``interrupt_timeout``, 30 s; the server took 28.5 s to stop in tests/test_hub.py). Here,
inside a server, the learner is told what happened instead, and the interrupt is raised again half a second later (the
answer on its way), so the server stops as the hub asked. In a terminal (``nbgrader submit``) an interrupt stays an
interrupt.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal

import nbformat
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import find_all_notebooks


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


class CheckedSubmit(ExchangeSubmit):
    _staged = None  # (hidden folder in inbound, the submission's final path) while a copy is under way
    _handed_in = False  # the submission renamed into place, whole

    def start(self):
        try:
            return super().start()  # copy_files' own clean-up has run when an interrupt comes out of it
        except KeyboardInterrupt:
            try:
                loop = asyncio.get_running_loop()  # inside a server: the Assignment List's Submit
            except RuntimeError:
                loop = None  # `nbgrader submit` in a terminal
            if loop is None:
                raise
            loop.call_later(0.5, signal.raise_signal, signal.SIGINT)  # the server then stops as it was asked
        assignment = self.coursedir.assignment_id
        if self._handed_in:  # the stop came after the rename (while nbgrader's cache copy ran): it is in, whole
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

    def copy_files(self):
        final = self.inbound_path
        hidden = os.path.join(final, f".incoming-{secrets.token_hex(8)}")
        os.mkdir(hidden)
        self._staged = (os.path.join(hidden, self.assignment_filename), os.path.join(final, self.assignment_filename))
        self.inbound_path = hidden
        try:
            super().copy_files()  # into the hidden folder; do_copy moves it into place before the cache copy
        finally:
            self.inbound_path = final
            self._staged = None
            shutil.rmtree(hidden, ignore_errors=True)

    def do_copy(self, src, dest, log=None):
        if self._staged and dest != self._staged[0]:
            # nbgrader's second copy (its cache): the inbound copy is complete, timestamp and secret included
            os.rename(*self._staged)
            self._staged = None
            self._handed_in = True
        super().do_copy(src, dest, log)

"""nbgrader's exchange classes for the hub's exchange (docs/JUPYTERHUB.md, "The exchange"): nbgrader's own default
ones, for an exchange that root made (hub/exchange_service.py ``prepare``), and a collect that trusts nothing in
``inbound/``.

hub/tritonhub.py copies this file beside both roles' nbgrader_config.py, which name its classes in
``c.ExchangeFactory``. nbgrader only (the learners' side imports it too: nothing of the grader).

- Every class: the exchange's root is root's (0755) and nobody else writes it, where nbgrader's default wants it
  world-writable (it checks so before every command, and ``release_assignment`` would chmod it 0777).
- ``Collect``, as the instructor, copies each learner's newest submission without following a link, never
  reading a device, a FIFO or a socket, within ``max_files``, ``max_file_size`` and ``max_dir_size``; it ignores
  submissions dated in the future (by this machine's clock) and any not made by the hand-in service or by the
  learner it names (a forged name, left from nbgrader's shared folder). A refused submission costs only its
  learner: one ``Not collected`` line in the log (Formgrader's collect dialog shows it) and in
  ``<course>/exchange-refused.log``, and one JSON object a line in ``<course>/exchange-refused.jsonl`` (what
  ``python -m tritoncourse grade`` and ``export`` report: tritoncourse/classroom/refusals.py); everyone else is
  collected. What the learner named (folders, files) is written inert: control characters escaped, length bounded.
  nbgrader's own stopped the whole class at the first oversized folder and copied links' targets as the instructor.
"""
from __future__ import annotations

import datetime as dt
import fnmatch
import json
import os
import pwd
import re
import secrets
import shutil
import stat

from nbgrader.exchange.default import (ExchangeCollect, ExchangeFetchAssignment, ExchangeFetchFeedback,
                                       ExchangeList, ExchangeReleaseAssignment, ExchangeReleaseFeedback)
from nbgrader.utils import parse_utc
from traitlets import Integer

FUTURE_SLACK = dt.timedelta(minutes=1)
STUDENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")  # a learner's id: a folder name of submitted/
MAX_DEPTH = 8
REFUSED_LOG = "exchange-refused.log"  # one line a refusal, for people
REFUSED_RECORDS = "exchange-refused.jsonl"  # one JSON object a refusal: tritoncourse/classroom/refusals.py reads it
SHOWN = 300  # characters of a learner's name or reason in a line, at most


class RootMade:
    """The exchange's root exists (root made it at set-up); nobody but root writes it."""

    def ensure_root(self):
        if not os.path.isdir(self.root):
            self.fail(f"The exchange {self.root} is missing: ask your instructor (hub/tritonhub.py setup makes it)")


class List(RootMade, ExchangeList):
    pass


class FetchAssignment(RootMade, ExchangeFetchAssignment):
    pass


class FetchFeedback(RootMade, ExchangeFetchFeedback):
    pass


class ReleaseAssignment(RootMade, ExchangeReleaseAssignment):
    pass


class ReleaseFeedback(RootMade, ExchangeReleaseFeedback):
    pass


class NotCopied(Exception):
    pass


def kind(mode: int) -> str:
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def bounded_copy(src: str, dest: str, ignore: list[str], max_files: int, max_file: int, max_total: int) -> int:
    """Copy the folder ``src`` to ``dest`` (new) without following any link: regular files and folders only, within
    the bounds; raises NotCopied saying which file and why. Returns the bytes copied."""
    count, total = 0, 0
    top = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    stack = [(top, dest, "", 0)]
    os.mkdir(dest, 0o755)
    try:
        while stack:
            dfd, out, shown, depth = stack.pop()
            try:
                for name in sorted(os.listdir(dfd)):
                    rel = f"{shown}{name}"
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if any(fnmatch.fnmatch(name, pattern) for pattern in ignore):
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        if depth >= MAX_DEPTH:
                            raise NotCopied(f"{rel}/ is more than {MAX_DEPTH} folders deep")
                        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
                        os.mkdir(os.path.join(out, name), 0o755)
                        stack.append((sub, os.path.join(out, name), rel + "/", depth + 1))
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        raise NotCopied(f"{rel} is {kind(st.st_mode)}")
                    count += 1
                    if count > max_files:
                        raise NotCopied(f"more than {max_files} files")
                    if st.st_size > max_file:
                        raise NotCopied(f"{rel} is {st.st_size / 1e6:.1f} MB, more than {max_file / 1e6:.0f} MB")
                    total += _copy_file(dfd, name, os.path.join(out, name), rel, max_file, max_total - total)
            finally:
                os.close(dfd)
    finally:
        for dfd, *_ in stack:
            os.close(dfd)
    return total


def _copy_file(dfd: int, name: str, dest: str, rel: str, max_file: int, room: int) -> int:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotCopied(f"{rel} is {kind(st.st_mode)}")
        if st.st_nlink > 1:
            raise NotCopied(f"{rel} has {st.st_nlink} names (a hard link to a file elsewhere?)")
        limit = min(max_file, room)
        copied = 0
        with open(dest, "xb") as out:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                copied += len(chunk)
                if copied > limit:
                    raise NotCopied(f"{rel} is larger than {max_file / 1e6:.0f} MB, or the submission than its bound")
                out.write(chunk)
        return copied
    finally:
        os.close(fd)


def inert(text: str, limit: int = SHOWN) -> str:
    """``text`` (a name a learner chose) with every control or invisible character escaped (no newline to forge a
    log line, no terminal escape, no bidirectional override), at most ``limit`` characters."""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))
    return out if len(out) <= limit else out[:limit - 1] + "\u2026"


def record_refusal(course_root: str, student: str, assignment: str, folder: str, why: str) -> str:
    """Record one refused submission in ``<course>/exchange-refused.log`` (a line) and ``.jsonl`` (an object:
    time, student, assignment, folder, reason); returns the line. A course folder that cannot be written loses
    the record, never the collect."""
    now = dt.datetime.now(dt.timezone.utc)
    rec = {"time": f"{now:%Y-%m-%d %H:%M:%S} UTC", "student": inert(student, 100), "assignment": inert(assignment),
           "folder": inert(folder), "reason": inert(why, 2 * SHOWN)}
    line = f"Not collected: {rec['student']}'s {rec['assignment']} ({rec['folder']}): {rec['reason']}"
    for name, text in [(REFUSED_LOG, f"{rec['time']} {line}"), (REFUSED_RECORDS, json.dumps(rec))]:
        try:
            with open(os.path.join(course_root, name), "a") as f:
                f.write(text + "\n")
        except OSError:
            pass
    return line


def utcnow() -> dt.datetime:
    """Now, in UTC without a zone, as nbgrader's parse_utc gives timestamps."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Collect(RootMade, ExchangeCollect):
    max_files = Integer(200, help="Files in one submission, at most").tag(config=True)

    def _path_to_record(self, path):
        """nbgrader's, for its own init_src, without its stop of the whole collect at a malformed name (this
        class's init_src chooses again, refusing such names one by one)."""
        try:
            return super()._path_to_record(path)
        except Exception:
            return {"username": "", "filename": os.path.basename(path), "timestamp": dt.datetime.min}

    def init_src(self):
        super().init_src()  # the gradebook's due date, and the newest of each learner's (replaced below)
        now = utcnow()
        chosen = {}
        pattern = f"{self.coursedir.student_id or '*'}+{self.coursedir.assignment_id}+*"
        for entry in sorted(os.scandir(self.inbound_path), key=lambda e: e.name):
            if not fnmatch.fnmatch(entry.name, pattern) or entry.name.startswith("."):
                continue
            rec = self._record(entry, now)
            if rec is None:
                continue
            best = chosen.get(rec["username"])
            due = self.duedate if self.before_duedate else None
            if best is None or self._better(rec, best, due):
                chosen[rec["username"]] = rec
        self.src_records = sorted(chosen.values(), key=lambda r: r["username"])

    def _better(self, rec, best, due) -> bool:
        if due is not None and (rec["timestamp"] <= due) != (best["timestamp"] <= due):
            return rec["timestamp"] <= due
        return rec["timestamp"] > best["timestamp"]

    def _record(self, entry, now):
        parts = entry.name.rsplit("+", 3)
        try:
            timestamp = parse_utc(parts[2])
        except (IndexError, ValueError, OverflowError):
            return self.refuse(entry.name.split("+", 1)[0], entry.name, "its name holds no timestamp")
        username = parts[0]
        if not STUDENT.match(username):
            return self.refuse(username, entry.name, "its name names no learner")
        if timestamp > now + FUTURE_SLACK:
            return self.refuse(username, entry.name, f"dated {parts[2]}, in the future: ignored")
        st = entry.stat(follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            return self.refuse(username, entry.name, f"it is {kind(st.st_mode)}, not a folder")
        made_by = {pwd.getpwnam(self.instructor_name()).pw_uid}
        try:
            made_by.add(pwd.getpwnam(username).pw_uid)
        except KeyError:
            pass
        if st.st_uid not in made_by:
            return self.refuse(username, entry.name, f"it was made by uid {st.st_uid}, not by {username} nor the "
                               "hand-in service (a submission in someone else's name)")
        return {"username": username, "filename": entry.name, "timestamp": timestamp}

    def instructor_name(self) -> str:
        return pwd.getpwuid(os.geteuid()).pw_name

    def refuse(self, student: str, what: str, why: str):
        self.log.error(record_refusal(self.coursedir.root, student, self.coursedir.assignment_id, what, why))
        return None

    def copy_files(self):
        if not self.src_records:
            self.log.warning(f"No submissions of '{self.coursedir.assignment_id}' to collect")
        now = utcnow()
        for rec in self.src_records:
            student = rec["username"]
            dest = self.coursedir.format_path(self.coursedir.submitted_directory, student,
                                              self.coursedir.assignment_id)
            try:
                if os.path.isdir(dest) and not os.path.islink(dest):
                    existing = self.coursedir.get_existing_timestamp(dest)
                    stale = existing is None or existing > now + FUTURE_SLACK or rec["timestamp"] > existing
                    if not (self.update and stale):
                        self.log.info(f"Not newer, or no --update: {student} {self.coursedir.assignment_id}")
                        continue
                self._collect(rec, dest)
            except NotCopied as why:
                self.refuse(student, rec["filename"], f"{why}; nothing of it was collected")
            except Exception as err:  # this learner's submission only: the others are collected
                self.refuse(student, rec["filename"], f"{type(err).__name__}: {err}")

    def _collect(self, rec, dest: str) -> None:
        parent = os.path.dirname(dest)
        made = not os.path.isdir(parent)
        os.makedirs(parent, exist_ok=True)
        staging = os.path.join(parent, f".collecting-{secrets.token_hex(6)}")
        try:
            size = bounded_copy(os.path.join(self.inbound_path, rec["filename"]), staging, self.coursedir.ignore,
                                self.max_files, 1000 * self.coursedir.max_file_size,
                                1000 * self.coursedir.max_dir_size)
            if os.path.lexists(dest):
                (shutil.rmtree if os.path.isdir(dest) and not os.path.islink(dest) else os.unlink)(dest)
            os.rename(staging, dest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            if made:  # no empty submitted/<learner>/ left for the grader
                shutil.rmtree(parent, ignore_errors=True)
            raise
        self.log.info(f"Collected {rec['username']} {self.coursedir.assignment_id} ({rec['timestamp']}, {size} bytes)")

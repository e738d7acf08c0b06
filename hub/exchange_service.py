"""The course exchange's hand-in service: a learner's submission is written into ``inbound/`` by root, named for the
learner the kernel says is asking (docs/JUPYTERHUB.md, "The exchange").

nbgrader's shared-folder exchange lets every learner write ``inbound/`` and trusts what they write there: the folder's
name says who submitted and when (``nbgrader submit --student classmate``, a date in the future), and collect copies
it as the instructor, following links (a notebook that is a link to ``source/``) and reading devices. Here no learner
can write ``inbound/`` (it is the instructor's, 0700). A learner's ``nbgrader submit`` (hub/checked_submit.py) sends
the files over the Unix socket ``<exchange>/hand-in.sock`` to this service, which

- learns who is asking from the kernel (``SO_PEERCRED``: the uid of the connecting process; with DockerSpawner the
  container runs as the learner's uid, the socket comes with the exchange's mount), and takes only members of the
  learners' group;
- takes plain bytes, not files: nothing to follow, no device to read; relative names only, at most ``MAX_FILES``
  files, ``MAX_FILE`` bytes each and ``MAX_TOTAL`` together (nbgrader's own ``max_file_size`` and ``max_dir_size``),
  one hand-in per learner at a time, ``TIMEOUT`` seconds without data ends it;
- writes the submission into a hidden folder of ``inbound/`` and renames it, whole, to
  ``<learner>+<assignment>+<the service's clock>+<random>``, with ``timestamp.txt`` and a new
  ``submission_secret.txt`` (the key of the learner's feedback, sent back only to the learner), owned by the
  instructor; it keeps a learner's ``KEEP`` newest hand-ins of an assignment and deletes older ones of theirs.

``prepare`` (run by ``hub/tritonhub.py setup``, as root) makes the exchange before anyone logs in: the root
(root's, 0755), the course folder, ``outbound/`` (0755), ``inbound/`` (0700) and ``feedback/`` (0711), the
instructor's, so that no learner can claim a folder of the course first. The hub starts the service
(hub/jupyterhub_config.py, a JupyterHub managed service run as root): ``python3 hub/exchange_service.py SETTINGS``.

Standard library only (root runs it with the hub's interpreter).
"""
from __future__ import annotations

import datetime as dt
import grp
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import socketserver
import struct
import sys
import threading
import time

SOCKET = "hand-in.sock"  # in the exchange's root
MAX_FILES = 200
MAX_FILE = 100_000_000  # bytes: nbgrader's CourseDirectory.max_file_size (100000 kB)
MAX_TOTAL = 100_000_000  # bytes: nbgrader's CourseDirectory.max_dir_size (100000 kB)
MAX_HEADER = 256 * 1024
KEEP = 3  # a learner's newest hand-ins of an assignment kept in inbound/ (collect takes the newest)
MAX_CONNECTIONS = 2  # a learner's connections at once
TIMEOUT = 60  # seconds a hand-in may wait for its next bytes
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")  # an assignment, a course
PART = re.compile(r"^[^/\0]{1,255}$")
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format, in UTC


class Refused(Exception):
    """A hand-in refused; the message goes back to the learner, in their words."""


def log(message: str) -> None:
    print(f"tritonhub-exchange: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- set-up (root)

def prepare(root: str, course_id: str, instructor: str) -> None:
    """The exchange, made by root before anyone logs in; a folder of the course found owned by someone else (a
    learner who created it first on an older, world-writable exchange) is moved aside, never used."""
    pw = pwd.getpwnam(instructor)
    os.makedirs(root, exist_ok=True)
    os.chown(root, 0, 0)
    os.chmod(root, 0o755)  # nobody but root writes here: no learner can create the course's folder
    course = os.path.join(root, course_id)
    for path, mode in [(course, 0o755), (os.path.join(course, "outbound"), 0o755),
                       (os.path.join(course, "inbound"), 0o700), (os.path.join(course, "feedback"), 0o711)]:
        st = _lstat(path)
        if st is not None and not (os.path.isdir(path) and not os.path.islink(path) and st.st_uid == pw.pw_uid):
            aside = f"{path}.claimed-{st.st_uid}-{secrets.token_hex(4)}"
            os.rename(path, aside)
            os.chown(aside, 0, 0, follow_symlinks=False)
            if not os.path.islink(aside):
                os.chmod(aside, 0o700)
            print(f"tritonhub: {path} was not the instructor's (uid {st.st_uid}): moved aside to {aside}, root only")
        if not os.path.isdir(path):
            os.mkdir(path)
            os.chown(path, pw.pw_uid, pw.pw_gid)
        os.chmod(path, mode)


def _lstat(path: str):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


# ------------------------------------------------------------------------------------------- one hand-in

class Exchange:
    """The hand-in rules of one course (no socket: tests drive ``hand_in`` with any readable stream)."""

    def __init__(self, root: str, course_id: str, instructor: str, learners_group: str | None):
        self.root, self.course_id, self.instructor = root, course_id, instructor
        self.learners_group = learners_group
        self.inbound = os.path.join(root, course_id, "inbound")
        self.outbound = os.path.join(root, course_id, "outbound")
        self.busy: set[int] = set()
        self.open: dict[int, int] = {}
        self.lock = threading.Lock()

    def learner(self, uid: int) -> str:
        """The learner's name for a uid, or Refused (not an account, not one of the course's learners)."""
        try:
            pw = pwd.getpwuid(uid)
        except KeyError:
            raise Refused(f"uid {uid} has no account here") from None
        if self.learners_group is not None:
            try:
                group = grp.getgrnam(self.learners_group)
            except KeyError:
                raise Refused(f"the learners' group {self.learners_group} is missing") from None
            if pw.pw_gid != group.gr_gid and pw.pw_name not in group.gr_mem:
                raise Refused(f"{pw.pw_name} is not one of the course's learners ({self.learners_group})")
        return pw.pw_name

    def check(self, request: dict) -> tuple[str, list[tuple[str, int]]]:
        """The assignment and the files' (relative path, size) a hand-in announces, or Refused."""
        if request.get("course") != self.course_id:
            raise Refused(f"this exchange takes the course {self.course_id!r}, not {request.get('course')!r}")
        assignment = request.get("assignment")
        if not isinstance(assignment, str) or not NAME.match(assignment) or assignment in (".", ".."):
            raise Refused(f"{assignment!r} is not an assignment's name")
        if not os.path.isdir(os.path.join(self.outbound, assignment)):
            raise Refused(f"{assignment} has not been released")
        files = request.get("files")
        if not isinstance(files, list) or not files:
            raise Refused("no files to hand in")
        if len(files) > MAX_FILES:
            raise Refused(f"{len(files)} files: at most {MAX_FILES} are handed in")
        seen: set[str] = set()
        dirs: set[str] = set()
        total = 0
        out = []
        for item in files:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], int) and not isinstance(item[1], bool)):
                raise Refused("a malformed list of files")
            rel, size = item
            parts = rel.split("/")
            if (len(rel) > 1024 or not all(PART.match(p) and p not in (".", "..") for p in parts)
                    or parts[0] in ("timestamp.txt", "submission_secret.txt")):
                raise Refused(f"{rel!r} is not a name a hand-in can hold")
            if not 0 <= size <= MAX_FILE:
                raise Refused(f"{rel} is {size / 1e6:.1f} MB: at most {MAX_FILE / 1e6:.0f} MB a file")
            total += size
            prefixes = {"/".join(parts[:i]) for i in range(1, len(parts))}
            if rel in seen or rel in dirs or prefixes & seen:
                raise Refused(f"{rel} is named twice")
            seen.add(rel)
            dirs |= prefixes
            out.append((rel, size))
        if total > MAX_TOTAL:
            raise Refused(f"{total / 1e6:.1f} MB in all: at most {MAX_TOTAL / 1e6:.0f} MB a hand-in")
        return assignment, out

    def hand_in(self, uid: int, stream) -> dict:
        """Read one hand-in from ``stream`` (a JSON line, then each file's bytes) as the learner ``uid``; returns
        the answer for the learner (``ok``, ``student``, ``timestamp``, ``secret``) or raises Refused."""
        student = self.learner(uid)
        header = stream.readline(MAX_HEADER + 1)
        if not header.endswith(b"\n"):
            raise Refused("a malformed hand-in (its list of files is cut short or too long)")
        try:
            request = json.loads(header)
        except ValueError:
            raise Refused("a malformed hand-in (not JSON)") from None
        if not isinstance(request, dict):
            raise Refused("a malformed hand-in")
        assignment, files = self.check(request)
        with self.lock:
            if uid in self.busy:
                raise Refused("another hand-in of yours is under way: wait for it, then submit again")
            self.busy.add(uid)
        staging = os.path.join(self.inbound, f".incoming-{student}+{assignment}-{secrets.token_hex(8)}")
        try:
            os.mkdir(staging, 0o700)
            for rel, size in files:
                self._receive(stream, staging, rel, size)
            now = dt.datetime.now(dt.timezone.utc)
            timestamp = now.strftime(TIMESTAMP_FORMAT)
            secret = secrets.token_hex(64)
            for name, text in (("timestamp.txt", timestamp), ("submission_secret.txt", secret)):
                self._write(staging, name, text.encode())
            self._own(staging)
            name = f"{student}+{assignment}+{timestamp}+{secrets.token_urlsafe(9)}"
            os.rename(staging, os.path.join(self.inbound, name))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            with self.lock:
                self.busy.discard(uid)
        self._prune(student, assignment)
        log(f"{student} handed in {assignment} ({len(files)} files, {sum(s for _, s in files)} bytes): {name}")
        return {"ok": True, "student": student, "timestamp": timestamp, "secret": secret, "name": name}

    def _receive(self, stream, staging: str, rel: str, size: int) -> None:
        parent = staging
        for part in rel.split("/")[:-1]:
            parent = os.path.join(parent, part)
            if not os.path.isdir(parent):
                os.mkdir(parent, 0o700)
        fd = os.open(os.path.join(staging, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            left = size
            while left:
                chunk = stream.read(min(left, 1 << 20))
                if not chunk:
                    raise Refused(f"the hand-in ended before all of {rel} came (stopped or cut short)")
                out.write(chunk)
                left -= len(chunk)

    def _write(self, staging: str, name: str, data: bytes) -> None:
        fd = os.open(os.path.join(staging, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)

    def _own(self, staging: str) -> None:
        """The submission is the instructor's (collect reads it, the instructor may delete it); root's otherwise."""
        if os.geteuid() != 0:
            return
        pw = pwd.getpwnam(self.instructor)
        for dirpath, dirnames, filenames in os.walk(staging):
            for name in dirnames + filenames:
                os.chown(os.path.join(dirpath, name), pw.pw_uid, pw.pw_gid, follow_symlinks=False)
        os.chown(staging, pw.pw_uid, pw.pw_gid)

    def _prune(self, student: str, assignment: str) -> None:
        prefix = f"{student}+{assignment}+"
        mine = sorted(e.name for e in os.scandir(self.inbound)
                      if e.name.startswith(prefix) and e.name.count("+") == 3 and e.is_dir(follow_symlinks=False))
        for old in mine[:-KEEP]:  # names of one format sort by time
            shutil.rmtree(os.path.join(self.inbound, old), ignore_errors=True)


# ------------------------------------------------------------------------------------------- the socket

def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket, as the kernel has it (SO_PEERCRED)."""
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


class Handler(socketserver.StreamRequestHandler):
    timeout = TIMEOUT

    def handle(self):
        exchange: Exchange = self.server.exchange
        uid = peer_uid(self.request)
        with exchange.lock:  # connections at once: a few a learner (a learner cannot hold the service for others)
            exchange.open[uid] = exchange.open.get(uid, 0) + 1
            crowded = exchange.open[uid] > MAX_CONNECTIONS
        try:
            if crowded:
                raise Refused(f"more than {MAX_CONNECTIONS} hand-ins of yours at once")
            answer = exchange.hand_in(uid, self.rfile)
        except Refused as why:
            log(f"uid {uid}: refused: {why}")
            answer = {"ok": False, "error": str(why)}
        except (OSError, ValueError) as err:  # a timeout, a reset: the learner's end is gone
            log(f"uid {uid}: hand-in failed: {type(err).__name__}: {err}")
            answer = {"ok": False, "error": f"the hand-in failed ({type(err).__name__}); nothing was handed in"}
        finally:
            with exchange.lock:
                exchange.open[uid] -= 1
        try:
            self.wfile.write(json.dumps(answer).encode() + b"\n")
        except OSError:
            pass


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, path: str, exchange: Exchange):
        if os.path.exists(path) or os.path.islink(path):
            os.unlink(path)  # a socket left by an earlier run (the folder is root's)
        super().__init__(path, Handler)
        os.chmod(path, 0o666)  # anyone may connect; the kernel says who did
        self.exchange = exchange


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit("usage: exchange_service.py <state>/settings.json")
    with open(argv[1]) as f:
        s = json.load(f)
    exchange = Exchange(s["exchange"], s["course_id"], s["instructor"], s["learners_group"])
    if not os.path.isdir(exchange.inbound):
        sys.exit(f"{exchange.inbound} is missing: `tritonhub.py setup` makes the exchange")
    path = os.path.join(s["exchange"], SOCKET)
    server = Server(path, exchange)
    log(f"hand-ins of {s['course_id']} on {path}")
    threading.Thread(target=_stop_with_the_hub, args=(server, os.getppid()), daemon=True).start()
    server.serve_forever()
    log("the hub is gone: hand-ins stopped")


def _stop_with_the_hub(server: Server, hub: int) -> None:
    """Stop serving once the hub that started this service is gone (this process then has another parent). The hub
    stops its managed services when it stops, but a hub killed outright (SIGKILL, a crash) would leave this one, a
    root process in a session of its own, serving hand-ins for a hub that no longer exists."""
    while os.getppid() == hub:
        time.sleep(1)
    server.shutdown()


if __name__ == "__main__":
    main(sys.argv)

"""The instructor's workflow without JupyterHub: collect the notebooks, grade everyone, export the grades.

    python -m tritoncourse collect 01_vector_add DIR           # DIR/<student>__01_vector_add.ipynb -> submitted/
    python -m tritoncourse grade [ASSIGNMENT ...] [--jobs N] [--students A B ...]
    python -m tritoncourse export [ASSIGNMENT ...] [-o grades.csv]
    python -m tritoncourse feedback 01_vector_add               # feedback/ without hidden tests (feedback.py)

How ``grade`` keeps the gradebook whole and still uses every core: each learner's notebook is graded by
plain ``nbgrader autograde ASSIGNMENT --student S`` (so with this course's configuration: resilient
execution, out-of-kernel verdicts, restored test cells) in a private copy of the course that has its own
copy of the gradebook, taken once at the start. Only the main process writes the real gradebook: after a
learner's private run ends it copies that learner's autograde results (scores, the needs-manual-grade
flags, automatic comments, late penalty, timestamp) through ``nbgrader.api.Gradebook`` into the real
one, one learner at a time, and moves the autograded notebook into ``autograded/``. A private run's
gradebook starts from the same rows as the real one, so the copied values are those that plain
``nbgrader autograde`` would have written; manual scores and manual comments are never touched.

Every learner's outcome is written to ``autograded/.classroom/state.json`` once merged; a new run skips
what is done (same submission, same assignment source) and grades the rest. A crash, time-out or dead
kernel costs only that learner: it is retried once, then recorded with its reason and its log.
"""
from __future__ import annotations

import contextlib
import csv
import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..notebooks import STUDENT_RE, CourseError, nbgrader_ids, read_notebook, valid_student  # noqa: F401
from .database import db_url_of, query, snapshot
from .secrets import GENERIC, SECRET_MARKERS, normal, split_hidden, split_regions

ROOT = Path(__file__).resolve().parent.parent.parent
STATE_VERSION = 1
# "<student>__<assignment>.ipynb", with what browsers and LMSs append to a name ("(1)", "-2", "-Copy1").
FILENAME_RE = re.compile(rf"^(?P<student>{STUDENT_RE})__(?P<rest>.+?)\.ipynb$")
SUFFIX_RE = re.compile(r"^(?:\s*\(\d+\)|-\d+|-Copy\d+|_\d+)$")
SEED_RE = re.compile(r"seed (\d+)")


def _sha256(paths: list[Path], base: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(base)).encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    """The regular files of a submission. Symbolic links (and whatever lies under a linked folder) are never
    followed nor copied: a link to source/ or to the gradebook must not bring them into the learner's grading."""
    out = []
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if ".ipynb_checkpoints" in rel.parts:
            continue
        if any((folder / Path(*rel.parts[:i])).is_symlink() for i in range(1, len(rel.parts) + 1)):
            continue
        if p.is_file():
            out.append(p)
    return out


def _nbgrader_env() -> dict:
    """nbgrader runs alembic and jupyter as commands: this Python's bin/ first on PATH."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


# ------------------------------------------------------------------------------------------ the course

class Course:
    """The nbgrader course directory: folders, the gradebook, released assignments."""

    def __init__(self, root: Path = ROOT):
        self.root = Path(root).resolve()
        self.source = self.root / "source"
        self.release = self.root / "release"
        self.submitted = self.root / "submitted"
        self.autograded = self.root / "autograded"
        self.feedback = self.root / "feedback"
        self.db_path = self.root / "gradebook.db"
        self.course_id = "triton-kernels"
        self.state_dir = self.autograded / ".classroom"
        self._db_url: str | None = None

    @property
    def db_url(self) -> str:
        """The gradebook's URL, as nbgrader reads it from this course's configuration (SQLite or PostgreSQL:
        database.py)."""
        if self._db_url is None:
            self._db_url = db_url_of(self.root)
        return self._db_url

    @db_url.setter
    def db_url(self, url: str) -> None:
        self._db_url = url

    # ---- assignments
    def released_assignments(self) -> dict[str, list[str]]:
        """assignment -> its notebooks, as the gradebook knows them (``nbgrader generate_assignment``)."""
        rows = query(self.db_url, "SELECT assignment.name, notebook.name FROM notebook "
                                  "JOIN assignment ON notebook.assignment_id = assignment.id")
        out: dict[str, list[str]] = {}
        for a, nb in rows or []:
            out.setdefault(a, []).append(nb)
        return {a: sorted(nbs) for a, nbs in sorted(out.items())}

    def source_assignments(self) -> list[str]:
        return sorted(p.name for p in self.source.iterdir() if p.is_dir()) if self.source.exists() else []

    def check_assignment(self, assignment: str) -> list[str]:
        """The assignment's notebooks; CourseError if it is unknown or was never released."""
        released = self.released_assignments()
        if assignment in released:
            return released[assignment]
        known = sorted(set(released) | set(self.source_assignments()))
        if assignment in known:
            raise CourseError(f"Assignment '{assignment}' is not in the gradebook yet: run `make release` "
                              f"(nbgrader generate_assignment {assignment}) first.")
        raise CourseError(f"Unknown assignment '{assignment}'. Assignments: {', '.join(known) or 'none'}.")

    def release_notebook(self, assignment: str, notebook: str):
        path = self.release / assignment / f"{notebook}.ipynb"
        return nbformat.read(path, as_version=4) if path.exists() else None

    def assignment_hash(self, assignment: str) -> str:
        folder = self.source / assignment
        return _sha256(_files(folder), folder) if folder.exists() else ""

    # ---- learners
    def roster(self) -> list[str]:
        return sorted(r[0] for r in query(self.db_url, "SELECT id FROM student") or [])

    def submitters(self, assignment: str) -> list[str]:
        if not self.submitted.exists():
            return []
        return sorted(p.name for p in self.submitted.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and (p / assignment).is_dir())


# ------------------------------------------------------------------------------------------ collect

@dataclass
class Collected:
    source: Path
    student: str = ""
    status: str = ""  # collected | replaced | unchanged | other-assignment | error
    message: str = ""


def released_ids(course: Course) -> dict[str, set[str]]:
    """assignment -> the nbgrader cell ids of its released notebooks."""
    out: dict[str, set[str]] = {}
    for assignment, notebooks in course.released_assignments().items():
        for name in notebooks:
            release = course.release_notebook(assignment, name)
            if release is not None:
                out.setdefault(assignment, set()).update(nbgrader_ids(release))
    return out


def identify(nb, known: dict[str, set[str]]) -> str | None:
    """The assignment a notebook belongs to, by its nbgrader cell ids (None when it has none)."""
    ids = nbgrader_ids(nb)
    best, best_n = None, 0
    for assignment, theirs in known.items():
        if len(ids & theirs) > best_n:
            best, best_n = assignment, len(ids & theirs)
    return best


def collect(course: Course, assignment: str, folder: Path, *, add_students: bool = False,
            timestamps: str = "none", dry_run: bool = False) -> list[Collected]:
    """Copy each ``<student>__<assignment>.ipynb`` of ``folder`` (any depth; ``backups/`` and hidden folders
    are skipped) to ``submitted/<student>/<assignment>/<notebook>.ipynb``. Nothing is ever lost: a different earlier
    submission is moved to ``submitted/.replaced/`` first, bad files are reported and left where they are."""
    notebooks = course.check_assignment(assignment)
    if len(notebooks) != 1:
        raise CourseError(f"{assignment} has {len(notebooks)} notebooks; collect handles one-notebook "
                          "assignments (use nbgrader zip_collect for others).")
    notebook = notebooks[0]
    folder = Path(folder)
    if not folder.is_dir():
        raise CourseError(f"{folder}: no such folder.")
    roster = set(course.roster())
    known = released_ids(course)
    results: list[Collected] = []
    by_student: dict[str, list[tuple[Collected, nbformat.NotebookNode]]] = {}
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not any(part.startswith(".") or part == "backups" for part in p.relative_to(folder).parts))
    for path in files:
        item = Collected(path)
        results.append(item)
        if path.suffix != ".ipynb":
            item.status, item.message = "skipped", "not a notebook file (.ipynb)"
            continue
        m = FILENAME_RE.match(path.name)
        if not m:
            item.status = "error"
            item.message = (f"cannot tell whose notebook this is: name it <student>__{assignment}.ipynb "
                            f"(`python -m tritoncourse submit {assignment} --student NAME` does)")
            continue
        item.student, rest = m.group("student"), m.group("rest")
        try:
            nb = read_notebook(path)
        except CourseError as err:
            item.status, item.message = "error", str(err).replace(f"{path}: ", "")
            continue
        if not nb.cells:
            item.status, item.message = "error", "empty submission: the notebook has no cells"
            continue
        named = rest.startswith(assignment) and (rest == assignment or SUFFIX_RE.match(rest[len(assignment):]))
        content = identify(nb, known)
        if content not in (None, assignment):
            item.status = "other-assignment"
            item.message = f"holds {content}" + ("" if not named else f" although its name says {assignment}")
            continue
        if content is None and not named:
            item.status = "other-assignment"
            item.message = "neither its name nor its cells say it is " + assignment
            continue
        if content is None:
            item.message = "warning: none of the assignment's cells is left (graded as it is)"
        elif not named:
            item.message = f"renamed file ({path.name}): its cells say it is {assignment}"
        elif rest != assignment:
            item.message = f"renamed file ({path.name})"
        if roster and item.student not in roster and not add_students:
            item.status = "error"
            item.message = (f"unknown learner '{item.student}' (not in the gradebook's students; "
                            "fix the name, or pass --add-students)")
            continue
        by_student.setdefault(item.student, []).append((item, nb))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for student, items in sorted(by_student.items()):
        if len(items) > 1:
            names = ", ".join(str(i.source.relative_to(folder)) for i, _ in items)
            for item, _ in items:
                item.status = "error"
                item.message = f"{len(items)} notebooks from {student} ({names}): keep one, collect again"
            continue
        item, _ = items[0]
        dest_dir = course.submitted / student / assignment
        dest = dest_dir / f"{notebook}.ipynb"
        data = item.source.read_bytes()
        if dest.exists() and dest.read_bytes() == data:
            item.status = "unchanged"
            continue
        item.status = "replaced" if dest.exists() else "collected"
        if dry_run:
            continue
        if dest.exists():
            keep = course.submitted / ".replaced" / student / assignment / stamp
            keep.mkdir(parents=True, exist_ok=True)
            for old in dest_dir.iterdir():
                if old.is_file():
                    shutil.copy2(old, keep / old.name)
            item.message = (item.message + "; " if item.message else "") + \
                f"earlier submission kept in {keep.relative_to(course.root)}"
        dest_dir.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.incoming")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
        if timestamps == "mtime":
            when = dt.datetime.fromtimestamp(item.source.stat().st_mtime, dt.timezone.utc)
            (dest_dir / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
    return results


def print_collected(results: list[Collected], assignment: str, folder: Path) -> int:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
        if r.status in ("error", "other-assignment", "replaced") or r.message:
            rel = r.source.relative_to(folder) if r.source.is_relative_to(folder) else r.source
            print(f"  {r.status:16} {rel}: {r.message}")
    print(f"{assignment}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) if counts
          else f"{folder}: no files")
    return 1 if counts.get("error") else 0


# ------------------------------------------------------------------------------------------ grading

@dataclass
class Task:
    assignment: str
    student: str
    files: dict[str, Path]  # name in the private submission -> the real file
    submission_hash: str
    assignment_hash: str
    notes: list[str] = field(default_factory=list)
    attempt: int = 0
    # notebook file name -> why it is refused (grading/links.py: a link, a second hard link): graded as a placeholder
    # that fails every test with that reason, its target never read
    refused: dict[str, str] = field(default_factory=dict)

    def submission(self) -> dict[str, Path | bytes]:
        """What the private copy's submitted/<student>/<assignment>/ holds: the files, and the placeholders."""
        from ..grading.links import refused_notebook

        return {**self.files, **{name: refused_notebook(reason) for name, reason in self.refused.items()}}

    @property
    def key(self) -> str:
        return f"{self.assignment}/{self.student}"


@dataclass
class RunResult:
    ok: bool
    seconds: float
    reason: str = ""
    work: Path | None = None
    log: Path | None = None
    worker: str = ""  # where it was graded, when not on this machine (a Dask worker)


def prepare(course: Course, assignment: str, student: str, notebooks: list[str]) -> Task:
    """What to grade for one learner: the submitted files, a renamed notebook put under its expected name.
    CourseError when nothing gradable is there (empty folder, empty file, not a notebook)."""
    from ..grading.links import refusal

    folder = course.submitted / student / assignment
    notes = []
    refused: dict[str, str] = {}
    # Links refused at the entry (grading/links.py): a linked student or assignment folder is refused whole, without
    # reading what it points to; a notebook that is a link or has a second hard link is refused alone.
    whole = refusal(course.submitted, student, assignment, folder=True)
    if whole:
        refused = {f"{nb}.ipynb": whole for nb in notebooks}
        files = {}
    else:
        files = {str(p.relative_to(folder)): p for p in _files(folder) if not p.name.endswith(".verdicts.json")}
        for nb in notebooks:
            why = refusal(course.submitted, student, assignment, f"{nb}.ipynb")
            if why and os.path.lexists(folder / f"{nb}.ipynb"):
                refused[f"{nb}.ipynb"] = why
                files.pop(f"{nb}.ipynb", None)
        for name in [n for n in files if n.endswith(".ipynb") and "/" not in n and n not in refused]:
            if refusal(folder, name):  # another notebook with a second hard link: not a candidate for renaming
                files.pop(name)
    for name, why in refused.items():
        notes.append(f"{name} refused: {why} (graded 0, its target not read)")
    present = {Path(n).stem: n for n in list(files) + list(refused) if n.endswith(".ipynb") and "/" not in n}
    missing = [nb for nb in notebooks if nb not in present]
    others = [stem for stem in present if stem not in notebooks]
    if missing and len(missing) == 1 and len(others) == 1:
        stray = present[others[0]]
        files[f"{missing[0]}.ipynb"] = files.pop(stray)
        notes.append(f"renamed notebook {stray} graded as {missing[0]}.ipynb")
    elif others:
        notes.append(f"ignored notebooks with unknown names: {', '.join(present[o] for o in others)}")
        for o in others:
            files.pop(present[o])
    graded = [n for n in notebooks if f"{n}.ipynb" in files or f"{n}.ipynb" in refused]
    if not graded:
        raise CourseError(f"submitted/{student}/{assignment}/: empty submission: no notebook "
                          f"(expected {', '.join(n + '.ipynb' for n in notebooks)})")
    for n in graded:
        if f"{n}.ipynb" in refused:
            continue
        try:
            nb = read_notebook(files[f"{n}.ipynb"])
        except CourseError as err:
            raise CourseError(str(err).replace(str(course.root) + "/", "")) from None
        if not nb.cells:
            notes.append(f"{n}.ipynb has no cells: every test is restored and graded")
    digest = _sha256(list(files.values()), folder)
    if refused:  # a link made into a file (or removed) is a new submission
        digest = hashlib.sha256((digest + json.dumps(refused, sort_keys=True)).encode()).hexdigest()
    return Task(assignment, student, files, digest, course.assignment_hash(assignment), notes, refused=refused)


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kill a process and everything it started (nbgrader's kernels run in their own sessions)."""
    try:
        import psutil

        try:
            parent = psutil.Process(proc.pid)
            procs = [parent] + parent.children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(procs, timeout=10)
    except ImportError:  # pragma: no cover
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


WORKER_CONFIG = '''\
# Written by `python -m tritoncourse grade`: the course's own configuration, rooted in this private copy.
import os
_course_config = {config!r}
exec(compile(open(_course_config).read(), _course_config, "exec"), dict(globals(), __file__=_course_config))
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.db_url = "sqlite:///" + os.path.join({root!r}, "gradebook.db")
'''


def _error_reason(log: str) -> str:
    """The line of an nbgrader log that says why a learner's grading failed."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback"):
            tail = [line for line in lines[i + 1:] if not line.startswith(("File ", "[", "^", "~"))]
            for line in tail:
                if re.match(r"^[A-Za-z_.]+(Error|Exception|Exit|Interrupt)\b", line):
                    return line[:300]
    for line in reversed(lines):
        if "ERROR" in line or "error" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else "no output"


# IsolatedKernelTests logs one line per test: "<grade_id>: <kind> (<seconds> s, seed <seed>)".
LOG_SEED_RE = re.compile(r"\] (?P<gid>[A-Za-z0-9_.-]+): (?P<kind>[a-z-]+) \([0-9.]+ s, seed (?P<seed>\d+)\)")


def seeds_in_log(log: Path | None) -> dict[str, int]:
    """grade_id -> seed of every kernel test that an nbgrader log says was run (the last run of each)."""
    try:
        text = log.read_text(errors="replace") if log else ""
    except OSError:
        return {}
    return {m["gid"]: int(m["seed"]) for m in LOG_SEED_RE.finditer(text)}


def _failure_message(errors: list) -> str:
    """What a failed test said (its cause and likely fix), without the title and the seed line."""
    if not errors:
        return ""
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0].get("traceback", [])) or errors[0].get("evalue", ""))
    text = re.sub(r"^\w+: ", "", text.strip())
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("[seed ")]
    if len(lines) > 1 and lines[0].startswith("FAILED"):
        lines = lines[1:]
    return "\n".join(lines)[:600]


def verdicts_of(nb_path: Path) -> dict[str, dict]:
    """Each test cell's verdict (ok, kind, seed, message) from an autograded notebook and its verdicts.json."""
    out: dict[str, dict] = {}
    stored = nb_path.with_name(nb_path.stem + ".verdicts.json")
    if stored.exists():
        with contextlib.suppress(ValueError):
            out = {k: dict(v) for k, v in json.loads(stored.read_text()).items()}
    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception:
        return out
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        died = [o for o in cell.get("outputs", []) if o.get("ename") == "DeadKernelError"]
        if died:
            out.setdefault("_notebook", {})["kernel_died_at_cell"] = index
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        gid = meta.get("grade_id", f"cell-{index}")
        text = "\n".join(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
                         for o in cell.get("outputs", []))
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        text += "\n".join("\n".join(o.get("traceback", [])) for o in errors)
        entry = out.setdefault(gid, {})
        entry.setdefault("ok", not errors)
        if "seed" not in entry and (m := SEED_RE.search(text)):
            entry["seed"] = int(m.group(1))
        if not entry["ok"] and not entry.get("message"):
            entry["message"] = _failure_message(errors)
        entry.setdefault("kind", "pass" if entry["ok"] else (errors[0].get("ename", "error") if errors else "fail"))
    return out


class GradingStopped(Exception):
    """Grading cannot go on (its cluster is gone for good): it stops as on Ctrl-C, and a rerun goes on."""


class LocalExecutor:
    """Where private gradings run by default: ``jobs`` threads of this process, each running
    :meth:`Grader.run_one` (a private ``nbgrader autograde`` on this machine).

    The seam for other executors (``distributed.DaskExecutor``): ``submit`` returns a ``concurrent.futures.Future``
    of a :class:`RunResult` whose private course lies in the grader's work folder, ready for :meth:`Grader.merge`,
    which only the grading process calls."""

    poll_seconds: float | None = None  # how often the grading loop calls check() while it waits

    def __init__(self, grader: "Grader"):
        self.grader = grader
        self._pool: ThreadPoolExecutor | None = None

    def describe(self) -> str:
        return f"{self.grader.jobs} at a time ({self.grader.test_workers} test process(es) each)"

    def slots(self, busy: bool = False) -> int:
        """Gradings in flight at once (``busy``: those that can run right now, for the time left)."""
        return self.grader.jobs

    def __enter__(self):
        self._pool = ThreadPoolExecutor(self.grader.jobs)
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True)

    def submit(self, task: Task, template: Path):
        return self._pool.submit(self.grader.run_one, task, template)

    def check(self) -> None:
        pass

    def merged(self, seconds: float) -> None:
        """A result was merged and recorded in ``seconds`` (the coordinator's own work)."""

    def stop(self) -> None:
        self.grader.stop()

    def report(self, say) -> None:
        pass


class Grader:
    """Grades learners in private course copies, merging each result into the real gradebook serially."""

    def __init__(self, course: Course, *, jobs: int = 1, test_workers: int | None = None,
                 notebook_timeout: float = 1800.0, nbgrader_args: list[str] | None = None,
                 out=sys.stdout, executor=None, run_timeout: float = 86400.0):
        self.course = course
        # Where the private gradings run: None, threads on this machine (LocalExecutor); or a Dask cluster
        # (distributed.DaskExecutor). Either way this process alone merges results into the gradebook.
        self.executor = executor
        self.jobs = max(1, jobs)
        self.test_workers = test_workers or max(1, (os.cpu_count() or 1) // self.jobs)
        self.notebook_timeout = notebook_timeout  # one learner's private autograde, then it is killed
        self.run_timeout = run_timeout  # the whole run (0: none), then it stops as on Ctrl-C; a rerun goes on
        self._run_deadline: float | None = None
        self.nbgrader_args = list(nbgrader_args or [])
        self.out = out
        self.state_path = course.state_dir / "state.json"
        self.work_root = course.state_dir / "work"
        self.log_root = course.state_dir / "logs"
        self._procs: dict[str, subprocess.Popen] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    # ---- state
    def load_state(self) -> dict:
        try:
            state = json.loads(self.state_path.read_text())
            if state.get("version") == STATE_VERSION:
                return state
        except (OSError, ValueError):
            pass
        return {"version": STATE_VERSION, "entries": {}}

    def save_state(self, state: dict) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
        os.replace(tmp, self.state_path)

    def is_done(self, entry: dict | None, task: Task, retry_failed: bool) -> bool:
        if not entry or entry.get("submission_hash") != task.submission_hash \
                or entry.get("assignment_hash") != task.assignment_hash:
            return False
        if entry.get("status") == "graded":
            if retry_failed and entry.get("grader_errors"):
                return False
            return (self.course.autograded / task.student / task.assignment).is_dir()
        return entry.get("status") == "failed" and not retry_failed

    # ---- one learner, in a worker thread
    def _snapshot(self) -> Path:
        """A consistent copy of the real gradebook: every private run starts from it."""
        self.work_root.mkdir(parents=True, exist_ok=True)
        return snapshot(self.course.db_url, self.work_root / "gradebook.template.db")

    def run_one(self, task: Task, template: Path) -> RunResult:
        work = self.work_root / f"{task.assignment}__{task.student}"
        if work.exists():
            shutil.rmtree(work)
        sub = work / "submitted" / task.student / task.assignment
        sub.mkdir(parents=True)
        (work / "nbgrader_config.py").write_text(WORKER_CONFIG.format(
            config=str(self.course.root / "nbgrader_config.py"), root=str(work)))
        shutil.copy2(template, work / "gradebook.db")
        if (self.course.source / task.assignment).exists():
            shutil.copytree(self.course.source / task.assignment, work / "source" / task.assignment)
        for name, path in task.submission().items():
            (sub / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(path, bytes):  # a refused notebook's placeholder
                (sub / name).write_bytes(path)
            else:
                shutil.copy2(path, sub / name)
        log = self.log_root / task.assignment / f"{task.student}.attempt{task.attempt + 1}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, *self.autograde_argv(task)]
        start = time.monotonic()
        with open(log, "wb") as fh:
            fh.write(("$ " + " ".join(cmd) + "\n").encode())
            fh.flush()
            with self._lock:  # stop() either sees this process or this thread sees the stop
                if self._stopping.is_set():
                    return RunResult(False, 0.0, "stopped", work, log)
                proc = subprocess.Popen(cmd, cwd=work, env=_nbgrader_env(), stdin=subprocess.DEVNULL,
                                        stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
                self._procs[task.key] = proc
            try:
                proc.wait(timeout=self.notebook_timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_tree(proc)
            finally:
                self._procs.pop(task.key, None)
        seconds = time.monotonic() - start
        if self._stopping.is_set():
            return RunResult(False, seconds, "stopped", work, log)
        return self.outcome(task, work, log, proc.returncode, seconds, timed_out)

    def outcome(self, task: Task, work: Path, log: Path, returncode: int, seconds: float,
                timed_out: bool) -> RunResult:
        """What a private grading in ``work`` came to (here, or on a Dask worker and sent back)."""
        if timed_out:
            return RunResult(False, seconds, f"grading took longer than {self.notebook_timeout:.0f} s and "
                             "was stopped (--notebook-timeout)", work, log)
        autograded = work / "autograded" / task.student / task.assignment
        wanted = [n for n in task.files if n.endswith(".ipynb") and "/" not in n]
        made = all((autograded / n).exists() for n in wanted)
        if returncode != 0 or not made:
            text = log.read_text(errors="replace")
            what = (f"nbgrader exited with signal {signal.Signals(-returncode).name}"
                    if returncode < 0 else f"nbgrader exited {returncode}")
            return RunResult(False, seconds, f"{what}: {_error_reason(text)}", work, log)
        return RunResult(True, seconds, "", work, log)

    def autograde_argv(self, task: Task, test_workers: int | None = None) -> list[str]:
        """The private grading's command after the Python interpreter (each machine puts its own in front)."""
        return ["-m", "nbgrader", "autograde", task.assignment, "--student", task.student, "--force",
                "--log-level=INFO", f"--IsolatedKernelTests.workers={test_workers or self.test_workers}",
                *self.nbgrader_args]

    def reproduce_command(self, task: Task, seeds: dict[str, int]) -> str:
        """The command that grades this learner again in its kept private copy (with a test's seed, if any)."""
        work = (self.work_root / f"{task.assignment}__{task.student}").relative_to(self.course.root)
        seed = f"TRITONCOURSE_SEED={next(iter(seeds.values()))} " if len(set(seeds.values())) == 1 else ""
        return (f"cd {work} && {seed}nbgrader autograde {task.assignment} --student {task.student} --force "
                + " ".join(self.nbgrader_args)).strip()

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            procs = list(self._procs.values())
        for proc in procs:
            _kill_tree(proc)

    # ---- the main process only
    def merge(self, task: Task, work: Path) -> dict:
        """Copy one learner's autograde results into the real gradebook and autograded/; return a summary."""
        import warnings

        from nbgrader.api import Gradebook

        warnings.filterwarnings("ignore", module="nbgrader.api")  # SQLAlchemy's chatter about nbgrader's API
        src = work / "autograded" / task.student / task.assignment
        dest = self.course.autograded / task.student / task.assignment
        dest.parent.mkdir(parents=True, exist_ok=True)
        incoming = dest.parent / f".{task.assignment}.incoming"
        old = dest.parent / f".{task.assignment}.old"
        for p in (incoming, old):
            if p.exists():
                shutil.rmtree(p)
        shutil.copytree(src, incoming)
        if dest.exists():
            os.replace(dest, old)
        os.replace(incoming, dest)
        if old.exists():
            shutil.rmtree(old)

        tests: dict[str, dict] = {}
        with Gradebook(f"sqlite:///{work / 'gradebook.db'}", self.course.course_id) as private, \
                Gradebook(self.course.db_url, self.course.course_id) as real:
            p_sub = private.find_submission(task.assignment, task.student)
            p_student = private.find_student(task.student)
            try:
                real.find_student(task.student)
            except Exception:
                real.add_student(task.student, first_name=p_student.first_name, last_name=p_student.last_name,
                                 email=p_student.email, lms_user_id=p_student.lms_user_id)
            r_sub = real.update_or_create_submission(task.assignment, task.student)
            r_sub.timestamp = p_sub.timestamp
            for p_nb in p_sub.notebooks:
                r_nb = real.find_submission_notebook(p_nb.name, task.assignment, task.student)
                r_nb.late_submission_penalty = p_nb.late_submission_penalty
                r_grades = {g.name: g for g in r_nb.grades}
                for g in p_nb.grades:
                    r_grades[g.name].auto_score = g.auto_score
                    r_grades[g.name].needs_manual_grade = g.needs_manual_grade
                    tests[g.name] = {"score": g.score, "max_score": g.max_score, "notebook": p_nb.name,
                                     "auto": g.auto_score is not None and g.cell_type == "code"}
                r_comments = {c.name: c for c in r_nb.comments}
                for cm in p_nb.comments:
                    r_comments[cm.name].auto_comment = cm.auto_comment
            real.db.commit()
            score, max_score = r_sub.score, r_sub.max_score
        verdicts = {}
        for nb_file in sorted(dest.glob("*.ipynb")):
            verdicts.update(verdicts_of(nb_file))
        for gid, v in verdicts.items():
            if gid in tests:
                tests[gid].update({k: v[k] for k in ("ok", "kind", "seed", "message") if k in v})
        failures = {gid: t for gid, t in tests.items() if t["auto"] and t["score"] < t["max_score"]}
        return {"score": score, "max_score": max_score, "tests": tests,
                "failed_tests": {gid: {"seed": t.get("seed"), "kind": t.get("kind", ""),
                                       "message": t.get("message") or ""}
                                 for gid, t in failures.items()},
                "kernel_died_at_cell": verdicts.get("_notebook", {}).get("kernel_died_at_cell"),
                # Tests the grader itself could not judge (nbgrader_plugin's "grader-error" verdicts): not the
                # learner's fault, so retried once and reported to the instructor, never silently a 0.
                "grader_errors": sorted(gid for gid, t in tests.items() if t.get("kind") == "grader-error")}

    def plan(self, assignments: list[str] | None, students: list[str] | None) -> tuple[list[tuple[str, str, list[str]]], list[str]]:
        """(assignment, student, notebooks) to consider, after checking every name; CourseError on bad names."""
        released = self.course.released_assignments()
        if assignments:
            for a in assignments:
                self.course.check_assignment(a)
        else:
            assignments = [a for a in released if self.course.submitters(a)]
            if not assignments:
                raise CourseError("Nothing to grade: no submitted/<student>/<assignment>/ folder "
                                  "(collect the notebooks first: python -m tritoncourse collect).")
        pairs = []
        for a in assignments:
            who = self.course.submitters(a)
            if students:
                pairs += [(a, s, released[a]) for s in students if s in who]
            else:
                pairs += [(a, s, released[a]) for s in who]
        if students:
            unknown = [s for s in students if not any(p[1] == s for p in pairs)]
            if unknown:
                names = sorted({s for a in assignments for s in self.course.submitters(a)})
                raise CourseError(f"No submission from {', '.join(unknown)} for {', '.join(assignments)} "
                                  f"(no submitted/<student>/<assignment>/ folder). Learners who submitted: "
                                  f"{', '.join(names) or 'none'}.")
        return pairs, assignments

    def grade(self, assignments: list[str] | None = None, students: list[str] | None = None, *,
              force: bool = False, retry_failed: bool = False) -> int:
        self._run_deadline = time.monotonic() + self.run_timeout if self.run_timeout and self.run_timeout > 0 else None
        pairs, assignments = self.plan(assignments, students)
        from ..grading import sandbox

        try:  # every learner's code runs in the grading sandbox: without it, nothing is graded
            sandboxed = sandbox.require()
        except sandbox.SandboxUnavailable as err:
            raise CourseError(str(err)) from None
        self._print(sandbox.status() if sandboxed else "Grading UNSANDBOXED (opted out): learners can forge grades.")
        self.course.state_dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.course.state_dir / "lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CourseError("Another `tritoncourse grade` is running in this course (only one process may "
                              "write the gradebook); wait for it, or stop it.") from None
        try:
            return self._grade(pairs, force=force, retry_failed=retry_failed)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _wait_seconds(self, poll: float | None) -> float | None:
        """How long the grading loop may wait for a grading to finish: the executor's poll interval, never past the
        run's bound."""
        if self._run_deadline is None:
            return poll
        left = max(0.0, self._run_deadline - time.monotonic())
        return left if poll is None else min(poll, left)

    def _grade(self, pairs, *, force: bool, retry_failed: bool) -> int:
        state = self.load_state()
        entries = state["entries"]
        queue: deque[Task] = deque()
        skipped = bad = 0
        for assignment, student, notebooks in pairs:
            key = f"{assignment}/{student}"
            try:
                task = prepare(self.course, assignment, student, notebooks)
            except CourseError as err:
                prev = entries.get(key, {})
                if prev.get("status") == "failed" and prev.get("reason") == str(err):
                    skipped += 1
                    continue
                entries[key] = {"status": "failed", "reason": str(err), "attempts": 0, "seconds": 0,
                                "graded_at": time.strftime("%Y-%m-%d %H:%M:%S"), "submission_hash": "",
                                "assignment_hash": self.course.assignment_hash(assignment)}
                self._print(f"FAILED  {key}: {err}")
                bad += 1
                continue
            if not force and self.is_done(entries.get(key), task, retry_failed):
                skipped += 1
                continue
            queue.append(task)
        self.save_state(state)
        total = len(queue)
        pool = self.executor if self.executor is not None else LocalExecutor(self)
        self._print(f"{total} notebook(s) to grade, {skipped} already done, {pool.describe()}; state: "
                    f"{self.state_path.relative_to(self.course.root)}")
        if not total:
            return self._summary(state, pairs, 0, 0.0)
        template = self._snapshot()
        done = failures = 0
        times: list[float] = []
        start = time.monotonic()
        running: dict = {}
        old_term = _on_sigterm_interrupt()
        try:
            with pool:
                try:
                    while queue or running:
                        if self._run_deadline is not None and time.monotonic() >= self._run_deadline:
                            raise GradingStopped(f"the run passed its bound of {self.run_timeout:g} s (--run-timeout)"
                                                 "; its gradings were stopped.")
                        while queue and len(running) < pool.slots():
                            task = queue.popleft()
                            running[pool.submit(task, template)] = task
                        finished, _ = wait(running, timeout=self._wait_seconds(pool.poll_seconds),
                                           return_when=FIRST_COMPLETED)
                        pool.check()  # GradingStopped when the cluster is gone for good
                        for fut in finished:
                            task = running.pop(fut)
                            result = fut.result()
                            key = task.key
                            merge_start = time.perf_counter()
                            if result.ok:
                                try:
                                    summary = self.merge(task, result.work)
                                except Exception as err:  # a broken private result: retried like a crash
                                    result = RunResult(False, result.seconds, f"merge failed: {type(err).__name__}: "
                                                       f"{err}", result.work, result.log)
                                else:
                                    if summary["grader_errors"] and task.attempt == 0:
                                        result = RunResult(False, result.seconds, "the grader failed on "
                                                           f"{', '.join(summary['grader_errors'])}", result.work,
                                                           result.log)
                            if not result.ok and task.attempt == 0:
                                self._print(f"RETRY   {key}: {result.reason} (log: "
                                            f"{result.log.relative_to(self.course.root)})")
                                task.attempt += 1
                                queue.append(task)
                                continue
                            done += 1
                            times.append(result.seconds)
                            entry = {"submission_hash": task.submission_hash,
                                     "assignment_hash": task.assignment_hash, "attempts": task.attempt + 1,
                                     "seconds": round(result.seconds, 1), "notes": task.notes,
                                     "graded_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                                     "log": str(result.log.relative_to(self.course.root))}
                            if result.worker:
                                entry["worker"] = result.worker
                            if result.ok:
                                entry.update(status="graded", **summary)
                                shutil.rmtree(result.work, ignore_errors=True)
                                what = f"{summary['score']:g}/{summary['max_score']:g}"
                                if summary["failed_tests"]:
                                    what += f", {len(summary['failed_tests'])} test(s) failed"
                                if summary.get("kernel_died_at_cell") is not None:
                                    what += f", kernel died at cell {summary['kernel_died_at_cell']}"
                                if summary["grader_errors"]:
                                    what += f", GRADER ERROR in {', '.join(summary['grader_errors'])} (twice)"
                            else:
                                failures += 1
                                seeds = seeds_in_log(result.log)
                                entry.update(status="failed", reason=result.reason, seeds=seeds,
                                             work=str(result.work.relative_to(self.course.root)),
                                             reproduce=self.reproduce_command(task, seeds))
                                what = f"FAILED twice: {result.reason}"
                                if seeds:
                                    what += " (seeds: " + ", ".join(f"{g}={v}" for g, v in seeds.items()) + ")"
                            entries[key] = entry
                            self.save_state(state)
                            pool.merged(time.perf_counter() - merge_start)
                            left = len(queue) + len(running)
                            mean = sum(times) / len(times)
                            eta = mean * left / max(1, pool.slots(busy=True))
                            where = f" on {result.worker}" if result.worker else ""
                            self._print(f"[{done}/{total}] {key}: {what} ({result.seconds:.1f} s{where})"
                                        f"{'; ' if task.notes else ''}"
                                        f"{'; '.join(task.notes)} | left {left}, failures {failures + bad}, "
                                        f"elapsed {_clock(time.monotonic() - start)}, ~{_clock(eta)} to go")
                except (KeyboardInterrupt, GradingStopped) as err:
                    pool.stop()
                    for fut in running:
                        fut.cancel()
                    self.save_state(state)
                    why = f"{err} " if isinstance(err, GradingStopped) else ""
                    self._print(f"Stopped: {why}{done} graded this run, {len(queue) + len(running)} left. "
                                "Run the same command again to go on (what is done is not graded again).")
                    return 130 if isinstance(err, KeyboardInterrupt) else 3
        finally:
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
        wall = time.monotonic() - start
        with contextlib.suppress(FileNotFoundError):
            template.unlink()
        self._print(f"Graded {done} notebook(s) in {_clock(wall)} ({wall / max(done, 1):.1f} s per notebook "
                    f"wall, {sum(times) / max(len(times), 1):.1f} s each, {pool.slots(busy=True)} at a time)")
        pool.report(self._print)
        return self._summary(state, pairs, done, wall)

    def _summary(self, state: dict, pairs, done: int, wall: float) -> int:
        failed = [(f"{a}/{s}", state["entries"][f"{a}/{s}"]) for a, s, _ in pairs
                  if state["entries"].get(f"{a}/{s}", {}).get("status") == "failed"]
        for key, entry in failed:
            self._print(f"  failed: {key}: {entry.get('reason')}"
                        + (f" (log: {entry['log']})" if entry.get("log") else ""))
        if failed:
            self._print(f"{len(failed)} learner(s) could not be graded; fix the cause and rerun with "
                        "--retry-failed (or --students NAME --force).")
        unsure = [(f"{a}/{s}", state["entries"][f"{a}/{s}"]) for a, s, _ in pairs
                  if state["entries"].get(f"{a}/{s}", {}).get("grader_errors")]
        for key, entry in unsure:
            self._print(f"  grader error: {key}: {', '.join(entry['grader_errors'])} scored 0 because the grader "
                        f"failed, not the learner (log: {entry.get('log')}); rerun with --retry-failed")
        return 1 if failed or unsure else 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _on_sigterm_interrupt():
    """SIGTERM stops a run like Ctrl-C (children killed, state saved); None outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _interrupt)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


def default_jobs() -> int:
    """Notebooks graded at once: one per core, at most one per 2 GiB of memory (a kernel and a test
    process with torch each take a few hundred MB)."""
    cores = os.cpu_count() or 1
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = 2.0 * cores
    return max(1, min(cores, int(mem // 2)))


# ------------------------------------------------------------------------------------------ export

def export_csv(course: Course, out: Path, assignments: list[str] | None = None) -> int:
    """One row per learner and assignment: status, score, every test's score, failed tests with seeds."""
    from nbgrader.api import Gradebook, MissingEntry

    released = course.released_assignments()
    for a in assignments or []:
        course.check_assignment(a)
    assignments = assignments or list(released)
    state = Grader(course).load_state()["entries"]
    rows, columns = [], []
    with Gradebook(course.db_url, course.course_id) as gb:
        students = sorted({s.id for s in gb.students} | {k.split("/", 1)[1] for k in state
                                                         if k.split("/", 1)[0] in assignments})
        for a in assignments:
            assignment = gb.find_assignment(a)
            cells = [(nb.name, gc.name, gc.max_score) for nb in assignment.notebooks for gc in nb.grade_cells]
            prefix = len(assignments) > 1
            col = {(nb, g): (f"{a}:{g}" if prefix else g) for nb, g, _ in cells}
            columns += [col[(nb, g)] for nb, g, _ in cells]
            for s in students:
                entry = state.get(f"{a}/{s}", {})
                row = {"student": s, "assignment": a, "max_score": assignment.max_score}
                try:
                    sub = gb.find_submission(a, s)
                except MissingEntry:
                    sub = None
                if sub is None:
                    row.update(status="failed" if entry.get("status") == "failed" else "no submission", score=0)
                else:
                    row.update(status="failed" if entry.get("status") == "failed" else "graded",
                               score=sub.score, needs_manual_grade=sub.needs_manual_grade,
                               late_penalty=sub.late_submission_penalty)
                    for nb in sub.notebooks:
                        for g in nb.grades:
                            row[col[(nb.name, g.name)]] = g.score
                row["failed_tests"] = " ".join(f"{gid}(seed={v.get('seed')})"
                                               for gid, v in sorted(entry.get("failed_tests", {}).items()))
                row["reason"] = entry.get("reason", "")
                row["notes"] = "; ".join(entry.get("notes", []))
                rows.append(row)
    fields = ["student", "assignment", "status", "score", "max_score", "needs_manual_grade", "late_penalty",
              *columns, "failed_tests", "reason", "notes"]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{out}: {len(rows)} row(s), {len(assignments)} assignment(s)")
    return 0


# ------------------------------------------------------------------------------------------ handouts

HANDOUT_EXCLUDE = ("source/", "tests/", "tools/", ".ci/", "autograded/", "submitted/", "feedback/",
                   "solution/", "downloaded/", "results/gpu-run/", "docs/INSTRUCTORS.md")
def learner_secrets(course: Course) -> tuple[set[str], set[str]]:
    """(solution lines, hidden test lines) of every ``source/`` notebook that appear nowhere outside those
    regions of any source notebook: what a learner's copy must never hold. Judged from ``source/`` alone, so
    that a leaky ``release/`` cannot make its own leaks look public."""
    public, solution, hidden = [], [], []
    for a in course.source_assignments():
        for src in sorted((course.source / a).glob("*.ipynb")):
            for cell in nbformat.read(src, as_version=4).cells:
                p, s, h = split_regions(cell.source)
                public += p
                solution += s
                hidden += h
    seen = normal("\n".join(public))

    def secret(lines):
        return {n for n in (normal(line) for line in lines)
                if len(n) >= 8 and not n.startswith(GENERIC) and n not in seen}

    return secret(solution), secret(hidden)


def handout_problems(course: Course, files: list[Path]) -> list[str]:
    """Why these files must not go to learners: solutions, hidden tests, gradebooks, graded work."""
    solutions, secrets = learner_secrets(course)
    problems = []
    for f in files:
        rel = f.relative_to(course.root) if f.is_relative_to(course.root) else f
        if f.suffix == ".db" or f.name.startswith("gradebook"):
            problems.append(f"{rel}: a gradebook")
            continue
        if str(rel).startswith(HANDOUT_EXCLUDE):
            problems.append(f"{rel}: instructor-only folder")
            continue
        if f.suffix not in (".ipynb", ".md"):  # the package's checks legitimately share lines with the tests
            continue
        text = f.read_text(errors="replace")
        hits = []
        if f.suffix == ".ipynb":  # markers are only secrets in notebooks (the grading code names them)
            with contextlib.suppress(ValueError, KeyError, TypeError):
                cells = json.loads(text)["cells"]
                text = "\n".join("".join(c.get("source", "")) + "\n" + "\n".join(
                    "".join(o.get("text", "")) for o in c.get("outputs", [])) for c in cells)
            hits += [f"the marker {m!r}" for m in SECRET_MARKERS if m in text]
        joined = " ".join(text.split())
        for kind, lines in (("solution line", solutions), ("hidden test line", secrets)):
            found = sorted(s for s in lines if s in joined)
            if found:
                hits.append(f"{len(found)} {kind}(s), e.g. {found[0]!r}")
        if hits:
            problems.append(f"{rel}: contains {'; '.join(hits)}")
    return problems


def make_handout(course: Course, out: Path) -> int:
    """Copy what learners get (tracked files minus the instructor's) to ``out`` and check it holds no
    solutions, hidden tests or gradebook."""
    listed = subprocess.run(["git", "ls-files"], cwd=course.root, capture_output=True, text=True)
    if listed.returncode != 0:
        print("`git ls-files` failed: run this in the course's git clone.")
        return 2
    names = [n for n in listed.stdout.splitlines() if n and not n.startswith(HANDOUT_EXCLUDE)
             and not n.endswith(".db") and (course.root / n).is_file()]
    problems = handout_problems(course, [course.root / n for n in names])
    if problems:
        print("Not written: these files would give learners what they must not have:")
        for p in problems:
            print("  " + p)
        return 1
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        print(f"{out} is not empty: choose a new folder.")
        return 2
    for n in names:
        (out / n).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(course.root / n, out / n)
    print(f"{out}: {len(names)} files for learners (release notebooks, the course package, set-up); "
          "no source/, tests/, gradebook, solutions or hidden tests.")
    return 0


def make_solutions(course: Course, assignment: str, out: Path | None = None) -> int:
    """After the deadline: the source notebook with solutions and model answers, without hidden tests,
    grading rubrics kept, outputs cleared -> ``solution/<assignment>/``."""
    course.check_assignment(assignment)
    out = Path(out) if out else course.root / "solution" / assignment
    out.mkdir(parents=True, exist_ok=True)
    for src in sorted((course.source / assignment).glob("*.ipynb")):
        nb = nbformat.read(src, as_version=4)
        for cell in nb.cells:
            cell.source = split_hidden(cell.source)[0]
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, out / src.name)
        print(f"{out / src.name}: solutions, no hidden tests")
    return 0

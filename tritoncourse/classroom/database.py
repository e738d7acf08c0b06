"""Where the course's nbgrader gradebook lives, and the copies of it that private gradings start from.

nbgrader keeps its gradebook wherever ``c.CourseDirectory.db_url`` says: SQLite (``gradebook.db`` in the course
directory, the default) or any database SQLAlchemy reaches, PostgreSQL for a course that outgrows one file
(``postgresql+psycopg://USER@HOST:5432/DBNAME``; this course's ``nbgrader_config.py`` takes the URL from the
``TRITONCOURSE_DB_URL`` environment variable when it is set). Every command of the course reads the URL from the
course's own ``nbgrader_config.py``, so ``nbgrader`` and ``python -m tritoncourse`` always use the same gradebook.

A private grading (``Grader.run_one``, or a Dask worker) never touches the real gradebook: it runs plain
``nbgrader autograde`` against a SQLite copy. :func:`snapshot` takes that copy once, consistently, from either
kind of database; :func:`learner_copy` trims it to one learner's rows of one assignment (what that learner's
autograde reads and writes), which is what a Dask task carries to its worker.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import tempfile
from pathlib import Path

DB_URL_ENV = "TRITONCOURSE_DB_URL"


def db_url_of(root: Path) -> str:
    """The gradebook URL of the course in ``root``: ``TRITONCOURSE_DB_URL``, else ``c.CourseDirectory.db_url`` of its
    ``nbgrader_config.py`` (read as nbgrader reads it), else nbgrader's default ``gradebook.db`` in ``root``."""
    env = os.environ.get(DB_URL_ENV)
    if env:
        return env
    default = f"sqlite:///{Path(root) / 'gradebook.db'}"
    config = Path(root) / "nbgrader_config.py"
    if not config.exists():
        return default
    from traitlets.config.loader import PyFileConfigLoader

    try:
        with contextlib.redirect_stdout(None):
            cfg = PyFileConfigLoader(config.name, path=str(config.parent)).load_config()
        url = cfg.CourseDirectory.get("db_url") if "CourseDirectory" in cfg else None
    except Exception:  # nbgrader itself only logs a broken config file and goes on with its defaults
        return default
    return str(url) if url else default


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for any other database)."""
    if not url.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    return Path(database) if database and database != ":memory:" else None


def describe(url: str) -> str:
    """The URL without its password, for messages and logs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]


def query(url: str, sql: str) -> list[tuple] | None:
    """Rows of a read-only query; None when the gradebook does not exist yet (no file, or no tables)."""
    path = sqlite_path(url)
    if path is not None:
        if not path.exists():
            return None
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
            try:
                return con.execute(sql).fetchall()
            except sqlite3.OperationalError as err:
                if "no such table" in str(err):
                    return None
                raise
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(url)
    try:
        with engine.connect() as con:
            if not inspect(con).has_table("assignment"):
                return None
            return [tuple(r) for r in con.execute(text(sql)).fetchall()]
    finally:
        engine.dispose()


def snapshot(url: str, dest: Path) -> Path:
    """A consistent SQLite copy of the gradebook at ``url`` in ``dest``: SQLite's online backup for a SQLite
    gradebook; for any other database every table of nbgrader's schema, read in one repeatable-read transaction
    and written through nbgrader's own models (so the copy has exactly nbgrader's schema and alembic version)."""
    with contextlib.suppress(FileNotFoundError):
        dest.unlink()
    path = sqlite_path(url)
    if path is not None:
        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        dst = sqlite3.connect(dest)
        with dst:
            src.backup(dst)
        src.close()
        dst.close()
        return dest
    import warnings

    from nbgrader.api import Base, Gradebook
    from sqlalchemy import create_engine, insert, select, text

    warnings.filterwarnings("ignore", module="nbgrader.api")
    bindir = str(Path(sys.executable).parent)  # nbgrader runs `alembic` as a command: this Python's first
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    with Gradebook(f"sqlite:///{dest}"):  # nbgrader's tables and its alembic version
        pass
    source = create_engine(url)
    target = create_engine(f"sqlite:///{dest}")
    try:
        with source.connect().execution_options(isolation_level="REPEATABLE READ") as src, target.begin() as dst:
            for table in reversed(Base.metadata.sorted_tables):  # what Gradebook() put in (a default course)
                dst.execute(table.delete())
            for table in Base.metadata.sorted_tables:  # parents before children
                rows = [dict(r) for r in src.execute(select(table)).mappings()]
                if rows:
                    dst.execute(insert(table), rows)
            version = src.execute(text("SELECT version_num FROM alembic_version")).scalar()
            if version:
                dst.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": version})
    finally:
        source.dispose()
        target.dispose()
    return dest


# Every row that belongs to a submission other than (assignment, student), child tables first; then the other
# learners and the other assignments' definitions. What remains is what autograde of that one learner reads.
_TRIM = [
    "DELETE FROM grade WHERE notebook_id IN (SELECT sn.id FROM submitted_notebook sn JOIN submitted_assignment sa "
    "ON sn.assignment_id = sa.id WHERE sa.student_id != :student OR sa.assignment_id != :aid)",
    "DELETE FROM comment WHERE notebook_id IN (SELECT sn.id FROM submitted_notebook sn JOIN submitted_assignment sa "
    "ON sn.assignment_id = sa.id WHERE sa.student_id != :student OR sa.assignment_id != :aid)",
    "DELETE FROM submitted_notebook WHERE assignment_id IN (SELECT id FROM submitted_assignment "
    "WHERE student_id != :student OR assignment_id != :aid)",
    "DELETE FROM submitted_assignment WHERE student_id != :student OR assignment_id != :aid",
    "DELETE FROM student WHERE id != :student",
    "DELETE FROM grade_cells WHERE id IN (SELECT b.id FROM base_cell b JOIN notebook n ON b.notebook_id = n.id "
    "WHERE n.assignment_id != :aid)",
    "DELETE FROM solution_cells WHERE id IN (SELECT b.id FROM base_cell b JOIN notebook n ON b.notebook_id = n.id "
    "WHERE n.assignment_id != :aid)",
    "DELETE FROM task_cells WHERE id IN (SELECT b.id FROM base_cell b JOIN notebook n ON b.notebook_id = n.id "
    "WHERE n.assignment_id != :aid)",
    "DELETE FROM base_cell WHERE notebook_id IN (SELECT id FROM notebook WHERE assignment_id != :aid)",
    "DELETE FROM source_cell WHERE notebook_id IN (SELECT id FROM notebook WHERE assignment_id != :aid)",
    "DELETE FROM notebook WHERE assignment_id != :aid",
    "DELETE FROM assignment WHERE id != :aid",
]


def learner_copy(template: Path, assignment: str, student: str) -> bytes:
    """The bytes of a SQLite gradebook holding what ``nbgrader autograde ASSIGNMENT --student STUDENT`` reads and
    writes (the assignment's definitions, the learner and that learner's own earlier submission of it), cut
    from ``template`` (a :func:`snapshot`). Other learners' rows never leave the coordinator."""
    with tempfile.TemporaryDirectory(prefix="tc-gradebook-") as tmp:
        out = Path(tmp) / "gradebook.db"
        src = sqlite3.connect(f"file:{template}?mode=ro", uri=True)
        dst = sqlite3.connect(out)
        with dst:
            src.backup(dst)
        src.close()
        try:
            row = dst.execute("SELECT id FROM assignment WHERE name = ?", (assignment,)).fetchone()
            aid = row[0] if row else ""
            with dst:
                for sql in _TRIM:
                    dst.execute(sql, {"student": student, "aid": aid})
            dst.execute("VACUUM")
        finally:
            dst.close()
        return out.read_bytes()

"""hub/tritonhub.py's ``backup DIR`` and ``restore BACKUP``: what a class would lose with the machine's disk (the
gradebook, the course directory, nbgrader's exchange, each learner's home and the roster), copied while the hub runs,
and put back by root with the hub stopped. docs/JUPYTERHUB.md, "Backup and restore".

Standard library only, as hub/tritonhub.py (run as root with any Python 3.10+; Debian 12's 3.11.2 has no tarfile
extraction filters: the checks of each member's name and type here do not need them, and the filter adds its own where
it exists).
"""
from __future__ import annotations

import csv
import grp
import json
import os
import pwd
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import time
import urllib.parse
from pathlib import Path

import exchange_service
from tritonhub_accounts import USER_ID, add_account, user_exists
from tritonhub_common import Settings, as_user
from tritonhub_ops import running_pid

MANIFEST = "backup.json"  # where each tarball came from, and whose homes are in homes.tar.gz
SKIPPED = ("gradebook.db-journal", "gradebook.db-wal")  # the live gradebook's side files: gradebook.db is copied apart


def learners(settings: Settings) -> dict[str, str]:
    """The learners' group's members (name -> home): the accounts ``tritonhub.py users`` made."""
    try:
        members = grp.getgrnam(settings.learners_group).gr_mem
    except KeyError:
        return {}
    return {name: pwd.getpwnam(name).pw_dir for name in sorted(members) if user_exists(name)}


def _students(gradebook: Path) -> dict[str, dict]:
    """The gradebook's students (id -> names and e-mail), for the roster; empty without a SQLite gradebook."""
    if not gradebook.exists():
        return {}
    db = sqlite3.connect(f"file:{gradebook}?mode=ro", uri=True)
    try:
        rows = db.execute("select id, first_name, last_name, email from student").fetchall()
    except sqlite3.Error:
        rows = []
    finally:
        db.close()
    return {r[0]: {"first_name": r[1] or "", "last_name": r[2] or "", "email": r[3] or ""} for r in rows}


def hidden(url: str) -> str:
    """``url`` without its password, for messages and the manifest."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    return parts._replace(netloc=netloc[0].split(":", 1)[0] + ":***@" + netloc[1]).geturl()


def gradebook_url(settings: Settings) -> str:
    """The gradebook's URL: root's TRITONCOURSE_DB_URL when set, else the instructor's configuration, the course's
    ``nbgrader_config.py`` as nbgrader reads it (tritoncourse.classroom.database.db_url_of), evaluated by the hub
    venv's Python run as the instructor: the file is theirs, so root never executes it."""
    url = os.environ.get("TRITONCOURSE_DB_URL", "")
    course = settings.course_dir
    if url or not (course / "nbgrader_config.py").exists():
        return url or f"sqlite:///{course / 'gradebook.db'}"
    code = ("import sys; from pathlib import Path; from tritoncourse.classroom.database import db_url_of; "
            "print(db_url_of(Path(sys.argv[1])))")
    r = as_user(settings.instructor, [f"{settings.venv}/bin/python", "-I", "-B", "-c", code, str(course)], settings,
                cwd=course, capture_output=True, text=True, check=False)
    lines = r.stdout.split()
    if r.returncode != 0 or not lines:
        sys.exit(f"tritonhub: the gradebook's URL could not be read from {course / 'nbgrader_config.py'} as "
                 f"{settings.instructor}:\n{r.stderr.strip()[-1500:]}")
    return lines[-1]


def pg_command(tool: str, url: str, *args: str) -> tuple[list[str], dict]:
    """``tool`` (pg_dump, pg_restore, psql) on the PostgreSQL database of ``url``
    (postgresql[+driver]://user:password@host:port/db): the argument list names host, port, user and database; the
    password travels in the child's environment (PGPASSWORD), never in its arguments, which every user of the machine
    can read (ps, /proc/PID/cmdline)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme.startswith("postgresql") or not parts.path.strip("/"):
        raise ValueError("not a PostgreSQL database URL")
    argv = [tool, "-h", parts.hostname or "localhost", "-p", str(parts.port or 5432), "-d",
            urllib.parse.unquote(parts.path.strip("/"))]
    if parts.username:
        argv += ["-U", urllib.parse.unquote(parts.username)]
    env = dict(os.environ)
    env.pop("TRITONCOURSE_DB_URL", None)
    if parts.password is not None:
        env["PGPASSWORD"] = urllib.parse.unquote(parts.password)
    return argv + list(args), env


def _pg_dump(url: str, out: Path) -> None:
    """The database of ``url`` in pg_dump's custom format in ``out`` (mode 0600), for pg_restore."""
    argv, env = pg_command("pg_dump", url, "--format=custom")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        r = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, env=env, text=True)
    if r.returncode != 0:
        sys.exit(f"tritonhub: pg_dump of {hidden(url)} failed: {r.stderr.strip()[-1500:]}")


def backup(settings: Settings, dest: Path) -> Path:
    """A consistent copy of the gradebook the instructor's configuration names (:func:`gradebook_url`): SQLite's
    through its backup API while the hub may be writing it, PostgreSQL's by ``pg_dump`` in its custom format
    (``gradebook.pgdump``); tarballs of the course directory (source, submitted, autograded, feedback), of nbgrader's
    exchange and of every learner's home (links stored as links, never followed; owners and modes kept), and the
    roster (``roster.csv``: the learners' group with the gradebook's names), in a new folder
    ``DEST/tritonhub-backup-<date>-<time>`` (root only). Returns that folder."""
    out = Path(dest) / time.strftime("tritonhub-backup-%Y%m%d-%H%M%S")
    out.mkdir(mode=0o700, parents=True)
    os.chmod(out, 0o700)
    course = settings.course_dir
    url = gradebook_url(settings)
    db = Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None
    if url.startswith("postgresql"):
        _pg_dump(url, out / "gradebook.pgdump")
    elif db is not None and db.exists():
        src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        dst = sqlite3.connect(out / "gradebook.db")
        with dst:
            src.backup(dst)
        src.close()
        dst.close()
    else:
        print(f"tritonhub: no gradebook backed up: {hidden(url)} (nothing generated yet?)", file=sys.stderr)
    homes = learners(settings)
    trees = [("course", course, course.name), ("exchange", Path(settings.exchange), Path(settings.exchange).name)]
    for name, folder, arcname in trees:
        if folder.is_dir():
            with tarfile.open(out / f"{name}.tar.gz", "w:gz") as tar:
                tar.add(folder, arcname=arcname, filter=lambda info: None if info.name.endswith(SKIPPED) else info)
    with tarfile.open(out / "homes.tar.gz", "w:gz") as tar:
        for name, home in homes.items():
            if Path(home).is_dir():
                tar.add(home, arcname=name)
    students = _students(out / "gradebook.db")
    with open(out / "roster.csv", "w", newline="") as f:
        roster = csv.writer(f)
        roster.writerow(["id", "first_name", "last_name", "email"])
        roster.writerows([n, *students.get(n, {}).values()] for n in homes)
    (out / MANIFEST).write_text(json.dumps({
        "course": str(course), "exchange": settings.exchange, "course_id": settings.course_id, "gradebook": hidden(url),
        "instructor": settings.instructor, "homes": homes, "made": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1))
    for path in out.iterdir():
        os.chmod(path, 0o600)
    print(f"tritonhub: backup in {out}: " + ", ".join(sorted(p.name for p in out.iterdir())))
    return out


# ---------------------------------------------------------------------------------------------------- restore

def _set_aside(path: Path, stamp: str) -> Path | None:
    """``path`` renamed to ``<path>.before-restore-<stamp>`` (nothing is deleted); None when it was not there."""
    if not os.path.lexists(path):
        return None
    aside = path.with_name(f"{path.name}.before-restore-{stamp}")
    os.rename(path, aside)
    print(f"tritonhub: {path} set aside as {aside}")
    return aside


def _kept_as_it_was(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
    """tarfile's ``tar`` filter (no absolute name, none leaving the destination, even through a link), but the mode
    kept as :func:`_extract` left it (the filter would also clear group and other write, and sticky bits)."""
    return tarfile.tar_filter(member, path).replace(mode=member.mode, deep=False)


def _owned_by_name(member: tarfile.TarInfo) -> str | None:
    """The member's owner and group by name, never by number: uids differ between machines, and tarfile falls back to
    the stored number for a name this machine has not (a deleted account's number may be another user's here). Such
    an owner or group becomes root; returns the unknown name then."""
    unknown = None
    for name, number, lookup in (("uname", "uid", pwd.getpwnam), ("gname", "gid", grp.getgrnam)):
        try:
            lookup(getattr(member, name) or "")
        except KeyError:
            unknown = unknown or getattr(member, name) or f"#{getattr(member, number)}"
            setattr(member, name, "root")
            setattr(member, number, 0)
    return unknown


def _extract(tarball: Path, top: str, dest: Path, check_only: bool = False) -> bool:
    """Every member of ``tarball`` under its top folder ``top``, extracted as ``dest`` (a path that does not exist
    yet), owners by name (:func:`_owned_by_name`) and modes kept; False when ``top`` is not there. A name leaving
    ``top``, an absolute path, a path through a link, or a device is refused, whether extracting or ``check_only``
    (tarfile's ``tar`` filter checks the names again as it extracts)."""
    with tarfile.open(tarball) as tar:
        members, links, strangers = [], set(), {}
        for member in tar.getmembers():
            if not (member.name == top or member.name.startswith(top + "/")):
                continue  # another learner's home
            if os.path.normpath(member.name).split("/")[0] != top:
                sys.exit(f"tritonhub: {tarball} holds {member.name!r}, outside {top}/: not restored")
            if member.ischr() or member.isblk() or member.isfifo():
                sys.exit(f"tritonhub: {tarball} holds a device or pipe, {member.name!r}: not restored")
            if any(member.name.startswith(link + "/") for link in links):
                sys.exit(f"tritonhub: {tarball} holds {member.name!r}, through a link: not restored")
            if member.issym():
                links.add(member.name)
            if member.islnk() and not member.linkname.startswith(top + "/"):
                sys.exit(f"tritonhub: {tarball} holds {member.name!r}, a hard link out of {top}/: not restored")
            member.name = dest.name + member.name[len(top):]
            member.mode &= ~0o6000  # no setuid or setgid file comes back
            if member.islnk():  # a hard link names another member
                member.linkname = dest.name + member.linkname[len(top):]
            if (stranger := _owned_by_name(member)) is not None:
                strangers.setdefault(stranger, []).append(member.name)
            members.append(member)
        if not members or check_only:
            return bool(members)
        safe = {"filter": _kept_as_it_was} if hasattr(tarfile, "tar_filter") else {}  # Python 3.11.4+, 3.10.12+
        tar.extractall(dest.parent, members=members, **safe)
        for name, paths in strangers.items():
            print(f"tritonhub: {len(paths)} path(s) of {top} belonged to {name}, an account or group this machine "
                  f"has not: root's now, e.g. {dest.parent / paths[0]}")
        return True


def _restore_postgres(dump: Path, url: str) -> None:
    """The backup's gradebook loaded by ``pg_restore`` (``psql`` for the plain SQL of older backups) into the database
    of ``url``, which must be empty (no table, view or sequence: nothing there is overwritten), in one transaction: a
    failure leaves it empty."""
    count = ("select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace "
             "where n.nspname <> 'information_schema' and n.nspname !~ '^pg_'")
    argv, env = pg_command("psql", url, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", count)
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tritonhub: {hidden(url)} could not be read, nothing restored:\n{r.stderr.strip()[-1500:]}")
    if int(r.stdout.strip() or 0):
        sys.exit(f"tritonhub: the database {hidden(url)} is not empty ({r.stdout.strip()} tables, views or "
                 "sequences): restore loads the gradebook only into an empty one, so nothing is overwritten. Make "
                 "one (as PostgreSQL's admin: CREATE DATABASE ... OWNER ...; or DROP DATABASE and create it again, "
                 "once its contents are no longer needed), then restore again. Nothing was restored.")
    if dump.suffix == ".sql":
        argv, env = pg_command("psql", url, "--single-transaction", "-v", "ON_ERROR_STOP=1", "-q", "-X", "-f",
                               str(dump))
    else:
        argv, env = pg_command("pg_restore", url, "--no-owner", "--no-privileges", "--exit-on-error",
                               "--single-transaction", str(dump))
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tritonhub: {argv[0]} into {hidden(url)} failed, nothing restored (the database is still empty):"
                 f"\n{r.stderr.strip()[-2000:]}")
    print(f"tritonhub: gradebook restored into {hidden(url)}")


def restore(settings: Settings, folder: Path) -> None:
    """The backup in ``folder`` put back, with the hub stopped: the course directory and the exchange as they were
    (the present ones set aside, never deleted), the gradebook from its consistent copy (PostgreSQL's by pg_restore
    into the empty database the instructor's configuration or TRITONCOURSE_DB_URL names), every learner's home (an
    account missing on this machine is made again, with a new password in <state>/passwords.csv), owners by name and
    modes kept. Start the hub afterwards."""
    if os.geteuid() != 0:
        sys.exit("tritonhub restore runs as root")
    if (pid := running_pid(settings)) is not None:
        sys.exit(f"tritonhub: the hub is running (pid {pid}): stop it first (`tritonhub.py stop`), then restore")
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        sys.exit(f"tritonhub: {folder} is not a backup of `tritonhub.py backup` ({MANIFEST}: {err})")
    dumps = [folder / name for name in ("gradebook.pgdump", "gradebook.sql") if (folder / name).exists()]
    url = gradebook_url(settings) if dumps else ""
    if dumps and not url.startswith("postgresql"):
        sys.exit(f"tritonhub: the backup's gradebook is PostgreSQL's ({dumps[0]}), and the instructor's configuration "
                 f"names {hidden(url)}: set TRITONCOURSE_DB_URL to an empty PostgreSQL database (or name it in the "
                 "course's nbgrader_config.py), then restore again")
    course = settings.course_dir
    trees = [(folder / "course.tar.gz", Path(manifest["course"]).name, course),
             (folder / "exchange.tar.gz", Path(manifest["exchange"]).name, Path(settings.exchange))]
    trees = [t for t in trees if t[0].exists()]
    bad = [name for name in manifest["homes"] if not USER_ID.match(name)]
    if bad:
        sys.exit(f"tritonhub: {MANIFEST} names homes of {bad}, which are not learner ids: not restored")
    homes = [(folder / "homes.tar.gz", name, Path("/nonexistent") / name) for name in manifest["homes"]]
    for tarball, top, dest in trees + homes:
        _extract(tarball, top, dest, check_only=True)  # every tarball checked before anything is changed
    if dumps:  # first: a refused gradebook changes nothing (one transaction, into an empty database), files included
        _restore_postgres(dumps[0], url)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    made = []
    for name in manifest["homes"]:  # before the files: their owners are named in the tarballs
        if not user_exists(name):
            password = secrets.token_urlsafe(9)
            add_account(name, [settings.learners_group], password)
            made.append((name, password))
    for tarball, top, dest in trees:
        _set_aside(dest, stamp)
        _extract(tarball, top, dest)
    if (folder / "gradebook.db").exists():  # the consistent copy, over the one the course's tarball held
        gradebook = course / "gradebook.db"
        new = not gradebook.exists()
        shutil.copyfile(folder / "gradebook.db", gradebook)  # an existing file keeps its owner and mode
        if new:
            pw = pwd.getpwnam(settings.instructor)
            os.chown(gradebook, pw.pw_uid, pw.pw_gid)
            os.chmod(gradebook, 0o644)
    exchange_service.prepare(settings.exchange, settings.course_id, settings.instructor)  # as setup leaves it
    for name in manifest["homes"]:
        pw = pwd.getpwnam(name)
        home = Path(pw.pw_dir)
        if name in dict(made):
            shutil.rmtree(home, ignore_errors=True)  # the empty home useradd just made, replaced by the backup's
        else:
            _set_aside(home, stamp)
        if not _extract(folder / "homes.tar.gz", name, home):  # no home was backed up: an empty one, as useradd's
            home.mkdir(mode=0o700)
            os.chown(home, pw.pw_uid, pw.pw_gid)
    if made:
        out = Path(settings.state) / "passwords.csv"
        with open(out, "a", newline="") as f:
            csv.writer(f).writerows(made)
        out.chmod(0o600)
        print(f"tritonhub: accounts made again: {', '.join(n for n, _ in made)}; their new passwords in {out}")
    print(f"tritonhub: restored {folder} (made {manifest.get('made', '?')}); start the hub: "
          f"`python3 hub/tritonhub.py start --daemon --state {settings.state}`")

"""hub/tritonhub.py's Unix accounts: the learners' group, an account with a private home and a password, and the
roster's commands, ``users`` (learners' accounts and the gradebook's students) and ``remove-users`` (only accounts of
the learners' group).

Standard library only, as hub/tritonhub.py (run as root with any Python 3.10+).
"""
from __future__ import annotations

import csv
import grp
import os
import pwd
import re
import secrets
import subprocess
import sys
from pathlib import Path

from tritonhub_common import Settings, as_user, run

# A Unix user name that is also a valid learner id of the course (docs/INSTRUCTORS.md: no double underscore).
USER_ID = re.compile(r"^[a-z][a-z0-9-]*(?:_[a-z0-9-]+)*$")



def ensure_group(name: str) -> None:
    try:
        grp.getgrnam(name)
    except KeyError:
        run(["groupadd", name])



def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False



def add_account(name: str, groups: list[str], password: str | None) -> bool:
    """A Unix account with a private home (0700); returns True when it was made now."""
    made = False
    if not user_exists(name):
        run(["useradd", "--create-home", "--shell", "/bin/bash", "--user-group"]
            + (["--groups", ",".join(groups)] if groups else []) + [name])
        made = True
    home = Path(pwd.getpwnam(name).pw_dir)
    home.chmod(0o700)
    if password:
        run(["chpasswd"], input=f"{name}:{password}\n", text=True)
    return made



def read_roster(path: Path) -> list[dict]:
    """Rows of a CSV with an ``id`` column (and optional first_name, last_name, email, password)."""
    with open(path, newline="") as f:
        rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in csv.DictReader(f)]
    bad = [r.get("id", "") for r in rows if not USER_ID.match(r.get("id", "")) or len(r.get("id", "")) > 32]
    if bad:
        sys.exit(f"{path}: ids must be Unix user names and learner ids (a-z first, then a-z 0-9 - and single "
                 f"underscores, 32 at most): {bad}")
    return rows



def add_users(settings: Settings, roster: Path) -> None:
    """Each learner of ``roster``: a Unix account in the learners' group (home 0700), a password (the roster's, or
    a new one written to <state>/passwords.csv, root only), and a student of the course's gradebook."""
    if os.geteuid() != 0:
        sys.exit("tritonhub users runs as root")
    made_passwords = []
    rows = read_roster(roster)
    for row in rows:
        name = row["id"]
        if user_exists(name) and settings.learners_group not in groups_of(name):
            sys.exit(f"{name} is an existing account outside {settings.learners_group}: not taken over")
        password = row.get("password") or None
        if not user_exists(name) and not password:
            password = secrets.token_urlsafe(9)
            made_passwords.append((name, password))
        made = add_account(name, [settings.learners_group], password)
        print(f"tritonhub: {'added' if made else 'updated'} {name}")
    # the gradebook's students, in one nbgrader command (one per learner took a second or more each)
    students = Path(settings.course_dir) / ".tritonhub-students.csv"
    with open(students, "w", newline="") as f:
        out = csv.DictWriter(f, ["id", "first_name", "last_name", "email"], extrasaction="ignore")
        out.writeheader()
        out.writerows({k: row.get(k, "") for k in out.fieldnames} for row in rows)
    pw = pwd.getpwnam(settings.instructor)
    os.chown(students, pw.pw_uid, pw.pw_gid)
    try:
        as_user(settings.instructor, ["nbgrader", "db", "student", "import", str(students), "--log-level=WARN"],
                settings, cwd=settings.course_dir)
    finally:
        students.unlink()
    if made_passwords:
        out = Path(settings.state) / "passwords.csv"
        with open(out, "a", newline="") as f:
            csv.writer(f).writerows(made_passwords)
        out.chmod(0o600)
        print(f"tritonhub: new passwords appended to {out} (root only)")



def groups_of(name: str) -> set[str]:
    pw = pwd.getpwnam(name)
    return {g.gr_name for g in grp.getgrall() if name in g.gr_mem} | {grp.getgrgid(pw.pw_gid).gr_name}



def remove_users(settings: Settings, roster: Path) -> None:
    """Delete the accounts (and homes) of ``roster`` that are in the learners' group; never any other."""
    for row in read_roster(roster):
        name = row["id"]
        if not user_exists(name):
            continue
        if settings.learners_group not in groups_of(name):
            print(f"tritonhub: {name} is not in {settings.learners_group}: left alone", file=sys.stderr)
            continue
        subprocess.run(["pkill", "-KILL", "-u", name], check=False)  # that user's processes only
        run(["userdel", "--remove", name], stderr=subprocess.DEVNULL)
        print(f"tritonhub: removed {name}")


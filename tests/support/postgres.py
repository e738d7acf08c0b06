"""A PostgreSQL server of its own for tests and measurements: Debian's server binaries (the `postgresql` package,
installed by tools/install-ci-deps.sh), a data folder in /tmp, loopback only, password authentication."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from servers import free_port  # noqa: F401  (tests/support/slurm.py takes it from here)


class PostgresMissing(RuntimeError):
    """PostgreSQL's server binaries are not installed."""


def pg_bin(name: str) -> str | None:
    """A server binary of the newest PostgreSQL Debian installed (they are not on PATH there)."""
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]))
    return str(found[-1]) if found else shutil.which(name)


@dataclass
class Postgres:
    folder: Path
    port: int
    password: str = "grader-secret"
    user: str = "grader"
    databases: list[str] = field(default_factory=list)

    @property
    def as_server_user(self) -> list[str]:
        # PostgreSQL refuses to run as root: as root (CI here), run it as Debian's `postgres` user.
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                             dbname="postgres", autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return self.url(name)

    @classmethod
    def start(cls) -> "Postgres":
        initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
        if not initdb or not pg_ctl:
            raise PostgresMissing("PostgreSQL's server is not installed: run tools/install-ci-deps.sh "
                                  "(Debian's postgresql package)")
        folder = Path(tempfile.mkdtemp(prefix="tritoncourse-pg-"))
        server = cls(folder, free_port())
        (folder / "pw").write_text(server.password)
        if os.geteuid() == 0:
            pg = pwd.getpwnam("postgres")
            for p in (folder, folder / "pw"):
                os.chown(p, pg.pw_uid, pg.pw_gid)
        run = dict(capture_output=True, text=True, timeout=120)
        r = subprocess.run([*server.as_server_user, initdb, "-D", str(folder / "data"), "-U", server.user,
                            f"--pwfile={folder / 'pw'}", "--auth=scram-sha-256", "-E", "UTF8", "--no-sync"], **run)
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed: {r.stdout}{r.stderr}")
        r = subprocess.run([*server.as_server_user, pg_ctl, "-D", str(folder / "data"), "-l", str(folder / "log"),
                            "-w", "-o", f"-h 127.0.0.1 -p {server.port} -k {folder} -F", "start"], **run)
        if r.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {r.stdout}{r.stderr}"
                               + (folder / "log").read_text(errors="replace"))
        return server

    def stop(self) -> None:
        subprocess.run([*self.as_server_user, pg_bin("pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate",
                        "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)

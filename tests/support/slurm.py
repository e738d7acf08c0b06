"""A Slurm cluster of its own for tests: Debian's `slurmctld`, `slurmd` and `munge` (installed by
tools/system-deps.sh), one node (this machine), a private configuration, state and munge socket in a temporary
folder, ports of its own. Point a process at it with ``env(SLURM_CONF=cluster.conf)``. Root only: `slurmd`
starts each job as the user who submitted it."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from postgres import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")


class SlurmMissing(RuntimeError):
    """Slurm's daemons are not installed, or this is not root."""


def _daemon(name: str) -> str | None:
    """A Slurm or munge program: on PATH, or in /usr/sbin (not on a non-root user's PATH)."""
    return shutil.which(name) or (str(Path("/usr/sbin") / name) if (Path("/usr/sbin") / name).exists() else None)


@dataclass
class Slurm:
    folder: Path
    conf: Path

    @classmethod
    def start(cls, cpus: int | None = None) -> "Slurm":
        missing = [d for d in DAEMONS + ("sbatch",) if _daemon(d) is None]
        if missing:
            raise SlurmMissing(f"Slurm is not installed ({', '.join(missing)} missing): run tools/system-deps.sh as "
                               "root (Debian: slurmd slurmctld slurm-client munge)")
        if os.geteuid() != 0:
            raise SlurmMissing("a test Slurm cluster needs root (slurmd starts jobs as their user)")
        folder = Path(tempfile.mkdtemp(prefix="tritoncourse-slurm-"))
        for d in ("state", "spool", "log", "munge"):
            (folder / d).mkdir()
        key = folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = folder / "munge" / "munge.sock"
        run = lambda *a: subprocess.run(list(a), capture_output=True, text=True, timeout=60)  # noqa: E731
        r = run(_daemon("munged"), "--force", f"--key-file={key}", f"--socket={sock}",
                f"--pid-file={folder / 'munge' / 'munged.pid'}", f"--log-file={folder / 'log' / 'munged.log'}",
                f"--seed-file={folder / 'munge' / 'seed'}")
        if r.returncode != 0:
            raise RuntimeError(f"munged did not start: {r.stderr}")
        host = socket.gethostname().split(".")[0]
        cpus = cpus or os.cpu_count() or 1
        memory = max(1024, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 - 512)
        conf = folder / "slurm.conf"
        conf.write_text("\n".join([
            "ClusterName=tritoncourse",
            f"SlurmctldHost={host}(127.0.0.1)",  # by address: the host name may not resolve here
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
            "SlurmUser=root", "SlurmdUser=root",
            # No cgroups here (CI's machines, containers): processes tracked by their parent, no task plugin.
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "MpiDefault=none", "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
            f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'log' / 'slurmd.log'}",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN",
            "PartitionName=grading Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n")
        env = dict(os.environ, SLURM_CONF=str(conf))
        for daemon, extra in (("slurmctld", []), ("slurmd", ["-N", host])):
            r = subprocess.run([_daemon(daemon), "-f", str(conf), *extra], env=env, capture_output=True, text=True,
                               timeout=60)
            if r.returncode != 0:
                raise RuntimeError(f"{daemon} did not start: {r.stderr}\n{cls._logs(folder)}")
        cluster = cls(folder, conf)
        deadline = time.monotonic() + 60
        while True:  # the node must be idle before a job can start
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=30)
            if r.stdout.strip() == "idle":
                break
            if time.monotonic() > deadline:
                cluster.stop()
                raise RuntimeError(f"the Slurm node is not idle ({r.stdout.strip()!r}):\n{cls._logs(folder)}")
            time.sleep(0.5)
        return cluster

    @staticmethod
    def _logs(folder: Path) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted((folder / "log").glob("*.log")))

    def logs(self) -> str:
        return self._logs(self.folder)

    def env(self) -> dict:
        return {"SLURM_CONF": str(self.conf)}

    def jobs(self) -> list[str]:
        """Every job Slurm still knows, one line each (id, name, state)."""
        r = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], env=dict(os.environ, **self.env()),
                           capture_output=True, text=True, timeout=30)
        return [line for line in r.stdout.splitlines() if line.strip()]

    def stop(self) -> None:
        env = dict(os.environ, **self.env())
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True, timeout=30)
        for pidfile in (self.folder / "slurmd.pid", self.folder / "slurmctld.pid", self.folder / "munge" / "munged.pid"):
            try:
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(1)
        shutil.rmtree(self.folder, ignore_errors=True)

#!/usr/bin/python3
"""The stand-in for JupyterHub that tools/hub-vm-try.sh runs in a Debian 12 virtual machine (systemd, cgroup v2 only),
as hub/tritonhub.service starts the hub: systemd runs `tritonhub.py start`, which execs this file in place of the
venv's `jupyterhub`. It does what the hub's LimitedSpawner does with each learner's server, with hub/tritonhub_limits.py
itself: the plan (the hub's own processes moved into a leaf, the controllers handed to `tritonhub-learners`), one
learner's groups with their limits, processes of that learner (nobody) put in them between fork and exec as the
spawner's preexec does, each limit reached, and the groups cleared. What it saw goes to OUT as JSON; then it waits for
SIGTERM (`systemctl stop tritonhub`) as the hub would, removing its pid file."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("HUB_VM_OUT", "/opt/try/out/limits.json"))
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = ["/opt/site", str(REPO), str(REPO / "hub")]

Path("jupyterhub.pid").write_text(str(os.getpid()))  # in the state folder, as JupyterHub writes it
seen: dict = {"argv": sys.argv, "python": sys.version.split()[0],
              "cgroup_before": Path("/proc/self/cgroup").read_text()}


def bye(*_):
    Path("jupyterhub.pid").unlink(missing_ok=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, bye)

MEMORY, CPUS, TASKS = 256 << 20, 0.5, 64
HOG = ("import time\nchunks = []\nfor i in range(64):\n    chunks.append(bytearray(32 << 20))\n"
       "    print(len(chunks) * 32, flush=True)\n")
FORKS = ("import os, time\nr, w = os.pipe()\nn = 0\ntry:\n    for _ in range(256):\n        if os.fork() == 0:\n"
         "            os.close(w); os.read(r, 1); os._exit(0)\n        n += 1\nexcept BlockingIOError as e:\n"
         "    print('refused', n, e)\nelse:\n    print('all', n)\nos.close(w)\n")
BUSY = "import time\nend = time.time() + 2\nwhile time.time() < end: pass\n"

try:
    import tritonhub_limits as limits

    where, missing = limits.plan()
    seen["plan"] = {c: [v, str(p)] for c, (v, p) in where.items()}
    seen["missing"] = missing
    seen["cgroup_after_plan"] = Path("/proc/self/cgroup").read_text()
    groups = limits.LearnerCgroups("learner-a", where, MEMORY, CPUS, TASKS)
    seen["failed"] = groups.failed
    seen["dirs"] = {c: str(d) for c, d in groups.dirs.items()}
    seen["files"] = {name: (Path(d) / name).read_text().strip() for d in set(seen["dirs"].values())
                     for name in ("memory.max", "memory.swap.max", "pids.max", "cpu.max") if (Path(d) / name).exists()}
    procs = [str(p) for p in groups.procs_files()]

    def run_as_learner(code: str, timeout: float = 60):
        def preexec():  # as LimitedSpawner.make_preexec_fn: join the groups as root, then become the learner
            for path in procs:
                with open(path, "w") as f:
                    f.write(str(os.getpid()))
            os.setgid(65534)
            os.setuid(65534)
        return subprocess.run(["/usr/bin/python3", "-c", code], preexec_fn=preexec, capture_output=True, text=True,
                              timeout=timeout, cwd="/")

    hog = run_as_learner(HOG)
    events = dict(line.split() for line in (Path(seen["dirs"]["memory"]) / "memory.events").read_text().splitlines())
    seen["memory"] = {"returncode": hog.returncode, "last_mb": (hog.stdout.split() or ["0"])[-1],
                      "oom_kill": int(events.get("oom_kill", 0))}
    forks = run_as_learner(FORKS)
    seen["pids"] = {"returncode": forks.returncode, "said": forks.stdout.strip(),
                    "events": (Path(seen["dirs"]["pids"]) / "pids.events").read_text().strip()}
    stat0 = dict(line.split() for line in (Path(seen["dirs"]["cpu"]) / "cpu.stat").read_text().splitlines())
    t = time.monotonic()
    busy = [subprocess.Popen(["/usr/bin/python3", "-c", BUSY], preexec_fn=lambda: [
        open(p, "w").write(str(os.getpid())) for p in procs]) for _ in range(2)]
    for p in busy:
        p.wait(timeout=60)
    stat1 = dict(line.split() for line in (Path(seen["dirs"]["cpu"]) / "cpu.stat").read_text().splitlines())
    seen["cpu"] = {"wall_s": round(time.monotonic() - t, 2),
                   "usage_s": (int(stat1["usage_usec"]) - int(stat0["usage_usec"])) / 1e6,
                   "nr_throttled": int(stat1["nr_throttled"]) - int(stat0["nr_throttled"])}
    left = run_as_learner("import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True, "
                          "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n")  # a terminal's nohup job
    seen["left_running"] = left.returncode
    seen["procs_before_clear"] = (Path(seen["dirs"]["pids"]) / "cgroup.procs").read_text().split()
    seen["not_removed"] = [str(p) for p in limits.LearnerCgroups.existing("learner-a", where).clear()]
    seen["dirs_after_clear"] = [d for d in set(seen["dirs"].values()) if Path(d).exists()]
except Exception as err:  # recorded, not raised: the VM's script reads OUT
    import traceback

    seen["error"] = traceback.format_exc()
OUT.parent.mkdir(parents=True, exist_ok=True)
OUT.write_text(json.dumps(seen, indent=1))
while True:
    time.sleep(1)

"""`nbgrader submit ASSIGNMENT` as many Unix users at the same moment, from one process (tests/system/test_hub.py's load
test).

    python hub_submit_many.py ASSIGNMENT JUPYTER_CONFIG_PATH USER...   (as root)

nbgrader is imported once (about 1.3 s of CPU a command here, nearly all of it imports); then one fork per user
drops to that user's uid and gid (no other groups), takes its HOME and the learners' Jupyter configuration, and runs
nbgrader's own `submit` app in its home. Every child starts at once. Prints {user: [exit status, seconds]} as JSON.
"""
from __future__ import annotations

import json
import os
import pwd
import sys
import time
import traceback

from nbgrader.apps.nbgraderapp import NbGraderApp


def child(user: str, assignment: str, config_path: str) -> int:
    pw = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)
    os.environ.update(HOME=pw.pw_dir, USER=user, LOGNAME=user, JUPYTER_CONFIG_PATH=config_path)
    os.chdir(pw.pw_dir)
    try:
        NbGraderApp.launch_instance(["submit", assignment, "--log-level=WARN"])
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported, and the exit status says so
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    assignment, config_path, users = sys.argv[1], sys.argv[2], sys.argv[3:]
    started, pids = time.monotonic(), {}
    for user in users:
        pid = os.fork()
        if pid == 0:
            os._exit(child(user, assignment, config_path))
        pids[pid] = user
    results = {}
    while pids:
        pid, status = os.wait()
        results[pids.pop(pid)] = [os.waitstatus_to_exitcode(status), round(time.monotonic() - started, 2)]
    print(json.dumps(results))


if __name__ == "__main__":
    main()

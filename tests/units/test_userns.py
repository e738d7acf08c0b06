"""Machines that forbid unprivileged user namespaces (Ubuntu 23.10/24.04's AppArmor default, HPC nodes with
user.max_user_namespaces=0): the sandbox's check says so in plain words, with the fix (issue 29).

The refusal is real: bubblewrap runs as a user who is not root inside a user namespace whose
max_user_namespaces is 0, and what it says there is what the grader's check must explain."""
from __future__ import annotations

import ctypes
import os
import shutil
import stat

import pytest

from tritoncourse.grading import sandbox

CLONE_NEWUSER = 0x10000000


def _bwrap_where_user_namespaces_are_forbidden() -> tuple[int, str]:
    """bubblewrap's exit status and words, started as uid 1000 where no user namespace may be made."""
    bwrap = shutil.which("bwrap")
    libc = ctypes.CDLL(None, use_errno=True)
    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a user namespace of its own, then no more of them, then not root
        try:
            if libc.unshare(CLONE_NEWUSER) != 0:
                os._exit(90)
            os.write(ready_w, b"1")
            os.read(mapped_r, 1)
            with open("/proc/sys/user/max_user_namespaces", "w") as f:
                f.write("0")
            os.setgroups([])
            os.setgid(1000)
            os.setuid(1000)
            os.dup2(out_w, 2)
            os.execv(bwrap, [bwrap, "--ro-bind", "/", "/", "--unshare-user", "--uid", "1000", "--gid", "1000",
                             "--unshare-ipc", "--unshare-pid", "--unshare-net", "true"])
        finally:
            os._exit(91)
    os.close(out_w)
    os.read(ready_r, 1)
    for name in ("uid_map", "gid_map"):  # as root outside: uids 0..65535 the same inside
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write("0 0 65536\n")
    os.write(mapped_w, b"1")
    _, status = os.waitpid(pid, 0)
    said = os.read(out_r, 4096).decode(errors="replace")
    return os.waitstatus_to_exitcode(status), said


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("bwrap"),
                    reason="needs root (to map a user namespace's uids) and bubblewrap")
def test_the_check_names_the_fix_where_user_namespaces_are_forbidden(tmp_path, monkeypatch):
    rc, said = _bwrap_where_user_namespaces_are_forbidden()
    assert rc not in (0, 90, 91), (rc, said)  # the namespace was refused, not the set-up
    assert sandbox.USERNS_REFUSED.search(said), f"bubblewrap's words not recognised: {said!r}"
    # The grader's own check, with a bwrap that says exactly that (the check runs bwrap as the grader).
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\ncat >&2 <<'EOF'\n" + said.strip() + "\nEOF\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(sandbox.CGROUP_ENV, "off")
    monkeypatch.setenv(sandbox.TMPFS_ENV, "off")
    sandbox.problem.cache_clear()
    try:
        why = sandbox.problem()
    finally:
        sandbox.problem.cache_clear()
    assert why and "user namespace" in why and "max_user_namespaces=15000" in why, why
    assert "apparmor_restrict_unprivileged_userns=0" in why and "as root" in why, why
    assert said.strip()[:60] in why, "bubblewrap's own words are kept"


def test_other_bwrap_failures_are_not_called_a_namespace_problem():
    assert not sandbox.USERNS_REFUSED.search("bwrap: execvp python3: No such file or directory")
    assert not sandbox.USERNS_REFUSED.search("bwrap: Can't mount proc on /newroot/proc: Operation not permitted")
    for said in ("bwrap: setting up uid map: Permission denied",  # Ubuntu 24.04's AppArmor restriction
                 "bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
                 "non-privileged user namespaces. On e.g. debian this can be enabled with "
                 "'sysctl kernel.unprivileged_userns_clone=1'."):
        assert sandbox.USERNS_REFUSED.search(said), said

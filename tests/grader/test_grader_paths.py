"""Root follows no link a learner's process can plant (issue 42): the grader's own paths in a grading sandbox.

A process in the checks' sandbox (as a runner's leftover would be: the sandbox's uid, alive beside the grader)
races every kernel test's folder with links aimed at files this test made outside the sandbox, root's and 0600
(tests/hostile/grader_paths/race_links.py): it swaps the folder itself for a link, plants links where the grader
writes the learner's definitions and the runner's output, and keeps replacing the judge's socket with a link. Four
kernel tests run meanwhile, two through a zygote in the sandbox and two as plain processes (whose output file the
grader opens itself). Before the fix each folder lay in the shared folder, the learner's to write: root chmod'ed
and chown'ed a swapped folder's target (the learner then owned it), wrote the definitions and the output through
the planted links, and chmod'ed the socket's path. Now those folders are the grader's own, bound read-only inside
(``Sandbox.grader_dir``), the socket's mode comes from the umask at bind time, and the runner's output written in
the shared folder is read back without following links: none of the files changes, every test still passes.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import DEVICE
from known_kernels import CORRECT_VECTOR_ADD
from tritoncourse.grading import sandbox
from tritoncourse.grading.processes.isolated import Assembly, run_test
from tritoncourse.grading.processes.zygote_client import _Zygote

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(DEVICE != "cpu", reason="runs the CPU interpreter's path"),
              pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's own uid (and root to follow links) needs root")]

RACE = Path(__file__).resolve().parents[1] / "hostile" / "grader_paths" / "race_links.py"
TEST = textwrap.dedent('''
    """Full blocks."""
    from tritoncourse.checks.vector_add import check_vector_add

    check_vector_add(triton_vector_add_kernel, n=1024, block_size=256)
''')
KERNEL = CORRECT_VECTOR_ADD


def _state(path: Path) -> tuple:
    st = os.lstat(path)
    body = path.read_bytes() if stat.S_ISREG(st.st_mode) else tuple(sorted(os.listdir(path)))
    return stat.filemode(st.st_mode), st.st_uid, st.st_gid, body


def test_a_racing_process_in_the_sandbox_changes_no_file_outside(tmp_path):
    assert sandbox.problem() is None, sandbox.problem()
    targets = tmp_path / "targets"
    targets.mkdir(mode=0o700)
    (targets / "folder").mkdir(mode=0o700)
    for name in ("file", "socket_target"):
        (targets / name).write_text(f"root's {name}, untouched\n")
        (targets / name).chmod(0o600)
    before = {p.name: _state(p) for p in targets.iterdir()}
    box = sandbox.Sandbox("grader-paths")
    zygote = race = None
    try:
        race = subprocess.Popen(box.argv([sys.executable, "-I", "-B", "-c", RACE.read_text(), str(box.shared), str(targets),
                                          "60"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        box.watch(race.pid)
        ready = json.loads(race.stdout.readline() or "{}").get("ready")  # its watches are set
        assert ready and str(box.shared) in ready, race.stderr.read() if race.poll() is not None else ready
        outcomes = []
        assembly = Assembly(KERNEL, ["triton_vector_add_kernel"], [])
        for i in range(4):
            if i == 2:
                zygote = _Zygote(box)
            outcomes.append(run_test(TEST, assembly, timeout=60, seed=5 + i, device="cpu", sandbox=box,
                                     zygote=zygote))
        (box.shared / "stop-race").write_text("")
        out, err = race.communicate(timeout=30)
    finally:
        if race is not None and race.poll() is None:
            race.kill()
        if zygote is not None:
            zygote.close()
        box.close()
    after = {p.name: _state(p) for p in targets.iterdir()}
    changed = {name: (before.get(name), after.get(name)) for name in set(before) | set(after)
               if before.get(name) != after.get(name)}
    assert not changed, f"the grader followed a planted link: {changed}\nthe racing process: {out}{err[-2000:]}"
    raced = json.loads(out.strip().splitlines()[-1])
    assert raced["folders_seen"] == 4, f"the racing process missed a test's folder: {raced}"
    assert all(o.ok for o in outcomes), "\n".join(f"{o.kind}: {o.message}" for o in outcomes)

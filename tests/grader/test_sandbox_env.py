"""The grading sandbox's environment is an allow-list of names (sandbox.config.PASS_ENV), never a prefix: the
grader's secrets (the gradebook's URL with its password, the judge zygote's socket, the hub's and any other token,
every other TRITONCOURSE_* or PYTORCH_* variable) never reach a process that runs learner code.

Each test plants secrets in the grader's environment, starts real sandboxed processes the way grading does, prints
their WHOLE environment from inside, and asks that every name is one the sandbox means to give and that no secret
value appears: a bare process of :class:`Sandbox`; the runner of a kernel test (``isolated.run_test``), forked by
the sandbox's zygote as on the CPU, and started plainly as on a GPU; the notebook's kernel under nbgrader's Execute
step (``ResilientExecute``, as ``nbgrader autograde`` runs it). The hostile class (test_sandbox.py) plants the same
kind of secrets in a whole grading. The runner's and the notebook kernel's tests are marked slow (5.5 s together);
the bare process's is fast.
"""
from __future__ import annotations

import secrets
import subprocess
import textwrap

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tritoncourse.grading import sandbox
from tritoncourse.grading.sandbox import PASS_ENV, Limits, Sandbox

TAG = secrets.token_hex(8)
# What a grader's environment may hold that no learner may read: values unique to this run.
PLANTED = {
    "TRITONCOURSE_DB_URL": f"postgresql://grader:SECRET{TAG}@db.example:5432/gradebook",
    "TRITONCOURSE_JUDGE_ZYGOTE": f"/run/tritoncourse/judge-{TAG}.sock",
    "TRITONCOURSE_ZYGOTE_SOCKET": f"/run/tritoncourse/zygote-{TAG}.sock",
    "TRITONCOURSE_INSTRUCTOR_SECRET": f"instructor-{TAG}",
    "PYTORCH_SECRET_HOOK": f"pytorch-{TAG}",
    "JUPYTERHUB_API_TOKEN": f"hubtoken{TAG}",
    "FOO_TOKEN": f"footoken{TAG}",
    "AWS_SECRET_ACCESS_KEY": f"AKIA{TAG.upper()}",
}
# The names SandboxCommandLine.environment sets inside (its own folders, PATH, the package's PYTHONPATH), and PWD
# (bubblewrap's --chdir).
INNER = {"HOME", "TMPDIR", "MPLCONFIGDIR", "TRITON_CACHE_DIR", "IPYTHONDIR", "JUPYTER_RUNTIME_DIR", "XDG_CACHE_HOME",
         "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PWD"}
# Names the course's own code inside reads: the allow-list must hold them (and nothing else of TRITONCOURSE_*).
NEEDED = {"TRITON_INTERPRET", "NBGRADER_EXECUTION", "TRITONCOURSE_HEADLESS", "PYTORCH_NO_CUDA_MEMORY_CACHING"}


@pytest.fixture(autouse=True)
def planted(monkeypatch):
    why = sandbox.problem()
    if why is not None:
        pytest.skip(f"the grading sandbox cannot run here: {why}")
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TRITONCOURSE_HEADLESS", "1")
    return PLANTED


def _parse(dump: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in dump.split("\0") if item)


def _assert_clean(env: dict[str, str], raw: str, allowed: set[str]) -> None:
    strays = sorted(set(env) - allowed)
    assert not strays, f"names inside the sandbox that are not on its allow-list: {strays}"
    leaked = [name for name, value in PLANTED.items() if value in raw or TAG in raw]
    assert not leaked, f"secrets of the grader's environment inside the sandbox: {leaked}"


def test_the_allow_list_names_names_not_prefixes():
    """Every entry is one exact name; the names the code inside reads are on it, no other TRITONCOURSE_* is."""
    assert NEEDED <= set(PASS_ENV)
    assert not any(name.endswith("_") or "*" in name for name in PASS_ENV)
    assert {n for n in PASS_ENV if n.startswith("TRITONCOURSE_")} == {"TRITONCOURSE_HEADLESS"}
    assert not set(PLANTED) & set(PASS_ENV)
    assert set(sandbox.sandbox_env()) <= set(PASS_ENV) | {"PYTHONPATH"}


def test_a_sandboxed_process_sees_only_the_allow_list():
    """``env -0`` run by the sandbox (as every sandboxed process is started): its whole environment."""
    box = Sandbox("env", limits=Limits())
    try:
        proc = subprocess.run(box.argv(["env", "-0"]), capture_output=True, text=True, timeout=60)
    finally:
        box.close()
    assert proc.returncode == 0, proc.stderr
    env = _parse(proc.stdout)
    assert env["TRITONCOURSE_HEADLESS"] == "1" and "HOME" in env
    _assert_clean(env, proc.stdout + proc.stderr, set(PASS_ENV) | INNER)


# A "learner" definition that the lint would refuse: the runner is assumed to run any Python (the judge trusts
# nothing it says), so this stands for the worst a learner's kernel process can do. It hands back its environment.
DUMP_SOURCE = ("import os\n\n\ndef dump_environment():\n"
               "    return '\\0'.join(f'{k}={v}' for k, v in os.environ.items())\n")


@pytest.mark.slow
@pytest.mark.parametrize("forked", [True, False], ids=["zygote", "plain"])
def test_the_runner_sees_only_the_allow_list(tmp_path, forked):
    """A kernel test's runner, in the checks' sandbox, forked by the sandbox's zygote (CPU grading) or started as a
    process of its own (GPU grading): its environment, returned to the judge and written out by the test."""
    from tritoncourse.grading.processes.isolated import Assembly, run_test
    from tritoncourse.grading.processes.zygote_client import _Zygote

    out = tmp_path / "runner-env"
    body = f"open({str(out)!r}, 'w').write(dump_environment())\n"
    box = Sandbox("env-runner", limits=Limits())
    zygote = _Zygote(box) if forked else None
    try:
        outcome = run_test(body, Assembly(DUMP_SOURCE, ["dump_environment"], []), timeout=120, seed=1, sandbox=box,
                           zygote=zygote, device="cpu")
    finally:
        if zygote is not None:
            zygote.close()
        box.close()
    assert outcome.ok, outcome.report()
    raw = out.read_text()
    env = _parse(raw)
    assert env.get("TRITON_INTERPRET") == "1" and "tritoncourse-sandbox-" in env["HOME"], sorted(env)
    _assert_clean(env, raw, set(PASS_ENV) | INNER | {"PYTHONUNBUFFERED"})


# Set by ipykernel itself in the kernel's process (ZMQInteractiveShell.init_environment, the inline backend).
IPYKERNEL_OWN = {"TERM", "CLICOLOR", "PAGER", "GIT_PAGER", "MPLBACKEND", "PYDEVD_USE_FRAME_EVAL", "FORCE_COLOR",
                 "CLICOLOR_FORCE"}


@pytest.mark.slow
def test_the_notebook_kernel_under_nbgrader_sees_only_the_allow_list():
    """nbgrader's Execute step as the course configures it (ResilientExecute: the kernel in the sandbox) runs a
    learner's cell that prints its whole environment; nothing of the grader's secrets is in the cell's output."""
    from tritoncourse.grading.autograde.nbgrader_plugin import ResilientExecute

    nb = new_notebook(cells=[new_code_cell(textwrap.dedent("""\
        import os
        print('ENV-BEGIN' + '\\0'.join(f'{k}={v}' for k, v in os.environ.items()) + 'ENV-END')"""))])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb, _ = ResilientExecute(timeout=60).preprocess(nb, {"nbgrader": {"student": "envprobe"}})
    raw = nbformat.writes(nb)
    text = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert "ENV-BEGIN" in text and "ENV-END" in text, nb.cells[0].outputs
    env = _parse(text.split("ENV-BEGIN", 1)[1].split("ENV-END", 1)[0])
    assert env.get("NBGRADER_EXECUTION") == "autograde" and "tritoncourse-sandbox-" in env["HOME"], sorted(env)
    _assert_clean(env, raw, set(PASS_ENV) | INNER | IPYKERNEL_OWN)

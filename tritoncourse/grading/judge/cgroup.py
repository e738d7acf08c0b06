"""The judge's own control group (issue 42): one per kernel test in grading, made by the grader before the judge
starts (:class:`JudgeCgroup`) and joined by the judge first thing in its main (:func:`join`), bounding the judge's
processes and threads together (pids.max) and its memory of every kind (memory.max, page cache and memfd included).
A learner's own check (``make check``, the notebook's ``%%kernel_test``) makes none: their kernels run unsandboxed
there, and their machine is asked for no cgroup.

Why a cgroup: RLIMIT_NPROC counts every process of the judge's uid (the whole grader's) and root, which the grader is
on CI and on the hub, is exempt from it; threads count too (torch's and, on a GPU, CUDA's), and a cgroup counts them
all for this judge alone. It is made where the sandbox makes its own (sandbox.cgroups._cgroup_plan: cgroup v2, or v1
per controller), never in a learner's sandbox's group (whose processes a learner's code could use up). Where none is
writable here (a learner's own machine without root, ``TRITONCOURSE_SANDBOX_CGROUP=off``) the judge keeps its
rlimits only (sandbox.limits.JudgeLimits), and :attr:`JudgeCgroup.why_not` says why.
"""
from __future__ import annotations

import functools
import os
import secrets

from ..sandbox.cgroups import WANTED, _Cgroups, _cgroup_plan
from ..sandbox.config import CGROUP_ENV
from ..sandbox.limits import JudgeLimits

JOIN_ENV = "TRITONCOURSE_JUDGE_CGROUP"  # the cgroup.procs files the judge writes its pid into (os.pathsep between)


@functools.lru_cache(maxsize=None)
def _plan(gpu: bool, setting: str) -> tuple[dict, str]:
    """Where the judges' cgroups go (the sandbox's plan: on a GPU no sibling group, whose device rules could lack the
    NVIDIA devices), looked up once per setting of ``TRITONCOURSE_SANDBOX_CGROUP``."""
    return _cgroup_plan(allow_sibling=not gpu)


class JudgeCgroup:
    """One judge's cgroups: made at construction (nothing where no cgroup can be made here), joined by the judge
    through :meth:`env`, read after the test by :meth:`breach`, killed and removed by :meth:`close`."""

    def __init__(self, gpu: bool, limits: JudgeLimits | None = None):
        self.limits = limits = limits or JudgeLimits.from_env()  # the judge's own, from the same environment
        plan, why = _plan(gpu, os.environ.get(CGROUP_ENV, ""))
        self._cg: _Cgroups | None = None
        if plan:
            self._cg = _Cgroups(f"tritoncourse-judge-{os.getpid()}-{secrets.token_hex(4)}", plan,
                                limits.memory_mb << 20, limits.processes)
        made = self._cg.dirs if self._cg is not None else {}
        failed = self._cg.failed if self._cg is not None else {}
        self.why_not = {c: failed.get(c) or why or "no cgroup" for c in WANTED if c not in made}

    def env(self) -> dict[str, str]:
        """What the judge's environment needs to join its cgroups (nothing where there are none)."""
        files = self._cg.procs_files() if self._cg is not None else []
        return {JOIN_ENV: os.pathsep.join(map(str, files))} if files else {}

    def breach(self) -> tuple[str, str] | None:
        """(what, the sentence) when the judge reached a bound of its cgroup: "processes" (a fork or a thread refused
        by pids.max) or "memory" (killed by the cgroup's out-of-memory killer); None when it did not."""
        counts = self._cg.counts() if self._cg is not None else {}
        if counts.get("processes", 0):
            return "processes", (f"the judge of this test (the grader's checks, which start no process of their own "
                                 f"on what your code sends) tried to start more than {self.limits.processes} "
                                 f"processes or threads, its bound, and was refused")
        if counts.get("memory", 0):
            return "memory", (f"Judging what your kernels' process sent took the grader past its "
                              f"{self.limits.memory_mb} MB of memory (files in memory counted) and it was stopped; "
                              "the test fails.")
        return None

    def close(self) -> None:
        """Kill whatever is left in the cgroups (a process the judge started and left running, in a session of its
        own or not), then remove them."""
        if self._cg is not None:
            self._cg.kill_all()
            self._cg.remove()
            self._cg = None


def join(env=os.environ) -> None:
    """Put this process (the judge, all its threads) into the cgroups the grader made for it, if any; an error
    (the grader's folders gone) ends the judge without a verdict: the grader's fault, said so."""
    for path in filter(None, env.get(JOIN_ENV, "").split(os.pathsep)):
        with open(path, "w") as f:
            f.write(str(os.getpid()))

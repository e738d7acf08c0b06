"""A small phase's notebook with kernel test cells, and stand-ins for the grader's own steps, that the grader
error tests share (tests/grader/test_grader_errors.py, test_grader_errors_processes.py,
test_grader_errors_execute.py)."""
from __future__ import annotations

import json

from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tritoncourse.grading.processes.isolated import Outcome

KERNEL = '''@triton.jit
def triton_double_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
'''


def _test_cell(grade_id: str, body: str = "", magic: str = "%%kernel_test") -> dict:
    cell = new_code_cell(f'{magic}\n"""Checks {grade_id}."""\n{body or "triton_double_kernel"}\n')
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": grade_id,
                                 "points": 1}
    cell.outputs = [{"output_type": "stream", "name": "stdout",
                     "text": "Graded in a fresh process outside this notebook (see the verdict in your feedback).\n"}]
    return cell


def _notebook(*tests) -> dict:
    nb = new_notebook()
    kernel = new_code_cell(KERNEL)
    kernel.metadata["nbgrader"] = {"solution": True, "grade": False, "locked": False, "grade_id": "kernel"}
    plain_test = new_code_cell("assert True")
    plain_test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": "plain",
                                       "points": 1}
    nb.cells = [new_markdown_cell("# A phase"), kernel, *tests, plain_test]
    return nb


def _passing(body, assembly, *, timeout=0, seed=None, device=None, sandbox=None, zygote=None):
    return Outcome(True, "pass", "", seed, 0.1, "")


def _pair(runs, calls):
    """A stand-in for run_test's judge and runner: each run writes the runner's output and the judge's verdict."""
    def run_pair(jcmd, jenv, jdir, judge_zygote, rcmd, renv, rdir, zygote, sandbox, timeout, warm=()):
        runner_code, output, verdict, judge_code = runs[len(calls)]
        calls.append(rcmd)
        (rdir / "out.txt").write_text(output)
        if verdict is not None:
            (jdir / "result.json").write_text(json.dumps(verdict))
        return runner_code, judge_code
    return run_pair

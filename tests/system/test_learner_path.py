"""What a learner meets in the released notebooks: every code cell parses, and a learner who fills only the
stubs the release leaves (the `# YOUR CODE HERE` lines) with the reference's code has a notebook that runs
(the full-marks check of that notebook is in test_grading.py: test_reference_gets_full_marks)."""
from __future__ import annotations

import ast

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from course import ROOT, fill_solution_regions

ASSIGNMENTS = sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir())


def _read(folder: str, assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / folder / assignment / f"{assignment}.ipynb", as_version=4)


def _syntax_errors(nb: nbformat.NotebookNode) -> list[str]:
    """Each code cell as IPython runs it (magics turned into Python), parsed; the errors, by cell."""
    transform = TransformerManager().transform_cell
    errors = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            ast.parse(transform(cell.source))
        except SyntaxError as err:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
            errors.append(f"cell {i} {gid}: line {err.lineno}: {err.msg}")
    return errors


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_release_code_cell_parses(assignment):
    """Does every code cell of the release, stubs included, parse as IPython runs it?"""
    errors = _syntax_errors(_read("release", assignment))
    assert not errors, f"release/{assignment}: cells that do not parse:\n" + "\n".join(errors)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_filling_the_stubs_gives_the_reference(assignment):
    """Is every stub of the release in the place of one solution region, so that filling the stubs (and nothing
    else) gives cells that parse and equal the reference's?"""
    release, source = _read("release", assignment), _read("source", assignment)
    filled = fill_solution_regions(release, source)
    assert not _syntax_errors(filled)
    strip = lambda s: [ln for ln in s.splitlines() if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]  # noqa: E731
    ref = {c.metadata.nbgrader["grade_id"]: c.source for c in source.cells
           if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in filled.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and gid in ref:
            assert strip(cell.source) == strip(ref[gid]), f"{assignment}/{gid}: the filled stub differs from the source"


# ---- the checked exercises: does each check fail a wrong answer and pass the reference? ----------------
def _cells_by_id(assignment: str) -> dict[str, str]:
    return {c.get("id"): c.source for c in _read("source", assignment).cells}


def _run_script(tmp_path, text: str):
    import subprocess
    import sys

    path = tmp_path / "exercise.py"
    path.write_text(text)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "TRITON_INTERPRET": "1"})


HEADER = ("import torch\nimport triton\nimport triton.language as tl\nfrom tritoncourse.checking import compare\n"
          "DEVICE = 'cpu'\n")


@pytest.mark.parametrize("answer,passes", [("reference", True), ("the planted bug", False)])
def test_debugging_check_fails_the_planted_bug(tmp_path, answer, passes):
    """Phase 1's debugging exercise: its check passes the fixed wrapper and fails the planted bug."""
    from course import reference_solution

    cells = _cells_by_id("01_vector_add")
    fixed = reference_solution(cells["axpy-fixed"]) if answer == "reference" else "axpy_fixed = axpy\n"
    proc = _run_script(tmp_path, HEADER + cells["planted-bug"] + "\n\n" + fixed + "\n\n" + cells["axpy-check"] + "\n")
    assert ("bug found and fixed" in proc.stdout) is passes, proc.stdout + proc.stderr
    assert (proc.returncode == 0) is passes and ("AssertionError" in proc.stderr) is not passes


@pytest.mark.parametrize("answer,passes", [
    ("reference", True),
    ("truncated", False),  # drops the low bits without rounding: error up to 2^-10
    ("unchanged", False),  # returns x: keeps all 23 bits
])
def test_tf32_check_fails_wrong_roundings(tmp_path, answer, passes):
    """Phase 3's numerics exercise: its check passes rounding to nearest and fails truncation or no rounding."""
    from course import reference_solution

    cells = _cells_by_id("03_matmul_relu")
    answers = {
        "reference": reference_solution(cells["round-to-tf32"]),
        "truncated": "def round_to_tf32(x):\n    return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)\n",
        "unchanged": "def round_to_tf32(x):\n    return x.clone()\n",
    }
    proc = _run_script(tmp_path, HEADER + answers[answer] + "\n\n" + cells["round-to-tf32-check"] + "\n")
    assert ("round_to_tf32 is right" in proc.stdout) is passes, proc.stdout + proc.stderr
    assert (proc.returncode == 0) is passes


@pytest.mark.parametrize("answer,passes", [({"eager": 3, "triton": 1}, True), ({"eager": 1, "triton": 1}, False),
                                           ({"eager": 3, "triton": 3}, False)])
def test_profiling_check_compares_with_the_profile(answer, passes, capsys):
    """Phase 4's profiling exercise: its check passes the launches a profile shows and fails other counts."""
    cells = _cells_by_id("04_benchmarking")
    profile = {"eager": {"add": (1, 60.0), "clamp_min": (1, 60.0), "mul": (1, 60.0)},
               "triton": {"triton_add_relu_mul_kernel": (1, 40.0)}}
    namespace = {"profiles": profile, "kernel_launches": answer}
    if passes:
        exec(cells["kernel-launches-check"], namespace)
        assert "matches the profile" in capsys.readouterr().out
    else:
        with pytest.raises(AssertionError, match="the profile shows"):
            exec(cells["kernel-launches-check"], namespace)
    reference = {}
    exec(cells["kernel-launches"].replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""), reference)
    assert reference["kernel_launches"] == {"eager": 3, "triton": 1}

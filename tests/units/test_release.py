"""release/ as committed: notebooks without outputs, no solutions and no hidden tests, every phase released and
listed. That regenerating it by nbgrader changes nothing: tests/workflows/test_release_regenerated.py."""
import json
import subprocess
from pathlib import Path

import pytest

from course import ROOT

ASSIGNMENTS = sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir())


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_hides_solutions_and_hidden_tests(assignment):
    text = (ROOT / "release" / assignment / f"{assignment}.ipynb").read_text()
    for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "Model answer", "Rubric"):
        assert marker not in text, f"release/{assignment} contains '{marker}'"


def test_notebooks_are_committed_without_outputs():
    files = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert files, "no notebooks tracked"
    dirty = []
    for f in files:
        nb = json.loads((ROOT / f).read_text())
        if any(c.get("outputs") or c.get("execution_count") for c in nb["cells"]):
            dirty.append(f)
    assert not dirty, f"notebooks committed with outputs: {dirty}"


def test_every_source_assignment_is_released_and_listed_in_the_makefile():
    makefile = (ROOT / "Makefile").read_text()
    for a in ASSIGNMENTS:
        assert (ROOT / "release" / a / f"{a}.ipynb").exists(), a
        assert a in makefile, f"{a} missing from ASSIGNMENTS in the Makefile"


def _hidden_only(assignment: str) -> list[str]:
    """grade_ids of the test cells whose every check is hidden (nothing a learner can run before grading)."""
    import ast
    import re

    nb = json.loads((ROOT / "source" / assignment / f"{assignment}.ipynb").read_text())
    found = []
    for cell in nb["cells"]:
        grade = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or not grade.get("grade"):
            continue
        visible = re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", "".join(cell["source"]), flags=re.S)
        visible = "\n".join(line for line in visible.splitlines() if not line.startswith("%%"))
        if not any(isinstance(n, ast.Call) for n in ast.walk(ast.parse(visible))):
            found.append(grade["grade_id"])
    return found


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_test_cell_has_a_visible_case(assignment):
    """Can a learner check each tested behaviour before grading? Every test cell runs at least one visible case
    besides its hidden ones (issue 29)."""
    assert _hidden_only(assignment) == [], f"source/{assignment}: test cells with hidden cases only"

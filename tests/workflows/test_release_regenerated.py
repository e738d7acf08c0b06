"""release/ is generated from source/ by nbgrader and committed: regenerating it (a real `nbgrader
generate_assignment` of every phase, in a course copy) must change nothing. What the committed release holds:
tests/units/test_release.py."""
import json

import pytest

from course import ROOT, Course

ASSIGNMENTS = sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    return Course(tmp_path_factory.mktemp("release"), ASSIGNMENTS)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_is_regenerated_without_diff(regenerated, assignment):
    """Does `nbgrader generate_assignment` reproduce the committed release/ exactly?"""
    name = f"{assignment}.ipynb"
    fresh = json.loads((regenerated.path / "release" / assignment / name).read_text())
    committed = json.loads((ROOT / "release" / assignment / name).read_text())
    assert fresh == committed, f"release/{assignment} is stale: run `make release` and commit it"

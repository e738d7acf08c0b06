"""What the README and docs/ say about the course's own files, checked against those files (issue 29).

Fast: reads text, JSON and two tools' tables; grades nothing.
"""
from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
RESULTS = (ROOT / "docs" / "RESULTS.md").read_text()
INSTRUCTORS = (ROOT / "docs" / "INSTRUCTORS.md").read_text()
ASSIGNMENTS = re.search(r"^ASSIGNMENTS := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()


@pytest.fixture(scope="module")
def tools():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        yield importlib.import_module("gpu_check"), importlib.import_module("grading_speed")
    finally:
        sys.path.remove(str(ROOT / "tools"))


def test_results_doc_names_every_benchmark_section(tools):
    gpu_check, _ = tools
    m = re.search(r"`--sections ([a-z_,]+)`\s*`([a-z_,]+)`", RESULTS)
    assert m, "docs/RESULTS.md names no `--sections ...` list"
    assert (m.group(1) + m.group(2)).split(",") == list(gpu_check.BENCHMARKS), \
        f"docs/RESULTS.md's --sections list differs from tools/gpu_check.py's: {list(gpu_check.BENCHMARKS)}"


def test_grading_speed_is_rendered_from_its_record(tools):
    """The CPU timing of docs/INSTRUCTORS.md section 9 and the README's sentence are what tools/grading_speed.py
    writes from results/grading-cpu.json (never typed by hand), and they name the phases the record lacks."""
    _, speed = tools
    assert speed.ASSIGNMENTS == ASSIGNMENTS
    record = json.loads((ROOT / "results" / "grading-cpu.json").read_text())
    block = INSTRUCTORS[INSTRUCTORS.index(speed.BEGIN) + len(speed.BEGIN):INSTRUCTORS.index(speed.END)]
    assert block.strip() == speed.markdown(record).strip(), "rerun tools/grading_speed.py --from-json ... --write-docs"
    sentence = README[README.index(speed.README_BEGIN) + len(speed.README_BEGIN):README.index(speed.README_END)]
    assert sentence == speed.readme_sentence(record)
    phases, _, missing = speed.measured(record)
    for a in missing:
        assert a in block and a in sentence, f"{a} is not in the record, and the docs do not say so"
    if missing:
        assert not re.search(r"(all|every) (five|six) (notebooks|phases)", block + sentence)


def test_gpu_grading_speed_is_rendered_from_its_record(tools):
    """The GPU timing of docs/INSTRUCTORS.md section 9 is what tools/grading_speed.py writes from
    results/grading-gpu.json, in its own markers (a GPU record written with --write-docs never replaces the CPU's)."""
    _, speed = tools
    record = json.loads((ROOT / "results" / "grading-gpu.json").read_text())
    assert record["device"].startswith("gpu")
    block = INSTRUCTORS[INSTRUCTORS.index(speed.GPU_BEGIN) + len(speed.GPU_BEGIN):INSTRUCTORS.index(speed.GPU_END)]
    assert block.strip() == speed.markdown(record).strip(), "rerun tools/grading_speed.py --from-json ... --write-docs"
    assert INSTRUCTORS.index(speed.END) < INSTRUCTORS.index(speed.GPU_BEGIN)


def test_historical_gpu_grading_says_so():
    """A grading run in results/gpu-results.json that lacks a phase of today's course is labelled historical and
    points to docs/GPU-RUNS.md."""
    grading = json.loads((ROOT / "results" / "gpu-results.json").read_text()).get("grading", {})
    for key, run in grading.items():
        if isinstance(run, dict) and "phases" in run and set(run["phases"]) != set(ASSIGNMENTS):
            assert "historical" in key, f"grading run {key!r} covers {sorted(run['phases'])} only"
            assert "docs/GPU-RUNS.md" in grading.get("note", ""), "the grading block does not point to newer runs"


def _canvas_regexp() -> str:
    block = re.search(r"```python\n(c\.FileNameCollectorPlugin\.named_regexp = \(.*?\))\n```", INSTRUCTORS, re.S)
    assert block, "docs/INSTRUCTORS.md shows no named_regexp for an LMS"
    c = type("C", (), {})()
    c.FileNameCollectorPlugin = type("P", (), {})()
    exec(block.group(1), {"c": c})
    return c.FileNameCollectorPlugin.named_regexp


@pytest.mark.parametrize("name,student,assignment", [
    ("doejane_12345_67890_jane_doe__01_vector_add.ipynb", "jane_doe", "01_vector_add"),
    ("doejane_late_12345_67890_jane_doe__02_softmax.ipynb", "jane_doe", "02_softmax"),
    ("smithjohn_LATE_4_5_john.smith@uni.edu__06_fused_attention-1.ipynb", "john.smith@uni.edu", "06_fused_attention"),
    ("jane_doe__01_vector_add.ipynb", None, None),                 # no Canvas prefix
    ("doejane_12345_67890_jane__doe__01_vector_add.ipynb", None, None),  # a double underscore in the id
])
def test_the_canvas_regexp_reads_canvas_names(name, student, assignment):
    """nbgrader's FileNameCollectorPlugin re.match()es the regexp against the path of each extracted file."""
    m = re.match(_canvas_regexp(), f"downloaded/x/extracted/{name}")
    if student is None:
        assert m is None, m.groupdict()
    else:
        assert m and m.group("student_id") == student and m.group("file_id") == assignment, name


def test_canvas_advice_names_the_file_that_wins():
    """nbgrader reads the course directory's nbgrader_config.py last: the advice must send the edit there."""
    i = INSTRUCTORS.index("If your LMS renames uploads")
    advice = INSTRUCTORS[i:i + 1500]
    assert "in the course directory" in advice and "overridden by the course's" in advice
    assert "--FileNameCollectorPlugin.named_regexp=" in advice


def _tables(text: str):
    """Each markdown table's rows (lists of cells), first row the header."""
    for block in re.findall(r"((?:^\|.*\|\n)+)", text, re.M):
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.strip().splitlines()]
        yield [r for r in rows if not set("".join(r)) <= set("-: ")]


def test_every_workflow_table_has_the_manual_grading_step():
    """Key questions are graded by hand between grade and export/feedback, in every workflow table."""
    found = 0
    for rows in _tables(INSTRUCTORS):
        steps = [r[0] for r in rows[1:]]
        if rows[0][0] == "step" and "grade" in steps:
            found += 1
            assert "grade by hand" in steps, steps
            assert steps.index("grade") < steps.index("grade by hand") < steps.index("export") < steps.index("feedback")
    assert found, "docs/INSTRUCTORS.md has no workflow table"
    commands = README[README.index("make release   "):]
    assert commands.index("make grade ") < commands.index("Formgrader") < commands.index("make grades")


def test_the_readme_is_short_and_names_only_what_exists():
    """The README a newcomer reads in five minutes (issue 44): at most 150 lines; every `make TARGET` it names has a
    rule in the Makefile, every course file or folder it names is there (but for the learner's workspace,
    notebooks/, which `make lab` fills)."""
    from tritoncourse.classroom.learner_files import MAKE_RE

    assert len(README.splitlines()) <= 150, "the README grew: move the detail to docs/ or tests/README.md"
    rules = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))
    assert set(MAKE_RE.findall(README)) <= rules, set(MAKE_RE.findall(README)) - rules
    paths = re.findall(r"(?<![\w/.])((?:docs|tests|tools|source|release|results|requirements|docker|notebooks|"
                       r"tritoncourse)/[\w./-]*[\w/])", README)
    missing = [p for p in paths if not (ROOT / p).exists() and not p.startswith("notebooks/")]
    assert paths and not missing, missing


def test_the_readmes_make_test_time_is_the_latest_in_the_tests_history():
    """The README gives one figure for `make test`; it is the last run tests/README.md records, within the goal."""
    m = re.search(r"`make test` took (\d+) s \(under (\d+) minutes; pytest (\d+) s, (\d+) passed, (\d+) skipped\) "
                  r"at commit (\w+)", README)
    assert m, "the README gives no `make test` time"
    total, minutes, pytest_s, passed, skipped, commit = m.groups()
    assert int(total) < int(minutes) * 60 <= 20 * 60
    history = " ".join((ROOT / "tests" / "README.md").read_text().split())
    assert f"{commit} {total} s (pytest {pytest_s} s, {passed} passed, {skipped} skipped)" in history

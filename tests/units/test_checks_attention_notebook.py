"""Phase 6's notebook (issue 29): every number in its prose is the notebook's own, and every graded test cell shows
a case a learner can run. Fast: the notebook read with nbformat, one reference cell run."""
import torch

from attention_cases import NOTEBOOK
from course import ROOT


# ---- issue 29: every number in the prose is the notebook's own -------------------------------------------------
def _cells():
    import nbformat

    return nbformat.read(NOTEBOOK, as_version=4).cells


def test_the_first_cell_states_the_graded_points_and_the_readmes_time():
    """The first cell's points are the sums of the grade cells (by part), its time is the README's row for the phase,
    and the graded LayerNorm backward is not called optional."""
    import re

    cells = _cells()
    grades = [c.metadata.nbgrader for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    tests = {g["grade_id"]: g["points"] for g in grades if g["grade_id"].startswith("test_")}
    questions = sum(g["points"] for g in grades if not g["grade_id"].startswith("test_"))
    backward = sum(p for t, p in tests.items() if t.startswith("test_layer_norm_backward"))
    forward = sum(p for t, p in tests.items() if t.startswith("test_layer_norm")) - backward
    attention = sum(p for t, p in tests.items() if t.startswith("test_attention"))
    assert forward + backward + attention == sum(tests.values())
    first = " ".join(cells[0].source.split())
    assert (f"Points: kernel tests {sum(tests.values())} (LayerNorm {forward}, its backward {backward}, attention "
            f"{attention}), key questions {questions}.") in first, first
    assert "optional" not in first.lower()
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if "`06_fused_attention`" in line)
    lo, hi = re.search(r"\| (\d+)–(\d+) min \|", row).groups()
    assert f"Expected time: {lo} to {hi} minutes" in first, (row, first)


def test_the_prose_sizes_are_those_the_reference_cell_computes():
    """'Q, K, V and O together are N MiB' and 'G GiB for S alone' at batch·heads 32, seq_len 16384, head_dim 128,
    fp16: computed by the notebook's own attention_memory."""
    cell = next(c for c in _cells() if c.get("id") == "attention-reference")
    ns = {"torch": torch}
    exec(cell.source.split("\nprint(")[0], ns)
    qkvo, scores = ns["attention_memory"](32, 16384, 128)
    text = " ".join(" ".join(c.source.split()) for c in _cells() if c.cell_type == "markdown")
    assert f"that is {scores / 2**30:.0f} GiB for `S` alone" in text
    assert f"`Q`, `K`, `V` and `O` together are {qkvo / 2**20:.0f} MiB at head_dim 128" in text


def test_every_graded_test_cell_shows_a_case_and_the_steps_name_real_tests():
    """A learner can run every graded behaviour before grading (a visible case above the hidden ones), and each of
    the kernel's steps names a test that exists."""
    import re

    cells = _cells()
    ids = set()
    for c in cells:
        gid = c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if c.cell_type == "code" and gid.startswith("test_"):
            ids.add(gid)
            visible = c.source.split("### BEGIN HIDDEN TESTS")[0]
            assert re.search(r"^check_\w+\(", visible, re.M), f"{gid} has hidden cases only"
    steps = next(c.source for c in cells if c.cell_type == "markdown" and "The kernel, in four steps" in c.source)
    named = set(re.findall(r"`(test_\w+)`", steps))
    assert named and named <= ids, named - ids


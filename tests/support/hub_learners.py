"""What the hub test's learners hand in, beyond the reference and a wrong kernel: hostile learner C's notebook, and the
30 learners of the load test, each notebook marked as its owner's."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_raw_cell

from course import Fixture
from hostile_markup import hostile_notebook
from learner_lab import learner_notebook

HOSTILE = Path(__file__).resolve().parents[1] / "hostile"
PHASE = "01_vector_add"
KERNEL_CELL = "vector_add_kernel"
C_HOSTILE = ("hostile_forge_gradebook", "hostile_read_secrets")  # tests/hostile/01_vector_add/, their hostile cells


def _index(nb, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _publishing(output) -> str:
    """A cell whose run makes ``output`` again: what a learner's code can send (tests/grader/test_inert_pages.py)."""
    if output.output_type == "stream":
        return f"print({output.text!r}, end='')"
    if output.output_type == "error":
        return f"raise ValueError({output.evalue!r})"
    data, meta = json.loads(json.dumps(output.data)), json.loads(json.dumps(output.get("metadata", {})))
    return f"from IPython.display import publish_display_data\npublish_display_data({data!r}, {meta!r})"


def hostile_learner(course: Path, marker: str, leak_url: str) -> nbformat.NotebookNode:
    """Learner C: the reference kernel (so every kernel test must still pass: C's points are checked), then, right
    after the kernel, the hostile cells of tests/hostile/01_vector_add/'s ``C_HOSTILE`` aimed at the instructor's
    real course directory ``course`` (forge the gradebook, now and from a detached child; print every file of the
    course it reaches), and cells whose outputs carry tests/grader/test_inert_pages.py's payloads (``leak_url``: the
    test's server they call home to) with the key question's answer in that test's hostile markdown."""
    nb = learner_notebook(PHASE)
    at = _index(nb, KERNEL_CELL) + 1
    for name in C_HOSTILE:
        for where, src in Fixture.load(HOSTILE / PHASE / f"{name}.py").chunks[1:]:
            assert where == "after-kernel", (name, where)
            src = src.replace("{{course}}", str(course)).replace("{{marker}}", marker)
            nb.cells.insert(at, new_code_cell(src))
            at += 1
    payloads = hostile_notebook(leak_url)
    answer, outputs = payloads.cells[1], payloads.cells[2].outputs
    key = nb.cells[_index(nb, "mask_question")]
    key.source, key["attachments"] = answer.source, answer.attachments
    errors = [o for o in outputs if o.output_type == "error"]
    shows = [_publishing(o) for o in outputs if o.output_type != "error"]
    nb.cells += [new_code_cell("\n".join(shows)), new_markdown_cell(payloads.cells[3].source),
                 new_raw_cell(payloads.cells[4].source, metadata=dict(payloads.cells[4].metadata))]
    nb.cells += [new_code_cell(_publishing(o)) for o in errors]  # last: an error ends nothing, but stays last
    for i, c in enumerate(nb.cells):
        c.setdefault("id", f"c-{i}")
    return nb


def marked_notebook(owner: str) -> nbformat.NotebookNode:
    """The released notebook with a cell naming its owner: the load test finds whose notebook each collected one is."""
    nb = nbformat.read(Path(__file__).resolve().parents[2] / "release" / PHASE / f"{PHASE}.ipynb", as_version=4)
    nb.cells.append(new_code_cell(f"# OWNER={owner}", id="owner-marker"))
    return nb


def owner_of(path: Path) -> str | None:
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.source.startswith("# OWNER="):
            return cell.source.split("=", 1)[1].strip()
    return None

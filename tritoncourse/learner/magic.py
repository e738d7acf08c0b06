"""The ``%%kernel_test`` cell magic: a test cell that runs in a fresh process.

In the learner's notebook the magic takes the kernels from the session's input history (the cells as
last run, parsed the way the grader parses the saved file) and runs the cell's test against them in a fresh process: a crash or an endless loop in a
kernel never takes the notebook down. During ``nbgrader autograde`` it does nothing: the course's
preprocessor runs the same test outside the notebook, on the kernels of the submitted file.

Where JupyterLab says which cell each input came from (its cell id), the magic takes definitions as the
grader and ``make check`` do: a solution cell's definition wins over one run from any other cell, and it says
so loudly when the two differ. An unfilled stub reads the same on the CPU and on a GPU: "not written yet".
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import nbformat

from ..grading.processes.isolated import MAGIC, run_cell
from ..grading.lint.source import assemble, kernels_from_history, kernels_from_notebook
from ..grading.lint.whitelist import NOT_WRITTEN

ROOT = Path(__file__).resolve().parent.parent.parent
_CELL_IDS: dict[int, str] = {}  # index in the input history -> id of the notebook cell that ran (from JupyterLab)


class KernelTestFailed(Exception):
    """Raised in the notebook when a kernel test fails; shows the message without a traceback."""

    def _render_traceback_(self):
        return ["\x1b[0;31mKernelTestFailed\x1b[0m: " + str(self)]


@functools.lru_cache(maxsize=None)
def _released_cells(path: Path) -> tuple[frozenset[str], dict[str, str], frozenset[str]]:
    """(every cell id, {solution cell id: grade_id}, names its solution cells define) of a released notebook."""
    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")]
    names = set()
    for c in cells:
        names |= set(kernels_from_history([c.source])[0])
    return (frozenset(c.get("id") for c in nb.cells),
            {c.get("id"): c.metadata["nbgrader"].get("grade_id", c.get("id")) for c in cells}, frozenset(names))


def solution_cells(seen: set[str], release: Path | None = None) -> tuple[dict[str, str], frozenset[str]]:
    """({cell id: grade_id} of the solution cells, the names they define) of the released notebook the seen
    cell ids belong to (the one that has most of them)."""
    best, overlap = ({}, frozenset()), 0
    for path in sorted((release or ROOT / "release").glob("*/*.ipynb")):
        ids, solution, names = _released_cells(path)
        if len(ids & seen) > overlap:
            best, overlap = (solution, names), len(ids & seen)
    return best


def kernels_as_graded(inputs: list[str], cell_ids: dict[int, str], release: Path | None = None):
    """(definitions, plain names, warnings): the session's definitions taken as the grader takes the saved
    notebook's (solution cells win), and a warning for each name last run from another cell.

    Without cell ids (a frontend that sends none) the last definition wins, as before."""
    solution, solution_names = solution_cells(set(cell_ids.values()), release)
    if not solution:
        kernels, plain = kernels_from_history(inputs)
        return kernels, plain, {}
    cells, last_run = [], {}
    for i, text in enumerate(inputs):
        if not text.strip() or text.lstrip().startswith("%%"):
            continue  # cell magics (the tests themselves) define nothing of the learner's
        grade_id = solution.get(cell_ids.get(i))
        cells.append(nbformat.v4.new_code_cell(text, metadata={"nbgrader": {
            "solution": grade_id is not None, "grade_id": grade_id or f"input [{i}]"}}))
        for name in kernels_from_history([text])[0]:
            last_run[name] = (i, grade_id)
    kernels, plain = kernels_from_notebook(nbformat.v4.new_notebook(cells=cells))
    warnings = {}
    for name, (i, grade_id) in last_run.items():
        taken = kernels.get(name)
        if grade_id is None and taken is not None and taken.cell != f"input [{i}]":
            warnings[name] = (f"`{name}` was last run from a cell that is not its solution cell (input [{i}]). "
                              f"This test, `make check` and the grader all take `{name}` from the solution cell "
                              f"`{taken.cell}`: move your change there and run that cell.")
        elif grade_id is None and taken is not None and name in solution_names:
            warnings[name] = (f"`{name}` was run only from a cell that is not its solution cell (input [{i}]). "
                              f"The grader and `make check` take `{name}` from its solution cell in the saved "
                              "notebook: write it there and run that cell.")
    return kernels, plain, warnings


def kernel_test(line: str, cell: str) -> None:
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        # Graded test cells never reach the kernel (the grader replaces them, nbgrader_plugin): this one has no points.
        print("A practice check without points: not run when your notebook is graded.")
        return
    from IPython import get_ipython

    # The definitions as last run: the session's raw input history, oldest first.
    inputs = get_ipython().history_manager.input_hist_raw
    kernels, plain, warnings = kernels_as_graded(inputs, _CELL_IDS)
    used = set(assemble(cell, kernels, plain).kernels)
    loud = [w for name, w in warnings.items() if name in used]
    if loud:
        print("\n".join(["!" * 100, "WARNING: the grader will not test what you last ran."] + loud + ["!" * 100]))
    outcome = run_cell(f"{MAGIC} {line}\n{cell}", kernels, plain)
    if outcome.ok:
        print(outcome.report())
    else:
        raise KernelTestFailed(outcome.report())


# ------------------------------------------------------------------ an unfilled stub, on the CPU and on a GPU
def stub_name(err: BaseException, tb=None) -> str | None:
    """The name of the unfilled stub this error comes from, or None when it is another error.

    CPU (interpreter, or a plain function): a bare ``NotImplementedError()`` raised by the learner's code.
    GPU: Triton's compiler refuses the stub's ``raise`` ("unsupported AST node type: Raise"); the CPU's
    interpreter wraps the kernel's NotImplementedError in an InterpreterError."""
    if type(err).__name__ == "InterpreterError" and isinstance(err.__cause__, NotImplementedError):
        return stub_name(err.__cause__, err.__cause__.__traceback__)
    from triton import CompilationError

    if isinstance(err, CompilationError):  # on a GPU its subclass UnsupportedLanguageConstruct (seen on an H200)
        text = str(err)
        if "unsupported AST node type: Raise" not in text or "NotImplementedError" not in text:
            return None
        found = re.search(r"def\s+(\w+)\s*\(", getattr(err, "src", None) or "")
        return found.group(1) if found else "your kernel"
    if not isinstance(err, NotImplementedError) or err.args:
        return None  # torch's own NotImplementedError (an unsupported op) carries a message
    frame = None
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
    if frame is None or not _learner_file(frame.f_code.co_filename):
        return None
    return frame.f_code.co_name


def _learner_file(filename: str) -> bool:
    """A notebook cell's code (IPython's `<ipython-input-…>` or ipykernel's cell files), not a library's."""
    return filename.startswith("<ipython-input") or "ipykernel" in filename or filename.startswith("<cell")


def not_written_message(name: str) -> str:
    return f"NotImplementedError: `{name}` is not written yet: {NOT_WRITTEN.split(': ', 1)[1]}."


def _stub_handler(shell, etype, value, tb, tb_offset=None):
    """IPython's handler for the exceptions registered below: it shows the error itself (IPython only calls
    it). An unfilled stub shows one line, as a NotImplementedError on the CPU and on a GPU alike; anything
    else its usual traceback."""
    name = stub_name(value, tb)
    if name is None:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return []
    message = not_written_message(name)
    stb = ["\x1b[0;31m" + message + "\x1b[0m"]
    shell._showtraceback(NotImplementedError, NotImplementedError(message.split(": ", 1)[1]), stb)
    return stb


def _remember_cell(info) -> None:
    from IPython import get_ipython

    cell_id = getattr(info, "cell_id", None)
    if cell_id and info.store_history:  # this input is about to be stored at the history's end
        _CELL_IDS[len(get_ipython().history_manager.input_hist_raw)] = cell_id


def register(ip) -> None:
    ip.register_magic_function(kernel_test, magic_kind="cell", magic_name=MAGIC.lstrip("%"))
    from triton import CompilationError
    from triton.runtime.interpreter import InterpreterError

    ip.set_custom_exc((NotImplementedError, CompilationError, InterpreterError), _stub_handler)
    if _remember_cell not in ip.events.callbacks["pre_run_cell"]:
        ip.events.register("pre_run_cell", _remember_cell)

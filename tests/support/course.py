"""Test harness: a throw-away copy of the course directory driven with real nbgrader commands."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

ROOT = Path(__file__).resolve().parents[2]
SUBMISSIONS = Path(__file__).resolve().parents[1] / "submissions"
BIN = Path(sys.executable).parent
# The fixtures graded through real nbgrader (tests/workflows/test_grading.py); every other fixture's verdict is
# tests/judged/test_verdicts.py's, through the grader's judge and sandboxed runner. In every phase each autograded cell is a
# %%kernel_test (the answers, statistics and configurations of phases 4 and 5 are plain definitions judged in the
# runner too), scored by IsolatedKernelTests from kernels_from_notebook and run_cell alone, whatever the notebook's
# run did: nbgrader's score and feedback for a fixture that only changes definitions are test_verdicts' verdict and
# report. So only what acts on the notebook's run (a cheat: an input transformer, patched checks, a redefined
# wrapper or autograd.Function) is graded here (2026-11-28: the correct variants, wrong values and refused
# definitions moved to test_verdicts; tests/README.md, "What moved"). A failing test's cause and seed in nbgrader's
# feedback is asked of phase 1's class (CLASS_FIXTURES: its crash reads far outside its tensors): the feedback's path
# is the same for every phase, and each phase's stray access (phases 2, 3, 4, 6 and 7's, graded here until
# 2026-11-29) is judged with its cause in test_verdicts. A GPU run names them (TRITONCOURSE_GRADING_FIXTURES) to
# grade them through nbgrader under compute-sanitizer.
NBGRADER_FIXTURES = {
    # phase 1's other failure classes are CLASS_FIXTURES (a crash, an endless loop, monkeypatching, a broken cell)
    "01_vector_add": {"wrong_input_transformer"},
    "03_matmul_relu": {"wrong_monkeypatch_checks"},
    "05_autotuning": {"wrong_not_autotuned"},  # patches the checks, beside a matmul left unautotuned
    "06_fused_attention": {"wrong_wrapper_calls_sdpa"},
    # phase 7's notebook-level cheat, an AttentionFunction redefined in the notebook with forged gradients, is its
    # hostile learner hostile_autograd_forged_backward's (graded in test_grading's phase-7 run, every test 0):
    # wrong_autograd_function_forged (the same redefinition beside right kernels but one) is judged in test_verdicts
}

# Phase 1's fixtures that the classroom's class grades through real nbgrader (tests/support/baseline.py's build_class:
# plain serial `nbgrader autograde` in the session's baseline, but the endless loop, and `course grade`, whose private
# gradings are plain `nbgrader autograde` too): a cheat that monkeypatches the notebook, a broken unrelated cell,
# an endless loop (the time limits), a crash (the CPU fence). tests/workflows/test_classroom.py asks each for exactly
# its fixture's lost tests and, in its feedback, the cause and the seed; neither test_grading nor test_verdicts grades
# them again.
CLASS_FIXTURES = {"01_vector_add": {"wrong_monkeypatch", "correct_broken_unrelated_cell", "wrong_endless_loop",
                                    "wrong_segfault"}}


def graded_through_nbgrader(assignment: str) -> set[str]:
    """The fixtures of ``assignment`` that real nbgrader grades in `make test` (test_grading's, the class's)."""
    return NBGRADER_FIXTURES.get(assignment, set()) | CLASS_FIXTURES.get(assignment, set())


# Phase 1 with its largest sizes scaled down, for the tests that grade phase 1 to prove a workflow rather than to
# judge kernels: a class graded in parallel, stopped and restarted, on Dask and Slurm; hostile learners; links. Its
# 2**20-element and 100_003-element tests are about a third of a grading's CPU on Triton's interpreter (one
# reference notebook under plain nbgrader: 14 s of busy CPU, 9 s scaled down); the notebook's own example cell, a
# 98_432-element launch in the notebook's kernel, 0.17 s of CPU a notebook, 0.01 s at 9_843. Every size is still
# ragged where it was. The real sizes are graded by tests/workflows/test_grading.py (each standard learner, real nbgrader) and judged by
# tests/judged/test_verdicts.py (every fixture).
SCALED_DOWN = {"01_vector_add": (("n=2**20 + 1,", "n=2**12 + 1,"), ("n=2**20 + 12_345,", "n=2**12 + 345,"),
                                 ("100_003", "1_003"), ("n=65536,", "n=8192,"),
                                 ("torch.rand(98_432,", "torch.rand(9_843,"))}


def scale_down(notebook: Path, assignment: str) -> None:
    """Rewrite ``notebook``'s test sizes by SCALED_DOWN; each size must be found (a changed notebook fails here)."""
    text = notebook.read_text()
    for real, small in SCALED_DOWN[assignment]:
        assert real in text, f"{notebook}: {real!r} is gone; update tests/support/course.py's SCALED_DOWN"
        text = text.replace(real, small)
    notebook.write_text(text)


def nbgrader(*args: str, cwd: Path, check: bool = True, timeout: float = 3000,
             env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("TRITONCOURSE_SEED", None)
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"nbgrader {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-8000:]}")
    return proc


# Where generated courses are kept for the session (conftest.py sets it; None: every Course generates its own).
TEMPLATES_ENV = "TRITONCOURSE_TEST_COURSE_TEMPLATES"


def generated_template(assignments: list[str], scaled_down: bool) -> Path | None:
    """A course generated once per test session (all pytest-xdist workers and the early baseline's process) for
    these assignments, as ``Course`` makes it with nbgrader's own environment: nbgrader_config.py, source/, release/
    and the gradebook (nothing in them names their folder; only the gradebook's random ids would differ). Keyed by
    the bytes of everything generation reads, so a changed notebook makes a new one. None without TEMPLATES_ENV."""
    if not os.environ.get(TEMPLATES_ENV):
        return None
    digest = hashlib.sha256(repr((sorted(assignments), scaled_down)).encode())
    for f in [ROOT / "nbgrader_config.py", *sorted(p for a in sorted(assignments) for p in (ROOT / "source" / a).rglob("*")
                                                   if p.is_file())]:
        digest.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    home = Path(os.environ[TEMPLATES_ENV])
    made = home / digest.hexdigest()[:24]
    if not made.is_dir():
        home.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix="partial-", dir=home))
        Course(partial / "course", assignments, scaled_down=scaled_down, cached=False)
        try:
            os.rename(partial / "course", made)  # atomic; another process's equal copy may have come first
        except OSError:
            if not made.is_dir():
                raise
        shutil.rmtree(partial, ignore_errors=True)
    return made


class Course:
    """A copy of nbgrader_config.py and source/ in ``path``, with its own gradebook."""

    def __init__(self, path: Path, assignments: list[str], scaled_down: bool = False, frozen_package: bool = False,
                 env: dict | None = None, cached: bool = True):
        """``scaled_down``: phase 1's largest test sizes scaled down (SCALED_DOWN), for workflow tests.
        ``frozen_package``: a copy of the course package in the folder, for processes that import it from there
        (the Dask workers); ``env``: nbgrader's environment (a gradebook's URL, that copy on PYTHONPATH), else this
        process's, and then a copy of the session's generated course (``generated_template``) unless not ``cached``."""
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        if frozen_package:
            shutil.copytree(ROOT / "tritoncourse", path / "tritoncourse",
                            ignore=shutil.ignore_patterns("__pycache__"))
        # a gradebook elsewhere (nbgrader_config.py reads TRITONCOURSE_DB_URL) is generated there, not copied
        here = env is None and not os.environ.get("TRITONCOURSE_DB_URL")
        template = generated_template(assignments, scaled_down) if cached and here else None
        if template is not None:
            shutil.copytree(template, path, dirs_exist_ok=True)
            return
        shutil.copy2(ROOT / "nbgrader_config.py", path / "nbgrader_config.py")
        for a in assignments:
            shutil.copytree(ROOT / "source" / a, path / "source" / a)
            if scaled_down:
                scale_down(path / "source" / a / f"{a}.ipynb", a)
            nbgrader("generate_assignment", a, "--force", "--log-level=WARN", cwd=path, env=env)

    @classmethod
    def existing(cls, path: Path) -> "Course":
        """A course folder made before (by this class or a copy of one), used as it is."""
        course = cls.__new__(cls)
        course.path = path
        return course

    def release_notebook(self, assignment: str) -> nbformat.NotebookNode:
        return nbformat.read(self.path / "release" / assignment / f"{assignment}.ipynb", as_version=4)

    def source_notebook(self, assignment: str) -> nbformat.NotebookNode:
        return nbformat.read(self.path / "source" / assignment / f"{assignment}.ipynb", as_version=4)

    def submit(self, student: str, assignment: str, nb: nbformat.NotebookNode | str) -> None:
        dest = self.path / "submitted" / student / assignment
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / f"{assignment}.ipynb"
        if isinstance(nb, str):
            target.write_text(nb)
        else:
            nbformat.write(nb, target)

    def autograde(self, assignment: str, *flags: str, check: bool = False) -> subprocess.CompletedProcess:
        """Plain ``nbgrader autograde`` of the course. Its judges are forked by this test process's shared judge
        zygote (tritoncourse/grading/processes/zygote_server.py, as `course grade` shares one among its gradings): the
        nbgrader runs of one pytest worker (test_grading's shards of every phase) start one, not one each."""
        from tritoncourse.grading.processes.zygote_server import shared_judge_env

        return nbgrader("autograde", assignment, "--force", *flags, cwd=self.path, check=check,
                        env=shared_judge_env(os.environ))

    def scores(self, assignment: str, student: str) -> dict[str, float]:
        """Each autograded test's score, by grade_id, from the gradebook."""
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.path / 'gradebook.db'}") as gb:
            sub = gb.find_submission_notebook(assignment, assignment, student)
            return {g.name: g.score for g in sub.grades if g.auto_score is not None or g.cell_type == "code"}

    def feedback_text(self, assignment: str, student: str) -> dict[str, str]:
        """The outputs of each test cell of the autograded notebook, by grade_id."""
        nb = nbformat.read(self.path / "autograded" / student / assignment / f"{assignment}.ipynb", as_version=4)
        texts = {}
        for cell in nb.cells:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid and cell.cell_type == "code":
                parts = []
                for out in cell.get("outputs", []):
                    parts.append(out.get("text", "") + "\n".join(out.get("traceback", [])))
                texts[gid] = "\n".join(parts)
        return texts


@dataclass
class Fixture:
    """A submission file of tests/submissions/<assignment>/ and what grading must give it.

    The notebook is the release with the file's first chunk in place of one solution cell
    (``# replaces: <grade_id>``, default the first); ``# %% append`` and ``# %% after-kernel`` chunks become
    new cells. The other solution cells stay the release's stubs, or with ``# other-solutions: source`` hold
    the reference's solutions, so that a file holds only the cell it changes. Header lines
    ``# expect-fail:``, ``# expect-message:`` and ``# expect-all-pass`` say what grading must give;
    ``# gpu-may-pass:`` names expected failures that a GPU's looser tolerance (tf32 for fp32 tl.dot) may let pass,
    ``# may-pass:`` those that a test written for another mistake catches on most random inputs only.
    """

    name: str
    path: Path
    expect_fail: set[str]
    expect_message: str
    all_pass: bool
    replaces: str | None  # grade_id of the solution cell the first chunk replaces (default: the first)
    chunks: list[tuple[str, str]]  # (where, source)
    other_solutions: str = "release"  # the other solution cells: "release" (the stubs) or "source" (the reference)
    gpu_may_pass: frozenset = frozenset()  # expected failures a GPU's tf32 tolerance may let pass
    may_pass: frozenset = frozenset()  # expected failures that some random inputs let pass, on any device

    def may_keep(self, test: str, on_gpu: bool) -> bool:  # may this expected failure pass here (its header says)?
        return test in self.may_pass or (on_gpu and test in self.gpu_may_pass)

    @classmethod
    def load(cls, path: Path) -> "Fixture":
        text = path.read_text()
        fail = re.search(r"^# expect-fail:(.*)$", text, re.M)
        msg = re.search(r"^# expect-message:(.*)$", text, re.M)
        repl = re.search(r"^# replaces:(.*)$", text, re.M)
        others = re.search(r"^# other-solutions:(.*)$", text, re.M)
        gpu = re.search(r"^# gpu-may-pass:(.*)$", text, re.M)
        anywhere = re.search(r"^# may-pass:(.*)$", text, re.M)
        other_solutions = others.group(1).strip() if others else "release"
        if other_solutions not in ("release", "source"):
            raise ValueError(f"{path}: `# other-solutions:` takes release or source, not {other_solutions!r}")
        body = "\n".join(line for line in text.splitlines()
                          if not line.startswith(("# expect-", "# replaces:", "# other-solutions:", "# gpu-may-pass:",
                                                  "# may-pass:")))
        parts = re.split(r"^# %% (append|after-kernel)\s*$", body, flags=re.M)
        chunks = [("kernel", parts[0].strip("\n"))]
        for where, src in zip(parts[1::2], parts[2::2]):
            chunks.append((where, src.strip("\n")))
        return cls(path.stem, path, set(fail.group(1).split()) if fail else set(),
                   msg.group(1).strip() if msg else "", "# expect-all-pass" in text,
                   repl.group(1).strip() if repl else None, chunks, other_solutions,
                   frozenset(gpu.group(1).split()) if gpu else frozenset(),
                   frozenset(anywhere.group(1).split()) if anywhere else frozenset())

    def notebook(self, release: nbformat.NotebookNode,
                 source: nbformat.NotebookNode | None = None) -> nbformat.NotebookNode:
        """The learner's notebook: ``release`` with this fixture's cells; with ``# other-solutions: source``
        every other solution code cell holds the reference's solution from ``source``."""
        nb = nbformat.from_dict(release)
        if self.other_solutions == "source":
            if source is None:
                raise ValueError(f"{self.name} takes its other solution cells from the source notebook: "
                                 "pass source=")
            solutions = {c.metadata.nbgrader["grade_id"]: reference_solution(c.source) for c in source.cells
                         if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")}
            for c in nb.cells:
                gid = c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                if c.cell_type == "code" and gid in solutions and gid != self.replaces:
                    c.source = solutions[gid]

        def wanted(c):
            meta = c.get("metadata", {}).get("nbgrader", {})
            if self.replaces:
                return meta.get("grade_id") == self.replaces
            return c.cell_type == "code" and meta.get("solution")

        index = next(i for i, c in enumerate(nb.cells) if wanted(c))
        for where, src in self.chunks:
            if where == "kernel":
                nb.cells[index].source = src
            elif where == "after-kernel":
                nb.cells.insert(index + 1, new_code_cell(src))
            else:
                nb.cells.append(new_code_cell(src))
        for i, c in enumerate(nb.cells):
            c.setdefault("id", f"added-{i}")
        return nb


def reference_solution(cell_source: str) -> str:
    """A source notebook's solution cell as a learner who wrote the reference would have it: without
    nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines."""
    return "\n".join(line for line in cell_source.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def fixtures(assignment: str) -> list[Fixture]:
    return [Fixture.load(p) for p in sorted((SUBMISSIONS / assignment).glob("*.py"))]


def graded_test_ids(nb: nbformat.NotebookNode) -> list[str]:
    """grade_ids of the autograded test cells."""
    return [c.metadata.nbgrader["grade_id"] for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade")
            and not c.metadata.nbgrader.get("solution") and c.cell_type == "code"]


STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")  # nbgrader's code stub (ClearSolutions.code_stub)


def solution_regions(cell_source: str) -> list[str]:
    """The text between each ``### BEGIN SOLUTION`` and ``### END SOLUTION`` of a source cell, in order."""
    regions, current = [], None
    for line in cell_source.splitlines():
        if line.strip() == "### BEGIN SOLUTION":
            current = []
        elif line.strip() == "### END SOLUTION":
            regions.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return regions


def fill_solution_regions(release: nbformat.NotebookNode, source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The release as a learner who did exactly what it asks has it: each ``# YOUR CODE HERE`` /
    ``raise NotImplementedError()`` stub replaced by the source's solution region at that place, and
    nothing else of the cell touched (written answers take the source's text). Fails when a release cell's
    stubs and the source cell's regions do not pair up."""
    nb = nbformat.from_dict(release)
    ref = {c.metadata.nbgrader["grade_id"]: c for c in source.cells
           if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid not in ref:
            continue
        if cell.cell_type == "markdown":
            cell.source = reference_solution(ref[gid].source)
            continue
        regions = solution_regions(ref[gid].source)
        lines, out, used = cell.source.splitlines(), [], 0
        i = 0
        while i < len(lines):
            if lines[i].strip() == STUB[0] and i + 1 < len(lines) and lines[i + 1].strip() == STUB[1]:
                if used == len(regions):
                    raise AssertionError(f"{gid}: more stubs in the release than solution regions in the source")
                out.append(regions[used])
                used += 1
                i += 2
            else:
                out.append(lines[i])
                i += 1
        if used != len(regions):
            raise AssertionError(f"{gid}: {len(regions)} solution regions in the source, {used} stubs in the release")
        cell.source = "\n".join(out)
    return nb


def notebook_calls(notebook: Path, name: str) -> list[tuple[str, dict]]:
    """(grade_id, keyword arguments) of every call of ``name`` in a notebook's test cells (hidden ones too):
    the cases the grader runs, for the checks' own tests to run against wrong kernels."""
    import ast

    import torch

    cases = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if cell.cell_type != "code" or not gid.startswith("test_"):
            continue
        body = "\n".join(line for line in cell.source.splitlines() if not line.startswith("%%"))
        for node in ast.walk(ast.parse(body)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == name:
                kw = {}
                for k in node.keywords:
                    if isinstance(k.value, ast.Attribute):  # dtype=torch.float16
                        kw[k.arg] = getattr(torch, k.value.attr)
                    else:
                        kw[k.arg] = ast.literal_eval(k.value)
                cases.append((gid, kw))
    return cases


def gradebook_rows(url: str) -> dict:
    """Every value autograde writes, by (assignment, student), read through nbgrader's API from a gradebook
    URL (sqlite:///path/gradebook.db, postgresql://...): timestamps, penalties, scores, comments."""
    from nbgrader.api import Gradebook

    rows = {}
    with Gradebook(url) as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                nbs = {}
                for nb in sub.notebooks:
                    nbs[nb.name] = {
                        "late_penalty": nb.late_submission_penalty,
                        "grades": {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade, g.score)
                                   for g in nb.grades},
                        "comments": {cm.name: (cm.auto_comment, cm.manual_comment) for cm in nb.comments}}
                rows[(assignment.name, sub.student.id)] = {"timestamp": str(sub.timestamp), "notebooks": nbs}
    return rows


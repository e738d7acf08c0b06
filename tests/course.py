"""Test harness: a throw-away copy of the course directory driven with real nbgrader commands."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
BIN = Path(sys.executable).parent


def nbgrader(*args: str, cwd: Path, check: bool = True, timeout: float = 3000) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("TRITONCOURSE_SEED", None)
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"nbgrader {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-8000:]}")
    return proc


class Course:
    """A copy of nbgrader_config.py and source/ in ``path``, with its own gradebook."""

    def __init__(self, path: Path, assignments: list[str]):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / "nbgrader_config.py", path / "nbgrader_config.py")
        for a in assignments:
            shutil.copytree(ROOT / "source" / a, path / "source" / a)
            nbgrader("generate_assignment", a, "--force", "--log-level=WARN", cwd=path)

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
        return nbgrader("autograde", assignment, "--force", *flags, cwd=self.path, check=check)

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
    """A submission file of tests/submissions/<assignment>/ and what grading must give it."""

    name: str
    path: Path
    expect_fail: set[str]
    expect_message: str
    all_pass: bool
    replaces: str | None  # grade_id of the solution cell the first chunk replaces (default: the first)
    chunks: list[tuple[str, str]]  # (where, source)

    @classmethod
    def load(cls, path: Path) -> "Fixture":
        text = path.read_text()
        fail = re.search(r"^# expect-fail:(.*)$", text, re.M)
        msg = re.search(r"^# expect-message:(.*)$", text, re.M)
        repl = re.search(r"^# replaces:(.*)$", text, re.M)
        body = "\n".join(line for line in text.splitlines()
                          if not line.startswith(("# expect-", "# replaces:")))
        parts = re.split(r"^# %% (append|after-kernel)\s*$", body, flags=re.M)
        chunks = [("kernel", parts[0].strip("\n"))]
        for where, src in zip(parts[1::2], parts[2::2]):
            chunks.append((where, src.strip("\n")))
        return cls(path.stem, path, set(fail.group(1).split()) if fail else set(),
                   msg.group(1).strip() if msg else "", "# expect-all-pass" in text,
                   repl.group(1).strip() if repl else None, chunks)

    def notebook(self, release: nbformat.NotebookNode) -> nbformat.NotebookNode:
        nb = nbformat.from_dict(release)

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


def fixtures(assignment: str) -> list[Fixture]:
    return [Fixture.load(p) for p in sorted((SUBMISSIONS / assignment).glob("*.py"))]


def graded_test_ids(nb: nbformat.NotebookNode) -> list[str]:
    """grade_ids of the autograded test cells."""
    return [c.metadata.nbgrader["grade_id"] for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade")
            and not c.metadata.nbgrader.get("solution") and c.cell_type == "code"]

"""What learners may have: ``python -m tritoncourse handout DIR`` (the course minus the instructor's files, checked
free of solutions, hidden tests and gradebooks) and, after the deadline, ``solutions ASSIGNMENT``."""
from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path

import nbformat

from . import learner_files
from .course import Course
from .secrets import GENERIC, SECRET_MARKERS, normal, split_hidden, split_regions


HANDOUT_EXCLUDE = ("source/", "tests/", "tools/", ".ci/", "autograded/", "submitted/", "feedback/",
                   "solution/", "downloaded/", "results/gpu-run/", "docs/INSTRUCTORS.md")
# What a learner reads first: nothing in them may name a make target or a file the hand-out lacks.
LEARNER_READMES = ("README.md", "Makefile", "notebooks/README.md")


def learner_secrets(course: Course) -> tuple[set[str], set[str]]:
    """(solution lines, hidden test lines) of every ``source/`` notebook that appear nowhere outside those
    regions of any source notebook: what a learner's copy must never hold. Judged from ``source/`` alone, so
    that a leaky ``release/`` cannot make its own leaks look public."""
    public, solution, hidden = [], [], []
    for a in course.source_assignments():
        for src in sorted((course.source / a).glob("*.ipynb")):
            for cell in nbformat.read(src, as_version=4).cells:
                p, s, h = split_regions(cell.source)
                public += p
                solution += s
                hidden += h
    seen = normal("\n".join(public))

    def secret(lines):
        return {n for n in (normal(line) for line in lines)
                if len(n) >= 8 and not n.startswith(GENERIC) and n not in seen}

    return secret(solution), secret(hidden)


def handout_problems(course: Course, files: list[Path]) -> list[str]:
    """Why these files must not go to learners: solutions, hidden tests, gradebooks, graded work."""
    solutions, secrets = learner_secrets(course)
    problems = []
    for f in files:
        rel = f.relative_to(course.root) if f.is_relative_to(course.root) else f
        if f.suffix == ".db" or f.name.startswith("gradebook"):
            problems.append(f"{rel}: a gradebook")
            continue
        if str(rel).startswith(HANDOUT_EXCLUDE):
            problems.append(f"{rel}: instructor-only folder")
            continue
        if f.suffix not in (".ipynb", ".md"):  # the package's checks legitimately share lines with the tests
            continue
        text = f.read_text(errors="replace")
        hits = []
        if f.suffix == ".ipynb":  # markers are only secrets in notebooks (the grading code names them)
            with contextlib.suppress(ValueError, KeyError, TypeError):
                cells = json.loads(text)["cells"]
                text = "\n".join("".join(c.get("source", "")) + "\n" + "\n".join(
                    "".join(o.get("text", "")) for o in c.get("outputs", [])) for c in cells)
            hits += [f"the marker {m!r}" for m in SECRET_MARKERS if m in text]
        joined = " ".join(text.split())
        for kind, lines in (("solution line", solutions), ("hidden test line", secrets)):
            found = sorted(s for s in lines if s in joined)
            if found:
                hits.append(f"{len(found)} {kind}(s), e.g. {found[0]!r}")
        if hits:
            problems.append(f"{rel}: contains {'; '.join(hits)}")
    return problems


def make_handout(course: Course, out: Path) -> int:
    """Copy what learners get (tracked files minus the instructor's) to ``out`` and check it holds no
    solutions, hidden tests or gradebook."""
    listed = subprocess.run(["git", "ls-files"], cwd=course.root, capture_output=True, text=True)
    if listed.returncode != 0:
        print("`git ls-files` failed: run this in the course's git clone.")
        return 2
    names = [n for n in listed.stdout.splitlines() if n and not n.startswith(HANDOUT_EXCLUDE)
             and not n.endswith(".db") and (course.root / n).is_file()]
    problems = handout_problems(course, [course.root / n for n in names])
    if problems:
        print("Not written: these files would give learners what they must not have:")
        for p in problems:
            print("  " + p)
        return 1
    # The course's README and Makefile speak to instructors and developers too: the hand-out gets its own.
    own = learner_files.written(course.root, names)
    wrong = learner_files.problems({**own, **{n: (course.root / n).read_text() for n in LEARNER_READMES
                                              if n in names and n not in own}}, set(names) | set(own))
    if wrong:
        print("Not written: the hand-out's own texts would send learners to what they do not get:")
        for p in wrong:
            print("  " + p)
        return 1
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        print(f"{out} is not empty: choose a new folder.")
        return 2
    for n in names:
        (out / n).parent.mkdir(parents=True, exist_ok=True)
        if n in own:
            (out / n).write_text(own[n])
        else:
            shutil.copy2(course.root / n, out / n)
    print(f"{out}: {len(names)} files for learners (release notebooks, the course package, set-up; its own "
          f"{' and '.join(sorted(own))}); no source/, tests/, gradebook, solutions or hidden tests.")
    return 0


def make_solutions(course: Course, assignment: str, out: Path | None = None) -> int:
    """After the deadline: the source notebook with solutions and model answers, without hidden tests,
    grading rubrics kept, outputs cleared -> ``solution/<assignment>/``."""
    course.check_assignment(assignment)
    out = Path(out) if out else course.root / "solution" / assignment
    out.mkdir(parents=True, exist_ok=True)
    for src in sorted((course.source / assignment).glob("*.ipynb")):
        nb = nbformat.read(src, as_version=4)
        for cell in nb.cells:
            cell.source = split_hidden(cell.source)[0]
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, out / src.name)
        print(f"{out / src.name}: solutions, no hidden tests")
    return 0

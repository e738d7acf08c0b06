"""The learner's checks from the terminal: every ``%%kernel_test`` cell of a saved notebook, and a reset.

    python -m tritoncourse check notebooks/01_vector_add.ipynb   # exit code 0: every test passed
    python -m tritoncourse reset 01_vector_add                   # back up, then restore the release
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent.parent


def check_notebook(path: Path) -> int:
    """Run every ``%%kernel_test`` cell of a saved notebook in fresh processes; 0 when all pass."""
    from ..grading.processes.isolated import run_cell  # the test runner, loaded only when tests run (not for reset)
    from ..grading.lint.source import kernels_from_notebook

    try:
        nb = nbformat.read(str(path), as_version=4)
    except FileNotFoundError:
        print(f"{path}: no such notebook. Start with `make lab`, which creates it from release/.")
        return 2
    except Exception as err:  # not JSON, not a notebook
        print(f"{path} is not a readable notebook ({type(err).__name__}: {err}).\n"
              f"Restore it with `make reset PHASE={path.stem}` (your copy is backed up first).")
        return 2
    kernels, plain = kernels_from_notebook(nb)
    failed = passed = hidden = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outcome = run_cell(cell.source, kernels, plain)
        if outcome is None:
            continue
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        print(f"[{grade_id}] " + outcome.report().replace("\n", "\n    "), flush=True)
        hidden += outcome.kind == "hidden"
        passed += outcome.ok and outcome.kind != "hidden"
        failed += not outcome.ok
    print(f"{passed} passed, {failed} failed" + (f" ({hidden} hidden, run when graded)" if hidden else ""))
    return 0 if failed == 0 and passed > 0 else 1


def reset_notebook(phase: str, workspace: Path = ROOT / "notebooks", release: Path = ROOT / "release") -> int:
    """Back up ``notebooks/<phase>.ipynb`` to ``notebooks/backups/`` and copy the released version back."""
    src = release / phase / f"{phase}.ipynb"
    if not src.exists():
        known = sorted(p.name for p in release.iterdir() if p.is_dir())
        print(f"Unknown phase '{phase}'. Phases: {', '.join(known)}")
        return 2
    dest = workspace / f"{phase}.ipynb"
    if dest.exists():
        backups = workspace / "backups"
        backups.mkdir(parents=True, exist_ok=True)
        backup = backups / f"{phase}.{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
        shutil.copy2(dest, backup)
        print(f"Your notebook was backed up to {backup}")
    shutil.copy2(src, dest)
    print(f"{dest} is the released version again.")
    return 0

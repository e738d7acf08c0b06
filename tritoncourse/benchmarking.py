"""Benchmarking: when timing is possible, and the GPU results recorded by ``make gpu-check``.

Timing needs a GPU; on the interpreter the notebooks show the recorded results instead, read from
``results/gpu-results.json`` and labelled with the GPU, versions and date they came from.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .device import infer_device

RESULTS_FILE = Path(__file__).resolve().parent.parent / "results" / "gpu-results.json"


def grading() -> bool:
    """True while nbgrader executes the notebook (autograde or validate): benchmarks are skipped."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def can_time() -> bool:
    """True when kernels can be timed here: a GPU, and not under nbgrader. Otherwise says why."""
    if grading():
        print("Benchmarks are skipped while nbgrader runs the notebook.")
        return False
    if infer_device() != "cuda":
        print("Timing needs a GPU: on Triton's CPU interpreter kernels run as numpy code, "
              "so their speed says nothing about a GPU. Recorded GPU results follow, if any.")
        return False
    return True


def load_results(path: Path = RESULTS_FILE) -> dict | None:
    """The recorded GPU results, or None when no run has been recorded yet."""
    if not path.exists():
        return None
    return json.loads(path.read_text())


def show_recorded(section: str, path: Path = RESULTS_FILE) -> None:
    """Print the recorded GPU table for one section (e.g. 'vector_add'), with where it came from."""
    results = load_results(path)
    if not results or section not in results.get("benchmarks", {}):
        print(f"No GPU results for '{section}' have been recorded yet (results/gpu-results.json); "
              "run `make gpu-check` on a machine with an NVIDIA GPU.")
        return
    env = results["environment"]
    print(f"Recorded on {env['gpu']} (driver {env['driver']}), torch {env['torch']}, "
          f"triton {env['triton']}, {env['date']}; medians of {env['repeats']} interleaved repetitions.")
    table = results["benchmarks"][section]
    cols = table["columns"]
    print("  ".join(f"{c:>14}" for c in cols))
    for row in table["rows"]:
        print("  ".join(f"{v:>14.4g}" if isinstance(v, float) else f"{v!s:>14}" for v in row))
    for note in table.get("notes", []):
        print(note)

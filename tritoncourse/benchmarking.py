"""Benchmarking: when timing is possible, and the GPU results recorded by ``make gpu-check``.

Timing needs a GPU; on the interpreter the notebooks show the recorded results instead, read from
``results/gpu-results.json`` and labelled with the GPU, versions and date they came from.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .device import infer_device

RESULTS_FILE = Path(__file__).resolve().parent.parent / "results" / "gpu-results.json"


def grading() -> bool:
    """True while nbgrader executes the notebook (autograde or validate): benchmarks are skipped."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def picture_left_out() -> bool:
    """True, after saying so, while nbgrader runs the notebook: the course's pictures (widgets, recorded plots, the
    roofline) are drawn for a person and graded by nobody, so grading draws none of them. Drawing them cost about
    1.3 s of CPU in each grading of phase 1 (matplotlib and ipywidgets), for every learner of a class."""
    if grading():
        print("(Pictures are drawn in JupyterLab, not while nbgrader runs the notebook.)")
        return True
    return False


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
    table = results["benchmarks"][section]
    date = table.get("measured", {}).get("date", env["date"])
    print(f"Recorded on {env['gpu']} (driver {env['driver']}), torch {env['torch']}, "
          f"triton {env['triton']}, {date}; medians of {_repeats(table, env)} interleaved repetitions.")
    cols = table["columns"]
    print("  ".join(f"{c:>14}" for c in cols))
    for row in table["rows"]:
        print("  ".join(f"{v:>14.4g}" if isinstance(v, float) else f"{v!s:>14}" for v in row))
    for note in table.get("notes", []):
        print(note)


def _repeats(table: dict, env: dict):
    """Interleaved repetitions behind a section's medians: its own run's, else the file's (older records)."""
    return table.get("measured", {}).get("repeats", env.get("repeats", "?"))


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 10 else f"{v:.0f}"
    return str(v)


def results_markdown(results: dict | None = None) -> str:
    """The recorded GPU results as Markdown tables (the README's section is generated from this)."""
    results = results if results is not None else load_results()
    if not results or "environment" not in results:
        return "No GPU results recorded yet: run `make gpu-check` on a machine with an NVIDIA GPU.\n"
    env = results["environment"]
    lines = [f"Recorded by `make gpu-check` on an **{env['gpu']}** (compute capability {env['compute_capability']}, "
             f"{env['sm_count']} SMs, driver {env['driver']}), torch {env['torch']}, triton {env['triton']}, "
             f"CUDA {env['cuda']}, Python {env['python']}; last run {env['date']}; where: {env['where']}; "
             f"container: {env['container']}. Every figure is the median of interleaved repetitions of "
             "`triton.testing.do_bench` medians, providers timed side by side in one run; each section says when it "
             "was measured and how many repetitions."]
    peaks = results.get("peaks")
    if peaks:
        lines.append(f"\nRoofs of the latest benchmark run: device copy **{peaks['copy_gbps']:.0f} GB/s** "
                     f"(bytes read + written), cuBLAS fp16 8192³ **{peaks['cublas_fp16_tflops']:.0f} TFLOP/s**.")
    for name, table in results.get("benchmarks", {}).items():
        lines.append(f"\n**{name}**\n")
        measured = table.get("measured")
        if measured:
            roofs = (f"; roofs of that run: copy {measured['copy_gbps']:.0f} GB/s, cuBLAS "
                     f"{measured['cublas_fp16_tflops']:.0f} TFLOP/s" if "copy_gbps" in measured else "")
            lines.append(f"_Measured {measured['date']}, medians of {_repeats(table, env)} interleaved "
                         f"repetitions{roofs}._\n")
        lines.append("| " + " | ".join(table["columns"]) + " |")
        lines.append("|" + "---|" * len(table["columns"]))
        for row in table["rows"]:
            lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
        if table.get("notes"):
            lines.append("")
            lines += [f"- {note}" for note in table["notes"]]
    return "\n".join(lines) + "\n"


README_START, README_END = "<!-- gpu-results:start -->", "<!-- gpu-results:end -->"


def render_readme(readme: Path, results: dict | None = None) -> str:
    """README text with its GPU results block regenerated from the results file."""
    text = readme.read_text()
    head, _, rest = text.partition(README_START)
    _, _, tail = rest.partition(README_END)
    return f"{head}{README_START}\n{results_markdown(results)}{README_END}{tail}"


# ------------------------------------------------------------------------------- timers for the autotuner
def cpu_do_bench(fn, quantiles=None, return_mode="mean", repeats: int = 1, **_ignored):
    """A benchmarker the autotuner can use without a GPU: the wall-clock time of ``repeats`` calls, in ms.

    On the interpreter this times numpy, not a GPU: it shows how autotuning works, never which config a
    GPU would choose. Same calling convention as ``triton.testing.do_bench`` (a list when quantiles are
    asked for).
    """
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    ms = (time.perf_counter() - start) * 1e3 / repeats
    return [ms] * len(quantiles) if quantiles else ms


STEADY_WARMUP_MS = 200  # Triton's autotuner warms each config up for 25 ms


def steady_do_bench(fn, quantiles=None, **_ignored):
    """Triton's GPU timer with STEADY_WARMUP_MS of warm-up and 200 ms of timing per config.

    The autotuner compiles each config just before timing it, and the GPU idles meanwhile; after an idle
    spell it runs at boost clocks for a moment, so with the default 25 ms warm-up the config timed first looked
    15% faster than at steady state on an H200 (706 against 614 TFLOP/s) and won. Warmed up for longer, every
    config is timed at the clocks it will run at.
    """
    import triton

    return triton.testing.do_bench(fn, warmup=STEADY_WARMUP_MS, rep=200, quantiles=quantiles)


def set_tuning_timer(kernel):
    """Give an autotuned kernel the timer for this machine; returns it. On the CPU, a wall-clock timer
    (Triton's own needs a GPU); on a GPU, Triton's with a longer warm-up (:func:`steady_do_bench`)."""
    if hasattr(kernel, "configs"):
        # an instance attribute wins over Autotuner.do_bench (a cached property)
        kernel.do_bench = cpu_do_bench if infer_device() == "cpu" else steady_do_bench
    return kernel

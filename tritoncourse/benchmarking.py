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
    """The recorded GPU results as Markdown tables (docs/RESULTS.md's are generated from this)."""
    results = results if results is not None else load_results()
    if not results or "environment" not in results:
        return "No GPU results recorded yet: run `make gpu-check` on a machine with an NVIDIA GPU.\n"
    env = results["environment"]
    lines = [f"Recorded by `make gpu-check` on an **{env['gpu']}** (compute capability {env['compute_capability']}, "
             f"{env['sm_count']} SMs, driver {env['driver']}), torch {env['torch']}, triton {env['triton']}, "
             f"CUDA {env['cuda']}, Python {env['python']}; last run {env['date']}; where: {env['where']}; "
             f"container: {env['container']}. Every figure is the median of interleaved repetitions of "
             "`triton.testing.do_bench` medians (where a section's columns include some marked \"(do_bench)\", its "
             "other TFLOP/s are `do_bench_cudagraph`'s, the GPU's time alone: its notes say which), providers timed "
             "side by side in one run; each section says when it was measured and how many repetitions."]
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


# The README shows a summary (one line per phase, at one large shape); docs/RESULTS.md every table. Both are
# regenerated from the results file by `make gpu-check` (tools/gpu_check.py) and checked by tests/units/test_results.py.
README_FILE = RESULTS_FILE.parent.parent / "README.md"
RESULTS_DOC = RESULTS_FILE.parent.parent / "docs" / "RESULTS.md"
SUMMARY_START, SUMMARY_END = "<!-- gpu-summary:start -->", "<!-- gpu-summary:end -->"
TABLES_START, TABLES_END = "<!-- gpu-results:start -->", "<!-- gpu-results:end -->"

# (phase, kernel, section, the row's column values, the shape in words, the Triton figure, against torch, against
# the roof): each figure a format string over the row (``{r[column]:.2f}``). A line whose row is gone is left out.
SUMMARY = (
    ("1", "vector add", "vector_add", {"n (fp32)": "2^26"}, "n = 2^26 fp32", "{r[Triton GB/s]:.0f} GB/s",
     "{r[Triton/torch]:.2f}× `torch.add`", "{r[Triton/copy]:.2f}× a device copy"),
    ("2", "softmax", "softmax", {"kernel": "softmax", "n_cols": 4096, "dtype": "float32"}, "16384 × 4096 fp32",
     "{r[Triton GB/s]:.0f} GB/s", "{r[Triton/torch]:.2f}× `torch.softmax`", "{r[Triton/copy]:.2f}× a copy"),
    ("2", "online softmax", "softmax", {"kernel": "online_softmax", "n_cols": 65536}, "1024 × 65536 fp32",
     "{r[Triton GB/s]:.0f} GB/s", "{r[Triton/torch]:.2f}× `torch.softmax`", "{r[Triton/copy]:.2f}× a copy"),
    ("3", "matmul + ReLU", "matmul_relu", {"M=N=K (fp16)": 4096}, "M = N = K = 4096 fp16",
     "{r[Triton TFLOP/s]:.0f} TFLOP/s", "{r[Triton/relu(a@b)]:.2f}× `torch.relu(a @ b)`",
     "{r[Triton/cuBLAS peak]:.2f}× cuBLAS's peak"),
    ("4", "add, ReLU, scale fused", "add_relu_mul", {"n (fp32)": "2^27", "provider": "triton"}, "n = 2^27 fp32",
     "{r[GB/s]:.0f} GB/s", "{r[vs eager]:.2f}× eager torch", "{r[of roof]:.2f}× a device copy"),
    ("5", "autotuned matmul + ReLU", "autotuning", {"problem": "M=N=K=8192 fp16"}, "M = N = K = 8192 fp16",
     "{r[autotuned]:.0f} TFLOP/s", "{r[autotuned/torch]:.2f}× `torch.relu(a @ b)`",
     "{r[autotuned/cuBLAS]:.2f}× cuBLAS `a @ b`"),
    ("6", "LayerNorm", "layer_norm", {"n_cols": 4096, "dtype": "float16"}, "32768 × 4096 fp16",
     "{r[Triton GB/s]:.0f} GB/s", "{r[Triton/torch]:.2f}× `F.layer_norm`", "{r[Triton/copy]:.2f}× a copy"),
    ("6", "attention (forward)", "fused_attention", {"head_dim": 128, "causal": False, "seq_len": 8192},
     "batch 4, 8 heads, 8192 × 128 fp16", "{r[Triton TFLOP/s]:.0f} TFLOP/s",
     "{r[Triton/FA2]:.2f}× SDPA's FlashAttention-2, {r[Triton/default]:.2f}× its default (cuDNN)",
     "{r[Triton/cuBLAS peak]:.2f}× cuBLAS's peak"),
)


def results_summary(results: dict | None = None) -> str:
    """The README's summary of the recorded GPU results: one line per phase at one large shape, then the targets
    that were not met. Every table: :func:`results_markdown` (docs/RESULTS.md)."""
    results = results if results is not None else load_results()
    if not results or "environment" not in results:
        return "No GPU results recorded yet: run `make gpu-check` on a machine with an NVIDIA GPU.\n"
    env, benchmarks = results["environment"], results.get("benchmarks", {})
    lines = [f"Recorded by `make gpu-check` on an **{env['gpu']}** (torch {env['torch']}, triton {env['triton']}; "
             f"last run {env['date']}): the reference kernels at one large shape each, medians of interleaved "
             "`do_bench` runs. Every shape, provider and date: [docs/RESULTS.md](docs/RESULTS.md).", "",
             "| phase | kernel | shape | Triton | against torch | against the roof |", "|---|---|---|---|---|---|"]
    for phase, kernel, section, where, shape, *figures in SUMMARY:
        table = benchmarks.get(section, {})
        cols = table.get("columns", [])
        row = next((r for r in table.get("rows", []) if all(k in cols and r[cols.index(k)] == v
                                                           for k, v in where.items())), None)
        if row is not None:
            r = dict(zip(cols, row))
            lines.append(f"| {phase} | {kernel} | {shape} | " + " | ".join(f.format(r=r) for f in figures) + " |")
    notes = [(name, n) for name, t in benchmarks.items() for n in t.get("notes", []) if n.endswith(": met")
             or n.endswith(": NOT met")]
    missed = [f"{name}: {n.removesuffix(': NOT met')}" for name, n in notes if n.endswith(": NOT met")]
    if notes:
        lines += ["", f"Targets met: {len(notes) - len(missed)} of {len(notes)}."
                  + (" Not met: " + "; ".join(missed) + "." if missed else "")]
    return "\n".join(lines) + "\n"


def _regenerated(text: str, start: str, end: str, body: str) -> str:
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{body}{end}{tail}"


def render_readme(readme: Path = README_FILE, results: dict | None = None) -> str:
    """README text with its GPU summary regenerated from the results file."""
    return _regenerated(readme.read_text(), SUMMARY_START, SUMMARY_END, results_summary(results))


def render_results_doc(doc: Path = RESULTS_DOC, results: dict | None = None) -> str:
    """docs/RESULTS.md with its tables regenerated from the results file."""
    return _regenerated(doc.read_text(), TABLES_START, TABLES_END, results_markdown(results))


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

"""`make gpu-check`: verify the course on a real NVIDIA GPU and record every figure it measures.

    python tools/gpu_check.py [--notebooks] [--grading] [--bench] [--sections S,...] [--phases P,...]
                              [--out DIR] [--where LABEL]

1. --notebooks: executes every source notebook (or --phases) top to bottom, kernels compiled on the GPU, with
                TRITONCOURSE_HEADLESS=1 (each widget draws once with its defaults, GPU timers included, and
                creates no ipywidget); executed notebooks and nbclient's DEBUG log (<notebook>.nbclient.log)
                go to --out;
2. --grading:   runs tests/test_grading.py (real nbgrader autograde of the references and the wrong-kernel
                suites) on the GPU;
3. --bench:     benchmarks the reference kernels (taken from the source notebooks) side by side with torch
                eager and torch.compile, plus the device's copy bandwidth and cuBLAS peak; providers are
                interleaved and repeated, every ratio is a median. Sections (--sections): vector_add, softmax,
                matmul_relu, add_relu_mul, roofline, autotuning (phase 5: autotuned kernels against the earlier
                phases' and torch, and the sweeps its notebook shows), layer_norm and fused_attention (phase 6:
                the fused LayerNorm against a copy and torch; attention against every SDPA backend, naive torch
                and torch.compile of it), attention_backward (phase 7: the backward, dQ by kernel and by
                atomics, against every SDPA backend's backward; the block's step), profile (phase 4:
                torch.profiler's CUDA kernels of eager and fused add-ReLU-scale). Results go to
                results/gpu-results.json, and docs/RESULTS.md's tables and the README's summary are regenerated from it.
With no flag, all three. Logs and executed notebooks go to --out (default results/gpu-run/).

This file keeps the command line, the environment record, the notebook and grading steps, BENCHMARKS (the sections
--sections names) and run_bench; the sections themselves are in tools/gpu_bench.py (the shared helpers and phases
1-4), tools/gpu_bench_tuned.py (phases 5 and 6) and tools/gpu_bench_backward.py (phase 7), and are re-exported here.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# every name the benchmark sections define, re-exported (gpu_check.bench_autotuning, gpu_check.reference_module, ...)
from gpu_bench import (SOFTMAX_INPUT_BYTES, _compiled, _phase4, bench_add_relu_mul, bench_matmul_relu,  # noqa: F401
                       bench_matmul_relu_grouped, bench_peaks, bench_profile, bench_roofline, bench_softmax,
                       bench_vector_add, interleaved, log, reference_module)
from gpu_bench_tuned import (ATTENTION_SEQS, LAYER_NORM_INPUT_BYTES, _rate_row, bench_autotuning,  # noqa: F401
                             bench_fused_attention, bench_layer_norm)
from gpu_bench_backward import bench_attention_backward  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "results" / "gpu-results.json"


# ---------------------------------------------------------------- environment
def environment(where: str) -> dict:
    import torch
    import triton

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    name, driver, memory = [s.strip() for s in smi.split(",")] if smi else (torch.cuda.get_device_name(), "?", "?")
    props = torch.cuda.get_device_properties(0)
    return {"gpu": name, "driver": driver, "memory": memory, "sm_count": props.multi_processor_count,
            "compute_capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "where": where,
            "container": "not run" if where != "container" else "run"}


# ---------------------------------------------------------------- notebooks
def _cell_seconds(cell) -> float:
    """Wall time of one executed cell, from the timestamps nbclient records in its metadata."""
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = lambda s: dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (parse(end) - parse(start)).total_seconds()


def execute_notebook(path: Path, out: Path, cell_timeout: int) -> dict:
    """Run one notebook top to bottom (errors recorded, not raised); its slowest cells are reported.

    The kernel runs with TRITONCOURSE_HEADLESS=1: the widgets draw their picture once with their default values
    (GPU timers included) and create no ipywidgets object, which nbclient has been seen to wait on for a whole
    cell timeout (jupyter/nbclient#312). nbclient's own log (every message it receives, at DEBUG) goes to
    out/<notebook>.nbclient.log, so that a stall shows what it was waiting for.
    """
    import logging

    import nbformat
    from nbclient import NotebookClient

    os.environ["TRITONCOURSE_HEADLESS"] = "1"  # inherited by the kernel nbclient starts below
    logger = logging.getLogger("traitlets")  # nbclient's and jupyter_client's logger outside an Application
    handler = logging.FileHandler(out / f"{path.stem}.nbclient.log", mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    nb = nbformat.read(path, as_version=4)
    start = time.time()
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}}, log=logger)
    try:
        client.execute()
        crashed = None
    except Exception as err:  # a cell over cell_timeout, or a dead kernel: keep what ran
        crashed = f"{type(err).__name__}: {str(err)[:300]}"
        logger.exception("execution stopped")
    finally:
        logger.removeHandler(handler)
        handler.close()
    errors = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                errors.append(f"cell {i}: {o.get('ename')}: {o.get('evalue')}"[:300])
    if crashed:
        errors.append(f"stopped: {crashed}")
    slow = sorted(((round(_cell_seconds(c), 1), i, (c.metadata.get("nbgrader", {}).get("grade_id") or
                    c.source.strip().splitlines()[0][:60] if c.source.strip() else ""))
                   for i, c in enumerate(nb.cells) if c.cell_type == "code"), reverse=True)[:8]
    nbformat.write(nb, out / path.name)
    return {"seconds": round(time.time() - start, 1), "errors": errors,
            "slowest_cells": [f"cell {i} ({name}): {s} s" for s, i, name in slow if s >= 1]}


def run_notebooks(out: Path, phases: list[str], parallel: int = 1, cell_timeout: int = 300) -> dict:
    """Every source notebook (or those of `phases`), `parallel` at a time: notebooks share the GPU then, so
    their printed timings are not the recorded ones (those come from --bench, alone on the GPU).

    Workers are spawned, not forked: the parent has initialised CUDA (torch.cuda.is_available()), and a forked
    child of a CUDA process cannot use CUDA (nor should it inherit its threads)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    paths = [p for p in sorted((ROOT / "source").glob("*/*.ipynb")) if not phases or p.stem in phases]
    status = {}
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, parallel), mp_context=spawn) as pool:
        futures = {p.stem: pool.submit(execute_notebook, p, out, cell_timeout) for p in paths}
        log(f"executing {len(paths)} notebook(s), {parallel} at a time")
        for stem, future in futures.items():
            status[stem] = future.result()
            log(f"  {stem}: {len(status[stem]['errors'])} error(s) in {status[stem]['seconds']:.0f} s")
            for line in status[stem]["errors"] + status[stem]["slowest_cells"]:
                log(f"    {line}")
    return status


# ---------------------------------------------------------------- grading
def run_grading(out: Path, phases: list[str]) -> dict:
    start = time.time()
    select = ["-k", " or ".join(phases)] if phases else []
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "tests/test_grading.py",
                           "-p", "no:cacheprovider", *select], cwd=ROOT, capture_output=True, text=True)
    (out / "grading.log").write_text(proc.stdout + proc.stderr)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    log(f"grading suite: {tail} ({time.time() - start:.0f} s)")
    return {"returncode": proc.returncode, "summary": tail, "seconds": round(time.time() - start, 1)}


# ---------------------------------------------------------------- benchmarks
BENCHMARKS = {"vector_add": bench_vector_add, "softmax": bench_softmax, "matmul_relu": bench_matmul_relu,
              "matmul_relu_grouped": bench_matmul_relu_grouped,
              "add_relu_mul": bench_add_relu_mul, "roofline": bench_roofline, "autotuning": bench_autotuning,
              "layer_norm": bench_layer_norm, "fused_attention": bench_fused_attention,
              "attention_backward": bench_attention_backward, "profile": bench_profile}


def run_bench(repeats: int, sections: list[str]) -> dict:
    log("measuring peaks (device copy, cuBLAS fp16 8192^3)")
    peaks = bench_peaks(repeats)
    log(f"peaks: copy {peaks['copy_gbps']:.0f} GB/s, cuBLAS {peaks['cublas_fp16_tflops']:.0f} TFLOP/s")
    results = {"peaks": peaks}
    for name in sections:
        started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        results[name] = BENCHMARKS[name](repeats, peaks)
        # sections are often measured in separate runs: each keeps its own date and the roofs it was measured with
        results[name]["measured"] = {"date": started, "repeats": repeats, "copy_gbps": peaks["copy_gbps"],
                                     "cublas_fp16_tflops": peaks["cublas_fp16_tflops"]}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="With no step flag, all three steps run. Needs an NVIDIA GPU.")
    parser.add_argument("--notebooks", action="store_true", help="execute the source notebooks on the GPU")
    parser.add_argument("--grading", action="store_true", help="run tests/test_grading.py (real nbgrader)")
    parser.add_argument("--bench", action="store_true", help="benchmark and record results/gpu-results.json")
    parser.add_argument("--sections", default=",".join(BENCHMARKS),
                        help=f"comma-separated benchmark sections (--bench; default: all of {', '.join(BENCHMARKS)})")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repetitions per median (default 5)")
    parser.add_argument("--phases", default="", help="comma-separated assignments (default: all)")
    parser.add_argument("--parallel", type=int, default=1, help="notebooks executed at once (--notebooks)")
    parser.add_argument("--cell-timeout", type=int, default=300, help="seconds a notebook cell may run")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu-run",
                        help="logs and executed notebooks (default results/gpu-run/)")
    parser.add_argument("--where", default="device machine (bare image, wheels carried)",
                        help="where the run happened, recorded with the results")
    args = parser.parse_args()
    unknown = [s for s in args.sections.split(",") if s and s not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    everything = not (args.notebooks or args.grading or args.bench)
    phases = [p for p in args.phases.split(",") if p]
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        print("make gpu-check needs an NVIDIA GPU (torch.cuda.is_available() is False).")
        return 2
    os.environ.pop("TRITON_INTERPRET", None)
    record = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    earlier = record.get("environment", {})
    record["environment"] = environment(args.where)
    if "repeats" in earlier:  # the recorded benchmarks' repetitions, until --bench measures again
        record["environment"]["repeats"] = earlier["repeats"]
    log(json.dumps(record["environment"]))
    if everything or args.notebooks:
        record.setdefault("notebooks", {}).update(run_notebooks(args.out, phases, args.parallel, args.cell_timeout))
    if everything or args.grading:
        record.setdefault("grading", {})[args.phases or "all"] = run_grading(args.out, phases)
    if everything or args.bench:
        bench = run_bench(args.repeats, [s for s in args.sections.split(",") if s])
        record["environment"]["repeats"] = args.repeats
        record["peaks"] = bench.pop("peaks")
        record.setdefault("benchmarks", {}).update(bench)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=1))
    (args.out / "gpu-results.json").write_text(json.dumps(record, indent=1))
    from tritoncourse.benchmarking import README_FILE, RESULTS_DOC, render_readme, render_results_doc

    README_FILE.write_text(render_readme(README_FILE, record))
    RESULTS_DOC.write_text(render_results_doc(RESULTS_DOC, record))
    log(f"wrote {RESULTS}, docs/RESULTS.md's tables and the README's summary")
    return 0


if __name__ == "__main__":
    sys.exit(main())

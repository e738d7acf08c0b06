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
                and torch.compile of it), profile (phase 4: torch.profiler's CUDA
                kernels of eager and fused add-ReLU-scale). Results go to results/gpu-results.json,
                and the README's results section is regenerated from it.
With no flag, all three. Logs and executed notebooks go to --out (default results/gpu-run/).
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "results" / "gpu-results.json"


def log(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


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
def reference_module(assignment: str):
    """The instructor's notebook as a module: its read-only cells (imports, references, wrappers) and
    solution cells (kernels), in order, so benchmarks launch exactly as the notebook does."""
    # Plain JSON (nbformat 4 on disk): the GPU machines may have no Jupyter packages.
    nb = json.loads((ROOT / "source" / assignment / f"{assignment}.ipynb").read_text())
    chunks = []
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or meta.get("grade") or not (meta.get("solution") or meta.get("locked")):
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        chunks.append("\n".join("" if line.lstrip().startswith(("%", "!")) else line
                                for line in source.splitlines()))
    path = Path(tempfile.mkdtemp()) / f"nb_{assignment}.py"
    path.write_text("\n\n".join(chunks) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def interleaved(providers: dict, repeats: int) -> dict:
    """Median over `repeats` rounds; in each round every provider is timed once (do_bench median)."""
    import triton

    times = {p: [] for p in providers}
    for _ in range(repeats):
        for name, fn in providers.items():
            times[name].append(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    return {p: statistics.median(v) for p, v in times.items()}


def bench_peaks(repeats: int) -> dict:
    import torch

    n = 2**28
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    t = interleaved({"copy": lambda: y.copy_(x), "matmul": lambda: a @ b}, repeats)
    return {"copy_gbps": 2 * n * 4 / (t["copy"] * 1e-3) / 1e9,
            "cublas_fp16_tflops": 2 * 8192**3 / (t["matmul"] * 1e-3) / 1e12}


def _compiled(fn):
    import torch

    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False, mode="max-autotune-no-cudagraphs")


def bench_vector_add(repeats: int, peaks: dict) -> dict:
    import torch

    vector_add = reference_module("01_vector_add").vector_add  # the notebook's wrapper, BLOCK_SIZE 1024
    rows = []
    for exp in range(12, 29, 2):
        n = 2**exp
        x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        assert torch.equal(vector_add(x, y), x + y), f"reference vector add is wrong at n={n}"
        compiled = _compiled(lambda a, b: a + b)
        c0 = time.time()
        compiled(x, y)
        torch.cuda.synchronize()
        compile_s = time.time() - c0
        t = interleaved({"triton": lambda: vector_add(x, y), "torch": lambda: x + y,
                         "compile": lambda: compiled(x, y)}, repeats)
        gbps = {p: 3 * n * 4 / (ms * 1e-3) / 1e9 for p, ms in t.items()}
        rows.append([f"2^{exp}", gbps["triton"], gbps["torch"], gbps["compile"], gbps["triton"] / gbps["torch"],
                     gbps["triton"] / peaks["copy_gbps"], round(compile_s, 2)])
        log(f"vector add n=2^{exp}: triton {gbps['triton']:.0f} GB/s, torch {gbps['torch']:.0f}, "
            f"compile {gbps['compile']:.0f}")
    big = [r for r in rows if int(r[0][2:]) >= 26]
    targets = {
        "triton >= 0.98x torch.add at n >= 2^26": all(r[4] >= 0.98 for r in big),
        "triton >= 0.97x device copy bandwidth at n >= 2^26": all(r[5] >= 0.97 for r in big),
    }
    return {"columns": ["n (fp32)", "Triton GB/s", "torch GB/s", "compile GB/s", "Triton/torch",
                        "Triton/copy", "compile s"],
            "rows": rows, "targets": targets,
            "notes": [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]}


SOFTMAX_INPUT_BYTES = 2**28  # each benchmarked softmax input: 256 MB


def bench_softmax(repeats: int, peaks: dict) -> dict:
    import torch

    nb = reference_module("02_softmax")
    cases = [("softmax", n_cols, dt) for dt in (torch.float32, torch.float16) for n_cols in (1024, 4096, 16384)]
    cases += [("online_softmax", n_cols, torch.float32) for n_cols in (65536, 262144)]
    rows = []
    for kernel, n_cols, dtype in cases:
        # 256 MB inputs in both dtypes (fp16 gets twice the rows): the same bytes, so that launch and the last wave's
        # tail weigh the same. With 2**26 elements (128 MB in fp16) a copy itself runs at only 0.93x the 1 GB copy.
        n_rows = max(256, SOFTMAX_INPUT_BYTES // (n_cols * dtype.itemsize))
        x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
        ours = getattr(nb, kernel)
        ref = torch.softmax(x.float(), dim=-1)
        assert torch.allclose(ours(x).float(), ref, atol=1e-2 if dtype == torch.float16 else 1e-5), kernel
        compiled = _compiled(lambda t: torch.softmax(t, dim=-1))
        c0 = time.time()
        compiled(x)
        torch.cuda.synchronize()
        compile_s = time.time() - c0
        t = interleaved({"triton": lambda: ours(x), "torch": lambda: torch.softmax(x, dim=-1),
                         "compile": lambda: compiled(x)}, repeats)
        moved = 2 * x.numel() * x.element_size()
        gbps = {p: moved / (ms * 1e-3) / 1e9 for p, ms in t.items()}
        name = str(dtype).replace("torch.", "")
        rows.append([kernel, n_cols, n_rows, name, gbps["triton"], gbps["torch"], gbps["compile"],
                     gbps["triton"] / gbps["torch"], gbps["triton"] / peaks["copy_gbps"], round(compile_s, 2)])
        log(f"{kernel} {name} n_cols={n_cols}: triton {gbps['triton']:.0f} GB/s, torch {gbps['torch']:.0f}, "
            f"compile {gbps['compile']:.0f}")

    def ratio(kernel, dtype, cols, col):
        return [r[col] for r in rows if r[0] == kernel and r[3] == dtype and r[1] in cols]

    targets = {
        "one-block >= 0.9x copy bandwidth, n_cols 1024-16384, fp32 and fp16":
            all(v >= 0.9 for d in ("float32", "float16") for v in ratio("softmax", d, (1024, 4096, 16384), 8)),
        "one-block >= 1.3x torch.softmax fp32 at 4096 and 16384":
            all(v >= 1.3 for v in ratio("softmax", "float32", (4096, 16384), 7)),
        "one-block >= 1.7x torch.softmax fp16 at 4096 and 16384":
            all(v >= 1.7 for v in ratio("softmax", "float16", (4096, 16384), 7)),
        "online >= 1.25x torch.softmax at n_cols 65536-262144 (>= 256 rows)":
            all(v >= 1.25 for v in ratio("online_softmax", "float32", (65536, 262144), 7)),
    }
    return {"columns": ["kernel", "n_cols", "n_rows", "dtype", "Triton GB/s", "torch GB/s", "compile GB/s",
                        "Triton/torch", "Triton/copy", "compile s"],
            "rows": rows, "targets": targets,
            "notes": [f"each input {SOFTMAX_INPUT_BYTES >> 20} MB in both dtypes (fp16: twice the rows of fp32)"]
                     + [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]}


def bench_matmul_relu(repeats: int, peaks: dict) -> dict:
    import torch

    nb = reference_module("03_matmul_relu")
    rows = []
    for size in (256, 512, 1024, 2048, 4096, 8192):
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        ref = torch.relu(a.float() @ b.float())
        got = nb.matmul_relu(a, b).float()
        assert torch.allclose(got, ref, atol=0.05 * size**0.5, rtol=1e-2), f"matmul_relu wrong at {size}"
        compiled = _compiled(lambda x, y: torch.relu(x @ y))
        c0 = time.time()
        compiled(a, b)
        torch.cuda.synchronize()
        compile_s = time.time() - c0
        t = interleaved({"triton": lambda: nb.matmul_relu(a, b), "torch": lambda: torch.relu(a @ b),
                         "cublas": lambda: a @ b, "compile": lambda: compiled(a, b)}, repeats)
        tflops = {p: 2 * size**3 / (ms * 1e-3) / 1e12 for p, ms in t.items()}
        rows.append([size, tflops["triton"], tflops["torch"], tflops["cublas"], tflops["compile"],
                     tflops["triton"] / tflops["torch"], tflops["triton"] / peaks["cublas_fp16_tflops"],
                     round(compile_s, 2)])
        log(f"matmul_relu {size}: triton {tflops['triton']:.0f} TFLOP/s, relu(a@b) {tflops['torch']:.0f}, "
            f"a@b {tflops['cublas']:.0f}, compile {tflops['compile']:.0f}")
    by = {r[0]: r for r in rows}
    targets = {"fixed tiles >= 0.85x torch.relu(a @ b) at 4096": by[4096][5] >= 0.85,
               "fixed tiles >= 0.8x torch.relu(a @ b) at 8192": by[8192][5] >= 0.8}
    return {"columns": ["M=N=K (fp16)", "Triton TFLOP/s", "relu(a@b) TFLOP/s", "a@b TFLOP/s",
                        "compile TFLOP/s", "Triton/relu(a@b)", "Triton/cuBLAS peak", "compile s"],
            "rows": rows, "targets": targets,
            "notes": [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]}


def bench_matmul_relu_grouped(repeats: int, peaks: dict) -> dict:
    """Phase 3's optional exercise: the same tiles on a 2-D grid (pid_m fastest) and in grouped order."""
    import torch

    nb = reference_module("03_matmul_relu")
    rows = []
    for size in (2048, 4096, 8192):
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        ref = torch.relu(a.float() @ b.float())
        for fn in (nb.matmul_relu, nb.matmul_relu_grouped):
            assert torch.allclose(fn(a, b).float(), ref, atol=0.05 * size**0.5, rtol=1e-2), fn.__name__
        t = interleaved({"2d": lambda: nb.matmul_relu(a, b), "grouped": lambda: nb.matmul_relu_grouped(a, b),
                         "torch": lambda: torch.relu(a @ b)}, repeats)
        tflops = {p: 2 * size**3 / (ms * 1e-3) / 1e12 for p, ms in t.items()}
        rows.append([size, tflops["2d"], tflops["grouped"], tflops["torch"], tflops["grouped"] / tflops["2d"],
                     tflops["grouped"] / tflops["torch"]])
        log(f"matmul_relu grouped {size}: 2-D grid {tflops['2d']:.0f} TFLOP/s, grouped {tflops['grouped']:.0f}, "
            f"relu(a@b) {tflops['torch']:.0f}")
    return {"columns": ["M=N=K (fp16)", "2-D grid TFLOP/s", "grouped TFLOP/s", "relu(a@b) TFLOP/s",
                        "grouped/2-D", "grouped/relu(a@b)"],
            "rows": rows,
            "notes": ["same tiles and warps in both (the notebook's defaults); grouped: GROUP_M = 8 on a 1-D grid"]}


def _phase4():
    """The phase-4 notebook as a module (its graded functions, wrappers and GPU helpers), and the roof."""
    nb = reference_module("04_benchmarking")
    for fn in (nb.comparison_table, nb.run_benchmark):  # defensive: the module imports statistics itself
        fn.__globals__.setdefault("statistics", statistics)
    return nb


def bench_add_relu_mul(repeats: int, peaks: dict) -> dict:
    """Fused add-ReLU-scale against eager (three kernels) and torch.compile, 2^12 .. 2^27 fp32."""
    import torch

    nb = _phase4()
    roof = (peaks["copy_gbps"], peaks["cublas_fp16_tflops"])
    rows, notes = [], []
    for exp in (12, 15, 18, 21, 24, 27):
        n = 2**exp
        x, bias = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        inputs = (x, bias, 0.5)
        providers = {"triton": nb.add_relu_mul, "eager": nb.add_relu_mul_ref}
        providers["compile"], compile_s = nb.compiled(nb.add_relu_mul_ref, inputs)
        times, failed = nb.run_benchmark(providers, nb.add_relu_mul_ref, inputs, nb.gpu_timer, repeats)
        assert not failed, f"add_relu_mul n=2^{exp}: {failed}"
        flops, moved = nb.add_relu_mul_cost(n, torch.float32)
        for r in nb.comparison_table(times, flops, moved["triton"], *roof):
            rows.append([f"2^{exp}", r["provider"], r["ms"], r["gbps"], r["vs_eager"], r["vs_compile"], r["roof"]])
        notes.append(f"2^{exp}: torch.compile (mode={nb.COMPILE_MODE!r}, dynamic=False) compiled in "
                     f"{compile_s:.1f} s, not in the times")
        by = {r[1]: r for r in rows[-3:]}
        log(f"add_relu_mul 2^{exp}: triton {by['triton'][3]:.0f} GB/s ({by['triton'][4]:.2f}x eager, "
            f"{by['triton'][5]:.2f}x compile)")
    big = [r for r in rows if r[1] == "triton" and int(r[0][2:]) >= 24]
    targets = {"fused >= 2x eager at n >= 2^24 (7n vs 3n bytes predicts 2.33x)": all(r[4] >= 2.0 for r in big),
               "fused >= 0.95x torch.compile at n >= 2^24": all(r[5] >= 0.95 for r in big),
               "fused >= 0.9x device copy bandwidth at n >= 2^24": all(r[6] >= 0.9 for r in big)}
    notes += [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]
    return {"columns": ["n (fp32)", "provider", "ms", "GB/s", "vs eager", "vs compile", "of roof"],
            "rows": rows, "targets": targets, "notes": notes}


def bench_roofline(repeats: int, peaks: dict) -> dict:
    """Every kernel of the course (reference kernels of phases 1-4) and its PyTorch versions at one large size:
    the comparison table and the roofline points (intensity = FLOPs / bytes each provider moves)."""
    nb = _phase4()
    roof = (peaks["copy_gbps"], peaks["cublas_fp16_tflops"])
    kernels = nb.course_kernels(ROOT / "source" / "04_benchmarking")
    rows, points, notes = [], [], []
    for name, (flops, moved), inputs, reference, providers in nb.course_ops(kernels):
        providers = dict(providers)
        providers["compile"], compile_s = nb.compiled(providers["eager"], inputs)
        times, failed = nb.run_benchmark(providers, reference, inputs, nb.gpu_timer, repeats)
        for r in nb.comparison_table(times, flops, moved["triton"], *roof):
            intensity = flops / moved[r["provider"]]
            rows.append([name, r["provider"], r["ms"], r["gbps"], r["tflops"], r["vs_eager"], r["vs_compile"],
                         r["roof"], intensity, nb.classify(intensity, *roof)])
            points.append({"label": f"{name} / {r['provider']}", "provider": r["provider"],
                           "intensity": intensity, "tflops": r["tflops"]})
        notes.append(f"{name}: torch.compile (mode={nb.COMPILE_MODE!r}, dynamic=False) compiled in "
                     f"{compile_s:.1f} s, not in the times")
        notes += [f"{name}: {p} FAILED its check and was not timed: {m}" for p, m in failed.items()]
        log(f"roofline {name}: " + ", ".join(f"{r[1]} {r[4]:.3g} TFLOP/s" for r in rows if r[0] == name))
    return {"columns": ["op", "provider", "ms", "GB/s", "TFLOP/s", "vs eager", "vs compile", "of roof",
                        "FLOP/byte", "bound"],
            "rows": rows, "points": points, "notes": notes}

def _rate_row(kernel, problem, unit, rates: dict, best: str, tuning_s: float) -> list:
    """One row of the autotuning table: the earlier phase's kernel, the autotuned one, torch (and cuBLAS a@b)."""
    ratio = lambda p: rates["autotuned"] / rates[p] if p in rates else "-"
    return [kernel, problem, unit, rates["earlier"], rates["autotuned"], rates["torch"], rates.get("cublas", "-"),
            ratio("earlier"), ratio("torch"), ratio("cublas"), best, round(tuning_s, 1)]


def bench_autotuning(repeats: int, peaks: dict) -> dict:
    """Phase 5: the autotuned kernels of the reference notebook against the earlier phases' fixed choices and
    torch, plus the tables the phase-5 notebook reads back on the CPU: vector_add_sweep (sweep_widget),
    matmul_sweep (show_recorded_table), softmax_sweep, and resources (the GPU's n_regs, n_spills and shared
    memory per config, which tests/test_compiled.py compares with a compile on the CPU). About two minutes on an H200."""
    import torch
    import triton

    from tritoncourse.benchmarking import set_tuning_timer
    from tritoncourse.gpus import describe
    from tritoncourse.widgets.autotuning import compiled_resources

    nb = reference_module("05_autotuning")  # its kernels, configs, PHASE3_CONFIG and wrappers
    mm, sm, va = (nb.triton_autotuned_matmul_relu_kernel, nb.triton_autotuned_online_softmax_kernel,
                  nb.triton_autotuned_vector_add_kernel)
    for kernel in (mm, sm, va):
        set_tuning_timer(kernel)  # as the notebook: 200 ms of warm-up per config, not 25
    rows, targets, notes = [], {}, []

    def tuned(call):
        """The first call with a new key: the autotuner compiles and times every config, then launches the best."""
        t0 = time.time()
        out = call()
        torch.cuda.synchronize()
        return out, time.time() - t0

    # 1. The matmul: phase 3's fixed config (same kernel, GROUP_M = 1) and the autotuner's choice, against
    #    torch.relu(a @ b) and cuBLAS a @ b. Every config the autotuner timed goes to matmul_sweep.
    matmul_sweep = []
    for size in (512, 1536, 4096, 8192):
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        ref = torch.relu(a.float() @ b.float())
        tol = dict(atol=0.05 * size**0.5, rtol=1e-2)
        got, tuning_s = tuned(lambda: nb.matmul_relu_autotuned(a, b))
        assert torch.allclose(got.float(), ref, **tol), f"autotuned matmul wrong at {size}"
        best = describe(mm.best_config)
        flops = nb.matmul_flops(size, size, size)
        timed = {describe(c): (t[0] if isinstance(t, (list, tuple)) else t) for c, t in mm.configs_timings.items()}
        for config, ms in sorted(timed.items(), key=lambda kv: kv[1]):  # fastest first, as print_timings
            matmul_sweep.append([size, config, ms, flops / (ms * 1e-3) / 1e12 if math.isfinite(ms) else 0.0,
                                 "best_config" if config == best else ""])
        fixed = nb.matmul_relu_with_config(a, b, nb.PHASE3_CONFIG)[0]
        assert torch.allclose(fixed.float(), ref, **tol), f"phase 3's config wrong at {size}"
        t = interleaved({"earlier": lambda: nb.matmul_relu_with_config(a, b, nb.PHASE3_CONFIG),
                         "autotuned": lambda: nb.matmul_relu_autotuned(a, b),
                         "torch": lambda: torch.relu(a @ b), "cublas": lambda: a @ b}, repeats)
        tf = {p: flops / (ms * 1e-3) / 1e12 for p, ms in t.items()}
        rows.append(_rate_row("matmul+ReLU", f"M=N=K={size} fp16", "TFLOP/s", tf, best, tuning_s))
        targets[f"matmul: autotuned >= 1.0x phase 3's fixed config at {size}"] = tf["autotuned"] >= tf["earlier"]
        if t["autotuned"] > 2 * timed[best]:
            notes.append(f"matmul {size}: the autotuned call took {t['autotuned'] * 1e3:.0f} us where its kernel "
                         f"takes {timed[best] * 1e3:.0f} us (the autotuner's own timing): at this size the time is "
                         "the Python launch path (autotuner and launcher), not the GPU")
        if size >= 4096:
            targets[f"matmul: autotuned >= 1.0x torch.relu(a @ b) at {size}"] = tf["autotuned"] >= tf["torch"]
            targets[f"matmul: autotuned >= 0.95x cuBLAS a @ b at {size}"] = tf["autotuned"] >= 0.95 * tf["cublas"]
        log(f"autotuning matmul {size}: phase-3 config {tf['earlier']:.0f}, autotuned {tf['autotuned']:.0f} "
            f"({best}, tuned in {tuning_s:.1f} s), relu(a@b) {tf['torch']:.0f}, a@b {tf['cublas']:.0f} TFLOP/s")
        del a, b, ref, got, fixed
    torch.cuda.empty_cache()

    # 2. Registers, spills and shared memory of every matmul config, from the compiled kernels (as the notebook).
    S = 1024
    a = torch.randn(S, S, device="cuda", dtype=torch.float16)
    b = torch.randn(S, S, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)

    def launch(fn, meta):
        grid = (triton.cdiv(S, meta["BLOCK_M"]) * triton.cdiv(S, meta["BLOCK_N"]),)
        return fn[grid](a, b, c, S, S, S, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), **meta)

    resources = []
    for r in compiled_resources(mm, launch):
        if "error" in r:
            resources.append([r["config"], "-", "-", "-", 0, f"does not compile here: {r['error']}", 0.0])
        else:
            resources.append([r["config"], r["registers"], r["spills"], round(r["shared KB"], 1), r["programs/SM"],
                              r["bound by"], round(r["occupancy %"], 1)])

    # 3. The online softmax: phase 2's kernel (its wrapper's fixed tile and warps) against the autotuned one.
    phase2 = reference_module("02_softmax")
    softmax_sweep = []
    for n_rows, n_cols in ((4096, 4096), (1024, 65536), (256, 262144)):
        x = torch.randn(n_rows, n_cols, device="cuda")
        ref = torch.softmax(x, dim=-1)
        got, tuning_s = tuned(lambda: nb.softmax_autotuned(x))
        assert torch.allclose(got, ref, atol=1e-6, rtol=1e-4), f"autotuned softmax wrong at {n_rows}x{n_cols}"
        assert torch.allclose(phase2.online_softmax(x), ref, atol=1e-6, rtol=1e-4), "phase 2's online softmax"
        best = describe(sm.best_config)
        block, warps = phase2.online_launch_config(n_cols)
        moved = 2 * x.numel() * x.element_size()
        for config, timing in sm.configs_timings.items():
            ms = timing[0] if isinstance(timing, (list, tuple)) else timing  # [median, p20, p80] in triton 3.6
            softmax_sweep.append([n_rows, n_cols, describe(config), ms,
                                  moved / (ms * 1e-3) / 1e9 if math.isfinite(ms) else 0.0])
        t = interleaved({"earlier": lambda: phase2.online_softmax(x), "autotuned": lambda: nb.softmax_autotuned(x),
                         "torch": lambda: torch.softmax(x, dim=-1)}, repeats)
        gbps = {p: moved / (ms * 1e-3) / 1e9 for p, ms in t.items()}
        rows.append(_rate_row("online softmax", f"{n_rows}x{n_cols} fp32", "GB/s", gbps, best, tuning_s))
        same = best == describe(triton.Config({"BLOCK_SIZE": block}, num_warps=warps))
        # phase 2's tile and warps with the same kernel body: the ratio of their times is measurement noise
        targets[f"online softmax: autotuned >= 1.0x phase 2's kernel (or the same kernel) at {n_rows}x{n_cols}"] = (
            same or gbps["autotuned"] >= gbps["earlier"])
        if same:
            notes.append(f"online softmax {n_rows}x{n_cols}: the autotuner chose phase 2's own tile and warps, so "
                         f"both ran the same kernel; their ratio ({gbps['autotuned'] / gbps['earlier']:.3f}) is "
                         "measurement noise")
        log(f"autotuning online softmax {n_rows}x{n_cols}: phase 2 {gbps['earlier']:.0f}, autotuned "
            f"{gbps['autotuned']:.0f} GB/s ({best}), torch {gbps['torch']:.0f}")
        del x, ref, got

    # 4. The vector add: the whole BLOCK_SIZE x num_warps x num_stages sweep (what sweep_widget shows), then
    #    phase 1's kernel (BLOCK_SIZE 1024) against the autotuned one. Sweep cells: do_bench(warmup=10, rep=40).
    phase1 = reference_module("01_vector_add")
    sweep = []
    for exp in (16, 20, 24):
        n = 2**exp
        x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        out = torch.empty_like(x)
        for stages in (1, 2, 3, 4):
            for block in (64, 128, 256, 512, 1024):
                for warps in (1, 2, 4, 8):
                    def run(block=block, warps=warps, stages=stages):
                        va.fn[(triton.cdiv(n, block),)](x, y, out, n, BLOCK_SIZE=block, num_warps=warps,
                                                        num_stages=stages)
                    out.fill_(float("nan"))
                    run()
                    assert torch.equal(out, x + y), f"vector add wrong: n={n} {block} {warps} {stages}"
                    ms = triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
                    sweep.append([n, block, warps, stages, 3 * n * 4 / (ms * 1e-3) / 1e9])
        got, tuning_s = tuned(lambda: nb.vector_add_autotuned(x, y))
        assert torch.equal(got, x + y), f"autotuned vector add wrong at n=2^{exp}"
        best = describe(va.best_config)
        t = interleaved({"earlier": lambda: phase1.vector_add(x, y), "autotuned": lambda: nb.vector_add_autotuned(x, y),
                         "torch": lambda: x + y}, repeats)
        gbps = {p: 3 * n * 4 / (ms * 1e-3) / 1e9 for p, ms in t.items()}
        rows.append(_rate_row("vector add", f"n=2^{exp} fp32", "GB/s", gbps, best, tuning_s))
        log(f"autotuning vector add 2^{exp}: phase 1 {gbps['earlier']:.0f}, autotuned {gbps['autotuned']:.0f} "
            f"GB/s ({best}), torch {gbps['torch']:.0f}")

    notes += [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]
    notes += ["earlier = the earlier phase's fixed choice: phase 3's config "
              f"({describe(nb.PHASE3_CONFIG)}) in the same kernel, phase 2's online softmax, phase 1's vector add; "
              "tuning s = the first call with a new key (compiling and timing every config)"]
    return {
        "columns": ["kernel", "problem", "unit", "earlier", "autotuned", "torch", "cuBLAS a@b", "autotuned/earlier",
                    "autotuned/torch", "autotuned/cuBLAS", "best config", "tuning s"],
        "rows": rows, "targets": targets, "notes": notes,
        "vector_add_sweep": {"columns": ["n", "BLOCK_SIZE", "num_warps", "num_stages", "GB/s"], "rows": sweep,
                             "notes": ["each cell: do_bench median, warmup 10 ms, rep 40 ms; one run, not interleaved"]},
        "matmul_sweep": {"columns": ["M=N=K", "config", "ms", "TFLOP/s", "chosen"], "rows": matmul_sweep,
                         "notes": ["the autotuner's own timings (do_bench median per config, 200 ms of warm-up) at the first call of "
                                   "each size; inf = did not compile here, shown as 0 TFLOP/s"]},
        "softmax_sweep": {"columns": ["n_rows", "n_cols", "config", "ms", "GB/s"], "rows": softmax_sweep},
        "resources": {"columns": ["config", "registers", "spills", "shared KB", "programs/SM", "bound by",
                                  "occupancy %"], "rows": resources,
                      "notes": [f"compiled at M=N=K={S}; programs per SM from the CUDA occupancy rules"]},
    }


def bench_profile(repeats: int, peaks: dict) -> dict:
    """Phase 4's profiling section: torch.profiler's CUDA kernels for one call of eager add-ReLU-scale (three
    kernels) and of the fused Triton kernel (one), at 2^24 fp32; each kernel's median time over `repeats`
    profiled calls. What a CPU learner reads instead of a live profile."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    nb = _phase4()
    n = 2**24
    x, bias = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    rows = []
    for provider, fn in (("eager", nb.add_relu_mul_ref), ("triton", nb.add_relu_mul)):
        for _ in range(3):
            fn(x, bias, 0.5)  # compiled and warm
        torch.cuda.synchronize()
        per_kernel: dict[str, list[float]] = {}
        launches: dict[str, int] = {}
        for _ in range(repeats):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn(x, bias, 0.5)
                torch.cuda.synchronize()
            for e in prof.key_averages():
                if e.device_type != torch.autograd.DeviceType.CUDA or not e.count:
                    continue
                us = getattr(e, "device_time_total", None)
                us = e.cuda_time_total if us is None else us
                per_kernel.setdefault(e.key, []).append(us)
                launches[e.key] = e.count
        for name, times in per_kernel.items():
            rows.append([provider, name[:90], launches[name], statistics.median(times)])
        log(f"profile {provider}: " + ", ".join(f"{r[1][:40]} {r[3]:.0f} us" for r in rows if r[0] == provider))
    kernels = {p: sum(r[2] for r in rows if r[0] == p) for p in ("eager", "triton")}
    notes = [f"n = 2^24 fp32, one call per profile; kernel launches per call: eager {kernels['eager']}, "
             f"triton {kernels['triton']}; times are medians over {repeats} profiles"]
    return {"columns": ["provider", "CUDA kernel", "launches per call", "us per call"], "rows": rows, "notes": notes}


LAYER_NORM_INPUT_BYTES = 2**28  # each benchmarked LayerNorm input: 256 MB, as for softmax


def bench_layer_norm(repeats: int, peaks: dict) -> dict:
    """Phase 6's fused LayerNorm forward against torch's and a device copy of the same bytes (read x, write y)."""
    import torch

    nb = reference_module("06_fused_attention")
    rows = []
    for dtype in (torch.float16, torch.float32):
        for n_cols in (1024, 4096, 16384):
            n_rows = LAYER_NORM_INPUT_BYTES // (n_cols * dtype.itemsize)
            x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
            w = torch.rand(n_cols, device="cuda", dtype=dtype) + 0.5
            b = torch.randn(n_cols, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            ref = torch.nn.functional.layer_norm(x.float(), (n_cols,), w.float(), b.float())
            assert torch.allclose(nb.layer_norm(x, w, b).float(), ref, atol=2e-2, rtol=1e-2), f"layer_norm {n_cols}"
            t = interleaved({"triton": lambda: nb.layer_norm(x, w, b),
                             "torch": lambda: torch.nn.functional.layer_norm(x, (n_cols,), w, b),
                             "copy": lambda: y.copy_(x)}, repeats)
            moved = 2 * x.numel() * x.element_size()
            gbps = {p: moved / (ms * 1e-3) / 1e9 for p, ms in t.items()}
            name = str(dtype).replace("torch.", "")
            rows.append([n_cols, n_rows, name, gbps["triton"], gbps["torch"], gbps["copy"],
                         gbps["triton"] / gbps["copy"], gbps["triton"] / gbps["torch"]])
            log(f"layer_norm {name} n_cols={n_cols}: triton {gbps['triton']:.0f} GB/s, torch {gbps['torch']:.0f}, "
                f"copy {gbps['copy']:.0f}")
    targets = {"LayerNorm >= 0.9x a device copy of the same bytes": all(r[6] >= 0.9 for r in rows),
               "LayerNorm >= 1.0x torch.nn.functional.layer_norm": all(r[7] >= 1.0 for r in rows)}
    return {"columns": ["n_cols", "n_rows", "dtype", "Triton GB/s", "torch GB/s", "copy GB/s", "Triton/copy",
                        "Triton/torch"],
            "rows": rows, "targets": targets,
            "notes": [f"each input {LAYER_NORM_INPUT_BYTES >> 20} MB; bytes = read x + write y; the copy moves the same"]
                     + [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]}


ATTENTION_SEQS = (1024, 2048, 4096, 8192, 16384)


def bench_fused_attention(repeats: int, peaks: dict) -> dict:
    """Phase 6's attention forward (the notebook's wrapper: the reference kernel, autotuned) against every SDPA
    backend, naive torch and torch.compile of it; fp16, batch 4 x heads 8, head_dim 64 and 128, causal and not."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    nb = reference_module("06_fused_attention")
    B, H = 4, 8

    def sdpa(backend):
        def run(q, k, v, causal):
            if backend is None:
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return run

    def naive(q, k, v, causal):  # fp16 throughout, the seq x seq scores materialised
        s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        if causal:
            n = q.shape[-2]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    rows, memory = [], []
    for head_dim in (64, 128):
        for causal in (False, True):
            for S in ATTENTION_SEQS:
                q, k, v = (torch.randn(B, H, S, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
                o, _ = nb.attention(q, k, v, causal)
                ref = sdpa(SDPBackend.FLASH_ATTENTION)(q, k, v, causal)
                err = (o.float() - ref.float()).abs().max().item()
                assert err < 2e-2, f"attention wrong at d={head_dim} causal={causal} S={S}: {err}"
                providers = {"triton": lambda: nb.attention(q, k, v, causal),
                             "flash": lambda: sdpa(SDPBackend.FLASH_ATTENTION)(q, k, v, causal),
                             "default": lambda: sdpa(None)(q, k, v, causal),
                             "efficient": lambda: sdpa(SDPBackend.EFFICIENT_ATTENTION)(q, k, v, causal),
                             "naive": lambda: naive(q, k, v, causal)}
                compile_s = ""
                if S == 4096 and head_dim == 128:  # torch.compile of the naive version: one shape each (slow to build)
                    compiled = torch.compile(naive, dynamic=False)
                    c0 = time.time()
                    compiled(q, k, v, causal)
                    torch.cuda.synchronize()
                    compile_s = round(time.time() - c0, 1)
                    providers["compile"] = lambda: compiled(q, k, v, causal)
                t = interleaved(providers, repeats)
                flops = 4 * B * H * S * S * head_dim / (2 if causal else 1)
                tf = {p: flops / (ms * 1e-3) / 1e12 for p, ms in t.items()}
                rows.append([head_dim, causal, S, tf["triton"], tf["flash"], tf["default"], tf["efficient"],
                             tf["naive"], tf.get("compile", ""), tf["triton"] / tf["flash"],
                             tf["triton"] / tf["default"], tf["triton"] / peaks["cublas_fp16_tflops"], compile_s])
                log(f"attention d={head_dim} causal={causal} S={S}: triton {tf['triton']:.0f} TFLOP/s, FA2 "
                    f"{tf['flash']:.0f}, default {tf['default']:.0f}, efficient {tf['efficient']:.0f}, naive "
                    f"{tf['naive']:.0f}" + (f", compile {tf['compile']:.0f} (built in {compile_s} s)" if compile_s else ""))
                if S == 8192 and head_dim == 128 and not causal:
                    for name, fn in (("naive", providers["naive"]), ("triton", providers["triton"])):
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                        base = torch.cuda.memory_allocated()
                        fn()
                        torch.cuda.synchronize()
                        memory.append(f"peak memory beyond the inputs, d=128 S=8192: {name} "
                                      f"{(torch.cuda.max_memory_allocated() - base) / 2**20:.0f} MiB")
                del q, k, v
    targets = {"Triton >= 1.0x SDPA FLASH_ATTENTION at every shape": all(r[9] >= 1.0 for r in rows),
               "Triton >= 0.8x SDPA default (cuDNN) at seq >= 4096": all(r[10] >= 0.8 for r in rows if r[2] >= 4096)}
    return {"columns": ["head_dim", "causal", "seq_len", "Triton TFLOP/s", "FA2 TFLOP/s", "default TFLOP/s",
                        "efficient TFLOP/s", "naive TFLOP/s", "compile TFLOP/s", "Triton/FA2", "Triton/default",
                        "Triton/cuBLAS peak", "compile s"],
            "rows": rows, "targets": targets,
            "notes": ["fp16, batch 4 x heads 8; FLOPs 4*B*H*S^2*D, halved when causal; default = what SDPA picks "
                      "with no backend named (cuDNN on an H100/H200); torch.compile of the naive version only at "
                      "head_dim 128, seq 4096 (dynamic=False, built per shape)"] + memory
                     + [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]}




BENCHMARKS = {"vector_add": bench_vector_add, "softmax": bench_softmax, "matmul_relu": bench_matmul_relu,
              "matmul_relu_grouped": bench_matmul_relu_grouped,
              "add_relu_mul": bench_add_relu_mul, "roofline": bench_roofline, "autotuning": bench_autotuning,
              "layer_norm": bench_layer_norm, "fused_attention": bench_fused_attention,
              "profile": bench_profile}


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
    from tritoncourse.benchmarking import render_readme

    (ROOT / "README.md").write_text(render_readme(ROOT / "README.md", record))
    log(f"wrote {RESULTS} and the README's results section")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`make gpu-check`: verify the course on a real NVIDIA GPU and record every figure it measures.

    python tools/gpu_check.py [--notebooks] [--grading] [--bench] [--out DIR] [--where LABEL]

1. --notebooks: executes every source notebook top to bottom, kernels compiled on the GPU;
2. --grading:   runs tests/test_grading.py (real nbgrader autograde of the references and the wrong-kernel
                suites) on the GPU;
3. --bench:     benchmarks the reference kernels (taken from the source notebooks) side by side with torch
                eager and torch.compile, plus the device's copy bandwidth and cuBLAS peak; providers are
                interleaved and repeated, every ratio is a median. Results go to results/gpu-results.json.
With no flag, all three. Logs and executed notebooks go to --out (default results/gpu-run/).
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
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
def run_notebooks(out: Path, phases: list[str]) -> dict:
    import nbformat
    from nbclient import NotebookClient

    status = {}
    for path in sorted((ROOT / "source").glob("*/*.ipynb")):
        if phases and path.stem not in phases:
            continue
        log(f"executing {path.relative_to(ROOT)}")
        nb = nbformat.read(path, as_version=4)
        start = time.time()
        client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(path.parent)}})
        client.execute()
        errors = []
        for i, cell in enumerate(nb.cells):
            for o in cell.get("outputs", []):
                if o.get("output_type") == "error":
                    errors.append(f"cell {i}: {o.get('ename')}: {o.get('evalue')}"[:300])
        nbformat.write(nb, out / path.name)
        status[path.stem] = {"seconds": round(time.time() - start, 1), "errors": errors}
        log(f"  {path.stem}: {len(errors)} error(s) in {time.time() - start:.0f} s")
        for e in errors:
            log(f"    {e}")
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
def reference_kernels(assignment: str) -> dict:
    """The instructor's kernels, taken from the source notebook the same way the grader takes a learner's."""
    import nbformat

    from tritoncourse.grading.isolated import KERNEL_HEADER
    from tritoncourse.grading.source import kernels_from_notebook

    nb = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    kernels, _ = kernels_from_notebook(nb)
    path = Path(tempfile.mkdtemp()) / f"ref_{assignment}.py"
    path.write_text(KERNEL_HEADER + "\n\n".join(k.source for k in kernels.values()))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: getattr(module, name) for name in kernels}


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


def bench_vector_add(repeats: int, peaks: dict) -> dict:
    import torch
    import triton

    kernel = reference_kernels("01_vector_add")["triton_vector_add_kernel"]

    def vector_add(x, y, out):
        n = out.numel()
        kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
        return out

    rows = []
    for exp in range(12, 29, 2):
        n = 2**exp
        x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        out = torch.empty_like(x)
        assert torch.equal(vector_add(x, y, out), x + y), f"reference vector add is wrong at n={n}"
        torch._dynamo.reset()  # one graph per shape: dynamic=False, and no recompile limit across sizes
        compiled = torch.compile(lambda a, b: a + b, dynamic=False, mode="max-autotune-no-cudagraphs")
        c0 = time.time()
        compiled(x, y)
        torch.cuda.synchronize()
        compile_s = time.time() - c0
        t = interleaved({"triton": lambda: vector_add(x, y, out), "torch": lambda: torch.add(x, y, out=out),
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


BENCHMARKS = {"vector_add": bench_vector_add}


def run_bench(repeats: int, sections: list[str]) -> dict:
    log("measuring peaks (device copy, cuBLAS fp16 8192^3)")
    peaks = bench_peaks(repeats)
    log(f"peaks: copy {peaks['copy_gbps']:.0f} GB/s, cuBLAS {peaks['cublas_fp16_tflops']:.0f} TFLOP/s")
    results = {"peaks": peaks}
    for name in sections:
        results[name] = BENCHMARKS[name](repeats, peaks)
    return results


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notebooks", action="store_true")
    parser.add_argument("--grading", action="store_true")
    parser.add_argument("--bench", action="store_true")
    parser.add_argument("--sections", default=",".join(BENCHMARKS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--phases", default="", help="comma-separated assignments (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu-run")
    parser.add_argument("--where", default="device machine (bare image, wheels carried)")
    args = parser.parse_args()
    everything = not (args.notebooks or args.grading or args.bench)
    phases = [p for p in args.phases.split(",") if p]
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        print("make gpu-check needs an NVIDIA GPU (torch.cuda.is_available() is False).")
        return 2
    os.environ.pop("TRITON_INTERPRET", None)
    record = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    record["environment"] = environment(args.where)
    log(json.dumps(record["environment"]))
    if everything or args.notebooks:
        record.setdefault("notebooks", {}).update(run_notebooks(args.out, phases))
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
    log(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

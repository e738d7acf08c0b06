"""The benchmarks of `make gpu-check` (`tools/gpu_check.py --bench`) for phases 1-4, and the helpers every section
shares; tools/gpu_check.py registers the sections in its BENCHMARKS, tools/gpu_bench_tuned.py holds phases 5 and 6.

Helpers: log (gpu-check's timestamped log line), reference_module (a source notebook as a module), interleaved
(providers timed in interleaved rounds, medians), bench_peaks (the device's copy bandwidth and cuBLAS fp16 peak),
_compiled (torch.compile as the benchmarks build it), _phase4 (the phase-4 notebook as a module).
Sections, each (repeats, peaks) -> a section of results/gpu-results.json: vector_add (phase 1), softmax (phase 2),
matmul_relu and matmul_relu_grouped (phase 3), add_relu_mul, roofline and profile (phase 4).
torch and triton are imported inside the functions: the module loads without a GPU.
"""
from __future__ import annotations

import importlib.util
import json
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)



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


"""The benchmarks of `make gpu-check` (`tools/gpu_check.py --bench`) for phases 5 and 6; tools/gpu_check.py registers
them in its BENCHMARKS, and the shared helpers (log, reference_module, interleaved) are tools/gpu_bench.py's.

Sections, each (repeats, peaks) -> a section of results/gpu-results.json: autotuning (phase 5: the autotuned kernels
against the earlier phases' fixed choices and torch, plus the sweeps and resources its notebook reads back, with
_rate_row for one row of its table), layer_norm and fused_attention (phase 6: the fused LayerNorm against a copy and
torch; attention against every SDPA backend, naive torch and torch.compile of it).
torch and triton are imported inside the functions: the module loads without a GPU.
"""
from __future__ import annotations

import math
import time

from gpu_bench import interleaved, log, reference_module


def _rate_row(kernel, problem, unit, rates: dict, best: str, tuning_s: float) -> list:
    """One row of the autotuning table: the earlier phase's kernel, the autotuned one, torch (and cuBLAS a@b)."""
    ratio = lambda p: rates["autotuned"] / rates[p] if p in rates else "-"
    return [kernel, problem, unit, rates["earlier"], rates["autotuned"], rates["torch"], rates.get("cublas", "-"),
            ratio("earlier"), ratio("torch"), ratio("cublas"), best, round(tuning_s, 1)]


def bench_autotuning(repeats: int, peaks: dict) -> dict:
    """Phase 5: the autotuned kernels of the reference notebook against the earlier phases' fixed choices and
    torch, plus the tables the phase-5 notebook reads back on the CPU: vector_add_sweep (sweep_widget),
    matmul_sweep (show_recorded_table), softmax_sweep, and resources (the GPU's n_regs, n_spills and shared
    memory per config, which tests/units/test_compiled.py compares with a compile on the CPU). About two minutes on an
    H200."""
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
                             "notes": ["each cell: do_bench median, warmup 10 ms, rep 40 ms; one run, not "
                                       "interleaved"]},
        "matmul_sweep": {"columns": ["M=N=K", "config", "ms", "TFLOP/s", "chosen"], "rows": matmul_sweep,
                         "notes": ["the autotuner's own timings (do_bench median per config, 200 ms of warm-up) at "
                                   "the first call of "
                                   "each size; inf = did not compile here, shown as 0 TFLOP/s"]},
        "softmax_sweep": {"columns": ["n_rows", "n_cols", "config", "ms", "GB/s"], "rows": softmax_sweep},
        "resources": {"columns": ["config", "registers", "spills", "shared KB", "programs/SM", "bound by",
                                  "occupancy %"], "rows": resources,
                      "notes": [f"compiled at M=N=K={S}; programs per SM from the CUDA occupancy rules"]},
    }



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
            "notes": [f"each input {LAYER_NORM_INPUT_BYTES >> 20} MB; bytes = read x + write y; the copy moves "
                      "the same"]
                     + [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]}


ATTENTION_SEQS = (1024, 2048, 4096, 8192, 16384)


def bench_fused_attention(repeats: int, peaks: dict) -> dict:
    """Phase 6's attention forward (the notebook's wrapper: the reference kernel, autotuned) against every SDPA
    backend, naive torch and torch.compile of it; fp16, batch 4 x heads 8, head_dim 64 and 128, causal and not.

    Triton and the SDPA backends are timed as phase 7's backward is (gpu_bench_backward.both_ways): on the GPU alone
    (do_bench_cudagraph), which the ratios and targets count, and by do_bench (each call's CPU launch included)
    beside it. At seq_len 1024 the kernel takes 29-48 us of GPU: do_bench (the wrapper's checks and launch included)
    measured 0.78-0.85x FlashAttention-2 there where a bare launch of the same kernel measured 1.22-1.29x
    (docs/GPU-RUNS.md, twenty-seventh session). The naive version and its torch.compile: do_bench."""
    import torch
    from gpu_bench_backward import _warm, both_ways
    from torch.nn.attention import SDPBackend, sdpa_kernel

    nb = reference_module("06_fused_attention")
    B, H = 4, 8
    _warm()

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
                graphed = {p: providers[p] for p in ("triton", "flash", "default", "efficient")}
                both_ways(graphed, 1)  # discarded: the first round after the check and the autotuner ran
                t, launched = both_ways(graphed, repeats)
                t.update(interleaved({p: f for p, f in providers.items() if p not in graphed}, repeats))
                flops = 4 * B * H * S * S * head_dim / (2 if causal else 1)
                tf = {p: flops / (ms * 1e-3) / 1e12 for p, ms in t.items()}
                lt = {p: flops / (ms * 1e-3) / 1e12 for p, ms in launched.items()}
                rows.append([head_dim, causal, S, tf["triton"], tf["flash"], tf["default"], tf["efficient"],
                             tf["naive"], tf.get("compile", ""), tf["triton"] / tf["flash"],
                             tf["triton"] / tf["default"], tf["triton"] / peaks["cublas_fp16_tflops"], compile_s,
                             lt["triton"], lt["flash"], lt["default"], lt["triton"] / lt["flash"]])
                log(f"attention d={head_dim} causal={causal} S={S}, GPU time (do_bench): triton {tf['triton']:.0f} "
                    f"({lt['triton']:.0f}) TFLOP/s, FA2 {tf['flash']:.0f} ({lt['flash']:.0f}), default "
                    f"{tf['default']:.0f} ({lt['default']:.0f}), efficient {tf['efficient']:.0f}, naive "
                    f"{tf['naive']:.0f}"
                    + (f", compile {tf['compile']:.0f} (built in {compile_s} s)" if compile_s else ""))
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
                        "Triton/cuBLAS peak", "compile s", "Triton TFLOP/s (do_bench)", "FA2 TFLOP/s (do_bench)",
                        "default TFLOP/s (do_bench)", "Triton/FA2 (do_bench)"],
            "rows": rows, "targets": targets,
            "notes": ["fp16, batch 4 x heads 8; FLOPs 4*B*H*S^2*D, halved when causal; default = what SDPA picks "
                      "with no backend named (cuDNN on an H100/H200); torch.compile of the naive version only at "
                      "head_dim 128, seq 4096 (dynamic=False, built per shape)",
                      "Triton's and SDPA's TFLOP/s and ratios are the GPU's time alone (do_bench_cudagraph: many calls "
                      "in a CUDA graph, replayed; L2 not flushed), the GPU warmed first and each shape's round "
                      "discarded once; the columns marked (do_bench) include each call's CPU launch (L2 flushed), which "
                      "counts at seq_len 1024; naive and compile: do_bench"]
                     + memory
                     + [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]}


"""gpu_check's benchmark of phase 7: the attention backward (the notebook's three kernels, dQ by its kernel and by
atomics) against the backward of every SDPA backend, and a forward + backward of the notebook's attention block on
its custom op (and on Hopper on the optional section's Gluon op, tritoncourse/hopper_gluon_backward.py, which the step's
target counts there) against the same block on SDPA's default.

    python tools/gpu_check.py --bench --sections attention_backward --repeats 5

Each provider is timed two ways: on the GPU alone (triton.testing.do_bench_cudagraph: a CUDA graph of many calls,
replayed, so no CPU launch time; L2 not flushed between calls), which the target counts, and by do_bench (launches
included, L2 flushed), printed beside it. At head_dim 64, seq_len 1024 one call of the notebook's backward needs
75-90 us of GPU and 128-193 us of CPU (three Triton launches): do_bench's figure there measured how fast the CPU ran
(0.78-1.69x FA2 from run to run, docs/GPU-RUNS.md, twenty-fourth session). Each shape's providers are timed
interleaved (medians) after one discarded round; the GPU's clocks are warmed before the first shape. Every
provider's gradients are checked against SDPA's FlashAttention-2 backward first.
"""
from __future__ import annotations

import statistics

from gpu_bench import interleaved, log, reference_module

SEQS = (1024, 2048, 4096, 8192, 16384)
B, H = 4, 8


def _warm(seconds_ms: int = 2000) -> None:
    """Run a large matmul for about ``seconds_ms``: the first shape measured cold ran ~30% slower (issue 43)."""
    import torch
    import triton

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    triton.testing.do_bench(lambda: a @ a, warmup=seconds_ms // 2, rep=seconds_ms // 2, return_mode="median")


def _capture_stream():
    """The stream torch.cuda.graph captures on by default (do_bench_cudagraph's capture uses it). Autograd runs each
    backward op on the stream its forward ran on: an SDPA forward run on another stream would put its backward's
    kernels outside the graph being captured (an error), so SDPA's forwards here run on this one."""
    import torch

    if torch.cuda.graph.default_capture_stream is None:
        torch.cuda.graph(torch.cuda.CUDAGraph())  # its constructor makes the default capture stream
    return torch.cuda.graph.default_capture_stream


def _sdpa_backward(q, k, v, do, causal, backend):
    """A function that runs SDPA's backward alone under ``backend`` (its forward run once, the graph kept)."""
    import torch
    from torch.nn.attention import sdpa_kernel

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    stream = _capture_stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), sdpa_kernel(backend):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.current_stream().wait_stream(stream)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


def gpu_ms(fn) -> float:
    """The GPU's time of one call (ms): do_bench_cudagraph's median, launches left out."""
    import triton

    return triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")


def both_ways(providers: dict, repeats: int) -> tuple[dict, dict]:
    """(GPU time, do_bench time) of each provider, medians of ``repeats`` interleaved rounds of both timers."""
    import triton

    graph, bench = {p: [] for p in providers}, {p: [] for p in providers}
    for _ in range(repeats):
        for name, fn in providers.items():
            graph[name].append(gpu_ms(fn))
            bench[name].append(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    return ({p: statistics.median(v) for p, v in graph.items()}, {p: statistics.median(v) for p, v in bench.items()})


def _check(nb, q, k, v, do, causal):
    """The notebook's gradients (both dQ modes) against SDPA's FlashAttention-2 backward, fp16."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ref = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal),
                                  (qr, kr, vr), do)
    o, lse = nb.attention_forward(q, k, v, causal)
    for mode in ("kernel", "atomic"):
        got = nb.attention_backward(q, k, v, o, lse, do, causal, dq_mode=mode)
        for name, g, r in zip(("dQ", "dK", "dV"), got, ref):
            err = (g.float() - r.float()).abs().max().item() / max(r.float().abs().max().item(), 1e-6)
            assert err < 2e-2, f"{name} by {mode} wrong at causal={causal} S={q.shape[2]}: relative {err:.3g}"
    return o, lse


def bench_attention_backward(repeats: int, peaks: dict) -> dict:
    """TFLOP/s of the backward alone (10·B·H·S²·D, halved when causal): the notebook's kernels with dQ by kernel and
    by atomics, SDPA's FLASH_ATTENTION, CUDNN_ATTENTION and EFFICIENT_ATTENTION backward; fp16, B 4 x H 8, head_dim
    64 and 128, causal and not, seq_len 1k-16k. Then the notebook's block, forward + backward, on its op, on SDPA's
    default and, on Hopper, on the Gluon op of the notebook's optional section, at seq_len 4096."""
    import torch
    from torch.nn.attention import SDPBackend

    nb = reference_module("07_attention_backward")
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    _warm()
    rows = []
    for head_dim in (64, 128):
        for causal in (False, True):
            for S in SEQS:
                q, k, v, do = (torch.randn(B, H, S, head_dim, device="cuda", dtype=torch.float16) for _ in range(4))
                o, lse = _check(nb, q, k, v, do, causal)
                providers = {mode: (lambda m=mode: nb.attention_backward(q, k, v, o, lse, do, causal, dq_mode=m))
                             for mode in ("kernel", "atomic")}
                providers.update({name: _sdpa_backward(q, k, v, do, causal, b) for name, b in backends.items()})
                both_ways(providers, 1)  # discarded: the first shape measured right after _warm and _check ran
                t, launched = both_ways(providers, repeats)
                flops = 10 * B * H * S * S * head_dim / (2 if causal else 1)
                tf = {p: flops / (ms * 1e-3) / 1e12 for p, ms in t.items()}
                lt = {p: flops / (ms * 1e-3) / 1e12 for p, ms in launched.items()}
                rows.append([head_dim, causal, S, tf["kernel"], tf["atomic"], tf["flash"], tf["cudnn"],
                             tf["efficient"], tf["kernel"] / tf["flash"],
                             max(tf["kernel"], tf["atomic"]) / tf["cudnn"], tf["kernel"] / peaks["cublas_fp16_tflops"],
                             lt["kernel"], lt["flash"], lt["cudnn"], lt["kernel"] / lt["flash"],
                             t["kernel"] * 1e3, launched["kernel"] * 1e3])
                log(f"attention backward d={head_dim} causal={causal} S={S}, GPU time (do_bench): kernel "
                    f"{tf['kernel']:.0f} ({lt['kernel']:.0f}) TFLOP/s, atomic {tf['atomic']:.0f} "
                    f"({lt['atomic']:.0f}), FA2 {tf['flash']:.0f} ({lt['flash']:.0f}), cuDNN {tf['cudnn']:.0f} "
                    f"({lt['cudnn']:.0f}), efficient {tf['efficient']:.0f} ({lt['efficient']:.0f}); kernel/FA2 "
                    f"{tf['kernel'] / tf['flash']:.2f}x ({lt['kernel'] / lt['flash']:.2f}x)")
                del q, k, v, do, o, lse, providers
    x = torch.randn(B, 4096, 1024, device="cuda", dtype=torch.float16)
    steps, attends = {}, [("yours", nb.op_attend), ("sdpa", nb.sdpa_attend)]
    if torch.cuda.get_device_capability()[0] == 9:  # the section's optional Hopper op (Gluon), beside them
        from tritoncourse.hopper_gluon_backward import gluon_attend

        attends.append(("gluon", gluon_attend))
    for name, attend in attends:
        model = nb.AttentionBlock(1024, H, attend, True).to("cuda", torch.float16)
        steps[name] = lambda model=model: model(x).float().square().mean().backward()
    step = interleaved(steps, repeats)
    try:  # the same steps on the GPU alone, beside do_bench's figure
        gstep = both_ways(steps, repeats)[0]
        graphed = "; on the GPU alone (do_bench_cudagraph) " + ", ".join(f"{k} {ms:.3f} ms" for k, ms in gstep.items())
    except Exception as err:  # a capture refused: say so, the do_bench figure stands
        graphed = f"; not captured in a CUDA graph ({type(err).__name__})"
    targets = {"backward (dQ kernel) >= 1.0x SDPA FLASH_ATTENTION at every shape, GPU time":
               all(r[8] >= 1.0 for r in rows),
               "forward + backward of the block >= 1.0x the same on SDPA's default (on Hopper: the Gluon op of the "
               "notebook's optional section)": step["sdpa"] >= step.get("gluon", step["yours"])}
    return {"columns": ["head_dim", "causal", "seq_len", "dQ kernel TFLOP/s", "dQ atomic TFLOP/s", "FA2 TFLOP/s",
                        "cuDNN TFLOP/s", "efficient TFLOP/s", "kernel/FA2", "best/cuDNN", "kernel/cuBLAS peak",
                        "dQ kernel TFLOP/s (do_bench)", "FA2 TFLOP/s (do_bench)", "cuDNN TFLOP/s (do_bench)",
                        "kernel/FA2 (do_bench)", "dQ kernel us", "dQ kernel us (do_bench)"],
            "rows": rows, "targets": targets,
            "notes": ["fp16, batch 4 x heads 8; backward alone (O and LSE computed once); FLOPs 10*B*H*S^2*D (2.5x the "
                      "forward's), halved when causal; the GPU warmed before the first shape, each shape's "
                      "providers run one discarded round before the timed ones",
                      "TFLOP/s and ratios are the GPU's time alone (do_bench_cudagraph: many calls in a CUDA graph, "
                      "replayed; L2 not flushed), the columns marked (do_bench) include each call's CPU launch time "
                      "(L2 flushed): at seq_len 1024 the notebook's three launches take longer on the CPU than its "
                      "kernels on the GPU, so do_bench measures the CPU there",
                      "block forward + backward, causal, seq 4096, embed 1024, 8 heads (do_bench, medians): "
                      + ", ".join(f"{k} {ms:.3f} ms ({step['sdpa'] / ms:.2f}x SDPA's default)"
                                  for k, ms in step.items())
                      + graphed]
                     + [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()]}

"""Developers only, on a GPU: issue 43's remaining speed targets, measured side by side in one run (medians of
interleaved repetitions, the GPU's clocks warmed first). Prints one line a measurement; nothing is recorded.

    python tools/sweep_attention.py [--parts short,forward,block] [--repeats 11]

short:   the backward at head_dim 64, seq_len 1024 and 2048 (causal and not), B 4 x H 8 fp16, where the last record
         fell under SDPA's FlashAttention-2 backward (0.80-0.90x): the notebook's tiles and others, each against
         FA2's backward called two ways (through autograd, as gpu_check does, and as the aten op alone), timed by
         do_bench (launches included) and by a CUDA graph of 20 calls (the GPU's time alone).
forward: phase 6's forward at head_dim 128, not causal, seq_len 4096-16384, tiles/warps/stages against SDPA's
         default (cuDNN), with each compiled kernel's registers, spills and shared memory.
long:    the backward at head_dim 64, seq_len 4096 and 16384, the notebook's tiles against 64 x 64 dQ (and dK/dV).
(LayerNorm's launches and variants: tools/sweep_layernorm.py, --cols, --dtype, --launches.)
launch:  where the head_dim-64 backward's CPU time goes at seq_len 1024: each launch alone, then cProfile.
block:   the notebook's attention block, forward + backward (causal, seq 4096, embed 1024, 8 heads) on its op and on
         SDPA's default, with the backward's d128 tiles varied.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import reference_module  # noqa: E402
from gpu_bench_backward import _warm  # noqa: E402

B, H = 4, 8


def log(msg: str) -> None:
    print(msg, flush=True)


def do_bench(fn) -> float:
    """One provider's time: do_bench's median (launches included, L2 flushed between calls)."""
    import triton

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def graph_ms(fn, calls: int = 20) -> float:
    """The GPU's time of one call: a CUDA graph of ``calls`` calls, replayed, median of do_bench (L2 not flushed
    between the calls inside a replay)."""
    import torch
    import triton

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return triton.testing.do_bench(g.replay, warmup=25, rep=200, return_mode="median") / calls


def interleaved(providers: dict, repeats: int, how) -> dict:
    times = {p: [] for p in providers}
    for _ in range(repeats):
        for name, fn in providers.items():
            try:
                times[name].append(how(fn))
            except Exception as err:  # a graph capture refused, a config out of shared memory
                log(f"    {name}: {type(err).__name__}: {str(err)[:160]}")
                providers[name] = None
        providers = {k: v for k, v in providers.items() if v is not None}
    return {p: statistics.median(v) for p, v in times.items() if v}


def sdpa_with(backend, q, k, v, causal: bool = False):
    """A provider: SDPA's forward of (q, k, v) with one backend (SDPBackend.CUDNN_ATTENTION, FLASH_ATTENTION...)."""
    import torch
    from torch.nn.attention import sdpa_kernel

    def run():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def forward_launcher(kernel, q, k, v, causal: bool, cfg, *, maxnreg=None, o_layout: str = "bhsd", sm_scale=None,
                     o=None, lse=None):
    """The launch of phase 6's attention kernel (or one with its arguments: q, k, v, O, LSE, the four tensors' 16
    strides, heads, seq_len, sm_scale) at cfg = (BLOCK_M, BLOCK_N, num_warps, num_stages), as the notebook's wrapper
    launches it: grid (cdiv(seq_len, BLOCK_M), batch * heads), the arguments built once. O is allocated in
    ``o_layout``: "bhsd" (contiguous (batch, heads, seq, dim)) or "bshd" (SDPA's layout, (batch, seq, heads, dim)
    seen through a transpose), unless ``o`` is given; LSE (batch * heads, seq_len) fp32 likewise.

    Returns run: run() launches and returns O; run.o, run.lse, run.args, run.kw; run.compiled() compiles without
    launching (kernel.warmup) and returns the compiled kernel, for stats()."""
    import torch
    import triton

    bm, bn, warps, stages = cfg
    batch, heads, seq_len, head_dim = q.shape
    if o is None:
        shape = (batch, seq_len, heads, head_dim) if o_layout == "bshd" else (batch, heads, seq_len, head_dim)
        if o_layout not in ("bhsd", "bshd"):
            raise ValueError(f"o_layout {o_layout!r}: bhsd or bshd")
        o = torch.empty(shape, device=q.device, dtype=q.dtype)
        o = o.transpose(1, 2) if o_layout == "bshd" else o
    if lse is None:
        lse = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    args = (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(), heads, seq_len,
            head_dim ** -0.5 if sm_scale is None else sm_scale)
    kw = dict(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages,
              **({"maxnreg": maxnreg} if maxnreg else {}))
    grid = (triton.cdiv(seq_len, bm), batch * heads)

    def run():
        kernel[grid](*args, **kw)
        return o
    run.o, run.lse, run.args, run.kw = o, lse, args, kw
    run.compiled = lambda: kernel.warmup(*args, grid=(1,), **kw)
    return run


def stats(compiled) -> str:
    try:
        compiled._init_handles()
        return f"{compiled.n_regs} regs, {compiled.n_spills} spills, {compiled.metadata.shared // 1024} KiB"
    except Exception as err:
        return f"stats: {type(err).__name__}"


def backward_inputs(nb, S: int, causal: bool):
    """head_dim-64 fp16 inputs of B x H heads at seq_len S (seed 0), the notebook's forward (o, lse), and SDPA's
    FlashAttention-2 forward on leaf copies (qr, kr, vr -> orf) whose autograd graph gives FA2's backward."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, 64, device="cuda", dtype=torch.float16) for _ in range(4))
    o, lse = nb.attention_forward(q, k, v, causal)
    qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        orf = torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
    return q, k, v, do, o, lse, qr, kr, vr, orf


def backward_with(nb, cfg: dict, q, k, v, o, lse, do, causal: bool):
    """A call of the notebook's backward with ``cfg`` as its GPU tiles (BWD_CONFIG["cuda"]), put back after."""
    def run():
        saved = nb.BWD_CONFIG["cuda"]
        nb.BWD_CONFIG["cuda"] = cfg
        try:
            return nb.attention_backward(q, k, v, o, lse, do, causal)
        finally:
            nb.BWD_CONFIG["cuda"] = saved
    return run


def part_short(nb, repeats: int) -> None:
    import torch

    base = dict(nb.BWD_CONFIG["cuda"])
    variants = {"nb": base,
                "dkdv64x64w4s2": {**base, "dkdv": (64, 64, 4, 2)},
                "dkdv32x64w4s3": {**base, "dkdv": (32, 64, 4, 3)},
                "dq64x64w4s2": {**base, "dq": (64, 64, 4, 2)},
                "dq64x32w4s3": {**base, "dq": (64, 32, 4, 3)},
                "both64": {**base, "dkdv": (64, 64, 4, 2), "dq": (64, 64, 4, 2)},
                "dkdv64x128w8s2": {**base, "dkdv": (64, 128, 8, 2)}}
    for S in (1024, 2048):
        for causal in (False, True):
            q, k, v, do, o, lse, qr, kr, vr, orf = backward_inputs(nb, S, causal)
            ref = torch.autograd.grad(orf, (qr, kr, vr), do, retain_graph=True)
            fa2_autograd = lambda: torch.autograd.grad(orf, (qr, kr, vr), do, retain_graph=True)  # noqa: E731
            out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
            fo, flse, cq, ck, mq, mk, seed, off = out[:8]
            fa2_op = lambda: torch.ops.aten._scaled_dot_product_flash_attention_backward(  # noqa: E731
                do, q, k, v, fo, flse, cq, ck, mq, mk, 0.0, causal, seed, off)
            providers = {"fa2_autograd": fa2_autograd, "fa2_op": fa2_op}
            for name, cfg in variants.items():
                run = backward_with(nb, cfg, q, k, v, o, lse, do, causal)
                got = run()
                err = max((g.float() - r.float()).abs().max().item() / r.float().abs().max().item()
                          for g, r in zip(got, ref))
                if err > 2e-2:
                    log(f"  S={S} causal={causal} {name}: WRONG (relative {err:.3g})")
                    continue
                providers[name] = run
            flops = 10 * B * H * S * S * 64 / (2 if causal else 1)
            for label, how in (("do_bench", do_bench), ("graph", graph_ms)):
                # autograd's backward is not captured in a graph: the aten op stands for FA2 there
                t = interleaved({p: f for p, f in providers.items() if label == "do_bench" or p != "fa2_autograd"},
                                repeats, how)
                ref_ms = t.get("fa2_autograd" if label == "do_bench" else "fa2_op", float("nan"))
                line = ", ".join(f"{p} {ms * 1e3:.1f} us ({flops / ms / 1e9:.0f} TF/s, {ref_ms / ms:.2f}x)"
                                 for p, ms in t.items())
                log(f"short d=64 S={S} causal={causal} [{label}, ratio to "
                    f"{'fa2_autograd' if label == 'do_bench' else 'fa2_op'}]: {line}")
            # CPU time of one call of each (the launch path), 200 calls without a sync, GPU idle before
            import time
            for p in ("nb", "fa2_autograd", "fa2_op"):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(200):
                    providers[p]()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                log(f"  cpu per call {p}: {(t1 - t0) / 200 * 1e6:.1f} us (enqueue), "
                    f"{(time.perf_counter() - t0) / 200 * 1e6:.1f} us with the GPU's drain")


def part_forward(repeats: int) -> None:
    import torch
    from torch.nn.attention import SDPBackend

    nb6 = reference_module("06_fused_attention")
    configs = [(128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2), (128, 64, 8, 4), (128, 64, 4, 3),
               (128, 128, 16, 2), (256, 64, 16, 3), (64, 64, 4, 3)]
    for S in (4096, 8192, 16384):
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, S, 128, device="cuda", dtype=torch.float16) for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        providers = {}
        for c in configs:
            run = forward_launcher(nb6.triton_attention_kernel, q, k, v, False, c)
            try:
                o = run()
                torch.cuda.synchronize()
                compiled = run.compiled()
            except Exception as err:
                log(f"  fwd S={S} {c}: {type(err).__name__}")
                continue
            err = (o.float() - ref.float()).abs().max().item()
            if err > 2e-2:
                log(f"  fwd S={S} {c}: WRONG ({err:.3g})")
                continue
            if S == 4096:
                log(f"  fwd config {c}: {stats(compiled)}")
            providers[str(c)] = run

        providers.update(cudnn=sdpa_with(SDPBackend.CUDNN_ATTENTION, q, k, v),
                         fa2=sdpa_with(SDPBackend.FLASH_ATTENTION, q, k, v))
        t = interleaved(providers, repeats, do_bench)
        flops = 4 * B * H * S * S * 128
        log(f"forward d=128 non-causal S={S}: " + ", ".join(
            f"{p} {flops / ms / 1e9:.0f} TF/s ({t['cudnn'] / ms:.2f}x cuDNN)" for p, ms in t.items()))


def part_block(nb, repeats: int) -> None:
    import torch

    x = torch.randn(B, 4096, 1024, device="cuda", dtype=torch.float16)
    base = dict(nb.BWD_CONFIG["cuda_d128"])
    variants = {"nb": base, "dkdv64x128w8s2": {**base, "dkdv": (64, 128, 8, 2)},
                "dq128x64w8s2": {**base, "dq": (128, 64, 8, 2)}, "dkdv64x64w4s3": {**base, "dkdv": (64, 64, 4, 3)},
                "dq64x64w4s3": {**base, "dq": (64, 64, 4, 3)}}
    steps = {}
    torch.manual_seed(0)
    for name, attend in (("yours", nb.op_attend), ("sdpa", nb.sdpa_attend)):
        model = nb.AttentionBlock(1024, H, attend, True).to("cuda", torch.float16)
        if name == "yours":
            for vname, cfg in variants.items():
                def step(model=model, cfg=cfg):
                    saved = nb.BWD_CONFIG["cuda_d128"]
                    nb.BWD_CONFIG["cuda_d128"] = cfg
                    try:
                        model(x).float().square().mean().backward()
                    finally:
                        nb.BWD_CONFIG["cuda_d128"] = saved
                steps[f"yours_{vname}"] = step
        else:
            steps[name] = lambda model=model: model(x).float().square().mean().backward()
    t = interleaved(steps, repeats, do_bench)
    log("block fwd+bwd causal S=4096 d=128: " + ", ".join(f"{p} {ms:.3f} ms ({t['sdpa'] / ms:.2f}x SDPA default)"
                                                          for p, ms in t.items()))


def part_long(nb, repeats: int) -> None:
    """head_dim 64 at seq_len 4096 and 16384: the notebook's tiles against 64 x 64 dQ (and dK/dV) tiles and FA2."""
    import torch

    base = dict(nb.BWD_CONFIG["cuda"])
    variants = {"nb": base, "dq128x32w4s3": {**base, "dq": (128, 32, 4, 3)},
                "dq64x64w4s2": {**base, "dq": (64, 64, 4, 2)},
                "both64": {**base, "dkdv": (64, 64, 4, 2), "dq": (64, 64, 4, 2)}}
    for S in (4096, 16384):
        for causal in (False, True):
            q, k, v, do, o, lse, qr, kr, vr, orf = backward_inputs(nb, S, causal)
            providers = {"fa2": lambda: torch.autograd.grad(orf, (qr, kr, vr), do, retain_graph=True)}
            for name, cfg in variants.items():
                run = backward_with(nb, cfg, q, k, v, o, lse, do, causal)
                providers[name] = run
            t = interleaved(providers, repeats, do_bench)
            flops = 10 * B * H * S * S * 64 / (2 if causal else 1)
            log(f"long d=64 S={S} causal={causal}: " + ", ".join(
                f"{p} {flops / ms / 1e9:.0f} TF/s ({t['fa2'] / ms:.2f}x FA2)" for p, ms in t.items()))
            del q, k, v, do, o, lse, orf, qr, kr, vr


def part_launch(nb) -> None:
    """Where the backward's CPU time goes at head_dim 64, seq_len 1024 (launch-bound there): each launch and
    allocation of the wrapper timed alone, then cProfile of 200 calls."""
    import cProfile
    import pstats
    import time

    import torch
    import triton

    S = 1024
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, 64, device="cuda", dtype=torch.float16) for _ in range(4))
    for causal in (False, True):
        o, lse = nb.attention_forward(q, k, v, causal)
        nb.attention_backward(q, k, v, o, lse, do, causal)
        cfg = nb.BWD_CONFIG["cuda"]
        lse2 = lse.reshape(B * H, S).contiguous()
        delta = torch.empty((B * H, S), device="cuda", dtype=torch.float32)
        dk, dv, dq = torch.empty_like(k), torch.empty_like(v), torch.empty_like(q)
        bm, bn, w, st = cfg["dkdv"]
        qm, qn, qw, qs = cfg["dq"]
        pieces = {
            "empty_like x3": lambda: (torch.empty_like(k), torch.empty_like(v), torch.empty_like(q)),
            "lse reshape": lambda: lse.reshape(B * H, S).contiguous(),
            "preprocess launch": lambda: nb.triton_attention_bwd_preprocess_kernel[(triton.cdiv(S, 128), B * H)](
                o, do, delta, *o.stride(), *do.stride(), H, S, HEAD_DIM=64, BLOCK_M=128, num_warps=4),
            "dkdv launch": lambda: nb.triton_attention_bwd_dkdv_kernel[(triton.cdiv(S, bn), B * H)](
                q, k, v, do, lse2, delta, dk, dv, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(),
                *dk.stride(), *dv.stride(), *dq.stride(), H, S, 0.125, HEAD_DIM=64, BLOCK_M=bm, BLOCK_N=bn,
                CAUSAL=causal, ATOMIC_DQ=False, num_warps=w, num_stages=st),
            "dq launch": lambda: nb.triton_attention_bwd_dq_kernel[(triton.cdiv(S, qm), B * H)](
                q, k, v, do, lse2, delta, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(), H,
                S, 0.125, HEAD_DIM=64, BLOCK_M=qm, BLOCK_N=qn, CAUSAL=causal, num_warps=qw, num_stages=qs),
            "whole wrapper": lambda: nb.attention_backward(q, k, v, o, lse, do, causal),
        }
        for name, fn in pieces.items():
            fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(100):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            log(f"launch causal={causal} {name}: {(t1 - t0) / 100 * 1e6:.1f} us of CPU a call "
                f"({(time.perf_counter() - t0) / 100 * 1e6:.1f} with the GPU's drain)")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            nb.attention_backward(q, k, v, o, lse, do, causal)
        prof.disable()
        torch.cuda.synchronize()
        import io
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
        log(out.getvalue())


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="short,forward,block")
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    nb = reference_module("07_attention_backward")
    _warm(3000)
    import traceback

    for part in args.parts.split(","):
        try:
            if part == "short":
                part_short(nb, args.repeats)
            elif part == "forward":
                part_forward(max(args.repeats // 2, 5))
            elif part == "launch":
                part_launch(nb)
            elif part == "long":
                part_long(nb, args.repeats)
            elif part == "block":
                part_block(nb, max(args.repeats // 2, 5))
        except Exception:
            traceback.print_exc()


if __name__ == "__main__":
    main()

"""Developers only (a scratch sweep, nothing recorded), on an H100/H200: phase 7's training step (the notebook's
AttentionBlock, causal, batch 4, seq_len 4096, embed 1024, 8 heads: head_dim 128, fp16; forward + backward of
model(x).float().square().mean(), as tools/gpu_bench_backward.py times it) on the notebook's op and on SDPA's default.

    python tools/sweep_block.py [--parts step,profile,forward,backward] [--repeats 3]
    python tools/sweep_block.py --parts step2,profile2,stats --repeats 5   (after the notebook's op lost its copies)

step:     the step on SDPA's default, on the notebook's custom op, on its autograd.Function (no .contiguous()
          copies), on a custom op without the copies, and on one that also allocates O as (batch, seq, heads, dim)
          (SDPA's layout: O's transpose-and-reshape before the output projection is then free); medians of
          interleaved rounds, do_bench (launches included) and a CUDA graph (the GPU's time alone).
profile:  torch.profiler's CUDA kernels of three steps of each, summed by kernel name: where the time goes.
forward:  the attention forward alone at the step's shape (q, k, v views of the projection, as the block makes
          them), phase 6's kernel at several tiles, against SDPA's cuDNN and default.
backward: the notebook's backward alone at that shape, BWD_CONFIG's head_dim-128 tiles varied, against cuDNN's;
          "split..." rows launch tools/sweep_backward_split.py's dK/dV kernel (query loop split into masked and
          unmasked tiles) in the notebook's place, "tmadq..." tools/sweep_backward_tma.py's backward (one kernel,
          dQ added by descriptor reduces) at its tiles.
step3:    the step on SDPA's default, on the notebook's op, on the op with the split dK/dV kernel and with tmadq.
gluon:    the Gluon backwards (tools/sweep_block_gluon.py: two kernels, and one with dQ by TMA reduce-adds) alone,
          causal at the step's shape and not causal at head_dim 64, against cuDNN's and the notebook's, then the
          step with each in the notebook's op.
fa3:      tools/sweep_backward_gluon_fa3.py (FlashAttention-3's backward layout in Gluon; the Gluon forward on the
          block's strided q, k, v) alone against cuDNN's and the notebook's, then the step with them, and a profile.
fa3step:  tritoncourse/hopper_gluon_backward.py (fa3's best variant as a module) checked against SDPA, its backward
          against cuDNN's, then the step with it beside fa3's best variants, and a profile.
step2, profile2: the step on SDPA's default, on the notebook's op and on "old" (the op as it was before: its
          q, k, v copied by .contiguous(), twice, and O contiguous); the profile of SDPA's and the notebook's.
stats:    the compiled kernels of the notebook's forward and backward at the step's shape (registers, spills, shared
          memory, programs an SM by each limit).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import reference_module  # noqa: E402
from gpu_bench_backward import _sdpa_backward, _warm, both_ways  # noqa: E402
from sweep_attention import forward_launcher, log, stats  # noqa: E402

B, S, E, H = 4, 4096, 1024, 8
D = E // H


def _ops(nb):
    """Two custom ops beside the notebook's: without the .contiguous() copies, and with O in SDPA's layout too."""
    import torch

    def forward(q, k, v, causal, sm_scale, bshd, copies=False):
        if copies:  # the notebook's op before the twenty-seventh session: q, k, v copied, O contiguous
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        bm, bn, warps = (128, 64, 8) if not (causal and q.shape[-1] == 128) else (64, 64, 4)
        run = forward_launcher(nb.triton_attention_kernel, q, k, v, causal, (bm, bn, warps, 3),
                               o_layout="bshd" if bshd else "bhsd", sm_scale=sm_scale)
        return run(), run.lse

    def make(name, bshd, copies=False):
        @torch.library.custom_op(f"sweepblock::attention_{name}", mutates_args=())
        def op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
               sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
            return forward(q, k, v, causal, sm_scale, bshd, copies)

        @torch.library.custom_op(f"sweepblock::attention_backward_{name}", mutates_args=())
        def bop(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                do: torch.Tensor, causal: bool, sm_scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return nb.attention_backward(q, k, v, o, lse, do, causal, sm_scale)

        def setup(ctx, inputs, output):
            q, k, v, causal, sm_scale = inputs
            if copies:
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            ctx.save_for_backward(q, k, v, *output)
            ctx.causal, ctx.sm_scale = causal, sm_scale

        def backward(ctx, do, _dlse):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = bop(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
            return dq, dk, dv, None, None

        op.register_autograd(backward, setup_context=setup)
        return lambda q, k, v, c: op(q, k, v, c, q.shape[-1] ** -0.5)[0]

    made = {"nc": make("nc", False), "bshd": make("bshd", True), "old": make("old", False, True)}
    made["fn"] = lambda q, k, v, c: nb.AttentionFunction.apply(q, k, v, c)
    return made


def _steps(nb, names):
    import torch

    torch.manual_seed(0)
    x = torch.randn(B, S, E, device="cuda", dtype=torch.float16)
    attends = {"sdpa": nb.sdpa_attend, "op": nb.op_attend, **_ops(nb)}
    steps = {}
    for name in names:
        model = nb.AttentionBlock(E, H, attends[name], True).to("cuda", torch.float16)
        steps[name] = lambda model=model: model(x).float().square().mean().backward()
    return steps


def _with_split(nb, fn, dkdv=None):
    """``fn`` run with tools/sweep_backward_split.py's dK/dV kernel (and tiles ``dkdv``) in the notebook's place."""
    from sweep_backward_split import split_dkdv_kernel

    def run():
        saved = nb.triton_attention_bwd_dkdv_kernel, nb.BWD_CONFIG["cuda_d128"]
        nb.triton_attention_bwd_dkdv_kernel = split_dkdv_kernel
        if dkdv:
            nb.BWD_CONFIG["cuda_d128"] = {**saved[1], "dkdv": dkdv}
        try:
            return fn()
        finally:
            nb.triton_attention_bwd_dkdv_kernel, nb.BWD_CONFIG["cuda_d128"] = saved
    return run


def _with_tma_dq(nb, fn, cfg):
    """``fn`` run with tools/sweep_backward_tma.py's backward (dQ by descriptor reduces) as the notebook's."""
    from sweep_backward_tma import tma_dq_backward

    def run():
        saved = nb.attention_backward
        nb.attention_backward = lambda q, k, v, o, lse, do, causal=False, sm_scale=None: tma_dq_backward(
            nb, q, k, v, o, lse, do, causal, cfg, sm_scale)
        try:
            return fn()
        finally:
            nb.attention_backward = saved
    return run


TMA_DQ_CONFIGS = ((64, 128, 8, 3), (32, 128, 8, 3), (32, 128, 8, 2), (64, 128, 8, 2))


def part_step(nb, repeats, names=("sdpa", "op", "fn", "nc", "bshd"), split=False, more=None):
    """The step of each of ``names`` (and with other backwards when asked: ``split``, or ``more(steps)``, which adds
    steps of its own), timed both ways."""
    steps = _steps(nb, names)
    if split:
        steps["op+split"] = _with_split(nb, steps["op"])
        for cfg in TMA_DQ_CONFIGS[:2]:
            steps[f"op+tmadq {cfg}"] = _with_tma_dq(nb, steps["op"], cfg)
    if more:
        more(steps)
    both_ways(steps, 1)
    graph, bench = both_ways(steps, repeats)
    for name in steps:
        log(f"step {name}: do_bench {bench[name]:.3f} ms ({bench['sdpa'] / bench[name]:.3f}x SDPA), "
            f"graph {graph[name]:.3f} ms ({graph['sdpa'] / graph[name]:.3f}x)")


def part_profile(nb, names=("sdpa", "op", "bshd")):
    import torch
    from torch.profiler import ProfilerActivity, profile

    steps = _steps(nb, names)
    for name, fn in steps.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
            if t > 0:
                rows.append((t / 3, e.count // 3, e.key))
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows)
        log(f"profile {name}: {total / 1e3:.3f} ms of kernels a step")
        for t, n, key in rows[:16]:
            log(f"    {t:8.1f} us  x{n:<3d} {key[:110]}")


def _qkv(seed=0):
    import torch

    torch.manual_seed(seed)
    qkv = torch.randn(B, S, 3, H, D, device="cuda", dtype=torch.float16).permute(2, 0, 3, 1, 4)
    do = torch.randn(B, S, H, D, device="cuda", dtype=torch.float16).transpose(1, 2)
    return qkv[0], qkv[1], qkv[2], do


def part_forward(nb, repeats):
    import torch
    from torch.nn.attention import SDPBackend

    from sweep_attention import sdpa_with

    q, k, v, _ = _qkv()
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    providers = {"cudnn": sdpa_with(SDPBackend.CUDNN_ATTENTION, q, k, v, True),
                 "default": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)}
    for bm, bn, warps, stages in ((64, 64, 4, 3), (128, 64, 8, 3), (64, 64, 4, 4), (64, 32, 4, 3), (128, 32, 8, 3),
                                  (128, 64, 8, 2)):
        run = forward_launcher(nb.triton_attention_kernel, q, k, v, True, (bm, bn, warps, stages), o_layout="bshd")
        o = run.o
        try:
            run()
            torch.cuda.synchronize()
            compiled = run.compiled()
        except Exception as err:
            log(f"  forward {bm}x{bn} w{warps} s{stages}: {type(err).__name__}: {str(err)[:160]}")
            continue
        err = (o.float() - ref.float()).abs().max().item()
        log(f"  forward {bm}x{bn} w{warps} s{stages}: {stats(compiled)}, max err {err:.2g}")
        providers[f"{bm}x{bn} w{warps} s{stages}"] = run
    _report("forward", providers, repeats, flops=4 * B * H * S * S * D / 2)


def _relative_errors(run, ref, label: str) -> list | None:
    """Each gradient of ``run()`` against ``ref``'s: its largest error over the reference's largest value; None
    (logged with ``label``) when it raises."""
    import torch

    try:
        got = run()
        torch.cuda.synchronize()
    except Exception as err:
        log(f"  {label}: {type(err).__name__}: {str(err)[:300]}")
        return None
    return [(g.float() - r.float()).abs().max().item() / r.float().abs().max().item() for g, r in zip(got, ref)]


def _report(what: str, providers: dict, repeats: int, flops: float) -> None:
    """Time ``providers`` both ways (one round discarded), then log each one's GPU time, TFLOP/s and ratio to cuDNN's,
    and its do_bench time."""
    both_ways(providers, 1)
    graph, bench = both_ways(providers, repeats)
    for p in providers:
        log(f"{what} {p}: graph {graph[p] * 1e3:.0f} us ({flops / graph[p] / 1e9:.0f} TFLOP/s, "
            f"{graph['cudnn'] / graph[p]:.3f}x cuDNN), do_bench {bench[p] * 1e3:.0f} us")


def part_backward(nb, repeats):
    import torch
    from torch.nn.attention import SDPBackend

    q, k, v, do = _qkv()
    o, lse = nb.attention_forward(q, k, v, True)
    qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
    ref = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=True),
                              (qr, kr, vr), do)
    providers = {"cudnn": _sdpa_backward(q, k, v, do, True, SDPBackend.CUDNN_ATTENTION)}
    base = dict(nb.BWD_CONFIG["cuda_d128"])
    configs = {"nb": base,
               "dkdv32x128s3": {**base, "dkdv": (32, 128, 4, 3)},
               "dkdv64x64s3": {**base, "dkdv": (64, 64, 4, 3)},
               "dkdv32x64s3": {**base, "dkdv": (32, 64, 4, 3)},
               "dkdv64x128w8s2": {**base, "dkdv": (64, 128, 8, 2)},
               "dq64x64s3": {**base, "dq": (64, 64, 4, 3)},
               "dq128x64w8s2": {**base, "dq": (128, 64, 8, 2)},
               "dq64x32s3": {**base, "dq": (64, 32, 4, 3)},
               "dq128x32w8s3": {**base, "dq": (128, 32, 8, 3)}}

    from sweep_backward_tma import tma_dq_backward

    def with_config(cfg):
        def run():
            nb.BWD_CONFIG["cuda_d128"] = cfg
            return nb.attention_backward(q, k, v, o, lse, do, True)
        return run

    # (provider, what the log says of it, run)
    variants = [(name, f"{name} {cfg}", with_config(cfg)) for name, cfg in configs.items()]
    for dkdv in (None, (64, 128, 8, 2)):
        run = _with_split(nb, lambda: nb.attention_backward(q, k, v, o, lse, do, True), dkdv)
        variants.append((f"split {dkdv}", f"split {dkdv}", run))
    for cfg in TMA_DQ_CONFIGS:
        run = lambda cfg=cfg: tma_dq_backward(nb, q, k, v, o, lse, do, True, cfg)  # noqa: E731
        variants.append((f"tmadq {cfg}", f"tmadq {cfg}", run))
    for name, label, run in variants:
        errs = _relative_errors(run, ref, f"backward {label}")
        if errs is None:
            continue
        err = max(errs)
        log(f"  backward {label}: relative err {err:.2g}")
        if err < 2e-2:
            providers[name] = run
    _report("backward", providers, repeats, flops=10 * B * H * S * S * D / 2)
    nb.BWD_CONFIG["cuda_d128"] = base


def part_stats(nb):
    """The compiled forward and backward kernels at the step's shape, as the notebook's wrappers launch them:
    registers a thread, spills, shared memory, and how many programs an SM holds by each limit."""
    import torch
    import triton

    q, k, v, do = _qkv()
    o, lse = nb.attention_forward(q, k, v, True)
    delta = torch.empty(B * H, S, device="cuda")
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    cfg = nb.BWD_CONFIG["cuda_d128"]
    props = torch.cuda.get_device_properties(0)
    regs_sm, smem_sm = props.regs_per_multiprocessor, props.shared_memory_per_multiprocessor

    def show(name, compiled, warps):
        compiled._init_handles()
        threads = 32 * warps
        by_regs = regs_sm // (compiled.n_regs * threads)
        by_smem = smem_sm // max(compiled.metadata.shared, 1)
        log(f"  {name}: {compiled.n_regs} regs, {compiled.n_spills} spills, {compiled.metadata.shared // 1024} KiB "
            f"shared, {warps} warps; programs an SM: {by_regs} by registers, {by_smem} by shared memory, "
            f"{2048 // threads} by threads")

    bm, bn, warps, stages = (64, 64, 4, 3)
    show("forward (64, 64, 4 warps, 3 stages)", forward_launcher(
        nb.triton_attention_kernel, q, k, v, True, (bm, bn, warps, stages), o=o, lse=lse).compiled(), warps)
    bm, _, warps, _ = cfg["preprocess"]
    show(f"preprocess {cfg['preprocess']}", nb.triton_attention_bwd_preprocess_kernel[(triton.cdiv(S, bm), B * H)](
        o, do, delta, *o.stride(), *do.stride(), H, S, HEAD_DIM=D, BLOCK_M=bm, num_warps=warps), warps)
    bm, bn, warps, stages = cfg["dkdv"]
    show(f"dkdv {cfg['dkdv']}", nb.triton_attention_bwd_dkdv_kernel[(triton.cdiv(S, bn), B * H)](
        q, k, v, do, lse, delta, dk, dv, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(),
        *dv.stride(), *dq.stride(), H, S, D**-0.5, HEAD_DIM=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=True, ATOMIC_DQ=False,
        num_warps=warps, num_stages=stages), warps)
    bm, bn, warps, stages = cfg["dq"]
    show(f"dq {cfg['dq']}", nb.triton_attention_bwd_dq_kernel[(triton.cdiv(S, bm), B * H)](
        q, k, v, do, lse, delta, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(), H, S,
        D**-0.5, HEAD_DIM=D, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=True, num_warps=warps, num_stages=stages), warps)


def part_gluon(nb, repeats):
    """tools/sweep_block_gluon.py's part (the Gluon backward's own sweep, kept apart: this file's size)."""
    from sweep_block_gluon import part_gluon as gluon_part

    gluon_part(nb, repeats)


def part_fa3(nb, repeats):
    """tools/sweep_block_gluon.py's part fa3: FlashAttention-3's backward layout in Gluon, the Gluon forward on the
    block's strided q, k, v, and the step with both."""
    from sweep_block_gluon import part_fa3 as fa3_part

    fa3_part(nb, repeats)


def part_fa3_step(nb, repeats):
    """tools/sweep_block_gluon.py's part fa3step: tritoncourse/hopper_gluon_backward.py checked and timed, and the
    step with it beside part fa3's best variants."""
    from sweep_block_gluon import part_fa3_step as fa3_step

    fa3_step(nb, repeats)


def main() -> None:
    import traceback

    import torch
    import triton

    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="step,profile,forward,backward")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
        f"cuDNN {torch.backends.cudnn.version()}")
    nb = reference_module("07_attention_backward")
    _warm(2000)
    for part in args.parts.split(","):
        try:
            {"step": lambda: part_step(nb, args.repeats), "profile": lambda: part_profile(nb),
             "step2": lambda: part_step(nb, args.repeats, ("sdpa", "op", "old")),
             "step3": lambda: part_step(nb, args.repeats, ("sdpa", "op"), split=True),
             "profile2": lambda: part_profile(nb, ("sdpa", "op")), "stats": lambda: part_stats(nb),
             "forward": lambda: part_forward(nb, args.repeats),
             "backward": lambda: part_backward(nb, args.repeats),
             "gluon": lambda: part_gluon(nb, args.repeats), "fa3": lambda: part_fa3(nb, args.repeats),
             "fa3step": lambda: part_fa3_step(nb, args.repeats)}[part]()
        except Exception:
            traceback.print_exc()


if __name__ == "__main__":
    main()

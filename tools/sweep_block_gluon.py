"""Developers only, on a Hopper GPU: tools/sweep_block.py's part "gluon": the Gluon backwards (two kernels,
tools/sweep_backward_gluon.py; one kernel with dQ by TMA reduce-adds, tools/sweep_backward_gluon_fused.py) measured
at the training block's shape (causal; not causal at head_dim 64 too) against cuDNN's and the notebook's, each
checked against SDPA's gradients first, then the training step with each in the notebook's op. Parts "fa3" and
"fa3step": FlashAttention-3's backward layout (tools/sweep_backward_gluon_fa3.py) with the Gluon forward on the
block's strided q, k, v (tools/sweep_forward_gluon_host.py), and tritoncourse/hopper_gluon_backward.py, the same."""
from __future__ import annotations

from sweep_backward_gluon import gluon_backward
from sweep_backward_gluon_fused import fused_backward


# tools/sweep_block.py's part gluon, the tiles it tries: (dK/dV (BLOCK_M, stages, registers), dQ (BLOCK_N, stages,
# registers))
GLUON_CONFIGS = (((64, 4, 240, True), (128, 2, 240)), ((64, 3, 240), (128, 2, 240)), ((64, 4, 240), (128, 2, 240)))


def _delta_of(nb):
    """Δ = rowsum(dO ∘ O) by the notebook's preprocess kernel, as its backward computes it."""
    import torch
    import triton

    def delta(o, do):
        batch, heads, seq_len, head_dim = o.shape
        out = torch.empty((batch * heads, seq_len), device=o.device, dtype=torch.float32)
        nb.triton_attention_bwd_preprocess_kernel[(triton.cdiv(seq_len, 128), batch * heads)](
            o, do, out, *o.stride(), *do.stride(), heads, seq_len, HEAD_DIM=head_dim, BLOCK_M=128, num_warps=4)
        return out
    return delta


def _with_gluon(nb, fn, cfg=None, backward=None):
    """``fn`` run with a Gluon backward as the notebook's (Δ by the notebook's preprocess kernel): the two kernels at
    ``cfg``, or ``backward`` (fused_backward) at its defaults."""
    def run():
        saved = nb.attention_backward
        nb.attention_backward = lambda q, k, v, o, lse, do, causal=False, sm_scale=None: (
            backward(q, k, v, o, lse, do, causal, sm_scale, delta_of=_delta_of(nb)) if backward else
            gluon_backward(q, k, v, o, lse, do, causal, sm_scale, *cfg, delta_of=_delta_of(nb)))
        try:
            return fn()
        finally:
            nb.attention_backward = saved
    return run


def part_gluon(nb, repeats):
    """The Gluon backward alone against cuDNN's and the notebook's (every variant checked against SDPA's gradients
    first, at the step's shape and strides and not causal at head_dim 64 too), then the step with it."""
    import torch
    from torch.nn.attention import SDPBackend

    from sweep_block import B, D, H, S, _relative_errors, _report, _sdpa_backward, log, part_step

    for causal, d in ((True, D), (False, 64)):
        torch.manual_seed(0)
        qkv = torch.randn(B, S, 3, H, d, device="cuda", dtype=torch.float16).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        do = torch.randn(B, S, H, d, device="cuda", dtype=torch.float16).transpose(1, 2)
        o, lse = nb.attention_forward(q, k, v, causal)
        qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
        ref = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal),
                                  (qr, kr, vr), do)
        providers = {"cudnn": _sdpa_backward(q, k, v, do, causal, SDPBackend.CUDNN_ATTENTION),
                     "nb": lambda: nb.attention_backward(q, k, v, o, lse, do, causal)}
        runs = {f"gluon {cfg}": lambda cfg=cfg: gluon_backward(q, k, v, o, lse, do, causal, None, *cfg,
                                                               delta_of=_delta_of(nb)) for cfg in GLUON_CONFIGS[1:2]}
        runs.update({f"fused {st}": lambda st=st: fused_backward(q, k, v, o, lse, do, causal, None, stages=st,
                                                                delta_of=_delta_of(nb)) for st in (2, )})
        for cfg, run in runs.items():
            errs = _relative_errors(run, ref, cfg)
            if errs is None:
                continue
            log(f"  {cfg} d{d} causal={causal}: relative errors dQ, dK, dV " + ", ".join(f"{e:.2g}" for e in errs))
            if max(errs) < 2e-2:
                providers[cfg] = run
        flops = 10 * B * H * S * S * d / (2 if causal else 1)
        _report(f"backward d{d} causal={causal}", providers, repeats, flops=flops)
    def more(steps):
        steps[f"op+gluon {GLUON_CONFIGS[1]}"] = _with_gluon(nb, steps["op"], GLUON_CONFIGS[1])
        steps["op+fused"] = _with_gluon(nb, steps["op"], backward=fused_backward)
    part_step(nb, repeats, ("sdpa", "op"), more=more)


# (the thirty-third session's calls 2-4: the grid's axes swapped (group 32) slower than groups of 4 or 8; stages 2
# and 3 alike; Δ and the zeroed dQ buffer by one kernel (prep) as fast as by two; descriptors made on the host faster
# than in the kernel)
FA3_VARIANTS = {"fa3 s2": dict(stages=2), "fa3 s3 prep g4": dict(stages=3, prep=True, group=4),
                "fa3 s2 prep g4 host": dict(stages=2, prep=True, group=4, host=True),
                "fa3 s3 prep g4 host": dict(stages=3, prep=True, group=4, host=True),
                "fa3 s2 prep g8 host": dict(stages=2, prep=True, group=8, host=True)}


def _fa3_attend(nb, forward, variant):
    """attend(q, k, v, causal) for the notebook's block: a custom op whose forward is ``forward(q, k, v, causal,
    sm_scale) -> (O, LSE)`` and whose backward is tools/sweep_backward_gluon_fa3.py's (Δ by the notebook's
    preprocess kernel)."""
    import torch

    from sweep_backward_gluon_fa3 import fa3_backward

    name = f"attention_{abs(hash((forward.__name__, tuple(variant.items()))))}"
    # explicit schemas: this file's annotations are strings (from __future__), which custom_op cannot read
    op = torch.library.custom_op(f"sweepfa3::{name}", lambda q, k, v, causal, sm_scale: forward(
        q, k, v, causal, sm_scale), mutates_args=(), schema="(Tensor q, Tensor k, Tensor v, bool causal, "
        "float sm_scale) -> (Tensor, Tensor)")
    bop = torch.library.custom_op(f"sweepfa3::{name}_backward", lambda q, k, v, o, lse, do, causal, sm_scale:
                                  fa3_backward(q, k, v, o, lse, do, causal, sm_scale, delta_of=_delta_of(nb),
                                               **variant), mutates_args=(),
                                  schema="(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor do, bool causal, "
                                  "float sm_scale) -> (Tensor, Tensor, Tensor)")

    def setup(ctx, inputs, output):
        q, k, v, causal, sm_scale = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.causal, ctx.sm_scale = causal, sm_scale

    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = bop(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None

    op.register_autograd(backward, setup_context=setup)
    return lambda q, k, v, c: op(q, k, v, c, q.shape[-1] ** -0.5)[0]


def _fa3_function(nb, forward, variant):
    """_fa3_attend as a torch.autograd.Function instead of a custom op (less Python a call: do_bench counts it)."""
    import torch

    from sweep_backward_gluon_fa3 import fa3_backward

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):
            o, lse = forward(q, k, v, causal, q.shape[-1] ** -0.5)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal = causal
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = fa3_backward(q, k, v, o, lse, do, ctx.causal, q.shape[-1] ** -0.5, **variant)
            return dq, dk, dv, None

    return Attention.apply


def part_fa3(nb, repeats):
    """FlashAttention-3's backward layout in Gluon (tools/sweep_backward_gluon_fa3.py) and the Gluon forward on the
    block's strided q, k, v: each checked against SDPA first, then timed alone against cuDNN's and the notebook's
    (forward and backward, causal at the step's shape; the backward not causal too), then the training step."""
    import torch
    from torch.nn.attention import SDPBackend

    from sweep_attention import sdpa_with
    from sweep_backward_gluon_fa3 import fa3_backward, strided_forward
    from sweep_forward_gluon_host import host_forward
    from tritoncourse.hopper_gluon import gluon_attention
    from sweep_block import B, D, E, H, S, _relative_errors, _report, _sdpa_backward, log, part_step

    torch.manual_seed(0)
    qkv = torch.randn(B, S, 3, H, D, device="cuda", dtype=torch.float16).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    do = torch.randn(B, S, H, D, device="cuda", dtype=torch.float16).transpose(1, 2)
    ref_o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    o_nb, lse_nb = nb.attention_forward(q, k, v, True)
    o_gl, lse_gl = strided_forward(q, k, v, True)
    torch.cuda.synchronize()
    o_h, lse_h = host_forward(q, k, v, True)
    torch.cuda.synchronize()
    log(f"  gluon host-descriptor forward: max err O {(o_h.float() - ref_o.float()).abs().max().item():.2g}, LSE "
        f"against the notebook's {(lse_h.view(-1) - lse_nb.reshape(-1)).abs().max().item():.2g}")
    log(f"  gluon strided forward: max err O {(o_gl.float() - ref_o.float()).abs().max().item():.2g} (the "
        f"notebook's {(o_nb.float() - ref_o.float()).abs().max().item():.2g}), LSE against the notebook's "
        f"{(lse_gl.view(-1) - lse_nb.reshape(-1)).abs().max().item():.2g}, O strides {tuple(o_gl.stride())}")
    fwd = {"cudnn": sdpa_with(SDPBackend.CUDNN_ATTENTION, q, k, v, True), "nb": lambda: nb.attention_forward(
        q, k, v, True), "gluon strided": lambda: strided_forward(q, k, v, True),
        "gluon host": lambda: host_forward(q, k, v, True)}
    qc, kc, vc = (t.contiguous() for t in (q, k, v))
    fwd["gluon contiguous (hopper_gluon)"] = lambda: gluon_attention(qc, kc, vc, True)
    _report("forward d128 causal=True", fwd, repeats, flops=4 * B * H * S * S * D / 2)

    for causal in (True, False):
        o, lse = nb.attention_forward(q, k, v, causal)
        qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
        ref = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal),
                                  (qr, kr, vr), do)
        providers = {"cudnn": _sdpa_backward(q, k, v, do, causal, SDPBackend.CUDNN_ATTENTION),
                     "nb": lambda: nb.attention_backward(q, k, v, o, lse, do, causal)}
        runs = {f"gluon {GLUON_CONFIGS[1]}": lambda: gluon_backward(q, k, v, o, lse, do, causal, None,
                                                                   *GLUON_CONFIGS[1], delta_of=_delta_of(nb))}
        runs.update({name: lambda kw=kw: fa3_backward(q, k, v, o, lse, do, causal, delta_of=_delta_of(nb), **kw)
                     for name, kw in FA3_VARIANTS.items()})
        for label, run in runs.items():
            errs = _relative_errors(run, ref, label)
            if errs is None:
                continue
            log(f"  {label} d{D} causal={causal}: relative errors dQ, dK, dV " + ", ".join(f"{e:.2g}" for e in errs))
            if max(errs) < 2e-2:
                providers[label] = run
        providers["fa3 kernel alone (s3 g4 host)"] = lambda: fa3_backward(q, k, v, o, lse, do, causal, stages=3,
                                                                          group=4, host=True, kernel_only=True)
        _report(f"backward d{D} causal={causal}", providers, repeats,
                flops=10 * B * H * S * S * D / (2 if causal else 1))

    def nb_forward(q, k, v, causal, sm_scale):
        return nb.attention_forward(q, k, v, causal, sm_scale)

    def gl_forward(q, k, v, causal, sm_scale):
        return strided_forward(q, k, v, causal, sm_scale)

    def gl_host_forward(q, k, v, causal, sm_scale):
        return host_forward(q, k, v, causal, sm_scale)

    def more(steps):
        torch.manual_seed(0)
        x = torch.randn(B, S, E, device="cuda", dtype=torch.float16)
        for label, forward, kw in (("gl+fa3 s3 prep g4", gl_forward, FA3_VARIANTS["fa3 s3 prep g4"]),
                                   ("glh+fa3 s2 prep g4 host", gl_host_forward, FA3_VARIANTS["fa3 s2 prep g4 host"]),
                                   ("glh+fa3 s3 prep g4 host", gl_host_forward, FA3_VARIANTS["fa3 s3 prep g4 host"])):
            model = nb.AttentionBlock(E, H, _fa3_attend(nb, forward, kw), True).to("cuda", torch.float16)
            steps[label] = lambda model=model: model(x).float().square().mean().backward()
            model = nb.AttentionBlock(E, H, _fa3_function(nb, forward, kw), True).to("cuda", torch.float16)
            steps["fn " + label] = lambda model=model: model(x).float().square().mean().backward()
        more.steps = steps
    part_step(nb, repeats, ("sdpa", "op"), more=more)
    _profile_steps(more.steps)


def part_fa3_step(nb, repeats):
    """tritoncourse/hopper_gluon_backward.py (the kernels of part fa3's best variant as a module) checked against SDPA
    and its backward timed against cuDNN's, then the step with it beside part fa3's best variants (custom op and
    autograd.Function), and a profile."""
    import torch
    from torch.nn.attention import SDPBackend

    from sweep_block import B, D, E, H, S, _relative_errors, _report, _sdpa_backward, log, part_step
    from sweep_forward_gluon_host import host_forward
    from tritoncourse import hopper_gluon_backward as mod

    torch.manual_seed(0)
    qkv = torch.randn(B, S, 3, H, D, device="cuda", dtype=torch.float16).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    do = torch.randn(B, S, H, D, device="cuda", dtype=torch.float16).transpose(1, 2)
    for causal in (True, False):
        o, lse = mod.attention_forward(q, k, v, causal)
        qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
        ref_o = torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
        ref = torch.autograd.grad(ref_o, (qr, kr, vr), do)
        errs = _relative_errors(lambda: mod.attention_backward(q, k, v, o, lse, do, causal), ref, "module")
        log(f"  module causal={causal}: O max err {(o.float() - ref_o.float()).abs().max().item():.2g}, relative "
            f"errors dQ, dK, dV " + ", ".join(f"{e:.2g}" for e in errs or ()))
        providers = {"cudnn": _sdpa_backward(q, k, v, do, causal, SDPBackend.CUDNN_ATTENTION),
                     "module": lambda: mod.attention_backward(q, k, v, o, lse, do, causal)}
        _report(f"backward d{D} causal={causal}", providers, repeats,
                flops=10 * B * H * S * S * D / (2 if causal else 1))

    def gl_host_forward(q, k, v, causal, sm_scale):
        return host_forward(q, k, v, causal, sm_scale)

    def more(steps):
        torch.manual_seed(0)
        x = torch.randn(B, S, E, device="cuda", dtype=torch.float16)
        for label in ("fa3 s2 prep g4 host", "fa3 s3 prep g4 host"):
            kw = FA3_VARIANTS[label]
            model = nb.AttentionBlock(E, H, _fa3_function(nb, gl_host_forward, kw), True).to("cuda", torch.float16)
            steps["fn glh+" + label] = lambda model=model: model(x).float().square().mean().backward()
        model = nb.AttentionBlock(E, H, _fa3_attend(nb, gl_host_forward, FA3_VARIANTS["fa3 s2 prep g4 host"]),
                                  True).to("cuda", torch.float16)
        steps["glh+fa3 s2 prep g4 host"] = lambda model=model: model(x).float().square().mean().backward()
        model = nb.AttentionBlock(E, H, mod.gluon_attend, True).to("cuda", torch.float16)
        steps["module"] = lambda model=model: model(x).float().square().mean().backward()
        more.steps = steps
    part_step(nb, repeats, ("sdpa", "op"), more=more)
    _profile_steps(more.steps, ("sdpa", "module"))


def _profile_steps(steps, names=("sdpa", "glh+fa3 s2 prep g4 host")):
    """torch.profiler's CUDA kernels of three steps of each of ``steps``, summed by name."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from sweep_block import log

    for name in names:
        fn = steps[name]
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
        rows = sorted(((getattr(e, "self_device_time_total", 0) / 3, e.key) for e in prof.key_averages()
                       if getattr(e, "self_device_time_total", 0) > 0), reverse=True)
        log(f"profile {name}: {sum(r[0] for r in rows) / 1e3:.3f} ms of kernels a step")
        for t, key in rows[:16]:
            log(f"    {t:8.1f} us  {key[:100]}")

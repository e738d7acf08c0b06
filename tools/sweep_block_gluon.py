"""Developers only, on a Hopper GPU: tools/sweep_block.py's part "gluon": the Gluon backwards (two kernels,
tools/sweep_backward_gluon.py; one kernel with dQ by TMA reduce-adds, tools/sweep_backward_gluon_fused.py) measured
at the training block's shape (causal; not causal at head_dim 64 too) against cuDNN's and the notebook's, each
checked against SDPA's gradients first, then the training step with each in the notebook's op."""
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

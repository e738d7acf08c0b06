"""Developers only, on a Hopper GPU: tools/sweep_block.py's part "gluon", tools/sweep_backward_gluon.py's backward
measured at the training block's shape (causal; not causal at head_dim 64 too) against cuDNN's and the notebook's,
each of its kernels alone, then the training step with it in the notebook's op."""
from __future__ import annotations

from sweep_backward_gluon import gluon_backward


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


def _with_gluon(nb, fn, cfg):
    """``fn`` run with the Gluon backward as the notebook's (Δ by the notebook's preprocess kernel)."""
    def run():
        saved = nb.attention_backward
        nb.attention_backward = lambda q, k, v, o, lse, do, causal=False, sm_scale=None: gluon_backward(
            q, k, v, o, lse, do, causal, sm_scale, *cfg, delta_of=_delta_of(nb))
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
        for cfg in GLUON_CONFIGS:
            run = lambda cfg=cfg: gluon_backward(q, k, v, o, lse, do, causal, None, *cfg,  # noqa: E731
                                                 delta_of=_delta_of(nb))
            errs = _relative_errors(run, ref, f"gluon {cfg}")
            if errs is None:
                continue
            log(f"  gluon {cfg} d{d} causal={causal}: relative errors dQ, dK, dV " + ", ".join(f"{e:.2g}" for e in errs))
            if max(errs) < 2e-2:
                providers[f"gluon {cfg}"] = run
        for cfg, kernel in ((GLUON_CONFIGS[0], "dkdv"), (GLUON_CONFIGS[1], "dkdv"), (GLUON_CONFIGS[0], "dq")):
            # each kernel alone (Δ included), to see which one lags
            providers[f"gluon {kernel} alone {cfg}"] = lambda kernel=kernel, cfg=cfg: gluon_backward(
                q, k, v, o, lse, do, causal, None, *cfg, delta_of=_delta_of(nb), kernels=(kernel, ))
        _report(f"backward d{d} causal={causal}", providers, repeats, flops=10 * B * H * S * S * d / (2 if causal else 1))
    def more(steps):
        for cfg in GLUON_CONFIGS[:2]:
            steps[f"op+gluon {cfg}"] = _with_gluon(nb, steps["op"], cfg)
    part_step(nb, repeats, ("sdpa", "op"), more=more)

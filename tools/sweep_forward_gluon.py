"""Developers only, on a Hopper GPU: tritoncourse/hopper_gluon.py's Gluon forward (FlashAttention-3's overlap written
out) as tools/sweep_forward_variants.py launches a spec item (issue 43).

    python tools/sweep_forward_variants.py --no-nb --spec 'gl:128,128,4,2;gl:128,128,4,3@d64' --tma '128,128,4,2@ws'

cfg (BLOCK_M, BLOCK_N, warps, stages): BLOCK_M and BLOCK_N 128 and 4 warps (a consumer group) are the kernel's own;
stages the K and V rings'; maxnreg the consumer groups' registers a thread (232 unless given).
"""
from __future__ import annotations


def gl_runner(q, k, v, causal, cfg, maxnreg=None, tags=()):
    """``run()`` -> O, ``run.lse``, ``run.compiled()``, as the sweep's other runners."""
    from tritoncourse.hopper_gluon import gluon_attention

    bm, bn, warps, stages = cfg
    if (bm, bn, warps) != (128, 128, 4):
        raise ValueError("the Gluon kernel's tiles are 128 x 128 with 4-warp groups")
    kw = dict(stages=stages, consumer_regs=maxnreg or 232)
    first = gluon_attention(q, k, v, causal, **kw)

    def run():
        return gluon_attention(q, k, v, causal, **kw)[0]
    run.lse = first[1]
    run.compiled = lambda: first[2]
    return run

"""tritoncourse/hopper.py, phase 6's optional Hopper section (read and measured on a GPU, never graded).

Its kernel against SDPA on fresh random inputs, both ways it gets its descriptors (made on the host without warp
specialization, made in the kernel with it: the causal case then runs one loop, masked in every tile), causal or
not, several key and query tiles; and the section's claim that Triton 3.6 splits the warp-specialized loop into warp
groups at 128-row tiles with four warps, checked by compiling for an H100 here, as phase 5's section 9 does.
"""
from __future__ import annotations

import re

import pytest
import torch

from tritoncourse import hopper
from tritoncourse.checks.fused_attention.attention.inputs import attention_tolerances
from tritoncourse.compiled import compile_for_gpu
from tritoncourse.device import infer_device

DEVICE = infer_device()
pytestmark = pytest.mark.skipif(DEVICE == "cuda" and torch.cuda.get_device_capability()[0] != 9,
                                reason="tensor descriptors as hopper.py makes them are a Hopper feature")


@pytest.mark.parametrize("warp_specialize", [False, True], ids=["host-descriptors", "kernel-descriptors"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tma_attention_matches_sdpa(warp_specialize, causal):
    torch.manual_seed(1000 + 2 * warp_specialize + causal)
    q, k, v = (torch.randn(1, 2, 128, 32, device=DEVICE, dtype=torch.float16) for _ in range(3))
    tiles = dict(block_m=64, block_n=32, stages=1, warps=4) if DEVICE == "cpu" else {}
    o, lse, _ = hopper.tma_attention(q, k, v, causal, warp_specialize=warp_specialize, **tiles)
    qf, kf, vf = q.float(), k.float(), v.float()
    scores = qf @ kf.transpose(-1, -2) / 32**0.5
    if causal:
        scores = scores.masked_fill(torch.ones(128, 128, dtype=torch.bool, device=DEVICE).triu(1), float("-inf"))
    ref_lse = torch.logsumexp(scores, -1)
    (atol, rtol), (l_atol, l_rtol), why = attention_tolerances(v, ref_lse, DEVICE)  # phase 6's tests' own
    torch.testing.assert_close(o.float(), torch.softmax(scores, -1) @ vf, atol=atol, rtol=rtol, msg=lambda m: m + why)
    torch.testing.assert_close(lse, ref_lse, atol=l_atol, rtol=l_rtol)


def test_warp_specialized_loop_splits_into_warp_groups():
    q = torch.empty(1, device="cpu", dtype=torch.float16)
    lse = torch.empty(1, device="cpu", dtype=torch.float32)
    compiled = compile_for_gpu(hopper.tma_attention_kernel, q, q, q, q, lse, 4096, 0.125, arch=90, num_warps=4,
                               num_stages=2, HEAD_DIM=64, BLOCK_M=128, BLOCK_N=128, CAUSAL=False,
                               WARP_SPECIALIZE=True)
    assert "ttg.warp_specialize" in compiled.asm["ttgir"], "the key loop was not split into warp groups"
    # the section's prose: a producer group and two consumer groups of 4 warps; 232 registers a consumer thread, 40 a
    # producer's
    assert re.search(r"\.reqntid 384\b", compiled.asm["ptx"]), "not 12 warps (384 threads) a program"
    counts = {int(n) for n in re.findall(r"setmaxnreg[.\w]*\s+(\d+)", compiled.asm["ptx"])}
    assert {40, 232} <= counts, counts

"""tritoncourse/hopper.py and hopper_gluon.py, phase 6's optional Hopper section (read and measured on a GPU, never
graded).

Its kernel against SDPA on fresh random inputs, both ways it gets its descriptors (made on the host without warp
specialization, made in the kernel with it: the causal case then runs one loop, masked in every tile), causal or
not, several key and query tiles; and the section's claim that Triton 3.6 splits the warp-specialized loop into warp
groups at 128-row tiles with four warps, checked by compiling for an H100 here, as phase 5's section 9 does. The Gluon
kernel (FlashAttention-3's overlap written out) against the same reference on a Hopper GPU, fp16 and bf16 (Triton's
interpreter does not run Gluon), and compiled for an H100 here: its three partitions, its registers, and the overlap
itself (a wait that leaves one product in flight). Phase 7's optional section, tritoncourse/hopper_gluon_backward.py:
its op's O and gradients against autograd through the fp32 reference on a Hopper GPU (strided inputs and dO, fp16 and
bf16, causal or not), and its backward compiled here: partitions, registers, the overlap, dQ added by TMA reduces.
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


def _reference(q, k, v, causal):
    """O and the natural-log LSE in fp32, from the scores themselves."""
    qf, kf, vf = q.float(), k.float(), v.float()
    scores = qf @ kf.transpose(-1, -2) / q.shape[-1]**0.5
    if causal:
        n = q.shape[2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(scores, -1) @ vf, torch.logsumexp(scores, -1)


@pytest.mark.skipif(DEVICE != "cuda", reason="Gluon runs compiled only: Triton's interpreter does not run it")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gluon_attention_matches_the_reference(dtype, head_dim, causal):
    from tritoncourse import hopper_gluon

    torch.manual_seed(2000 + head_dim + causal)
    # 640 keys: five key tiles, more than the rings' stages, so every buffer is reused; three (batch, head) pairs
    q, k, v = (torch.randn(1, 3, 640, head_dim, device=DEVICE, dtype=dtype) for _ in range(3))
    o, lse, _ = hopper_gluon.gluon_attention(q, k, v, causal)
    ref_o, ref_lse = _reference(q, k, v, causal)
    (atol, rtol), (l_atol, l_rtol), why = attention_tolerances(v, ref_lse, DEVICE)
    torch.testing.assert_close(o.float(), ref_o, atol=atol, rtol=rtol, msg=lambda m: m + why)
    torch.testing.assert_close(lse, ref_lse, atol=l_atol, rtol=l_rtol)


_COMPILE_GLUON = """
import json, sys
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import create_function_from_signature
from tritoncourse import hopper_gluon

causal, head_dim = json.loads(sys.argv[1])
jit = hopper_gluon.gluon_attention_kernel
target = GPUTarget("cuda", 90, 32)
backend = make_backend(target)
rows = torch.empty(4096, head_dim, dtype=torch.float16)
descs = [TensorDescriptor.from_tensor(rows, [block, head_dim], gl.NVMMASharedLayout.get_default_for(
    [block, head_dim], gl.float16)) for block in (64, 128, 128, 64)]
kwargs = dict(CAUSAL=causal, STAGES=2, CONSUMER_REGS=232, num_warps=4)
binder = create_function_from_signature(jit.signature, jit.params, backend)
bound, specialization, options = binder(*descs, torch.empty(4096), 4096, 0.18, **kwargs)
options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
compiled = triton.compile(GluonASTSource(jit, signature, constexprs, attrs), target=target, options=options.__dict__)
print(json.dumps({stage: compiled.asm[stage] for stage in ("ttgir", "ptx")}))
"""


def _compile_gluon_for_h100(causal: bool, head_dim: int, script: str = _COMPILE_GLUON) -> dict:
    """A Gluon kernel's TTGIR and PTX (``script``'s) compiled for sm_90a here, without a GPU, in a process of its own
    without TRITON_INTERPRET (this one runs Triton's interpreter, under which Triton's own @jit library functions that
    Gluon calls, gl.max and gl.sum, may be interpreted ones that Gluon cannot compile)."""
    import json
    import os
    import subprocess
    import sys

    from course import ROOT

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", script, json.dumps([causal, head_dim])], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_gluon_kernel_overlaps_its_products_in_three_partitions():
    asm = _compile_gluon_for_h100(causal=True, head_dim=128)
    ttgir, ptx = asm["ttgir"], asm["ptx"]
    # the notebook's prose: two consumer groups of 4 warps (the default partition and a worker) and a 1-warp producer;
    # warps are given by groups of 4, so 12 warps (384 threads) a program, 232 registers a consumer thread, 24 the
    # producer's
    assert re.search(r"ttg\.warp_specialize\(.*requestedRegisters = array<i32: 232, 24>", ttgir), \
        "not the partitions asked"
    assert re.findall(r"\bnum_warps\((\d+)\) \{", ttgir) == ["4", "1"], "the workers are not 4 warps and 1"
    assert re.search(r"\.reqntid 384\b", ptx), "not 12 warps (384 threads) a program"
    counts = {int(n) for n in re.findall(r"setmaxnreg[.\w]*\s+(\d+)", ptx)}
    assert {24, 232} <= counts, counts
    # the overlap: Q·Kᵀ and P·V are asynchronous wgmma, and the loop waits for the scores with one product (P·V)
    # still in flight
    assert "wgmma.mma_async" in ptx
    assert re.search(r"wgmma\.wait_group\.sync\.aligned 1;", ptx), "no wait leaves a product in flight"


# ---- phase 7's optional Hopper section: tritoncourse/hopper_gluon_backward.py, the training step in Gluon

def _block_views(batch, heads, seq_len, dtype, seed):
    """Q, K, V as an attention block's projection leaves them (strided slices of one (batch, seq, 3, heads, 128)
    tensor), and a dO that is not contiguous either."""
    torch.manual_seed(seed)
    qkv = torch.randn(batch, seq_len, 3, heads, 128, device=DEVICE, dtype=dtype).permute(2, 0, 3, 1, 4)
    do = torch.randn(batch, seq_len, heads, 128, device=DEVICE, dtype=dtype).transpose(1, 2)
    return qkv[0], qkv[1], qkv[2], do


@pytest.mark.skipif(DEVICE != "cuda", reason="Gluon runs compiled only: Triton's interpreter does not run it")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch,heads", [(1, 3), (2, 4)], ids=["programs-one-by-one", "programs-in-groups-of-4"])
def test_gluon_training_op_matches_the_reference(dtype, causal, batch, heads):
    """O and dQ, dK, dV of the Gluon op against autograd through the fp32 reference: 640 keys (five programs of
    128 keys, ten query tiles of 64 through a ring of 2), strided inputs and dO, (batch, head)s one by one or in
    the kernel's groups of 4."""
    from tritoncourse.hopper_gluon_backward import gluon_attend

    q, k, v, do = _block_views(batch, heads, 640, dtype, seed=3000 + 2 * heads + causal)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o = gluon_attend(*leaves, causal)
    o.backward(do)
    refs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref_o, _ = _reference(*refs, causal)
    ref_o.backward(do.float())
    for name, got, want in [("O", o, ref_o), *zip(("dQ", "dK", "dV"), (t.grad for t in leaves),
                                                   (t.grad for t in refs))]:
        err = ((got.float() - want).abs().max() / want.abs().max()).item()
        # P and dS are rounded to the inputs' type before their products (8 bits of mantissa in bf16, 11 in fp16)
        bound = 1e-2 if dtype == torch.float16 else 3e-2
        assert err < bound, f"{name}: relative error {err:.1e} ({dtype}, causal {causal})"


_COMPILE_GLUON_BACKWARD = """
import json, sys
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import create_function_from_signature
from tritoncourse import hopper_gluon_backward

causal, head_dim = json.loads(sys.argv[1])
jit = hopper_gluon_backward.backward_kernel
target = GPUTarget("cuda", 90, 32)
backend = make_backend(target)
rows, acc, f32 = torch.empty(4096, head_dim, dtype=torch.float16), torch.empty(4096, head_dim), torch.empty(4096)
descs = [TensorDescriptor.from_tensor(rows, [block, head_dim], gl.NVMMASharedLayout.get_default_for(
    [block, head_dim], gl.float16)) for block in (64, 128, 128, 64)]
descs.append(TensorDescriptor.from_tensor(acc, [64, head_dim // 2], gl.NVMMASharedLayout.get_default_for(
    [64, head_dim // 2], gl.float32)))
kwargs = dict(CAUSAL=causal, STAGES=2, GROUP=4, num_warps=4)
binder = create_function_from_signature(jit.signature, jit.params, backend)
bound, specialization, options = binder(*descs, f32, f32, rows, rows, 128, 128, 128, 128, 8, 4096, 0.088, **kwargs)
options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
compiled = triton.compile(GluonASTSource(jit, signature, constexprs, attrs), target=target, options=options.__dict__)
print(json.dumps({stage: compiled.asm[stage] for stage in ("ttgir", "ptx")}))
"""


def test_gluon_backward_adds_dq_by_a_warp_of_its_own():
    """The notebook's prose about the backward, compiled for sm_90a: two consumer groups of 4 warps, a producer warp
    and a writer warp (240 registers a consumer thread, 24 the others'), asynchronous wgmma with a wait that leaves
    products in flight, and dQ added into global memory by TMA reduces."""
    asm = _compile_gluon_for_h100(causal=True, head_dim=128, script=_COMPILE_GLUON_BACKWARD)
    ttgir, ptx = asm["ttgir"], asm["ptx"]
    assert re.search(r"ttg\.warp_specialize\(.*requestedRegisters = array<i32: 240, 24, 24>", ttgir), \
        "not the partitions asked"
    assert re.findall(r"\bnum_warps\((\d+)\) \{", ttgir) == ["4", "1", "1"], "the workers are not 4 warps, 1 and 1"
    assert re.search(r"\.reqntid 384\b", ptx), "not 12 warps (384 threads) a program"
    assert {24, 240} <= {int(n) for n in re.findall(r"setmaxnreg[.\w]*\s+(\d+)", ptx)}
    assert "wgmma.mma_async" in ptx
    assert re.search(r"wgmma\.wait_group\.sync\.aligned 1;", ptx), "no wait leaves a product in flight"
    assert re.search(r"cp\.reduce\.async\.bulk\.tensor\.2d\.global\.shared::cta\.add\b", ptx), \
        "dQ is not added by a TMA reduce"


"""Phase 7's diagnosis of fp16 accumulators in an fp32 test. The check named them only when every error stayed
under 64 tolerances ("close but not within the rounding of an fp32 computation"); dK and dV of a few units carry
fp16 rounding past that on some seeds, and then the learner got the generic "compare with the formulas" hint
(tests/submissions/07_attention_backward/wrong_fp16_accumulators.py failed its verdict on seed 1061025916). Now a
gradient whose every value fp16 represents exactly is named whatever the size of its error.

Fast: a few small launches on the interpreter.
"""
import pytest
import torch

from attention_backward_cases import DKDV, DQ, kernels_module
from tritoncourse.checking import KernelCheckError
from tritoncourse.checks import attention_backward as ab
from tritoncourse.checks.attention_backward.kernels import _fp16_values
from tritoncourse.device import infer_device

WORDS = "keep the accumulators in fp32"
FP16_ACCUMULATORS = [
    ("dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)", "dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float16)"),
    ("dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)", "dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float16)"),
    ("dv = tl.dot(p_t.to(do.dtype), do, dv)", "dv += tl.dot(p_t.to(do.dtype), do).to(tl.float16)"),
    ("dk = tl.dot(ds_t.to(q.dtype), q, dk)", "dk += tl.dot(ds_t.to(q.dtype), q).to(tl.float16)"),
]
# Before the fix each of these seeds got the generic hint (seen; so did seeds 4 to 6): the old "close" rule named it
# only on a seed whose errors stayed small.
SEEDS = (1061025916, 2, 3)


@pytest.fixture(scope="module")
def fp16_module(tmp_path_factory):
    return kernels_module(tmp_path_factory.mktemp("fp16acc"), FP16_ACCUMULATORS)


@pytest.mark.parametrize("seed", SEEDS)
def test_fp16_accumulators_are_named_on_every_seed(fp16_module, seed):
    """The notebook's first dK/dV case (fp32, whole tiles): the cause names fp16 accumulators. On a GPU that case is
    judged at tf32's tolerance, which fp16 accumulation over two tiles stays within (H200, 2026-11-28): there the
    notebook's case with dO past fp16's range catches it (the accumulator overflows), with the same words."""
    gpu = infer_device() == "cuda"
    with pytest.raises(KernelCheckError) as err:
        ab.check_attention_bwd_dkdv(fp16_module.triton_attention_bwd_dkdv_kernel, batch=1, heads=2, seq_len=64,
                                    head_dim=16, block_m=16, block_n=32, seed=seed, fence=False,
                                    **(dict(data="huge_do") if gpu else {}))
    cause = str(err.value).split("Likely cause:")[-1]
    assert WORDS in cause and ("past fp16's range" if gpu else "fp16 can hold") in cause, str(err.value)


def test_a_right_kernels_fp32_gradients_are_never_all_fp16_values():
    """The fp64 reference rounded to fp32 (what a right kernel stores, to its rounding) on every fp32 case of the
    notebook: never every value representable in fp16, so the cause cannot be told to a right kernel."""
    for kind, cases in (("dkdv", DKDV), ("dq", DQ)):
        for _, kw in cases:
            if kw.get("dtype", torch.float32) != torch.float32:
                continue
            scale = kw.get("sm_scale") or kw["head_dim"] ** -0.5
            q, k, v, do = ab.make_inputs(kw["batch"], kw["heads"], kw["seq_len"], kw["head_dim"], torch.float32,
                                         kw.get("data", "randn"), 7)
            *_, dq, dk, dv = ab.backward_ref(q, k, v, do, kw.get("causal", False), scale)
            for g in ((dk, dv) if kind == "dkdv" else (dq,)):
                assert not _fp16_values(g.float().double()), (kind, kw)


def test_fp16_values_need_a_nonzero_finite_result():
    assert _fp16_values(torch.tensor([0.5, 1.0, -2.0], dtype=torch.float64))
    assert not _fp16_values(torch.zeros(4, dtype=torch.float64))
    assert not _fp16_values(torch.tensor([0.5, float("nan")], dtype=torch.float64))
    assert not _fp16_values(torch.tensor([0.1, 0.5], dtype=torch.float32).double())

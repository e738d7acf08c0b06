"""Phase 7's diagnosis of scores left unscaled before the exponential (P = exp(Q Kᵀ - LSE): the kernel multiplies
the scores by log2(e) for exp2 but forgets sm_scale). Before this replay the check failed such a kernel with the
generic "compare with the formulas" hint (tests/submissions/07_attention_backward/wrong_scores_without_sm_scale.py).

Fast: fp64 replays, and two small launches on the interpreter.
"""
import pytest
import torch

from attention_backward_cases import DKDV, DQ, SEEDS, case, kernels_module
from tritoncourse.checking import KernelCheckError
from tritoncourse.checks import attention_backward as ab
from tritoncourse.checks.attention_backward.inputs import max_score

WORDS = "the scores are not multiplied by sm_scale before the exponential"
CASES = [("dkdv", g, kw) for g, kw in DKDV] + [("dq", g, kw) for g, kw in DQ]


def _names(kind, kw):
    return ("dK", "dV") + (("dQ",) if kw.get("atomic_dq") else ()) if kind == "dkdv" else ("dQ",)


@pytest.mark.parametrize("kind,gid,kw", CASES, ids=[f"{k}-{g}-{i}" for i, (k, g, _) in enumerate(CASES)])
def test_unscaled_scores_fail_every_case_of_the_notebook(kind, gid, kw):
    """On every tested case and seed the replay moves at least one checked gradient past its tolerance."""
    names = _names(kind, kw)
    for seed in SEEDS:
        inputs, refs, causal, scale, dtype = case(kw, seed)
        top = max_score(inputs[0], inputs[1], causal, scale)
        device = "cpu" if dtype == torch.float32 else "cuda"
        tols = {n: ab.gradient_tolerance(dtype, device, refs[n], top)[:2] for n in names}
        dq, dk, dv = ab.replay(*inputs, causal, scale, kw["block_m"], kw["block_n"], scaled_scores=False)
        wrong = {n: g.to(dtype).double() for n, g in dict(dQ=dq, dK=dk, dV=dv).items()}
        assert not all(torch.allclose(wrong[n], refs[n], atol=tols[n][0], rtol=tols[n][1]) for n in names), \
            (gid, kw, seed)


@pytest.mark.parametrize("kind", ["dkdv", "dq"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_diagnosis_names_unscaled_scores(kind, causal):
    """fp32 (in fp16 the unscaled probabilities overflow: the gradients hold inf, which nan_cause names instead)."""
    dtype = torch.float32
    kw = dict(batch=1, heads=2, seq_len=50, head_dim=16, block_m=16, block_n=32, causal=causal, dtype=dtype)
    inputs, refs, causal, scale, _ = case(kw, seed=3)
    dq, dk, dv = ab.replay(*inputs, causal, scale, 16, 32, scaled_scores=False)
    names = _names(kind, kw)
    got = {n: g.to(dtype) for n, g in dict(dQ=dq, dK=dk, dV=dv).items() if n in names}
    top = max_score(inputs[0], inputs[1], causal, scale)
    tols = {n: ab.gradient_tolerance(dtype, "cpu", refs[n], top)[:2] for n in names}
    named = ab.diagnose(got, tols, refs, inputs, causal, scale, 16, 32, kind)
    assert named and WORDS in named, named


def test_the_other_replays_keep_their_own_names():
    """The new replay comes after the LSE ones: a kernel with no LSE, or a natural LSE on log2 scores, is still
    named as before, not as unscaled scores."""
    kw = dict(batch=1, heads=2, seq_len=50, head_dim=16, block_m=16, block_n=32)
    inputs, refs, causal, scale, _ = case(kw, seed=5)
    for mistake, words in ((dict(use_lse=False), "without subtracting the forward's LSE"),
                           (dict(lse_factor=0.6931471805599453), "the natural LSE is subtracted as it is")):
        dq, dk, dv = ab.replay(*inputs, causal, scale, 16, 32, **mistake)
        got = dict(dK=dk.float(), dV=dv.float())
        tols = {n: ab.gradient_tolerance(torch.float32, "cpu", refs[n])[:2] for n in got}
        named = ab.diagnose(got, tols, refs, inputs, causal, scale, 16, 32, "dkdv")
        assert named and words in named, (mistake, named)


@pytest.mark.parametrize("kind,subs", [
    ("dkdv", [("s_t = tl.dot(k, tl.trans(q)) * qk_scale", "s_t = tl.dot(k, tl.trans(q)) * 1.4426950408889634")]),
    ("dq", [("s = tl.dot(q, tl.trans(k)) * qk_scale", "s = tl.dot(q, tl.trans(k)) * 1.4426950408889634")]),
])
def test_a_kernel_whose_scores_miss_sm_scale_fails_with_its_cause_named(tmp_path, kind, subs):
    module = kernels_module(tmp_path, subs)
    args = dict(batch=1, heads=2, seq_len=40, head_dim=16, block_m=16, block_n=16, seed=4, fence=False)
    check = ab.check_attention_bwd_dkdv if kind == "dkdv" else ab.check_attention_bwd_dq
    kernel = getattr(module, f"triton_attention_bwd_{kind}_kernel")
    with pytest.raises(KernelCheckError) as err:
        check(kernel, **args)
    assert WORDS in str(err.value).split("Likely cause:")[-1], str(err.value)

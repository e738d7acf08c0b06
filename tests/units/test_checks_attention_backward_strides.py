"""Phase 7's causes for a tensor addressed with another's strides (tests/submissions/07_attention_backward/
wrong_dkdv_do_uses_q_strides.py: dO read with Q's strides, as a caller's dO is rarely laid out as Q).

- Where the misread lands on the NaN guards and every tile is whole (a hidden case of test_attention_bwd_dkdv_causal,
  seq_len 96, tiles 16 and 32), the message said "Mask the loads of rows >= seq_len" first, though no row past seq_len
  is read then: now the strides come first and alone.
- Where it lands on numbers (test_attention_bwd_atomic_dq, _fp16, _strides), the learner got the generic hint: now
  the gradients are replayed from what the kernel read (strides.py) and the tensor and the strides it took are named.

Fast: a few small launches on the interpreter, and the message helpers.
"""
import pytest

from attention_backward_cases import kernels_module
from tritoncourse.checking import KernelCheckError
from tritoncourse.checks import attention_backward as ab
from tritoncourse.checks.attention_backward.diagnosis import nan_cause

STRIDES = "a tensor is addressed with another's strides"
DO_WITH_Q_STRIDES = [("do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_dom\n"
                      "                     + offs_d[None, :] * stride_dod,",
                      "do = tl.load(do_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm\n"
                      "                     + offs_d[None, :] * stride_qd,")]


def test_whole_tiles_in_mixed_layouts_blame_the_strides_alone():
    cause = nan_cause("dK", "randn", 96, 32, mixed=True, other_block=16)
    assert STRIDES in cause and "Mask the loads" not in cause, cause


@pytest.mark.parametrize("S,block,other", [(50, 32, 16), (80, 16, 32)])
def test_a_ragged_tile_still_names_the_masks_first(S, block, other):
    """A tile that is not whole, either the programs' or the loop's: an unmasked load is possible, named first."""
    cause = nan_cause("dK", "randn", S, block, mixed=True, other_block=other)
    assert cause.index("Mask the loads") < cause.index("another's strides"), cause


def test_one_layout_names_the_masks_only():
    cause = nan_cause("dQ", "randn", 64, 32, mixed=False, other_block=16)
    assert "Mask the loads" in cause and "strides" not in cause, cause


def test_a_kernel_reading_do_with_qs_strides_is_told_the_strides(tmp_path):
    module = kernels_module(tmp_path, DO_WITH_Q_STRIDES)
    with pytest.raises(KernelCheckError) as err:
        ab.check_attention_bwd_dkdv(module.triton_attention_bwd_dkdv_kernel, batch=1, heads=2, seq_len=96,
                                    head_dim=16, block_m=16, block_n=32, causal=True, layout="mixed_2", fence=False,
                                    seed=1126556944)
    cause = str(err.value).split("Likely cause:")[-1]
    assert STRIDES in cause and "Mask the loads" not in cause, str(err.value)


# ---- an input read with another tensor's strides, landing on numbers: replayed (strides.py) ------------------------
K_WITH_V_STRIDES = [("k = tl.load(k_ptr + b * stride_kb + h * stride_kh + cols[:, None] * stride_kn + "
                     "offs_d[None, :] * stride_kd,",
                     "k = tl.load(k_ptr + b * stride_vb + h * stride_vh + cols[:, None] * stride_vn + "
                     "offs_d[None, :] * stride_vd,")]


@pytest.mark.parametrize("kind,subs,kw,words", [
    ("dkdv", DO_WITH_Q_STRIDES, dict(batch=2, heads=2, seq_len=48, block_m=16, block_n=16, layout="mixed"),
     "dO is addressed with Q's strides"),
    ("dkdv", DO_WITH_Q_STRIDES, dict(batch=1, heads=2, seq_len=50, block_m=16, block_n=32, causal=True,
                                     atomic_dq=True, layout="mixed"), "dO is addressed with Q's strides"),
    ("dq", K_WITH_V_STRIDES, dict(batch=2, heads=2, seq_len=48, block_m=16, block_n=16, layout="mixed"),
     "K is addressed with V's strides"),
], ids=["dO-Q-whole", "dO-Q-causal-ragged-atomic", "K-V-dq"])
def test_an_input_read_with_anothers_strides_is_named(tmp_path, kind, subs, kw, words):
    """The tests whose misread lands inside the tensor's own buffer (numbers, not NaN): the gradients replayed from
    what the kernel read name the tensor and the strides it took; before, the generic hint."""
    module = kernels_module(tmp_path, subs)
    check = ab.check_attention_bwd_dkdv if kind == "dkdv" else ab.check_attention_bwd_dq
    with pytest.raises(KernelCheckError) as err:
        check(getattr(module, f"triton_attention_bwd_{kind}_kernel"), head_dim=16, fence=False, seed=1, **kw)
    assert words in str(err.value).split("Likely cause:")[-1], str(err.value)


def test_the_right_gradients_match_no_misread():
    """No false cause: the reference's gradients on every layout preset match no input read with another's strides."""
    import torch

    from tritoncourse.checks.attention_backward.inputs import layouts_of, place_tensors
    from tritoncourse.checks.attention_backward.strides import stride_cause

    for layout in ("mixed", "mixed_2", "padded"):
        q, k, v, do = ab.make_inputs(1, 2, 48, 16, torch.float32, "randn", 5)
        o, lse, d, dq, dk, dv = ab.backward_ref(q, k, v, do, True, 0.25)
        lays = layouts_of(layout)
        placed = place_tensors({"Q": q, "K": k, "V": v, "dO": do}, lays, 24, "cpu")
        refs = dict(dQ=dq, dK=dk, dV=dv)
        tols = {n: ab.gradient_tolerance(torch.float32, "cpu", r)[:2] for n, r in refs.items()}
        assert stride_cause(refs, tols, refs, placed, lays, lse, d, True, 0.25) is None, layout

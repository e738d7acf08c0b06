"""Phase 7's cause for NaN read from the guards when every tile is whole: a kernel reading dO with Q's strides failed
a hidden case of test_attention_bwd_dkdv_causal (seq_len 96, tiles of 16 and 32, every tensor in a layout of its own)
with "Mask the loads of rows >= seq_len" first and the strides second, though with whole tiles no row past seq_len is
read (tests/submissions/07_attention_backward/wrong_dkdv_do_uses_q_strides.py). Now the strides come first and alone.

Fast: one small launch on the interpreter, and the message helper.
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

"""Phase 7's messages on a hidden case name none of its inputs (issue 42's rule, tests/units/test_hidden_messages.py's
harness): a backward kernel with one mistake, run on the same case as a visible and as a hidden case of a judge's
test cell. The hidden message keeps the kind of case and the cause, and holds no size, tile, seed or value.
"""
from __future__ import annotations

import pytest

from attention_backward_cases import kernels_module
from test_hidden_messages import _absent, judged  # noqa: F401  (judged: the fixture)
from tritoncourse.checks import attention_backward as ab

SEED = 4243
CASES = {
    "dQ scaled by log2(e)": ([("(dq * sm_scale)", "(dq * qk_scale)")], "dq", {},
                             "dQ is off by a constant factor: the gradient is multiplied by sm_scale · log2(e)"),
    "dQ store unmasked": ([("(dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=rows)",
                            "(dq * sm_scale).to(dq_ptr.dtype.element_ty))")], "dq", {},
                          "Elements outside dQ were written"),
    "dK, dV per query tile": ([("dk = tl.dot(ds_t.to(q.dtype), q, dk)", "dk = tl.dot(ds_t.to(q.dtype), q)"),
                               ("dv = tl.dot(p_t.to(do.dtype), do, dv)", "dv = tl.dot(p_t.to(do.dtype), do)")], "dkdv",
                              dict(causal=True), "the last query tile's part only"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_hidden_case_names_the_cause_and_no_input(judged, tmp_path, name):  # noqa: F811
    subs, kind, kw, cause = CASES[name]
    module = kernels_module(tmp_path, subs)
    args = dict(batch=1, heads=3, seq_len=77, head_dim=16, block_m=32, block_n=16, layout="mixed", seed=SEED,
                fence=False, **kw)
    check = ((lambda: ab.check_attention_bwd_dq(module.triton_attention_bwd_dq_kernel, **args)) if kind == "dq" else
             (lambda: ab.check_attention_bwd_dkdv(module.triton_attention_bwd_dkdv_kernel, **args)))
    visible, hidden = judged(check)
    assert "seq_len=77" in visible and f"seed {SEED}" in visible, visible
    assert "a hidden case: a seq_len that is not a multiple of" in hidden and cause in hidden, hidden
    _absent(hidden, 77, 3, 32, SEED)

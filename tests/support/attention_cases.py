"""Phase 6's notebook cases and the fp64 replays' set-up that the attention check tests share
(tests/units/test_checks_attention.py, tests/units/test_checks_attention_notebook.py)."""
import torch

from course import ROOT, notebook_calls
from tritoncourse.checks import fused_attention as fa

NOTEBOOK = ROOT / "source" / "06_fused_attention" / "06_fused_attention.ipynb"
SEEDS = range(1, 9)


ATTENTION = notebook_calls(NOTEBOOK, "check_attention")
LAYER_NORM = notebook_calls(NOTEBOOK, "check_layer_norm")


def _setup(kw, seed):
    dtype = kw.get("dtype", torch.float32)
    q, k, v = fa.make_qkv(kw["batch"], kw["heads"], kw["seq_len"], kw["head_dim"], dtype, kw.get("data", "randn"), seed)
    scale = kw.get("sm_scale") or kw["head_dim"] ** -0.5
    causal = kw.get("causal", False)
    ref_o, ref_lse = fa.attention_ref(q, k, v, causal, scale)
    max_score = float(ref_lse.abs().max()) + torch.log(torch.tensor(float(kw["seq_len"]))).item()
    atol, rtol, _ = fa.attention_tolerance(dtype, "cpu", max_score, float(v.abs().max()))
    return q, k, v, scale, causal, ref_o, atol, rtol


def _caught(out, ref, atol, rtol, dtype):
    out = out.to(dtype).double()
    return not bool(torch.allclose(out, ref, atol=atol, rtol=rtol, equal_nan=False))

"""Phase 7's notebook cases, its solution kernels loaded from the source notebook (whole, or with one mistake
written in), for the checks' own tests (tests/units/test_checks_attention_backward*.py)."""
import importlib.util
import itertools

import nbformat
import torch

from course import ROOT, notebook_calls
from tritoncourse.checks import attention_backward as ab

NOTEBOOK = ROOT / "source" / "07_attention_backward" / "07_attention_backward.ipynb"
SEEDS = range(1, 5)
KERNEL_CELLS = ("attention_forward", "attention_bwd_preprocess_kernel", "attention_bwd_dkdv_kernel",
                "attention_bwd_dq_kernel")
DKDV = notebook_calls(NOTEBOOK, "check_attention_bwd_dkdv")
DQ = notebook_calls(NOTEBOOK, "check_attention_bwd_dq")
PREPROCESS = notebook_calls(NOTEBOOK, "check_attention_bwd_preprocess")
_count = itertools.count()


def case(kw: dict, seed: int):
    """A notebook call's inputs (Q, K, V, dO, O, LSE), its fp64 gradients, causal, sm_scale and dtype."""
    dtype = kw.get("dtype", torch.float32)
    scale = kw.get("sm_scale") or kw["head_dim"] ** -0.5
    causal = kw.get("causal", False)
    q, k, v, do = ab.make_inputs(kw["batch"], kw["heads"], kw["seq_len"], kw["head_dim"], dtype,
                                 kw.get("data", "randn"), seed)
    o, lse, d, dq, dk, dv = ab.backward_ref(q, k, v, do, causal, scale)
    return (q, k, v, do, o, lse), dict(dQ=dq, dK=dk, dV=dv), causal, scale, dtype


def _cell(grade_id: str) -> str:
    cell = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    return cell.source


def kernels_module(tmp_path, subs=()):
    """The notebook's kernels (the given forward and the three solutions) as a module written to ``tmp_path``, each
    (old, new) of ``subs`` replaced once (it must be there): a known mistake in a real kernel."""
    forward = _cell("attention_forward").split("\n\ndef attention_forward")[0]
    text = "import torch\nimport triton\nimport triton.language as tl\n\n\n" + "\n\n\n".join(
        [forward] + [_cell(g) for g in KERNEL_CELLS[1:]])
    for old, new in subs:
        assert text.count(old) >= 1, f"{old!r} is not in the notebook's kernels"
        text = text.replace(old, new)
    name = f"p7_kernels_{next(_count)}"
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""tritoncourse.bounds: in the learner's notebook on the CPU, a stray load or store names itself instead of writing
through the interpreter's raw pointers (which corrupted the notebook's heap: "double free or corruption" within 50
launches of phase 1's wrong_no_mask on 9843 elements, six runs of six, 2026-11-28). Correct kernels of every kind
the course uses (masks, strided views, block pointers, atomics) run as before and compute the same.

One subprocess per test run: the check patches Triton's interpreter for the whole process, and the units beside
this one run fenced tensors whose fences must stay writable (the graders' processes never turn it on)."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import DEVICE

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the interpreter's bounds: CPU only")

SUBMISSIONS = Path(__file__).resolve().parent.parent / "submissions" / "01_vector_add"

SCRIPT = textwrap.dedent("""
    import json, sys
    from IPython.core.interactiveshell import InteractiveShell
    InteractiveShell.instance()  # a notebook's kernel, as far as setup_notebook can tell
    import tritoncourse
    tritoncourse.setup_notebook()
    import torch, triton, triton.language as tl

    def launch(kernel, n=9843, block=1024):
        x, y = torch.randn(n), torch.randn(n)
        out = torch.zeros(n)
        try:
            kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK_SIZE=block)
        except Exception as e:
            return {"error": str(e)}
        return {"equal": torch.equal(out, x + y)}

    results = {}
    for name in sys.argv[1:]:
        scope = {"triton": triton, "tl": tl}
        exec(compile(open(name).read(), name, "exec"), scope)
        results[name.rsplit("/", 1)[-1]] = [launch(scope["triton_vector_add_kernel"]) for _ in range(60)]

    @triton.jit
    def before_start(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE) - 3  # shifted back by three
        mask = offsets < n_elements
        tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                 mask=mask)
    results["before_start"] = [launch(before_start)]

    @triton.jit
    def strided_sum(x_ptr, out_ptr, rows, cols, stride_r, stride_c, BLOCK: tl.constexpr):
        r = tl.program_id(0)
        c = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + r * stride_r + c * stride_c, mask=c < cols, other=0.0)
        tl.atomic_add(out_ptr + r % 4, tl.sum(x))  # four accumulators shared by the rows: atomics in bounds

    @triton.jit
    def block_copy(x_ptr, out_ptr, rows, cols, stride_r, stride_c, BR: tl.constexpr, BC: tl.constexpr):
        src = tl.make_block_ptr(x_ptr, (rows, cols), (stride_r, stride_c), (tl.program_id(0) * BR, 0), (BR, BC), (1, 0))
        dst = tl.make_block_ptr(out_ptr, (rows, cols), (cols, 1), (tl.program_id(0) * BR, 0), (BR, BC), (1, 0))
        tl.store(dst, tl.load(src, boundary_check=(0, 1), padding_option="zero"), boundary_check=(0, 1))

    base = torch.randn(40, 90)
    view = base.t()[5:70:2, 3:37]  # strided, offset, neither row nor column contiguous
    sums = torch.zeros(4)
    strided_sum[(view.shape[0],)](view, sums, view.shape[0], view.shape[1], view.stride(0), view.stride(1), BLOCK=64)
    expect = torch.zeros(4).index_add_(0, torch.arange(view.shape[0]) % 4, view.sum(1))
    copy = torch.empty(view.shape)
    block_copy[(triton.cdiv(view.shape[0], 16),)](view, copy, view.shape[0], view.shape[1], view.stride(0),
                                                   view.stride(1), BR=16, BC=64)
    results["correct_kinds"] = {"atomics": torch.allclose(sums, expect, atol=1e-4), "block": torch.equal(copy, view)}
    print(json.dumps(results))
""")


def test_stray_accesses_are_named_and_correct_kernels_run_as_before():
    fixtures = [str(SUBMISSIONS / f) for f in ("wrong_no_mask.py", "wrong_unmasked_store.py", "correct_other_zero.py")]
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *fixtures], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"the notebook's process died (the heap corrupted?): {proc.stderr[-3000:]}"
    results = json.loads(proc.stdout.strip().splitlines()[-1])

    for name, operation, tensor in (("wrong_no_mask.py", "tl.load", "x_ptr"),
                                    ("wrong_unmasked_store.py", "tl.store", "output_ptr")):
        errors = {r.get("error") for r in results[name]}
        assert len(errors) == 1 and None not in errors, (name, errors)  # every launch refused, the same way
        message = errors.pop()
        assert f"{operation} in kernel `triton_vector_add_kernel`" in message, message
        assert f"1 element past the end of `{tensor}` (which spans 9843 elements)" in message, message
        assert "mask" in message, message
    assert results["correct_other_zero.py"] == [{"equal": True}] * 60, results["correct_other_zero.py"]
    message = results["before_start"][0]["error"]
    assert "tl.load in kernel `before_start`" in message and "3 elements before the start of `x_ptr`" in message, message
    assert results["correct_kinds"] == {"atomics": True, "block": True}, results["correct_kinds"]

"""Phase 3's check module: is the tolerance tight, are the layouts what they claim, are causes named right?

Fast: torch only, except two small kernel launches on the interpreter (or the GPU).
"""
import importlib.util
from collections import defaultdict

import nbformat
import pytest
import torch

from course import ROOT, notebook_calls
from tritoncourse.checking import KernelCheckError
from tritoncourse.checks import matmul_relu as mr
from tritoncourse.grading.processes.isolated import KERNEL_HEADER
from tritoncourse.grading.lint.source import kernels_from_notebook

NOTEBOOK = ROOT / "source" / "03_matmul_relu" / "03_matmul_relu.ipynb"


CASES = notebook_calls(NOTEBOOK, "check_matmul_relu")
SEEDS = range(1, 11)


def _inputs(kw, seed):
    return mr.make_inputs(kw["M"], kw["N"], kw["K"], seed, kw.get("pattern", "random"), kw.get("block_k", 32))


def test_the_notebook_has_cases():
    assert len({gid for gid, _ in CASES}) >= 8 and len(CASES) >= 20


@pytest.mark.parametrize("gid,kw", CASES, ids=[f"{g}-{i}" for i, (g, _) in enumerate(CASES)])
def test_tolerance_catches_one_dropped_k_element(gid, kw):
    """Dropping a single product index (the last one: K = BLOCK_K + 1 with the tail dropped; the first;
    one in the middle) must fail on every tested shape, for every seed."""
    K = kw["K"]
    for seed in SEEDS:
        a, b = _inputs(kw, seed)
        expected = mr.matmul_relu_ref(a, b)
        for k_drop in sorted({K - 1, 0, K // 2}):
            assert mr.tolerance_catches(mr.dropped_k_output(a, b, k_drop), expected), (gid, kw, seed, k_drop)


@pytest.mark.parametrize("gid,kw", CASES, ids=[f"{g}-{i}" for i, (g, _) in enumerate(CASES)])
def test_tolerance_accepts_one_fp16_rounding(gid, kw):
    """A right kernel rounds the fp32 result to fp16 once; up to 1e-5 of accumulation-order noise on top."""
    for seed in SEEDS:
        a, b = _inputs(kw, seed)
        expected = mr.matmul_relu_ref(a, b)
        noisy = torch.relu(a.double() @ b.double() * (1 + 1e-6) + 1e-5).to(torch.float16)
        assert not mr.tolerance_catches(expected.to(torch.float16), expected)
        assert not mr.tolerance_catches(noisy, expected), (gid, kw, seed)


def _fp16_accumulated(a, b, block_k):
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
    for k in range(0, a.shape[1], block_k):
        acc = (acc.float() + a[:, k:k + block_k].float() @ b[k:k + block_k].float()).to(torch.float16)
    return torch.relu(acc)


def test_fp16_accumulator_fails_every_test_with_several_k_steps():
    """An fp16 accumulator (rounded after every K step) is caught by each test cell that has a case with
    more than one K step, for every seed."""
    by_test = defaultdict(list)
    for gid, kw in CASES:
        if kw["K"] > kw.get("block_k", 32):
            by_test[gid].append(kw)
    assert len(by_test) >= 8
    for gid, kws in by_test.items():
        for seed in SEEDS:
            caught = False
            for kw in kws:
                a, b = _inputs(kw, seed)
                out = _fp16_accumulated(a, b, kw.get("block_k", 32))
                caught |= mr.tolerance_catches(out, mr.matmul_relu_ref(a, b))
            assert caught, (gid, seed)


def test_patterns_have_negative_outputs_and_sign_changes():
    a, b = mr.make_inputs(64, 64, 64, 1)
    assert 0.3 < float((a.float() @ b.float() < 0).float().mean()) < 0.7
    a, b = mr.make_inputs(48, 32, 48, 1, "mostly_negative")
    assert float((a.float() @ b.float() < 0).float().mean()) > 0.8
    a, b = mr.make_inputs(32, 32, 64, 1, "sign_change", block_k=16)
    first = a.float()[:, :16] @ b.float()[:16]
    full = a.float() @ b.float()
    assert (first < 0).all()
    assert 0.2 < float((full > 0).float().mean()) < 0.8
    assert not torch.allclose(mr._relu_in_loop(a, b, 16), torch.relu(full))


@pytest.mark.parametrize("layout,strides", [("contiguous", (48, 1)), ("padded", (48 + 2 * 64, 1)),
                                            ("transposed", (1, 40 + 2 * 64))])
def test_layouts_hold_the_values_inside_nan_guards(layout, strides):
    t = torch.randn(40, 48).to(torch.float16)
    view, guard = mr._place(t, layout, 64, "cpu")
    assert torch.equal(view, t)
    assert view.stride() == strides
    assert guard.guard_changes() == 0 and torch.isnan(guard.buffer).sum() == guard.buffer.numel() - t.numel()


def test_output_starts_unwritten_inside_its_guard():
    c, g = mr._place_output(20, 30, "transposed", 64, "cpu")
    assert c.shape == (20, 30) and c.stride() == (1, 20 + 2 * 64)
    assert bool((c == mr.UNWRITTEN).all()) and g.guard_changes() == 0


class TestDiagnose:
    M, N, K, BM, BN, BK = 40, 64, 40, 16, 16, 16  # a 3 x 4 grid; K = 40 leaves a tail of 8

    def setup_method(self):
        self.a, self.b = mr.make_inputs(self.M, self.N, self.K, 7)
        self.lin = self.a.float() @ self.b.float()

    def said(self, out):
        return mr.diagnose(out.to(torch.float16), self.a, self.b, self.BM, self.BN, self.BK)

    def test_missing_and_inverted_relu(self):
        assert "ReLU is missing" in self.said(self.lin)
        assert "inverted" in self.said(torch.clamp(self.lin, max=0))
        assert "negated" in self.said(torch.relu(-self.lin))

    def test_relu_in_loop(self):
        assert "inside the K loop" in self.said(mr._relu_in_loop(self.a, self.b, self.BK))

    def test_k_tail_dropped_and_loop_stopping_early(self):
        assert "K tail was dropped" in self.said(torch.relu(mr._linear(self.a, self.b, 32)))
        a, b = mr.make_inputs(40, 48, 48, 7)
        out = torch.relu(mr._linear(a, b, 32)).to(torch.float16)
        assert "stops one tile early" in mr.diagnose(out, a, b, 16, 16, 16)

    def test_unwritten_tiles_and_swapped_ids(self):
        out = torch.relu(self.lin)
        swapped = mr._swapped_ids_unwritten(self.M, self.N, self.BM, self.BN)
        assert swapped.any()
        assert "program ids look swapped" in self.said(torch.where(swapped, mr.UNWRITTEN, out))
        assert "nothing was written" in self.said(torch.full_like(out, mr.UNWRITTEN))
        partial = out.clone()
        partial[3, 5] = mr.UNWRITTEN
        assert "never written, the first at row 3, column 5" in self.said(partial)

    @pytest.mark.parametrize("group", [1, 2, 8])
    def test_a_kernel_written_for_a_1d_grid_is_named(self, group):
        """Triton's tutorial maps tl.program_id(0) alone to a tile (row-major, or grouped by GROUP_SIZE_M row tiles);
        under the course's 2-D grid only the first cdiv(M, BLOCK_M) tiles of that order are written."""
        out = torch.relu(self.lin)
        unwritten = mr._one_d_mapping_unwritten(self.M, self.N, self.BM, self.BN, group)
        assert unwritten.any() and not torch.equal(unwritten, mr._swapped_ids_unwritten(self.M, self.N, self.BM,
                                                                                          self.BN))
        said = self.said(torch.where(unwritten, mr.UNWRITTEN, out))
        assert "written for a 1-D grid" in said and "program_id(1) is never read" in said, said
        assert ("row-major" in said) == (group == 1) and "swapped" not in said

    def test_nan_from_the_k_tail(self):
        out = torch.relu(self.lin)
        out[-1] = float("nan")
        assert "read past K" in self.said(out)

    def test_fp16_accumulator(self):
        assert "accumulate in fp32" in self.said(_fp16_accumulated(self.a, self.b, 4))


def _kernel(source: str, tmp_path, name="k"):
    path = tmp_path / f"{name}.py"
    path.write_text(KERNEL_HEADER + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.triton_matmul_relu_kernel


def test_reference_passes_and_a_missing_relu_is_named(tmp_path):
    """The notebook's own kernel passes a ragged, strided case; without its ReLU it fails with the cause."""
    kernels, _ = kernels_from_notebook(nbformat.read(NOTEBOOK, as_version=4))
    source = kernels["triton_matmul_relu_kernel"].source
    kw = dict(M=40, N=24, K=33, block_m=16, block_n=16, block_k=32, layout_a="transposed", layout_c="padded")
    mr.check_matmul_relu(_kernel(source, tmp_path, "ref"), **kw)
    broken = source.replace("tl.maximum(acc, 0.0)", "acc")
    assert broken != source
    with pytest.raises(KernelCheckError, match="ReLU is missing"):
        mr.check_matmul_relu(_kernel(broken, tmp_path, "norelu"), **kw)


@pytest.mark.parametrize("nan_becomes", [float("nan"), 0.0], ids=["interpreter", "gpu"])
def test_unmasked_k_tail_is_named_whether_relu_keeps_nan_or_not(nan_becomes):
    """On the interpreter NaN read from a guard reaches C; on a GPU tl.maximum(NaN, 0.0) turns it into 0.
    Both must be recognised as a K tail read past K (A only: its last row reads the guard)."""
    M, N, K, BK = 32, 32, 33, 32
    a, b = mr.make_inputs(M, N, K, 3)
    av, ga = mr._place(a, "contiguous", 64, "cpu")
    bv, gb = mr._place(b, "contiguous", 64, "cpu")
    c, _ = mr._place_output(M, N, "contiguous", 64, "cpu")
    out = torch.relu(a.float() @ b.float())
    out[-1] = nan_becomes  # A's unmasked tail: rows 0..30 read the next row (times B's masked 0), row 31 NaN
    said = mr.diagnose(out.half(), a, b, 16, 16, BK, (av, bv, c), ("contiguous",) * 3, (ga.buffer, gb.buffer))
    assert "loads of A in the last K step read past K" in said
    out[:] = nan_becomes  # both unmasked: B's rows past K are guard, every output is poisoned
    said = mr.diagnose(out.half(), a, b, 16, 16, BK, (av, bv, c), ("contiguous",) * 3, (ga.buffer, gb.buffer))
    assert "loads of A and B in the last K step read past K" in said

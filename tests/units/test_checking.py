"""The checking helpers: comparisons that explain, guard buffers that see stray stores, fences."""
import subprocess
import sys
import textwrap

import torch

from tritoncourse.checking import (OUTPUT_SENTINEL, Fenced, compare, fresh_seed, guarded_copy,
                                   guarded_empty)


def test_compare_reports_count_index_and_nan():
    """Does compare say how many differ, where, and that some are NaN?"""
    expected = torch.zeros(100)
    actual = expected.clone()
    actual[7] = 1.0
    actual[42] = float("nan")
    ok, msg = compare(actual, expected)
    assert not ok
    assert "2 of 100 elements differ" in msg
    assert "at index 7: expected 0, got 1" in msg
    assert "1 of them are NaN" in msg


def test_compare_accepts_equal_and_matching_nan_inf():
    """Equal values, NaN where the reference is NaN and matching infinities all count as equal."""
    t = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    ok, _ = compare(t.clone(), t)
    assert ok


def test_compare_shape_mismatch():
    ok, msg = compare(torch.zeros(3), torch.zeros(4))
    assert not ok and "shape" in msg


def test_output_guard_sees_stray_store_of_nan():
    """A stray store of NaN (read from an input's NaN guard) must still show in the output guard."""
    g = guarded_empty((10,), pad=4)
    assert g.guard_changes() == 0
    assert torch.isnan(g.view).all()
    g.buffer[4 + 10] = float("nan")
    assert g.guard_changes() == 1
    assert g.first_guard_change() == (10,)
    g.buffer[0] = OUTPUT_SENTINEL
    g.buffer[3] = 1.0
    assert g.first_guard_change() == (-1,)


def test_input_guard_is_nan_and_view_is_a_copy():
    x = torch.arange(5.0)
    g = guarded_copy(x, pad=3)
    assert torch.equal(g.view, x)
    assert torch.isnan(g.buffer[:3]).all() and torch.isnan(g.buffer[-3:]).all()


def test_two_dimensional_guard_gives_strided_rows():
    g = guarded_empty((3, 5), pad=2)
    assert g.view.stride() == (9, 1)
    g.buffer[2, 7] = 0.0  # just right of row 0
    assert g.first_guard_change() == (0, 5)


def test_fence_tensor_reads_and_faults_past_its_end():
    """Reading the element just past a fenced tensor kills the process (SIGSEGV), reading inside does not."""
    code = textwrap.dedent("""
        import ctypes, sys
        sys.path.insert(0, %r)
        import torch
        from tritoncourse.checking import Fenced
        f = Fenced(1000, torch.float32, side=sys.argv[1])
        f.tensor.fill_(2.0)
        assert float(f.tensor.sum()) == 2000.0
        step = 1 if sys.argv[1] == "end" else -1
        addr = f.tensor.data_ptr() + (4000 if step == 1 else -4)
        print(ctypes.c_float.from_address(addr).value)
    """) % str(__import__("pathlib").Path(__file__).resolve().parents[2])
    for side in ("end", "start"):
        proc = subprocess.run([sys.executable, "-c", code, side], capture_output=True)
        assert proc.returncode == -11, (side, proc.returncode, proc.stderr[-500:])


def test_fresh_seed_honours_env(monkeypatch):
    monkeypatch.setenv("TRITONCOURSE_SEED", "1234")
    assert fresh_seed() == 1234
    monkeypatch.delenv("TRITONCOURSE_SEED")
    seeds = {fresh_seed() for _ in range(20)}
    assert len(seeds) > 1 and all(1 <= s < 2**31 for s in seeds)

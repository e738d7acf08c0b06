"""What a learner is told when launching their kernel raises (tritoncourse/checks/common/launch.py): a failing
`tl.static_assert` on Triton's interpreter names the assertion and its line, in this process and through the
runner's channel (the judge sees only what the runner described)."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from conftest import DEVICE
from tritoncourse.checking import KernelCheckError
from tritoncourse.checks.common.launch import failed_static_assert, launch
from tritoncourse.grading.channel.wire import describe_error, make_error

pytestmark = pytest.mark.skipif(DEVICE == "cuda", reason="compiled, a failing static_assert is a CompilationError")


@triton.jit
def tile_copy_kernel(x_ptr, y_ptr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    tl.static_assert(BLOCK_N <= HEAD_DIM)  # stricter than a contract that allows BLOCK_N > HEAD_DIM
    offs = tl.arange(0, BLOCK_N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def _launch(block_n: int):
    x, y = torch.randn(64), torch.zeros(64)
    launch(tile_copy_kernel, (1,), (x, y), {"HEAD_DIM": 16, "BLOCK_N": block_n}, name="tile_copy_kernel",
           signature="tile_copy_kernel(x_ptr, y_ptr, HEAD_DIM, BLOCK_N)", context="a test", device=DEVICE)
    return x, y


def test_a_failing_static_assert_is_named_with_its_line():
    with pytest.raises(KernelCheckError) as caught:
        _launch(32)
    message = str(caught.value)
    assert "a `tl.static_assert` in your kernel failed" in message, message
    assert "`tl.static_assert(BLOCK_N <= HEAD_DIM)`" in message, message
    line = tile_copy_kernel.fn.__code__.co_firstlineno + 2
    assert f"line {line}:" in message, message
    assert "read the error above" not in message


def test_a_passing_static_assert_changes_nothing():
    x, y = _launch(16)
    assert torch.equal(y[:16], x[:16]) and not y[16:].any()


def test_the_assertion_is_named_from_what_the_runner_sends():
    """The judge gets the runner's description of the error (its learner-file frames only), not the traceback."""
    try:
        tile_copy_kernel[(1,)](torch.zeros(64), torch.zeros(64), HEAD_DIM=16, BLOCK_N=32)
    except Exception as err:  # InterpreterError, its cause the AssertionError
        remote = make_error(describe_error(err, {__file__}))
    else:
        pytest.fail("the kernel's static_assert did not fail")
    assert str(remote) == "AssertionError('')"  # all that the message says
    assert failed_static_assert(remote) == (f"line {tile_copy_kernel.fn.__code__.co_firstlineno + 2}: "
                                            "`tl.static_assert(BLOCK_N <= HEAD_DIM)`")
    unrelated = make_error(describe_error(ValueError("no assertion"), {__file__}))
    assert failed_static_assert(unrelated) is None

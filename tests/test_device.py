"""tritoncourse.device on the CPU: the interpreter computes what it computed before, without the overflow checks
it throws away (device.py's _skip_discarded_overflow_checks)."""
import subprocess
import sys
import textwrap

import pytest

from conftest import DEVICE

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the interpreter's options: CPU only")

SCRIPT = textwrap.dedent("""
    import os, sys
    if sys.argv[1] == "course":
        from tritoncourse.device import setup_device
        setup_device()
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    from triton.runtime.interpreter import interpreter_builder

    @triton.jit
    def wraps(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(out_ptr + offs, x * 65536 + x - 7, mask=offs < n)  # int32 products past 2**31

    x = torch.arange(-40000, 40000, 7, dtype=torch.int32)
    out = torch.empty_like(x)
    wraps[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    print(interpreter_builder.options.sanitize_overflow, out.sum().item(), out[:3].tolist(), out[-3:].tolist())
""")


def _run(mode: str, **env) -> str:
    import os

    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def test_the_interpreter_computes_the_same_without_the_discarded_overflow_checks():
    """Overflowing int32 products wrap the same way with the course's set-up as with Triton's defaults (whose
    overflow check device_assert drops outside debug mode); the course's set-up turns the check off."""
    plain, course = _run("plain"), _run("course")
    assert plain[0] == "True" and course[0] == "False", (plain, course)
    assert plain[1:] == course[1:], (plain, course)

"""tritoncourse.device on the CPU: the interpreter computes what it computed before, without the overflow checks
it throws away (device.py's _skip_discarded_overflow_checks) and with the builtins of triton.language listed once
instead of searched at every launch and helper call (_list_language_builtins_once)."""
import subprocess
import sys
import textwrap

import pytest

from conftest import DEVICE

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the interpreter's options: CPU only")

# Run with "course" (the course's set-up, tritoncourse.device.setup_device) or "plain" (Triton's interpreter as it is).
SET_UP = textwrap.dedent("""
    import os, sys
    if sys.argv[1] == "course":
        from tritoncourse.device import setup_device
        setup_device()
    else:
        os.environ["TRITON_INTERPRET"] = "1"
""")

SCRIPT = SET_UP + textwrap.dedent("""
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


def _run(mode: str, script: str = SCRIPT, fields: int = -1) -> list[str]:
    """The script's printed line, split in words (at most ``fields`` + 1 of them)."""
    proc = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split(maxsplit=fields)


def test_the_interpreter_computes_the_same_without_the_discarded_overflow_checks():
    """Overflowing int32 products wrap the same way with the course's set-up as with Triton's defaults (whose
    overflow check device_assert drops outside debug mode); the course's set-up turns the check off."""
    plain, course = _run("plain"), _run("course")
    assert plain[0] == "True" and course[0] == "False", (plain, course)
    assert plain[1:] == course[1:], (plain, course)


HELPER_SCRIPT = SET_UP + textwrap.dedent("""
    import inspect
    import torch, triton, triton.language as tl
    from triton.runtime import interpreter

    @triton.jit
    def scaled(x, s):  # a helper called in every program at every step
        return tl.exp(x * s) + tl.math.sqrt(tl.abs(x))

    @triton.jit
    def loops(x_ptr, out_ptr, n, STEPS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in range(STEPS):
            acc += scaled(x, 0.1 * i)
        tl.store(out_ptr + offs, acc, mask=offs < n)

    def builtins():
        return sorted(f"{k}.{name}" for k in (tl, tl.tensor, tl.math) for name, m in inspect.getmembers(k)
                      if tl.core.is_builtin(m))

    before = builtins()
    torch.manual_seed(0)
    x = torch.randn(1000)
    out = torch.empty_like(x)
    for _ in range(2):
        loops[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), STEPS=5, BLOCK=128)
    after = builtins()
    print(getattr(interpreter._patch_builtin, "_tritoncourse", False), before == after, len(before),
          out.double().sum().item(), out[:2].tolist(), out[-2:].tolist())
""")


def test_the_interpreter_computes_the_same_with_the_builtins_listed_once():
    """A kernel that calls a jitted helper in a loop computes bit for bit what it computes under Triton's own
    patching, and every builtin of triton.language is back in place after the launches; the course's set-up lists
    the builtins once (device.py's _list_language_builtins_once)."""
    plain, course = _run("plain", HELPER_SCRIPT, 3), _run("course", HELPER_SCRIPT, 3)
    assert plain[0] == "False" and course[0] == "True", (plain, course)
    assert plain[1] == course[1] == "True", (plain, course)  # nothing left patched
    assert int(course[2]) > 100, course
    assert plain[2:] == course[2:], (plain, course)


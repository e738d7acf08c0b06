"""Launching the learner's kernel, as every phase's checks do: is it a real Triton kernel, launch it and wait,
and turn what it raised into a learner-facing message."""
from __future__ import annotations

import re
import traceback

import triton

from ...checking import KernelCheckError, stage


# The ragged-store hints' words for kernels that store through a block pointer (tl.make_block_ptr, as upstream code
# often does): there the mask is boundary_check, over the block's dimensions.
BOUNDARY_CHECK_HINT = " (for a block-pointer store, tl.store(block_ptr, ...): boundary_check=(0, 1))"
BOUNDARY_CHECK_HINT_ROWS = "; a block-pointer store, tl.store(block_ptr, ...), needs boundary_check=(0,)"


def _kernel_types() -> tuple[type, ...]:
    # jit_types: Triton's own kernel classes, one home for both sides
    from ...grading.channel.rpc import RemoteJit, jit_types

    return (*jit_types(), RemoteJit)  # RemoteJit: the learner's kernel, in the runner process


def require_triton_kernel(kernel, name: str) -> None:
    """Fail unless ``kernel`` is a real @triton.jit kernel (not a Python function or a look-alike)."""
    if not isinstance(kernel, _kernel_types()):
        raise KernelCheckError(
            f"`{name}` is a {type(kernel).__name__}, not a Triton kernel.\n"
            "Likely cause: it is not decorated with @triton.jit (the tests launch it as kernel[grid](...))."
        )


def _causes(err: BaseException):
    seen = 0
    while err is not None and seen < 4:
        yield err
        err, seen = err.__cause__, seen + 1


def failed_static_assert(err: BaseException) -> str | None:
    """The learner's source line of a failed ``tl.static_assert`` ("line 6: `tl.static_assert(B <= N)`"), or None.

    Triton's interpreter raises ``InterpreterError(repr(AssertionError()))``: the message alone is
    ``AssertionError('')``. The line comes from the assertion's traceback: its own in this process, or the learner's
    frames the runner sent (``RemoteError.where``) when the kernel ran in the sandbox."""
    for cause in _causes(err):
        if type(cause).__name__ != "AssertionError" and getattr(cause, "remote_type", "") != "AssertionError":
            continue
        where = getattr(cause, "where", "") or "".join(traceback.format_tb(cause.__traceback__))
        found = re.findall(r'line (\d+), in [^\n]*\n\s+([^\n]*static_assert\([^\n]*)', where)
        if found:
            line, code = found[-1]
            code = re.sub(r"\s+#[^'\"]*$", "", code.strip())  # a trailing comment, not the assertion
            return f"line {line}: `{code[:200]}`"
    return None


def explain_launch_error(err: BaseException, name: str, signature: str, context: str) -> KernelCheckError:
    """Turn an exception raised while launching the learner's kernel into a learner-facing message."""
    text = f"{type(err).__name__}: {err}".strip()
    if len(text) > 1500:
        text = text[:1500] + " ..."
    chain = f"{err!r} {err.__cause__!r}"
    if "NotImplementedError" in chain:
        hint = "the kernel is not written yet: replace `raise NotImplementedError()` with your code."
    elif isinstance(err, TypeError) and ("argument" in str(err) or "positional" in str(err)):
        hint = f"the kernel's signature must be exactly `{signature}`."
    elif (assertion := failed_static_assert(err)) is not None:
        hint = (f"a `tl.static_assert` in your kernel failed, {assertion}. The test launched the kernel with "
                "values its contract allows (the block sizes and shapes described above the kernel): an assertion "
                "stricter than the contract fails on them. Relax it, or handle that case in the kernel.")
    elif isinstance(err, triton.CompilationError) or "CompilationError" in type(err).__name__:
        hint = "Triton could not compile the kernel; the line and the reason are above."
    else:
        hint = "read the error above; it comes from inside your kernel."
    return KernelCheckError(f"Launching `{name}` ({context}) raised an error:\n  {text}\nLikely cause: {hint}")


def launch(kernel, grid, args, kwargs, *, name: str, signature: str, context: str, device: str,
           stage_text: str | None = None) -> None:
    """Launch ``kernel[grid](*args, **kwargs)``, waiting for it, with errors explained.

    ``stage_text`` says what a crash during this launch means (default: which kernel ran on what)."""
    stage(stage_text or f"running `{name}` ({context})")
    try:
        kernel[grid](*args, **kwargs)
        if device == "cuda":
            import torch

            torch.cuda.synchronize()
    except KernelCheckError:
        raise
    except Exception as err:  # the learner's kernel may raise anything
        raise explain_launch_error(err, name, signature, context) from None

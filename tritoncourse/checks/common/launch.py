"""Launching the learner's kernel, as every phase's checks do: is it a real Triton kernel, launch it and wait,
and turn what it raised into a learner-facing message."""
from __future__ import annotations

import triton

from ...checking import KernelCheckError, stage


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

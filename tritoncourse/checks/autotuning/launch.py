"""Phase 5: running one config of an autotuned kernel directly, as the every-config checks do: what the autotuner
passes to the kernel for a config, which configs are run (those no GPU could run are the limits test's), the launch
with its errors explained (with the causes a config, rather than the kernel's code, usually has), and
:class:`Strided`, the guarded matrix each launch reads and writes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...checking import KernelCheckError, stage
from ...gpus import describe
from ..common.launch import explain_launch_error
from .configs import META, SIGNATURES

def _runnable(name: str, configs, problems: dict[int, list[str]], required: tuple = ()) -> list[int]:
    """The configs an every-config check runs: each must set the `required` meta-parameters; those that break
    a hardware limit are left out, the hardware-limits test's to fail (on a GPU they do not even compile), so
    one mistake costs one test, on the CPU and on a GPU alike. A space with no runnable config fails here too:
    nothing in it can be checked."""
    for i, c in enumerate(configs):
        missing = [m for m in required if m not in _config_meta(c)]
        if missing:
            raise KernelCheckError(f"Config #{i} ({describe(c)}) does not set {missing[0]}.\n"
                                   f"Likely cause: every config must set {', '.join(required)}.")
    runnable = [i for i in range(len(configs)) if i not in problems]
    if not runnable:
        raise KernelCheckError(
            f"None of the {len(configs)} configs of `{name}` can run on a GPU (each breaks a hardware limit: see "
            "the hardware-limits test), so no config could be checked for correct results.\n"
            "Likely cause: fix the limits first (powers of two, tl.dot tiles >= 16, num_warps 1 to 32, shared "
            "memory); then every config is run here.")
    return runnable


# ------------------------------------------------------------------------------------------ launching
def _launch(kernel, grid, args, meta: dict, *, name: str, context: str, device: str):
    stage(f"running `{name}` ({context})")
    try:
        result = kernel[grid](*args, **meta)
        if device == "cuda":
            torch.cuda.synchronize()
        return result
    except KernelCheckError:
        raise
    except Exception as err:  # the learner's kernel may raise anything
        raise _explained(err, name, context) from None


def _explained(err: BaseException, name: str, context: str) -> KernelCheckError:
    """explain_launch_error, with the causes a config (rather than the kernel's code) usually has."""
    found = explain_launch_error(err, name, SIGNATURES[name], context)
    text = f"{err!r} {err.__cause__!r}"
    hint = None
    if "power of 2" in text:
        hint = "a block size of this config is not a power of two (tl.arange needs one)."
    elif "missing a required argument" in text or "missing" in text and "argument" in text:
        hint = f"this config does not set every meta-parameter of the kernel ({', '.join(META[name])})."
    elif "unexpected keyword argument" in text or "got an unexpected" in text:
        hint = "this config sets a name that is not an argument of the kernel (a misspelt meta-parameter?)."
    if hint is None:
        return found
    head = str(found).split("\nLikely cause:")[0]
    return KernelCheckError(f"{head}\nLikely cause: {hint}")


def _config_meta(config) -> dict:
    """What the autotuner passes to the kernel for a config: its meta-parameters, num_warps, num_stages."""
    return dict(config.all_kwargs())


@dataclass
class Strided:
    """A matrix inside a larger 1-D buffer: rows (or columns, when transposed) ``gap`` elements longer
    than the matrix, and ``pad`` elements before and after, all holding ``fill``."""

    view: torch.Tensor
    buffer: torch.Tensor
    offset: int
    fill: float

    @classmethod
    def make(cls, rows: int, cols: int, dtype, device: str, fill: float, transposed: bool = False,
             gap: int = 8, pad: int = 1024) -> "Strided":
        if transposed:
            strides, span = (1, rows + gap), (cols - 1) * (rows + gap) + rows
        else:
            strides, span = (cols + gap, 1), (rows - 1) * (cols + gap) + cols
        buf = torch.full((pad + span + pad,), fill, dtype=dtype, device=device)
        view = buf.as_strided((rows, cols), strides, pad)
        view.fill_(float("nan"))
        return cls(view, buf, pad, fill)

    @classmethod
    def copy_of(cls, t: torch.Tensor, device: str, transposed: bool = False, pad: int = 1024) -> "Strided":
        s = cls.make(t.shape[0], t.shape[1], t.dtype, device, float("nan"), transposed, pad=pad)
        s.view.copy_(t.to(device))
        return s

    def stray(self) -> int:
        """Guard elements that changed: a store outside the matrix."""
        raw = self.buffer.detach().cpu()
        buf = raw.float()
        inside = torch.zeros(buf.numel(), dtype=torch.bool)
        rows, cols = self.view.shape
        s0, s1 = self.view.stride()
        idx = self.offset + torch.arange(rows)[:, None] * s0 + torch.arange(cols)[None, :] * s1
        inside[idx.reshape(-1)] = True
        if self.fill != self.fill:
            changed = ~torch.isnan(buf)
        else:
            changed = buf != torch.tensor(self.fill, dtype=raw.dtype).float()
        return int((changed & ~inside).sum())

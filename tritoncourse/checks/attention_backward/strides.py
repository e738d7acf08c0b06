"""Phase 7: the cause when a backward kernel reads one input with another tensor's strides (dO with Q's is the usual
one: a caller's dO is rarely laid out as Q). Each input the test placed in a layout of its own is read back as the
kernel would read it with each other tensor's strides, the gradients recomputed in fp64 from what it read (with the
right LSE and D, which the test hands the kernel), and compared with the kernel's: the first that matches is named.
Only reads that land on numbers are replayed: a read of the NaN guards is nan_cause's (diagnosis.py).
"""
from __future__ import annotations

import torch

from .inputs import LAYOUT_WORDS, scores

INPUTS = ("Q", "K", "V", "dO")
ROW = {"Q": "m", "K": "n", "V": "n", "dO": "m", "dQ": "m", "dK": "n", "dV": "n"}


def _addressing(t: torch.Tensor) -> tuple:
    """The strides that matter: those of dimensions longer than 1."""
    return tuple(st for st, n in zip(t.stride(), t.shape) if n > 1)


def gradients_from(q, k, v, do, lse, d, causal: bool, sm_scale: float) -> dict[str, torch.Tensor]:
    """(dQ, dK, dV) in fp64 from the given Q, K, V, dO with the given (right) LSE and D, as a kernel computes them."""
    q, k, v, do = (t.double().cpu() for t in (q, k, v, do))
    s = scores(q, k, causal, sm_scale)
    p = torch.exp(s - lse.double().cpu().reshape(s.shape[:-1])[..., None])
    ds = p * (do @ v.transpose(-2, -1) - d.double().cpu().reshape(s.shape[:-1])[..., None])
    return dict(dQ=sm_scale * ds @ k, dK=sm_scale * ds.transpose(-2, -1) @ q, dV=p.transpose(-2, -1) @ do)


def _words(x: str, y: str, lays: dict) -> str:
    xl, yl, r = x.lower(), y.lower(), ROW[x]
    return (f"{x} is addressed with {y}'s strides (stride_{yl}b, stride_{yl}h, stride_{yl}{ROW[y]}, stride_{yl}d): in "
            f"this test {x} is {LAYOUT_WORDS.get(lays.get(x), lays.get(x))} and {y} "
            f"{LAYOUT_WORDS.get(lays.get(y), lays.get(y))}, each with strides of its own. Address {x}[b, h, {r}, d] as "
            f"{xl}_ptr + b*stride_{xl}b + h*stride_{xl}h + {r}*stride_{xl}{r} + d*stride_{xl}d.")


def stride_cause(got: dict, tols: dict, refs: dict, placed: dict, lays: dict, lse, d, causal: bool,
                 sm_scale: float) -> str | None:
    """The cause when ``got`` (the checked gradients, fp64) are what the kernel gives with one input of ``placed``
    (name -> Placed: the inputs, and the outputs whose strides a kernel could take) read with another's strides."""
    originals = {n: placed[n].view.detach().cpu() for n in INPUTS}
    rel = {n: tols[n][0] / max(float(refs[n].abs().max()), 1e-300) for n in got}
    for x in INPUTS:
        for y, other in placed.items():
            if y == x or _addressing(other.view) == _addressing(placed[x].view):
                continue
            read = placed[x].read_as(other.view.stride())
            if not torch.isfinite(read).all():
                continue
            grads = gradients_from(**{n.lower(): (read if n == x else originals[n]) for n in INPUTS}, lse=lse, d=d,
                                   causal=causal, sm_scale=sm_scale)
            if all(torch.allclose(got[n], grads[n], atol=rel[n] * float(grads[n].abs().max()), rtol=tols[n][1])
                   for n in got):
                return _words(x, y, lays)
    return None


__all__ = ["stride_cause", "gradients_from"]

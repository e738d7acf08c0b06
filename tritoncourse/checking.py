"""Checking kernels: verbose comparisons, NaN guard buffers, electric fences, seeds.

Every check returns ``(ok, message)`` or raises :class:`KernelCheckError` with a message written
for a learner: what differs, where, and the likely cause.

On a hidden case of a test (grading/judge/hidden_cases.py) a message names no input of that case: no size, shape,
stride, seed, index, element value, count, nor anything the learner's code returned (it could encode the inputs).
The checks describe what they ran on with a :class:`Case` (its numbers on a visible case, its kind in words on a
hidden one), put every other number of a case through :func:`shown`, and :func:`compare` says on a hidden case
what kind of difference it found, not where or how many.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import sys
import weakref
from dataclasses import dataclass

import torch

from .grading.judge.hidden_cases import in_hidden_case, scrub, stage_text
from .seeds import fresh_seed  # noqa: F401  (the checks' seeds; the grader imports it from seeds.py, without torch)
from .tolerances import DEFAULT as TOLERANCES  # compare's defaults by dtype: (atol, rtol, why)


class KernelCheckError(AssertionError):
    """A check failed; the message is meant for the learner. Raised on a hidden case while handling an error of the
    learner's code, it quotes nothing of that error's text (grading/judge/hidden_cases.py)."""

    def __init__(self, message: str = "", *args):
        handled = sys.exc_info()[1]
        # A check's own error rewritten (handled is a KernelCheckError): its text is the check's, scrubbed already.
        if handled is not None and not isinstance(handled, KernelCheckError) and isinstance(message, str) \
                and in_hidden_case():
            message = scrub(message, handled)
        super().__init__(message, *args)


def generator(seed: int, device: str = "cpu") -> torch.Generator:
    """A torch generator seeded with ``seed``, independent of the global RNG the notebook may touch."""
    return torch.Generator(device=device).manual_seed(seed)


def stage(text: str) -> None:
    """Record what the check is about to do, so a crash (segfault, illegal address) can be explained."""
    path = os.environ.get("TRITONCOURSE_STAGE_FILE")
    if path:
        text = stage_text(text)  # marked once the test's hidden cases have begun
        with open(path, "w") as f:
            f.write(text)


def hidden() -> bool:
    """Whether the check runs a hidden case of the judge's test now: its messages then name no input."""
    return in_hidden_case()


def shown(detail: str, words: str = "") -> str:
    """``detail`` (numbers of the case: sizes, strides, indices, values) on a visible case; ``words``, which say
    the same without them, on a hidden one."""
    return words if hidden() else detail


class Case:
    """What a check ran on, for its messages: ``detail`` with the case's numbers (``n_elements=1000,
    BLOCK_SIZE=128, float32, seed 7``), ``kinds`` the same case in words (``a size that is not a multiple of
    BLOCK_SIZE``, ``float32``). Formatted into a message (``f"Wrong values ({case})"``) it is the detail on a
    visible case and "a hidden case: <its kinds>" on a hidden one, decided when the message is written."""

    def __init__(self, detail: str, *kinds: str):
        self.detail = detail
        self.kinds = tuple(k for k in kinds if k)

    def words(self) -> str:
        return "a hidden case: " + ", ".join(self.kinds) if self.kinds else "a hidden case"

    def __str__(self) -> str:
        return self.words() if hidden() else self.detail

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __add__(self, other: str) -> str:
        return str(self) + other

    def __radd__(self, other: str) -> str:
        return other + str(self)

    def but(self, detail_prefix: str, *kinds: str) -> "Case":
        """This case with more said before its detail (``config #2 of 3: ...; ``) and more kinds."""
        return Case(detail_prefix + self.detail, *kinds, *self.kinds)


def size_kind(n: int, block: int, what: str = "a size", unit: str = "BLOCK_SIZE", blocks: str = "blocks") -> str:
    """``n`` against ``block`` in words, no number: ragged or not, one block or several."""
    if n < block:
        return f"{what} smaller than {unit} (one partial {blocks[:-1]})"
    if n % block:
        return f"{what} that is not a multiple of {unit} (several {blocks}, the last one partial)"
    return f"{what} that is a multiple of {unit}" + (f" (one full {blocks[:-1]})" if n == block else
                                                      f" (several full {blocks})")


def tiles_kind(M: int, N: int, block_m: int, block_n: int) -> str:
    """M and N against the output's tiles, in words (no number)."""
    ragged = [name for name, n, b in (("M", M, block_m), ("N", N, block_n)) if n % b]
    one = M <= block_m and N <= block_n
    if not ragged:
        return "M and N multiples of the tiles" + (" (a single tile)" if one else "")
    which = " and ".join(ragged)
    return f"{which} not {'multiples' if len(ragged) > 1 else 'a multiple'} of the tiles (the last tiles partial)"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def _hidden_difference(name: str, a: torch.Tensor, e: torch.Tensor, bad: torch.Tensor) -> str:
    """What differs on a hidden case, in words: how much of the output (all, or part), NaN or inf where the
    reference is a number; never how many, where, or which values (the kernel chooses them), nor the tolerance
    (some are scaled by the case's sizes or values)."""
    lines = [f"{name}: {'every element differs' if bool(bad.all()) else 'some elements differ'} from the "
             "reference, beyond the tolerance; where and by how much is not shown on a hidden case"]
    if bool((torch.isnan(a) & ~torch.isnan(e)).any()):
        lines.append("  some of them are NaN where the reference is a number")
    if bool((torch.isinf(a) & ~torch.isinf(e)).any()):
        lines.append("  some of them are inf where the reference is finite")
    return "\n".join(lines)


def compare(actual: torch.Tensor, expected: torch.Tensor, *, atol: float | None = None,
            rtol: float | None = None, name: str = "output", max_show: int = 5) -> tuple[bool, str]:
    """Compare element-wise like torch.allclose, but explain: how many differ, where, NaN and inf.

    ``expected`` may be a higher-precision reference; both are compared in fp32 (fp64 if either is).
    """
    if actual.shape != expected.shape:
        return False, shown(f"{name} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}",
                            f"{name} does not have the expected shape")
    d_atol, d_rtol, _ = TOLERANCES.get(actual.dtype, TOLERANCES[torch.float32])
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    wide = torch.float64 if torch.float64 in (actual.dtype, expected.dtype) else torch.float32
    a = actual.detach().to("cpu", wide)
    e = expected.detach().to("cpu", wide)
    both_nan = torch.isnan(a) & torch.isnan(e)
    same_inf = torch.isinf(a) & torch.isinf(e) & (a == e)
    close = (a - e).abs() <= atol + rtol * e.abs()
    ok_mask = close | both_nan | same_inf
    bad = ~ok_mask
    n_bad = int(bad.sum())
    if n_bad == 0:
        return True, f"{name}: all {shown(f'{a.numel()} ', '')}elements match (atol={atol:g}, rtol={rtol:g})"
    if hidden():
        return False, _hidden_difference(name, a, e, bad)
    idx = bad.nonzero()
    lines = [f"{name}: {n_bad} of {a.numel()} elements differ (atol={atol:g}, rtol={rtol:g})"]
    for row in idx[:max_show].tolist():
        where = tuple(row) if len(row) > 1 else row[0]
        lines.append(f"  at index {where}: expected {_fmt(e[tuple(row)].item())}, got {_fmt(a[tuple(row)].item())}")
    if n_bad > max_show:
        lines.append(f"  ... and {n_bad - max_show} more")
    n_nan = int((torch.isnan(a) & ~torch.isnan(e)).sum())
    n_inf = int((torch.isinf(a) & ~torch.isinf(e)).sum())
    if n_nan:
        lines.append(f"  {n_nan} of them are NaN where the reference is a number")
    if n_inf:
        lines.append(f"  {n_inf} of them are inf where the reference is finite")
    return False, "\n".join(lines)


# Output guards hold this value rather than NaN, so that a stray store of a NaN (read from an input's
# NaN guard) still shows. Inputs keep NaN guards so that a stray read poisons the result.
OUTPUT_SENTINEL = -12345.0


@dataclass
class Guarded:
    """A tensor living inside a larger buffer whose border (the guard) holds ``fill``."""

    view: torch.Tensor
    buffer: torch.Tensor
    pad: int
    fill: float = float("nan")

    def guard_mask(self) -> torch.Tensor:
        inside = torch.zeros(self.buffer.shape, dtype=torch.bool, device=self.buffer.device)
        inside[tuple(slice(self.pad, self.pad + s) for s in self.view.shape)] = True
        return ~inside

    def _changed(self) -> torch.Tensor:
        if self.fill != self.fill:  # NaN guard
            differs = ~torch.isnan(self.buffer)
        else:
            differs = self.buffer != self.fill
        return self.guard_mask() & differs

    def guard_changes(self) -> int:
        """How many guard elements were overwritten: something wrote outside the view."""
        return int(self._changed().sum())

    def first_guard_change(self) -> tuple[int, ...] | None:
        """The first overwritten guard element, as an index relative to the view (may be < 0)."""
        idx = self._changed().nonzero()
        if len(idx) == 0:
            return None
        return tuple(i - self.pad for i in idx[0].tolist())


def guarded_empty(shape, dtype=torch.float32, device="cpu", pad: int = 64,
                  fill: float = OUTPUT_SENTINEL) -> Guarded:
    """An output tensor of ``shape``, NaN inside (unwritten elements show), inside a guard of ``fill``."""
    shape = tuple(shape)
    buffer = torch.full(tuple(s + 2 * pad for s in shape), fill, dtype=dtype, device=device)
    view = buffer[tuple(slice(pad, pad + s) for s in shape)]
    view.fill_(float("nan"))
    return Guarded(view, buffer, pad, fill)


def guarded_copy(t: torch.Tensor, pad: int = 64) -> Guarded:
    """A copy of ``t`` inside a NaN guard: a stray read returns NaN, a stray write shows in the guard."""
    g = guarded_empty(t.shape, t.dtype, t.device, pad, fill=float("nan"))
    g.view.copy_(t)
    return g


# Storages made by Fenced, by data_ptr: "end" | "start" (which side touches unreadable memory). The judge sends a
# launch's storages to the runner (grading/channel/rpc.py), which re-creates each of these fenced on the same side.
FENCED: dict[int, str] = {}


class Fenced:
    """A CPU tensor that ends (or starts) exactly at an unreadable page: an electric fence.

    On Triton's interpreter, an unmasked lane past the end of the tensor reads the protected page
    and the process dies with SIGSEGV at once, instead of silently reading a neighbour's memory.
    """

    PAGE = mmap.PAGESIZE

    def __init__(self, n: int, dtype=torch.float32, side: str = "end"):
        itemsize = torch.empty((), dtype=dtype).element_size()
        nbytes = n * itemsize
        data_pages = (nbytes + self.PAGE - 1) // self.PAGE + 1
        self._map = mmap.mmap(-1, (data_pages + 2) * self.PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        for page in (0, data_pages + 1):  # a fence page before and after the data
            if libc.mprotect(ctypes.c_void_p(base + page * self.PAGE), self.PAGE, 0) != 0:
                raise OSError(ctypes.get_errno(), "mprotect failed")
        if side == "end":
            offset = (data_pages + 1) * self.PAGE - nbytes
        elif side == "start":
            offset = self.PAGE
        else:
            raise ValueError("side must be 'end' or 'start'")
        self.tensor = torch.frombuffer(self._map, dtype=dtype, count=n, offset=offset)
        # A launch that goes to another process (grading/channel/rpc.py) re-creates this storage fenced on the same side.
        key = self.tensor.untyped_storage().data_ptr()
        FENCED[key] = side
        weakref.finalize(self, FENCED.pop, key, None)


def fence_supported(device: str) -> bool:
    """Can a stray read be caught here? On the interpreter with Fenced tensors; on a GPU only under
    compute-sanitizer (the test runner sets TRITONCOURSE_SANITIZER=1 there)."""
    return device == "cpu" or os.environ.get("TRITONCOURSE_SANITIZER") == "1"


def fenced_copy(t: torch.Tensor, side: str = "end"):
    """A copy of ``t`` whose memory ends (side='end') or starts where readable memory does.

    On the CPU a :class:`Fenced` tensor (keep the returned object alive while the kernel runs); on a
    GPU under compute-sanitizer a tensor of its own exact allocation, which memcheck fences.
    Returns (tensor, keepalive).
    """
    if t.device.type == "cpu":
        f = Fenced(t.numel(), t.dtype, side)
        f.tensor.copy_(t.reshape(-1))
        return f.tensor.view(t.shape), f
    exact = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    exact.copy_(t)
    return exact, None

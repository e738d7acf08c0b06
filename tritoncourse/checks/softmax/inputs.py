"""Phase 2: what the softmax checks feed the kernels: the three kernels' names and signatures, the kinds of rows
(:data:`DATA`) and their fp64 references, the strided layouts, :class:`Rows` (a matrix inside a guard buffer: NaN
around and between an input's rows, a sentinel around an output's) and :class:`FencedRows` (rows that end or start
exactly where readable memory does), and :class:`_Case`, one launch's inputs and how a message names them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...checking import Case, Fenced, dtype_name, size_kind

SOFTMAX = "triton_softmax_kernel"
ONLINE = "triton_online_softmax_kernel"
BACKWARD = "triton_softmax_backward_kernel"
SIGNATURES = {
    SOFTMAX: "triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, "
             "n_cols, BLOCK_SIZE: tl.constexpr)",
    ONLINE: "triton_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, "
            "n_rows, n_cols, BLOCK_SIZE: tl.constexpr)",
    BACKWARD: "triton_softmax_backward_kernel(grad_input_ptr, output_ptr, grad_output_ptr, "
              "grad_input_row_stride, output_row_stride, grad_output_row_stride, n_rows, n_cols, "
              "BLOCK_SIZE: tl.constexpr)",
}

# Rows the checks feed the kernels: how to make them, and how a message names them.
DATA = {
    "randn": "random normal rows (std 2)",
    "plus1000": "rows around +1000",
    "minus1000": "rows around -1000",
    "negative": "rows of negative values (-8.5 to -0.5)",
}
# The output's elements start at this value: an element the kernel never wrote shows as -54321
# (NaN would be ambiguous: a kernel without the max subtraction writes NaN).
UNWRITTEN = -54321.0

# Strided layouts: how far apart rows are, beyond n_cols, in each tensor. Different on purpose, so that
# swapping two strides or using n_cols as the stride shows.
FORWARD_GAPS = {"input": 29, "output": 11}
BACKWARD_GAPS = {"grad_input": 11, "output": 29, "grad_output": 5}


def make_rows(data: str, n_rows: int, n_cols: int, g: torch.Generator) -> torch.Tensor:
    """fp32 rows of the kind ``data`` (see :data:`DATA`)."""
    z = torch.randn(n_rows, n_cols, generator=g)
    if data == "randn":
        return 2 * z
    if data == "plus1000":
        return 2 * z + 1000
    if data == "minus1000":
        return 2 * z - 1000
    if data == "negative":
        return -(torch.rand(n_rows, n_cols, generator=g) * 8 + 0.5)
    raise ValueError(f"unknown data kind {data!r}; one of {sorted(DATA)}")


def softmax_ref(x: torch.Tensor) -> torch.Tensor:
    """The torch reference along the last dimension, in fp64 (the kernel's output is compared to it)."""
    return torch.softmax(x.double(), dim=-1)


def softmax_backward_ref(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = y * (dy - sum(y * dy)) per row, in fp64: what torch's autograd does for softmax.

    It is computed with ``torch.ops.aten._softmax_backward_data``, the very function torch's autograd
    calls for ``torch.softmax``, from the (rounded) y and dy the kernel is given.
    """
    return torch.ops.aten._softmax_backward_data(dy.double(), y.double(), -1, torch.float64)


# ---------------------------------------------------------------------------------------------------
# Rows inside guard buffers


class Rows:
    """An (n_rows, n_cols) matrix whose rows are ``stride`` elements apart inside a 1-D guard buffer.

    Every element of the buffer that is not one of the matrix's is guard: ``pad_before`` elements
    before row 0, ``pad_after`` after the last row, and the ``stride - n_cols`` elements between
    rows. The guard holds ``fill`` (NaN for inputs, a sentinel for outputs); the matrix's own elements
    start at ``start`` (:data:`UNWRITTEN` for outputs, so that unwritten elements show).
    """

    def __init__(self, n_rows: int, n_cols: int, stride: int, dtype, device: str, fill: float,
                 pad_before: int = 64, pad_after: int = 64, start: float = UNWRITTEN):
        if stride < n_cols:
            raise ValueError(f"stride {stride} < n_cols {n_cols}")
        self.n_rows, self.n_cols, self.stride, self.fill = n_rows, n_cols, stride, fill
        self.offset = pad_before
        span = (n_rows - 1) * stride + n_cols
        self.buffer = torch.full((pad_before + span + pad_after,), fill, dtype=dtype, device=device)
        self.view = self.buffer.as_strided((n_rows, n_cols), (stride, 1), pad_before)
        self.view.fill_(start)

    @classmethod
    def copy_of(cls, x: torch.Tensor, stride: int, device: str, pad_after: int = 64) -> "Rows":
        """An input: a copy of ``x`` with NaN around and between its rows."""
        rows = cls(x.shape[0], x.shape[1], stride, x.dtype, device, float("nan"), pad_after=pad_after,
                   start=float("nan"))
        rows.view.copy_(x)
        return rows

    def inside(self) -> torch.Tensor:
        """True for the buffer elements that belong to the matrix."""
        rel = torch.arange(self.buffer.numel()) - self.offset
        row = torch.div(rel, self.stride, rounding_mode="floor")
        col = torch.remainder(rel, self.stride)
        return (rel >= 0) & (row < self.n_rows) & (col < self.n_cols)

    def stray(self) -> list[int]:
        """Offsets, relative to element [0, 0], of the guard elements that were overwritten."""
        buf = self.buffer.detach().cpu()
        if self.fill != self.fill:
            changed = ~torch.isnan(buf)
        else:
            changed = buf != torch.tensor(self.fill, dtype=buf.dtype)
        changed &= ~self.inside()
        return (changed.nonzero().flatten() - self.offset).tolist()

    def where(self, offset: int) -> str:
        """Describe an offset relative to element [0, 0] in rows and columns."""
        if offset < 0:
            return "just before row 0" if offset == -1 else f"{-offset} elements before row 0"
        row, col = divmod(offset, self.stride)
        if row >= self.n_rows:
            past = offset - ((self.n_rows - 1) * self.stride + self.n_cols) + 1
            return "just past the end of the last row" if past == 1 else \
                f"{past} elements past the end of the last row"
        return f"row {row}, column {col}"

    def read(self, row_stride: int, width: int) -> torch.Tensor:
        """What a kernel would load from this buffer with the given row stride and row width (fp64;
        NaN where it would fall outside the buffer)."""
        buf = self.buffer.detach().cpu().double()
        idx = (torch.arange(self.n_rows)[:, None] * row_stride + torch.arange(width)[None, :]) + self.offset
        ok = (idx >= 0) & (idx < buf.numel())
        out = torch.full(idx.shape, float("nan"), dtype=torch.float64)
        out[ok] = buf[idx[ok]]
        return out


class FencedRows:
    """An input matrix whose last row ends (``side='end'``) or whose first row starts (``'start'``) exactly
    where readable memory does: an unmasked lane beyond it is caught at once.

    On the interpreter the neighbouring page is unreadable (a :class:`Fenced` buffer: the process dies
    with SIGSEGV); on a GPU the rows get an allocation of their own, exactly as long as they are, which
    compute-sanitizer's memcheck fences.
    """

    def __init__(self, x: torch.Tensor, stride: int, side: str, device: str):
        n_rows, n_cols = x.shape
        span = (n_rows - 1) * stride + n_cols
        if device == "cpu":
            self._fence = Fenced(span, x.dtype, side)  # keeps the mapping alive
            flat = self._fence.tensor
        else:
            flat = torch.empty(span, dtype=x.dtype, device=device)
        flat.fill_(float("nan"))
        self.view = flat.as_strided((n_rows, n_cols), (stride, 1))
        self.view.copy_(x.to(device))


@dataclass
class _Case:
    """One launch's inputs and how to describe them."""

    kernel_name: str
    n_rows: int
    n_cols: int
    block: int
    dtype: torch.dtype
    data: str
    strides: dict[str, int]
    seed: int

    def context(self) -> Case:
        """The case's numbers for a message, or on a hidden case its kind (checking.Case)."""
        dt = dtype_name(self.dtype)
        strides = ", ".join(f"{k} row stride {v}" for k, v in self.strides.items())
        data = DATA.get(self.data, self.data)
        if self.kernel_name == ONLINE:
            length = size_kind(self.n_cols, self.block, "rows of a length", "BLOCK_SIZE", "tiles")
        else:  # one tile of next_power_of_2(n_cols) lanes holds the row
            length = "rows whose length is a power of two" if self.n_cols == self.block else \
                "rows whose length is not a power of two (the tile's last lanes are masked)"
        layout = "contiguous rows" if all(v == self.n_cols for v in self.strides.values()) else \
            "rows further apart than n_cols (each tensor with a row stride of its own)"
        return Case(f"n_rows={self.n_rows}, n_cols={self.n_cols}, BLOCK_SIZE={self.block}, {dt}, {data}, {strides}, "
                    f"seed {self.seed}", length, data, layout, dt)


def _strides(strided: bool, n_cols: int, gaps: dict[str, int]) -> dict[str, int]:
    return {name: n_cols + (gap if strided else 0) for name, gap in gaps.items()}


def _pad_after(n_rows: int, n_cols: int, block: int, strides: dict[str, int]) -> int:
    """Room after the last row for stray stores, even with a swapped or too-large stride."""
    return 64 + max(block, n_cols) + (n_rows - 1) * (max(strides.values()) - min(strides.values()))

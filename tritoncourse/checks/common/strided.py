"""Tensors of shape (batch, heads, seq_len, head_dim) in the layouts real callers give attention kernels, each a
strided view inside a flat buffer whose other elements hold a guard value (NaN around inputs, sentinels around
outputs): phase 6's attention forward and phase 7's backward place their tensors with these.
"""
from __future__ import annotations

import torch

from ...checking import OUTPUT_SENTINEL, generator

UNWRITTEN = -54272.0  # what every output element holds before the kernel runs: exact in fp32, fp16 and bf16

LAYOUTS = ("contiguous", "padded", "bshd", "fused")
LAYOUT_WORDS = {"contiguous": "contiguous", "padded": "with guard rows between the heads",
                "bshd": "a (batch, seq, heads, dim) tensor seen as (batch, heads, seq, dim)",
                "fused": "a slice of one (batch, seq, 3, heads, dim) projection"}


# ------------------------------------------------------------------------------------------------ buffers
class Placed:
    """A strided view inside a flat buffer whose other elements hold ``fill`` (NaN around inputs)."""

    def __init__(self, flat: torch.Tensor, view: torch.Tensor, fill: float, layout: str = "contiguous"):
        self.flat, self.view, self.fill, self.layout = flat, view, fill, layout
        self.inside = self.mask_of(view)

    def mask_of(self, view) -> torch.Tensor:
        idx = torch.arange(self.flat.numel())
        inside = idx.as_strided(view.shape, view.stride(), view.storage_offset() - self.flat.storage_offset())
        mask = torch.zeros(self.flat.numel(), dtype=torch.bool)
        mask[inside.reshape(-1)] = True
        return mask

    def read_as(self, strides) -> torch.Tensor:
        """What a kernel reads from this tensor's pointer with other strides (the buffer leaves room for any)."""
        return self.flat.detach().cpu().as_strided(self.view.shape, strides, self.view.storage_offset())

    def guard_changes(self) -> int:
        outside = self.flat.detach().cpu()[~self.inside].float()
        if self.fill != self.fill:
            return int((~torch.isnan(outside)).sum())
        return int((outside != torch.tensor(self.fill, dtype=self.flat.dtype).float()).sum())


def layout_strides(shape: tuple[int, ...], layout: str, pad_rows: int,
                   slot: int = 0) -> tuple[tuple[int, ...], int, int]:
    """(strides, offset, buffer size) of a (B, H, S, D) tensor in ``layout`` with ``pad_rows`` guard rows;
    ``slot``: Q, K or V's place (0, 1, 2) in a fused projection."""
    B, H, S, D = shape
    total = B * H * S * D
    if layout == "contiguous":  # guard rows before the first and after the last head only
        return (H * S * D, S * D, D, 1), pad_rows * D, total + 2 * pad_rows * D
    if layout == "padded":  # every head's rows followed by guard rows
        rows = S + 2 * pad_rows
        return (H * rows * D, rows * D, D, 1), pad_rows * D, B * H * rows * D
    if layout == "bshd":  # stored (batch, seq, heads, dim), seen as (batch, heads, seq, dim): heads interleaved
        return (S * H * D, D, H * D, 1), pad_rows * D, total + 2 * pad_rows * D
    if layout == "fused":  # (batch, seq, 3, heads, dim): Q, K, V side by side in every row of a projection
        return (S * 3 * H * D, D, 3 * H * D, 1), pad_rows * D + slot * H * D, 3 * total + 2 * pad_rows * D
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def buffer_room(shape, pad_rows) -> int:
    """A buffer size that holds the tensor addressed with the strides of any layout, from any offset."""
    B, H, S, D = shape
    return max(layout_strides(shape, lay, pad_rows)[2] for lay in LAYOUTS) + pad_rows * D + 3 * H * D


def place(t: torch.Tensor, layout: str, pad_rows: int, device: str, fill: float = float("nan")) -> Placed:
    """A copy of the (B, H, S, D) ``t`` in ``layout`` inside a buffer of ``fill``."""
    strides, offset, _ = layout_strides(tuple(t.shape), layout, pad_rows)
    flat = torch.full((buffer_room(tuple(t.shape), pad_rows),), fill, dtype=t.dtype, device=device)
    view = flat.as_strided(t.shape, strides, offset)
    view.copy_(t)
    return Placed(flat, view, fill, layout)


def place_inputs(qkv, lays, pad_rows: int, device: str) -> list[Placed]:
    """Q, K, V in their layouts; those that are "fused" share one projection buffer (the other slots NaN)."""
    shape = tuple(qkv[0].shape)
    shared = torch.full((buffer_room(shape, pad_rows),), float("nan"), dtype=qkv[0].dtype, device=device)
    placed = []
    for slot, (t, lay) in enumerate(zip(qkv, lays)):
        if lay != "fused":
            placed.append(place(t, lay, pad_rows, device))
            continue
        strides, offset, _ = layout_strides(shape, lay, pad_rows, slot)
        view = shared.as_strided(shape, strides, offset)
        view.copy_(t)
        placed.append(Placed(shared, view, float("nan"), lay))
    fused = [p for p in placed if p.layout == "fused"]
    if fused:  # the projection's other slots hold other values, as a real one does: finite, not NaN
        g = generator(len(fused))
        slots = [shared.as_strided(shape, *layout_strides(shape, "fused", pad_rows, slot)[:2]) for slot in range(3)]
        for slot, lay in enumerate(lays[:3]):
            if lay != "fused":
                slots[slot].copy_(torch.randn(shape, generator=g).to(shared.dtype))
        inside = torch.stack([fused[0].mask_of(view) for view in slots]).any(0)
        for p in fused:  # a shared buffer's guard is what lies outside the projection
            p.inside = inside
    return placed


def place_output(shape, dtype, layout: str, pad_rows: int, device: str) -> Placed:
    return place(torch.full(shape, UNWRITTEN, dtype=dtype), layout, pad_rows, device, fill=OUTPUT_SENTINEL)

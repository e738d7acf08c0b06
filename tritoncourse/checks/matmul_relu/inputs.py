"""Phase 3: what the matmul + ReLU check feeds the kernel: its name and signature, the input patterns
(:func:`make_inputs`: random, sign_change, mostly_negative) and the fp32 reference, the mistakes' products the
diagnosis and the tolerance tests compare with, and the layouts (contiguous, padded, transposed) each matrix is
placed in, inside NaN guards (inputs) or sentinel guards (C), or ending at unreadable memory (the fence).
"""
from __future__ import annotations

import torch

from ...checking import (OUTPUT_SENTINEL, Guarded, compare, fenced_copy, generator, guarded_copy, guarded_empty,
                         hidden)
from ...tolerances import MATMUL_RELU as TOLERANCE  # (atol, rtol, why): C fp16 against an fp32 reference

NAME = "triton_matmul_relu_kernel"
SIGNATURE = ("triton_matmul_relu_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, "
             "stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
             "BLOCK_K: tl.constexpr)")

# Tile sizes that compile on a GPU: tl.dot needs at least 16 along M, N and K.
MIN_BLOCK = 16
LAYOUTS = ("contiguous", "padded", "transposed")
PATTERNS = ("random", "sign_change", "mostly_negative")
# What an output element holds before the kernel runs: a value relu never produces.
UNWRITTEN = float(torch.tensor(OUTPUT_SENTINEL, dtype=torch.float16))


# --------------------------------------------------------------------------------------------- inputs
def make_inputs(M: int, N: int, K: int, seed: int, pattern: str = "random",
                block_k: int = MIN_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh signed fp16 inputs A (M x K) and B (K x N).

    ``random``: N(0, 1) entries: about half of C is negative, so a missing or inverted ReLU shows.
    ``sign_change``: every partial sum after the first K tile (``block_k`` wide) is strongly negative,
    and the later tiles bring about half of the results back above 0: a ReLU applied inside the K loop
    gives different values for every output. Needs K >= 2 * block_k.
    ``mostly_negative``: entries biased so that about nine outputs in ten are negative.
    """
    g = generator(seed)
    if pattern == "random":
        a = torch.randn(M, K, generator=g)
        b = torch.randn(K, N, generator=g)
    elif pattern == "sign_change":
        if K < 2 * block_k:
            raise ValueError(f"pattern 'sign_change' needs K >= 2 * BLOCK_K, got K={K}, BLOCK_K={block_k}")
        a = torch.randn(M, K, generator=g).abs() + 0.1
        b = torch.randn(K, N, generator=g).abs() + 0.1
        b[:block_k] *= -1  # the first tile's partial sums: about -0.8 * block_k for every output
        # The later tiles add back between 0 and twice that, column by column.
        scale = torch.rand(N, generator=g) * 2 * block_k / (K - block_k)
        b[block_k:] *= scale
    elif pattern == "mostly_negative":
        a = torch.randn(M, K, generator=g) + 0.5
        b = torch.randn(K, N, generator=g) - 0.5
    else:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    return a.to(torch.float16), b.to(torch.float16)


def matmul_relu_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The reference in fp32: relu of the fp32 product of the fp16 inputs (kept in fp32)."""
    return torch.relu(a.float().cpu() @ b.float().cpu())


def _linear(a: torch.Tensor, b: torch.Tensor, k_stop: int | None = None) -> torch.Tensor:
    """A[:, :k_stop] @ B[:k_stop] in fp32, without the ReLU."""
    k_stop = a.shape[1] if k_stop is None else k_stop
    return a.float().cpu()[:, :k_stop] @ b.float().cpu()[:k_stop]


def _relu_in_loop(a: torch.Tensor, b: torch.Tensor, block_k: int) -> torch.Tensor:
    """What a kernel computes when it applies the ReLU after every K tile instead of once at the end."""
    a, b = a.float().cpu(), b.float().cpu()
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], block_k):
        acc = torch.relu(acc + a[:, k:k + block_k] @ b[k:k + block_k])
    return acc


def dropped_k_output(a: torch.Tensor, b: torch.Tensor, k_drop: int) -> torch.Tensor:
    """relu(A @ B) computed without the single product index ``k_drop``: what a kernel that loses one
    element of K (a tail one element long, dropped) produces. Used to show the tolerance is tight."""
    keep = [k for k in range(a.shape[1]) if k != k_drop]
    return torch.relu(a.float()[:, keep] @ b.float()[keep]).to(torch.float16)


def tolerance_catches(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """True when :func:`check_matmul_relu`'s comparison would reject ``actual``."""
    atol, rtol, _ = TOLERANCE
    return not compare(actual, expected, atol=atol, rtol=rtol)[0]


# -------------------------------------------------------------------------------------------- layouts
def _pad(block_sizes) -> int:
    """Guard width: wider than any tile, so a whole stray tile lands in the guard, never past it."""
    return max(64, max(block_sizes) + 16)


def _place(t: torch.Tensor, layout: str, pad: int, device: str) -> tuple[torch.Tensor, Guarded]:
    """A copy of the 2-D ``t`` in ``layout``, inside a NaN guard: (the matrix view, its guard)."""
    rows, cols = t.shape
    t = t.to(device)
    if layout == "contiguous":  # rows exactly ``cols`` apart; whole guard rows before and after
        g = guarded_copy(t.reshape(-1), pad=pad * max(cols, 1))
        return g.view.view(rows, cols), g
    if layout == "padded":  # every row followed by guard elements: stride(0) = cols + 2 * pad
        g = guarded_copy(t, pad=pad)
        return g.view, g
    if layout == "transposed":  # stored column-major: stride(0) = 1
        g = guarded_copy(t.t().contiguous(), pad=pad)
        return g.view.t(), g
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def _place_output(M: int, N: int, layout: str, pad: int, device: str) -> tuple[torch.Tensor, Guarded]:
    """An fp16 output in ``layout`` inside a sentinel guard, every element starting as UNWRITTEN."""
    if layout == "contiguous":
        g = guarded_empty((M * N,), torch.float16, device, pad=pad * max(N, 1))
        view = g.view.view(M, N)
    elif layout == "padded":
        g = guarded_empty((M, N), torch.float16, device, pad=pad)
        view = g.view
    elif layout == "transposed":
        g = guarded_empty((N, M), torch.float16, device, pad=pad)
        view = g.view.t()
    else:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    g.view.fill_(UNWRITTEN)
    return view, g


def _fenced(t: torch.Tensor, layout: str, device: str):
    """``t`` stored compactly in ``layout``, ending exactly where readable memory ends: on the CPU an
    unreadable page follows it, on a GPU (under compute-sanitizer) the end of its own allocation.
    Returns (matrix view, keep-alive object), or None for layouts with gaps between rows."""
    if layout == "contiguous":
        view, keep = fenced_copy(t.to(device), "end")
        return view, keep
    if layout == "transposed":
        view, keep = fenced_copy(t.t().contiguous().to(device), "end")
        return view.t(), keep
    return None  # padded: the guard already sits between the rows


def _where(flat_or_rc: tuple[int, ...], layout: str, shape: tuple[int, int]) -> str:
    """A stray element's position, in words, relative to the matrix (on a hidden case, only before or after it)."""
    rows, cols = shape
    if hidden():
        return "a place before C[0, 0]" if layout == "contiguous" and flat_or_rc[0] < 0 else \
            "a place outside C's rows and columns"
    if layout == "contiguous":
        (i,) = flat_or_rc
        if i < 0:
            return f"{-i} element(s) before C[0, 0]"
        r, c = divmod(i, cols)
        return f"row {r}, column {c} of the memory after C (C has {rows} rows)"
    r, c = flat_or_rc
    if layout == "transposed":
        r, c = c, r
    return f"row {r}, column {c} (C is {rows} x {cols})"

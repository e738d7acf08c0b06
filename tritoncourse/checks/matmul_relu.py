"""Phase 3: checks for ``triton_matmul_relu_kernel``: C = relu(A @ B), fp16 in and out, fp32 inside.

Each check launches the learner's kernel the way the notebook's wrapper does (a 2-D grid of
``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))`` programs) on fresh random fp16 inputs:

1. A and B sit inside NaN guards: a load that strays outside them (an unmasked K tail, rows past M,
   columns past N) reads NaN, and since 0 · NaN = NaN even a masked-to-zero partner cannot hide it;
2. C sits inside a guard of sentinels and starts out filled with another sentinel, so a stray store
   and an element never written are told apart from a wrong value;
3. A and B must be unchanged; the values must match an fp32 reference within :data:`TOLERANCE`;
4. on the interpreter, A and B are then stored so that they end exactly where an unreadable page
   begins (an electric fence), and the kernel runs again: an unmasked load crashes even when its
   values are never stored.

Layouts ("contiguous", "padded", "transposed") put each matrix in a different memory layout: the
kernel must follow the stride arguments. On a failure the message names the likely cause, found by
comparing the output with what known mistakes would have produced on the same inputs.
"""
from __future__ import annotations

import torch
import triton

from ..checking import (OUTPUT_SENTINEL, Guarded, KernelCheckError, compare, fence_supported, fenced_copy,
                        fresh_seed, generator, guarded_copy, guarded_empty, stage)
from ..device import infer_device
from ..tolerances import MATMUL_RELU as TOLERANCE  # (atol, rtol, why): C fp16 against an fp32 reference
from . import explain_launch_error, launch, require_triton_kernel

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
    """A stray element's position, in words, relative to the matrix."""
    rows, cols = shape
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


# ------------------------------------------------------------------------------------------ launching
def run_matmul_relu(kernel, a, b, c, block_m: int, block_n: int, block_k: int, *, context: str,
                    device: str, fence_stage: str | None = None) -> None:
    """Launch ``kernel`` the way the notebook's wrapper does: a 2-D grid of output tiles.

    ``fence_stage``: the stage to record instead of the plain "running ..." one (a crash during a fenced
    run is then explained as an unmasked load).
    """
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    kwargs = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k}
    if fence_stage is None:
        launch(kernel, grid, args, kwargs, name=NAME, signature=SIGNATURE, context=context, device=device)
        return
    stage(fence_stage)  # launch() would overwrite it with "running ..."
    try:
        kernel[grid](*args, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as err:  # the learner's kernel may raise anything
        raise explain_launch_error(err, NAME, SIGNATURE, context) from None


# ----------------------------------------------------------------------------------------- diagnosis
def _close(actual: torch.Tensor, candidate: torch.Tensor) -> bool:
    atol, rtol, _ = TOLERANCE
    return bool(torch.allclose(actual.double(), candidate.double(), atol=atol, rtol=rtol, equal_nan=True))


def _swapped_ids_unwritten(M: int, N: int, block_m: int, block_n: int) -> torch.Tensor:
    """The elements a kernel that swaps program_id(0) and program_id(1) never writes."""
    grid_m, grid_n = triton.cdiv(M, block_m), triton.cdiv(N, block_n)
    rows = torch.arange(M) // block_m < grid_n  # row tiles it does compute: pid_m runs over grid_n
    cols = torch.arange(N) // block_n < grid_m
    return ~(rows[:, None] & cols[None, :])


def _stride_hint(a, b, c, layouts: tuple[str, str, str]) -> str:
    names = []
    for label, t, lay, s in (("A", a, layouts[0], ("stride_am", "stride_ak")),
                             ("B", b, layouts[1], ("stride_bk", "stride_bn")),
                             ("C", c, layouts[2], ("stride_cm", "stride_cn"))):
        if lay != "contiguous":
            names.append(f"{label} is {lay} ({s[0]}={t.stride(0)}, {s[1]}={t.stride(1)})")
    return ("the kernel does not follow the stride arguments. In this test " + "; ".join(names) + ". "
            "Address A[m, k] as a_ptr + m * stride_am + k * stride_ak, B[k, n] as "
            "b_ptr + k * stride_bk + n * stride_bn and C[m, n] as c_ptr + m * stride_cm + n * stride_cn "
            "(not K or N as row lengths, and each matrix with its own strides).")


def _read_as(view: torch.Tensor, base: torch.Tensor, strides: tuple[int, int], shape=None) -> torch.Tensor:
    """What a kernel reads for ``view``'s elements (or a ``shape`` from its first element on) when it
    addresses them with ``strides``: read from the guard buffer ``base`` (NaN outside it), fp32, CPU."""
    flat = base.detach().reshape(-1).float().cpu()
    start = view.storage_offset() - base.storage_offset()
    rows, cols = view.shape if shape is None else shape
    idx = start + torch.arange(rows)[:, None] * strides[0] + torch.arange(cols)[None, :] * strides[1]
    inside = (idx >= 0) & (idx < flat.numel())
    values = torch.full((rows, cols), float("nan"))
    values[inside] = flat[idx[inside]]
    return values


def _matches_poisoned(out: torch.Tensor, product: torch.Tensor) -> bool:
    """Does ``out`` equal relu(``product``), where NaN (read from a guard) either stays NaN (the
    interpreter: numpy's maximum) or is turned into 0 by the ReLU (a GPU: tl.maximum(NaN, 0.0) = 0)?"""
    kept = torch.relu(product)
    if _close(out, kept):
        return True
    nan = torch.isnan(product)
    return bool(nan.any()) and _close(out, torch.where(nan, 0.0, kept))


def _k_tail_unmasked(out: torch.Tensor, views, bases, block_k: int) -> str:
    """Which loads ('A', 'B', 'A and B') read the last K step past K unmasked, if that explains ``out``."""
    a, b, _ = views
    ga, gb = bases
    M, K = a.shape
    N = b.shape[1]
    k_pad = triton.cdiv(K, block_k) * block_k
    if k_pad == K:
        return ""
    a_wide = _read_as(a, ga, tuple(a.stride()), (M, k_pad))
    b_wide = _read_as(b, gb, tuple(b.stride()), (k_pad, N))
    a_masked, b_masked = a_wide.clone(), b_wide.clone()
    a_masked[:, K:] = 0.0
    b_masked[K:] = 0.0
    for a_x, b_x, which in ((a_wide, b_wide, "A and B"), (a_wide, b_masked, "A"), (a_masked, b_wide, "B")):
        # NaN times anything, 0 included, is NaN: a NaN in row m of A or column n of B poisons C[m, n].
        poisoned = torch.isnan(a_x).any(1)[:, None] | torch.isnan(b_x).any(0)[None, :]
        if not poisoned.any():
            continue
        product = torch.nan_to_num(a_x) @ torch.nan_to_num(b_x)
        if _matches_poisoned(out, torch.where(poisoned, float("nan"), product)):
            return which
    return ""


def _stride_mixup(out: torch.Tensor, views, bases) -> str:
    """Name a stride mix-up whose result matches ``out`` (the loads' addressing only), or ''."""
    a, b, _ = views
    ga, gb = bases
    M, K = a.shape
    N = b.shape[1]
    sa, sb = tuple(a.stride()), tuple(b.stride())
    candidates = [
        ((K, 1), (N, 1), "A and B are addressed as if their rows were K and N elements apart (m * K + k, "
         "k * N + n) instead of with the stride arguments"),
        (sb, sa, "A is addressed with B's strides and B with A's (stride_bk, stride_bn for A)"),
        ((sa[1], sa[0]), sb, "stride_am and stride_ak are swapped: A[m, k] is at a_ptr + m * stride_am + "
         "k * stride_ak"),
        (sa, (sb[1], sb[0]), "stride_bk and stride_bn are swapped: B[k, n] is at b_ptr + k * stride_bk + "
         "n * stride_bn"),
    ]
    if torch.isnan(out).all() or (out == 0).all():
        return ""  # nothing to tell the candidates apart
    for strides_a, strides_b, words in candidates:
        if (strides_a, strides_b) == (sa, sb):
            continue
        product = _read_as(a, ga, strides_a) @ _read_as(b, gb, strides_b)
        if not torch.isnan(product).all() and _matches_poisoned(out, product):
            return f"a stride mix-up: {words}."
    return ""


def diagnose(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, block_m: int, block_n: int,
             block_k: int, views=None, layouts=("contiguous",) * 3, bases=None) -> str:
    """Guess the likely cause of wrong values, in a learner's words.

    ``out`` is C as the kernel left it (UNWRITTEN where it never stored); the candidates are what
    known mistakes produce on the same inputs. ``views`` (A, B, C as launched) and ``bases`` (the guard
    buffers of A and B) let it recognise stride mix-ups.
    """
    out = out.detach().cpu().float()
    a, b = a.cpu(), b.cpu()
    M, K = a.shape
    N = b.shape[1]
    unwritten = out == UNWRITTEN
    if unwritten.all():
        return "nothing was written to C: is there a tl.store to c_ptr (with the offsets of this tile)?"
    if unwritten.any():
        n_un = int(unwritten.sum())
        r, c = unwritten.nonzero()[0].tolist()
        if torch.equal(unwritten, _swapped_ids_unwritten(M, N, block_m, block_n)):
            return (f"{n_un} elements of C were never written, in whole tiles: the program ids look swapped. "
                    f"The grid is (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)) = ({triton.cdiv(M, block_m)}, "
                    f"{triton.cdiv(N, block_n)}): rows come from tl.program_id(0), columns from "
                    "tl.program_id(1).")
        return (f"{n_un} elements of C were never written, the first at row {r}, column {c}: does every "
                "program store its whole BLOCK_M x BLOCK_N tile, at rows pid_m * BLOCK_M + "
                "tl.arange(0, BLOCK_M) and columns pid_n * BLOCK_N + tl.arange(0, BLOCK_N), with the store "
                "mask (rows < M) & (columns < N)?")
    if views is not None and bases is not None:
        mixup = _stride_mixup(out, views, bases)
        if mixup:
            return mixup
    tail = _k_tail_unmasked(out, views, bases, block_k) if views is not None and bases is not None else ""
    if tail:
        return (f"the loads of {tail} in the last K step read past K (here K = {K} is not a multiple of "
                f"BLOCK_K = {block_k}): the memory around A and B holds NaN in this test and 0 * NaN = NaN, "
                "so masking only one of the two loads is not enough (on a GPU, tl.maximum(NaN, 0.0) is 0, so "
                "those outputs come out 0). Mask both A's and B's loads with their k index < K (other=0.0).")
    nan = torch.isnan(out)
    if nan.any():
        r, c = nan.nonzero()[0].tolist()
        if K % block_k:
            return (f"C[{r}, {c}] is NaN: a load in the last K tile read past K (here K = {K} is not a multiple "
                    f"of BLOCK_K = {block_k}). The memory around A and B holds NaN in this test and "
                    "0 * NaN = NaN, so masking only one of the two loads is not enough: mask both A's and "
                    "B's loads with their k index < K (other=0.0).")
        if views is not None and any(lay != "contiguous" for lay in layouts):
            return f"C[{r}, {c}] is NaN: " + _stride_hint(*views, layouts)
        return (f"C[{r}, {c}] is NaN: the kernel read outside A or B (the memory around them holds NaN in "
                "this test). Check the load masks and that A and B are addressed with their own strides.")
    lin = _linear(a, b)
    if (out == 0).all() and views is not None and any(lay != "contiguous" for lay in layouts) \
            and not K % block_k:
        return ("C is all zeros: every output read NaN from outside A or B (this test surrounds them with NaN, "
                "and on a GPU tl.maximum(NaN, 0.0) is 0); " + _stride_hint(*views, layouts))
    if (out == 0).all():
        return ("C is all zeros. Either the K loop never ran or its products are not added to the accumulator "
                "(for K < BLOCK_K there is still one step: tl.cdiv(K, BLOCK_K) = 1, while K // BLOCK_K = 0), "
                "or every output read NaN from outside A or B (this test surrounds them with NaN, and on a GPU "
                "tl.maximum(NaN, 0.0) is 0): check the loop bound, the load masks (k < K for both A and B) and "
                "that A and B are addressed with their own strides.")
    if (out < 0).any():
        if _close(out, lin):
            return ("C has the negative values of A @ B: the ReLU is missing. Apply "
                    "tl.maximum(acc, 0.0) once, after the K loop, before the store.")
        if _close(out, torch.clamp(lin, max=0.0)):
            return ("C keeps the negative values and zeroes the positive ones: the ReLU is inverted. "
                    "Use tl.maximum(acc, 0.0) (or tl.where(acc > 0, acc, 0.0)).")
        r, c = (out < 0).nonzero()[0].tolist()
        return (f"C[{r}, {c}] = {out[r, c].item():.4g} is negative, which relu never gives: is the ReLU "
                "applied to the accumulator before the store?")
    if _close(out, torch.relu(-lin)):
        return ("C holds relu(-(A @ B)): the ReLU is applied to the negated product. "
                "Use tl.maximum(acc, 0.0).")
    if _close(out, _relu_in_loop(a, b, block_k)):
        return ("C matches a ReLU applied inside the K loop. Partial sums may be negative and become "
                "positive later (here they do): accumulate the whole K loop first, then apply the ReLU "
                "once, after the loop.")
    k_full = K // block_k * block_k
    if K % block_k and _close(out, torch.relu(_linear(a, b, k_full))):
        return (f"C matches A @ B over the first {k_full} of K = {K} elements only: the K tail was dropped. "
                f"With K not a multiple of BLOCK_K = {block_k}, loop over tl.cdiv(K, BLOCK_K) tiles and "
                "mask the last one (k index < K, other=0.0).")
    k_early = (triton.cdiv(K, block_k) - 1) * block_k
    if _close(out, torch.relu(_linear(a, b, k_early))):
        return (f"C matches A @ B over the first {k_early} of K = {K} elements: the K loop stops one tile "
                "early. Loop over all tl.cdiv(K, BLOCK_K) tiles (range(0, tl.cdiv(K, BLOCK_K))).")
    ref = torch.relu(lin)
    rel = ((out - ref).abs() / ref.abs().clamp(min=1.0)).max().item()
    if rel < 3e-2:
        return ("the values are close but not within fp16 rounding of the fp32 result: accumulate in fp32 "
                "(acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)) and convert to fp16 only once, "
                "at the store.")
    if views is not None and any(lay != "contiguous" for lay in layouts):
        return _stride_hint(*views, layouts)
    return ("compare your offsets with the picture of the tiles above the kernel: program (pid_m, pid_n) "
            "computes the C tile at rows pid_m * BLOCK_M ..., columns pid_n * BLOCK_N ..., from the row of "
            "A tiles and the column of B tiles, summing over K.")


# ---------------------------------------------------------------------------------------------- check
def check_matmul_relu(kernel, M: int, N: int, K: int, block_m: int = 32, block_n: int = 32,
                      block_k: int = 32, *, layout_a: str = "contiguous", layout_b: str = "contiguous",
                      layout_c: str = "contiguous", pattern: str = "random", seed: int | None = None) -> None:
    """Launch ``kernel`` on fresh random fp16 A (M x K) and B (K x N) and check C = relu(A @ B).

    Raises :class:`KernelCheckError` with a message for the learner on the first problem found.
    """
    require_triton_kernel(kernel, NAME)
    for label, value in (("BLOCK_M", block_m), ("BLOCK_N", block_n), ("BLOCK_K", block_k)):
        if value < MIN_BLOCK or value & (value - 1):
            raise ValueError(f"{label} = {value}: tests use powers of two >= {MIN_BLOCK} (tl.dot on a GPU)")
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    a, b = make_inputs(M, N, K, seed, pattern, block_k)
    expected = matmul_relu_ref(a, b)
    layouts = (layout_a, layout_b, layout_c)
    shown = "" if layouts == ("contiguous",) * 3 else f", A {layout_a}, B {layout_b}, C {layout_c}"
    context = (f"M={M}, N={N}, K={K}, BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k}{shown}, "
               f"{pattern} fp16 inputs, seed {seed}")
    pad = _pad((block_m, block_n, block_k))
    ga_view, ga = _place(a, layout_a, pad, device)
    gb_view, gb = _place(b, layout_b, pad, device)
    c_view, gc = _place_output(M, N, layout_c, pad, device)
    run_matmul_relu(kernel, ga_view, gb_view, c_view, block_m, block_n, block_k, context=context, device=device)

    if not (torch.equal(ga_view.cpu(), a) and torch.equal(gb_view.cpu(), b)):
        raise KernelCheckError(f"The kernel changed its inputs A or B ({context}).\n"
                               "Likely cause: a tl.store to a_ptr or b_ptr instead of c_ptr.")
    if ga.guard_changes() or gb.guard_changes():
        raise KernelCheckError(f"The kernel wrote outside A or B ({context}).\n"
                               "Likely cause: a tl.store to a_ptr or b_ptr.")
    stray = gc.guard_changes()
    if stray:
        where = _where(gc.first_guard_change(), layout_c, (M, N))
        also = (" or the store does not use stride_cm and stride_cn (C is not contiguous in this test)"
                if layout_c != "contiguous" else "")
        raise KernelCheckError(
            f"{stray} element(s) outside C were written; the first at {where} ({context}).\n"
            "Likely cause: the tl.store is not masked with (rows < M) & (columns < N), so the last tiles' "
            f"rows past M or columns past N are written{also}.")
    atol, rtol, _ = TOLERANCE
    ok, msg = compare(c_view, expected, atol=atol, rtol=rtol, name="C")
    if not ok:
        cause = diagnose(c_view, a, b, block_m, block_n, block_k, (ga_view, gb_view, c_view), layouts,
                         (ga.buffer, gb.buffer))
        if bool((c_view == UNWRITTEN).any()):
            msg += f"\n  ({UNWRITTEN:g} is what C held before the kernel ran: those elements were never written)"
        raise KernelCheckError(f"Wrong values ({context}).\n{msg}\nLikely cause: {cause}")

    if fence_supported(device):
        fa, fb = _fenced(a, layout_a, device), _fenced(b, layout_b, device)
        if fa is not None or fb is not None:
            a2 = fa[0] if fa is not None else ga_view
            b2 = fb[0] if fb is not None else gb_view
            c2, _ = _place_output(M, N, layout_c, pad, device)
            fence = (f"FENCE-READ: running `{NAME}` on A and B that end exactly where readable memory ends "
                     f"({context}): any unmasked load of a row of A >= M, a column of B >= N or a k >= K "
                     "crashes here")
            run_matmul_relu(kernel, a2, b2, c2, block_m, block_n, block_k, context=context, device=device,
                            fence_stage=fence)
            ok, msg = compare(c2, expected, atol=atol, rtol=rtol, name="C")
            if not ok:
                raise KernelCheckError(f"Wrong values on the second run, with A and B stored without guards "
                                       f"({context}).\n{msg}")
    stage("done")

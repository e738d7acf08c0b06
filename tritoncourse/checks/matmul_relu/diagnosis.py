"""Phase 3: why a matmul + ReLU kernel is wrong: the usual mistakes (no ReLU or an inverted one, the ReLU inside
the K loop, a K tail dropped or read unmasked, the loop one tile short, swapped program ids, strides mixed up or
ignored, an fp16 accumulator) replayed on the same inputs, guard buffers included, and the one that reproduces C
named in a learner's words.
"""
from __future__ import annotations

import torch
import triton

from ...checking import shown
from ...tolerances import MATMUL_RELU as TOLERANCE  # (atol, rtol, why): C fp16 against an fp32 reference
from .inputs import UNWRITTEN, _linear, _relu_in_loop

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


def _one_d_mapping_unwritten(M: int, N: int, block_m: int, block_n: int, group: int) -> torch.Tensor:
    """The elements a kernel written for a 1-D grid never writes when the course's 2-D grid launches it: it reads only
    tl.program_id(0) (0 .. cdiv(M, BLOCK_M) - 1 here) as the linear tile id of Triton's tutorial, mapped to tiles in
    groups of ``group`` row tiles (``group`` 1: row-major order)."""
    grid_m, grid_n = triton.cdiv(M, block_m), triton.cdiv(N, block_n)
    written = torch.zeros(grid_m, grid_n, dtype=torch.bool)
    in_group = group * grid_n
    for pid in range(grid_m):
        first_m = pid // in_group * group
        size_m = min(grid_m - first_m, group)
        written[first_m + pid % in_group % size_m, pid % in_group // size_m] = True
    tiles = written.repeat_interleave(block_m, 0).repeat_interleave(block_n, 1)
    return ~tiles[:M, :N]


def _one_d_mapping_group(unwritten: torch.Tensor, M: int, N: int, block_m: int, block_n: int) -> int | None:
    """The group size of a 1-D tile mapping whose unwritten elements are exactly ``unwritten``, or None."""
    for group in range(1, triton.cdiv(M, block_m) + 1):
        if torch.equal(unwritten, _one_d_mapping_unwritten(M, N, block_m, block_n, group)):
            return group
    return None


def _stride_hint(a, b, c, layouts: tuple[str, str, str]) -> str:
    names = []
    for label, t, lay, s in (("A", a, layouts[0], ("stride_am", "stride_ak")),
                             ("B", b, layouts[1], ("stride_bk", "stride_bn")),
                             ("C", c, layouts[2], ("stride_cm", "stride_cn"))):
        if lay != "contiguous":
            names.append(f"{label} is {lay}" + shown(f" ({s[0]}={t.stride(0)}, {s[1]}={t.stride(1)})", ""))
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


def _advance_mixup(out: torch.Tensor, views, bases, block_k: int) -> str:
    """Name pointers advanced along the wrong dimension each K step (A by BLOCK_K * stride_am, B by BLOCK_K *
    stride_bn), replayed step by step on the guard buffers, if that explains ``out``; else ''."""
    a, b, _ = views
    ga, gb = bases
    M, K = a.shape
    N = b.shape[1]
    steps = triton.cdiv(K, block_k)
    sa, sb = tuple(a.stride()), tuple(b.stride())
    a_right = _read_as(a, ga, sa, (M, steps * block_k))
    b_right = _read_as(b, gb, sb, (steps * block_k, N))
    a_wrong = _read_as(a, ga, sa, (M + steps * block_k, block_k))  # step t: rows t * BLOCK_K on
    b_wrong = _read_as(b, gb, sb, (block_k, N + steps * block_k))  # step t: columns t * BLOCK_K on

    def product(a_off: bool, b_off: bool) -> torch.Tensor:
        total = torch.zeros(M, N)
        for t in range(steps):
            live = (t * block_k + torch.arange(block_k)) < K  # the K mask, other=0.0
            at = a_wrong[t * block_k:t * block_k + M] if a_off else a_right[:, t * block_k:(t + 1) * block_k]
            bt = b_wrong[:, t * block_k:t * block_k + N] if b_off else b_right[t * block_k:(t + 1) * block_k]
            total += torch.where(live[None, :], at, 0.0) @ torch.where(live[:, None], bt, 0.0)
        return total

    if torch.isnan(out).all() or (out == 0).all():
        return ""
    for a_off, b_off, words in (
            (False, True, "B's pointers move along N each K step: move them down BLOCK_K rows of B, b_ptrs += "
                          "BLOCK_K * stride_bk (not stride_bn)"),
            (True, False, "A's pointers move along M each K step: move them across BLOCK_K columns of A, a_ptrs "
                          "+= BLOCK_K * stride_ak (not stride_am)"),
            (True, True, "A's and B's pointers move along M and N each K step instead of along K: a_ptrs += "
                         "BLOCK_K * stride_ak, b_ptrs += BLOCK_K * stride_bk")):
        if _matches_poisoned(out, product(a_off, b_off)):
            return words + "."
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
        group = _one_d_mapping_group(unwritten, M, N, block_m, block_n)
        swapped = torch.equal(unwritten, _swapped_ids_unwritten(M, N, block_m, block_n))
        if group is not None:
            grid_m = triton.cdiv(M, block_m)
            order = ("in row-major order" if group == 1 else f"grouped, GROUP_SIZE_M >= {grid_m}: column by column"
                     if group == grid_m else f"grouped by GROUP_SIZE_M = {group} row tiles")
            order = shown(order, "in a grouped or row-major order")
            also = (" (or the program ids look swapped: on this test's grid the two leave the same tiles unwritten)"
                    if swapped else "")
            grid = shown(f" = ({triton.cdiv(M, block_m)}, {triton.cdiv(N, block_n)})", "")
            return (f"{shown(f'{n_un} elements', 'Elements')} of C were never written, in whole tiles, as by a kernel "
                    f"written for a 1-D grid{also}: it maps tl.program_id(0) alone to a tile ({order}, as in "
                    f"Triton's matmul tutorial), but this course launches a 2-D grid (cdiv(M, BLOCK_M), "
                    f"cdiv(N, BLOCK_N)){grid}, so program_id(0) only counts the row tiles and program_id(1) is "
                    "never read. Take pid_m = tl.program_id(0) and pid_n = tl.program_id(1), or, to keep a grouped "
                    "order, start from the linear id pid = tl.program_id(1) * tl.cdiv(M, BLOCK_M) + tl.program_id(0).")
        if swapped:
            grid = shown(f" = ({triton.cdiv(M, block_m)}, {triton.cdiv(N, block_n)})", "")
            return (f"{shown(f'{n_un} elements', 'Elements')} of C were never written, in whole tiles: the program "
                    f"ids look swapped. The grid is (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)){grid}: rows come from "
                    "tl.program_id(0), columns from tl.program_id(1).")
        return (shown(f"{n_un} elements of C were never written, the first at row {r}, column {c}",
                      "Some elements of C were never written") + ": does every "
                "program store its whole BLOCK_M x BLOCK_N tile, at rows pid_m * BLOCK_M + "
                "tl.arange(0, BLOCK_M) and columns pid_n * BLOCK_N + tl.arange(0, BLOCK_N), with the store "
                "mask (rows < M) & (columns < N)?")
    if views is not None and bases is not None:
        mixup = _stride_mixup(out, views, bases) or _advance_mixup(out, views, bases, block_k)
        if mixup:
            return mixup
    here_k = shown(f" (here K = {K} is not a multiple of BLOCK_K = {block_k})",
                   " (K is not a multiple of BLOCK_K here)")
    tail = _k_tail_unmasked(out, views, bases, block_k) if views is not None and bases is not None else ""
    if tail:
        return (f"the loads of {tail} in the last K step read past K{here_k}: the memory around A and B holds NaN "
                "in this test and 0 * NaN = NaN, "
                "so masking only one of the two loads is not enough (on a GPU, tl.maximum(NaN, 0.0) is 0, so "
                "those outputs come out 0). Mask both A's and B's loads with their k index < K (other=0.0).")
    nan = torch.isnan(out)
    if nan.any():
        r, c = nan.nonzero()[0].tolist()
        if K % block_k:
            return (f"{shown(f'C[{r}, {c}] is', 'Some of C is')} NaN: a load in the last K tile read past K"
                    f"{here_k}. The memory around A and B holds NaN in this test and "
                    "0 * NaN = NaN, so masking only one of the two loads is not enough: mask both A's and "
                    "B's loads with their k index < K (other=0.0).")
        if views is not None and any(lay != "contiguous" for lay in layouts):
            return f"{shown(f'C[{r}, {c}] is', 'Some of C is')} NaN: " + _stride_hint(*views, layouts)
        return (f"{shown(f'C[{r}, {c}] is', 'Some of C is')} NaN: the kernel read outside A or B (the memory around "
                "them holds NaN in "
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
        return (f"{shown(f'C[{r}, {c}] = {out[r, c].item():.4g} is', 'Some of C is')} negative, which relu never "
                "gives: is the ReLU "
                "applied to the accumulator before the store?")
    if _close(out, torch.relu(-lin)):
        return ("C holds relu(-(A @ B)): the ReLU is applied to the negated product. "
                "Use tl.maximum(acc, 0.0).")
    for relu_a, relu_b, which in ((True, True, "A and B"), (True, False, "A"), (False, True, "B")):
        if _close(out, torch.relu(_linear(torch.relu(a) if relu_a else a, torch.relu(b) if relu_b else b))):
            return (f"C matches relu(A @ B) with the ReLU also applied to the tiles of {which} as they are loaded: "
                    "the ReLU acts on the product only. Apply tl.maximum(acc, 0.0) once, to the accumulator "
                    "after the K loop, and leave the loaded tiles as they are.")
    if _close(out, _relu_in_loop(a, b, block_k)):
        return ("C matches a ReLU applied inside the K loop. Partial sums may be negative and become "
                "positive later (here they do): accumulate the whole K loop first, then apply the ReLU "
                "once, after the loop.")
    k_full = K // block_k * block_k
    if K % block_k and _close(out, torch.relu(_linear(a, b, k_full))):
        return (f"C matches A @ B over the first {shown(f'{k_full} of K = {K}', 'K // BLOCK_K * BLOCK_K of K')} "
                "elements only: the K tail was dropped. "
                f"With K not a multiple of BLOCK_K{shown(f' = {block_k}', '')}, loop over tl.cdiv(K, BLOCK_K) tiles "
                "and "
                "mask the last one (k index < K, other=0.0).")
    k_early = (triton.cdiv(K, block_k) - 1) * block_k
    if _close(out, torch.relu(_linear(a, b, k_early))):
        return (f"C matches A @ B over {shown(f'the first {k_early} of K = {K}', 'all but the last tile of K')} "
                "elements: the K loop stops one tile "
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

"""Phase 5: the autotuned matmul + ReLU, launched config by config and through its autotuner.

Checks of the kernel itself (C = relu(A @ B) for given meta-parameters, on fresh fp16 inputs in guarded, possibly
transposed layouts), of its grouped program order (found by launching the first p programs only), of every config
of its space, and of the autotuner running (a CPU timer on the interpreter, :func:`tritoncourse.benchmarking.cpu_do_bench`).
Wrong values are explained by :func:`diagnose_matmul`, which replays the usual mistakes (tile orders, the ReLU's place,
a dropped K tail, unmasked loads) on the same inputs.
"""
from __future__ import annotations

import torch
import triton

from ...benchmarking import cpu_do_bench
from ..common.launch import BOUNDARY_CHECK_HINT
from ...checking import (OUTPUT_SENTINEL, Case, KernelCheckError, compare, fence_supported, fenced_copy, fresh_seed,
                         generator, shown, size_kind, stage, tiles_kind)
from ...device import infer_device
from ...gpus import describe
from ...tolerances import MATMUL_RELU as MATMUL_TOLERANCE  # phase 3's C
from .configs import MATMUL, META, _configs, autotuner_of, jit_of, matmul_limit_problems
from .launch import Strided, _config_meta, _explained, _launch, _runnable

# ---------------------------------------------------------------------------------------------- matmul
UNWRITTEN = float(torch.tensor(OUTPUT_SENTINEL, dtype=torch.float16))


def grouped_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    """The C tile (pid_m, pid_n) program ``pid`` computes in the grouped order of Triton's tutorial."""
    per_group = group_m * num_pid_n
    first_m = (pid // per_group) * group_m
    size_m = min(num_pid_m - first_m, group_m)
    return first_m + (pid % per_group) % size_m, (pid % per_group) // size_m


def _unclamped_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    """The tile a kernel that forgets to shrink the last group (group_size_m = GROUP_M) computes."""
    per_group = group_m * num_pid_n
    first_m = (pid // per_group) * group_m
    return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m


def _row_major_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    return pid // num_pid_n, pid % num_pid_n


def _column_major_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    return pid % num_pid_m, pid // num_pid_m


ORDERS = {
    "grouped": grouped_tile,
    "unclamped": _unclamped_tile,
    "row-major": _row_major_tile,
    "column-major": _column_major_tile,
}


def make_matmul_inputs(M: int, N: int, K: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Signed fp16 A (M x K) and B (K x N): about half of A @ B is negative, so the ReLU matters."""
    g = generator(seed)
    return torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()


def matmul_relu_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(a.float().cpu() @ b.float().cpu())


def _matmul_grid(M: int, N: int, block_m: int, block_n: int) -> tuple[int]:
    return (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)


def _matmul_args(a, b, c) -> tuple:
    M, K = a.shape
    N = b.shape[1]
    return (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def _close(x: torch.Tensor, y: torch.Tensor) -> bool:
    atol, rtol, _ = MATMUL_TOLERANCE
    return bool(torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol, equal_nan=True))


def _simulate_order(order, M: int, N: int, block_m: int, block_n: int, group_m: int,
                    expected: torch.Tensor) -> torch.Tensor:
    """C as a kernel with the right tile math but the given program order would leave it."""
    num_m, num_n = triton.cdiv(M, block_m), triton.cdiv(N, block_n)
    out = torch.full((M, N), UNWRITTEN)
    for pid in range(num_m * num_n):
        pm, pn = order(pid, num_m, num_n, group_m)
        if 0 <= pm < num_m and 0 <= pn < num_n:
            out[pm * block_m:(pm + 1) * block_m, pn * block_n:(pn + 1) * block_n] = \
                expected[pm * block_m:(pm + 1) * block_m, pn * block_n:(pn + 1) * block_n]
    return out


def diagnose_matmul(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, meta: dict) -> str:
    """The likely cause of wrong values, by comparing C with what known mistakes produce on these inputs."""
    out = out.detach().cpu().float()
    a32, b32 = a.float().cpu(), b.float().cpu()
    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk, gm = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], meta["GROUP_M"]
    expected = torch.relu(a32 @ b32)
    unwritten = out == UNWRITTEN
    if unwritten.all():
        return "nothing was written to C: is there a tl.store to c_ptr with this tile's offsets?"
    if unwritten.any():
        for order_name in ("unclamped", "row-major", "column-major"):
            sim = _simulate_order(ORDERS[order_name], M, N, bm, bn, gm, expected)
            if torch.equal(sim == UNWRITTEN, unwritten):
                if order_name == "unclamped":
                    return ("whole tiles of C were never written, exactly those a kernel misses when the last "
                            f"group of rows is shorter than GROUP_M{shown(f' = {gm}', '')} "
                            f"and group_size_m is not shrunk for it. "
                            "Use group_size_m = min(num_pid_m - first_pid_m, GROUP_M).")
        r, c = unwritten.nonzero()[0].tolist()
        return (shown(f"{int(unwritten.sum())} elements of C were never written, the first at row {r}, column {c}",
                      "Some elements of C were never written") + ": "
                "does every program id 0 .. cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) - 1 map to a different tile "
                "(pid_m, pid_n), with pid_m < cdiv(M, BLOCK_M) and pid_n < cdiv(N, BLOCK_N)?")
    lin = a32 @ b32
    if (out < 0).any() and _close(out, lin):
        return "C has the negative values of A @ B: apply the ReLU, tl.maximum(acc, 0.0), after the K loop."
    acc = torch.zeros(M, N)
    for k in range(0, K, bk):
        acc = torch.relu(acc + a32[:, k:k + bk] @ b32[k:k + bk])
    if _close(out, acc) and not _close(expected, acc):
        return ("C matches a ReLU applied inside the K loop: accumulate the whole K loop, then apply the ReLU "
                "once, after the loop.")
    k_full = K // bk * bk
    if K % bk and _close(out, torch.relu(a32[:, :k_full] @ b32[:k_full])):
        return (f"C matches A @ B over the first {shown(f'{k_full} of K = {K}', 'K // BLOCK_K * BLOCK_K of K')} "
                "elements only: the last K step, which is "
                f"shorter than BLOCK_K{shown(f' = {bk}', '')}, was dropped. "
                f"Loop over tl.cdiv(K, BLOCK_K) steps and mask the "
                "loads with k < K (other=0.0).")
    nan = torch.isnan(out)
    if nan.any():
        r, c = nan.nonzero()[0].tolist()
        tail = (f" K{shown(f' = {K}', '')} is not a multiple of BLOCK_K{shown(f' = {bk}', '')}: "
                f"a kernel that assumes it is reads past the end "
                "of A's rows and B's columns on the last K step." if K % bk else "")
        return (f"{shown(f'C[{r}, {c}] is', 'Some of C is')} NaN: the kernel read outside A or B "
                f"(the memory around them holds NaN in this "
                f"test, and 0 * NaN = NaN).{tail} Mask both loads: rows < M and k < K for A, k < K and "
                "columns < N for B, with other=0.0.")
    if K % bk and ((out == 0) & (expected > 0)).any() and not torch.isnan(out).any():
        return (f"K{shown(f' = {K}', '')} is not a multiple of BLOCK_K{shown(f' = {bk}', '')}, "
                f"and C holds zeros where relu(A @ B) is positive: a "
                "kernel that assumes BLOCK_K divides K reads past the end of A's rows and B's columns on the last K "
                "step (NaN in this test, and on a GPU tl.maximum(NaN, 0) gives 0). Mask both loads: rows < M and "
                "k < K for A, k < K and columns < N for B, with other=0.0.")
    # Tiles written with the wrong tile's values: a permuted or duplicated mapping.
    rel = ((out - expected).abs() / expected.abs().clamp(min=1.0)).max().item()
    if rel < 3e-2:
        return ("the values are close but not within fp16 rounding: accumulate in fp32 "
                "(tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)) and convert to fp16 once, at the store.")
    return ("compare the kernel with the steps above it: the tile (pid_m, pid_n) of this program, the rows "
            "pid_m * BLOCK_M + tl.arange(0, BLOCK_M) and columns pid_n * BLOCK_N + tl.arange(0, BLOCK_N), the "
            "K loop, and every address through the strides.")


def _run_matmul_case(fn, a: torch.Tensor, b: torch.Tensor, meta: dict, *, context: str, device: str,
                     layouts: tuple[bool, bool, bool] = (False, False, False), fence: bool = True) -> None:
    """Launch ``fn`` (the @triton.jit kernel) once with ``meta`` on guarded copies of a and b and check C;
    then on the interpreter once more on a and b that end where readable memory ends."""
    M, K = a.shape
    N = b.shape[1]
    expected = matmul_relu_ref(a, b)
    pad = (max(meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]) + 16) * (max(M, N, K) + 16)
    ga = Strided.copy_of(a, device, layouts[0], pad=pad)
    gb = Strided.copy_of(b, device, layouts[1], pad=pad)
    gc = Strided.make(M, N, torch.float16, device, OUTPUT_SENTINEL, layouts[2], pad=pad)
    gc.view.fill_(UNWRITTEN)
    grid = _matmul_grid(M, N, meta["BLOCK_M"], meta["BLOCK_N"])
    _launch(fn, grid, _matmul_args(ga.view, gb.view, gc.view), meta, name=MATMUL, context=context, device=device)
    if not (torch.equal(ga.view.cpu(), a) and torch.equal(gb.view.cpu(), b)) or ga.stray() or gb.stray():
        raise KernelCheckError(f"The kernel wrote into A or B, or next to them ({context}).\n"
                               "Likely cause: a tl.store to a_ptr or b_ptr instead of c_ptr.")
    stray = gc.stray()
    if stray:
        raise KernelCheckError(
            f"{shown(f'{stray} element(s)', 'Elements')} outside C were written ({context}).\n"
            "Likely cause: the tl.store is not masked "
            f"with (rows < M) & (columns < N){BOUNDARY_CHECK_HINT}, or C is not addressed with stride_cm and "
            "stride_cn.")
    atol, rtol, _ = MATMUL_TOLERANCE
    ok, msg = compare(gc.view, expected, atol=atol, rtol=rtol, name="C")
    if not ok:
        raise KernelCheckError(f"Wrong values ({context}).\n{msg}\nLikely cause: "
                               f"{diagnose_matmul(gc.view, a, b, meta)}")
    if fence and fence_supported(device):
        fa, keep_a = fenced_copy(a.to(device) if not layouts[0] else a.t().contiguous().to(device), "end")
        fb, keep_b = fenced_copy(b.to(device) if not layouts[1] else b.t().contiguous().to(device), "end")
        fa = fa.t() if layouts[0] else fa
        fb = fb.t() if layouts[1] else fb
        c2 = Strided.make(M, N, torch.float16, device, OUTPUT_SENTINEL, layouts[2], pad=pad)
        c2.view.fill_(UNWRITTEN)
        stage(f"FENCE-READ: running `{MATMUL}` on A and B that end exactly where readable memory ends "
              f"({context}): an unmasked load of a row of A >= M, a column of B >= N or a k >= K crashes here")
        _launch(fn, grid, _matmul_args(fa, fb, c2.view), meta, name=MATMUL, context=context, device=device)
        ok, msg = compare(c2.view, expected, atol=atol, rtol=rtol, name="C")
        if not ok:
            raise KernelCheckError(f"Wrong values on a second run, with A and B stored compactly ({context}).\n"
                                   f"{msg}\nLikely cause: the kernel reads memory outside A or B.")
        del keep_a, keep_b


def check_autotuned_matmul_relu(kernel, M: int, N: int, K: int, block_m: int = 16, block_n: int = 16,
                                block_k: int = 16, group_m: int = 1, *, transpose_a: bool = False,
                                transpose_b: bool = False, transpose_c: bool = False,
                                seed: int | None = None) -> None:
    """Launch the kernel itself (not the autotuner) with the given meta-parameters on a 1-D grid of
    cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs, on fresh fp16 inputs, and check C = relu(A @ B)."""
    fn = jit_of(kernel, MATMUL)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    a, b = make_matmul_inputs(M, N, K, seed)
    meta = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": group_m}
    layout = "".join(f", {n} transposed" for n, t in (("A", transpose_a), ("B", transpose_b), ("C", transpose_c)) if t)
    context = Case(f"M={M}, N={N}, K={K}, BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k}, GROUP_M={group_m}"
                   f"{layout}, seed {seed}", tiles_kind(M, N, block_m, block_n),
                   size_kind(K, block_k, "K", "BLOCK_K", "K steps"), layout.lstrip(", "))
    _run_matmul_case(fn, a, b, meta, context=context, device=device, layouts=(transpose_a, transpose_b, transpose_c))
    stage("done")


def check_matmul_relu_grouped_order(kernel, M: int, N: int, block_m: int = 16, block_n: int = 16,
                                    group_m: int = 2, seed: int | None = None) -> None:
    """Program ``pid`` computes the tile of the grouped order: GROUP_M rows of tiles at a time, walking
    down a column of the group before moving right. Found by launching the first p programs only (grids
    of 1, 2, ... programs) and seeing which tile each new program writes."""
    fn = jit_of(kernel, MATMUL)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    K = 16
    a, b = make_matmul_inputs(M, N, K, seed)
    num_m, num_n = triton.cdiv(M, block_m), triton.cdiv(N, block_n)
    meta = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": 16, "GROUP_M": group_m}
    context = Case(f"M={M}, N={N}, K={K}, BLOCK_M={block_m}, BLOCK_N={block_n}, GROUP_M={group_m}: "
                   f"{num_m} x {num_n} tiles, seed {seed}", tiles_kind(M, N, block_m, block_n),
                   "the last group of rows shorter than GROUP_M" if num_m % group_m else
                   "every group of rows GROUP_M tall")
    a_d, b_d = a.to(device), b.to(device)
    seen: set[tuple[int, int]] = set()
    got: list = []
    for p in range(1, num_m * num_n + 1):
        c = torch.full((M, N), UNWRITTEN, dtype=torch.float16, device=device)
        _launch(fn, (p,), _matmul_args(a_d, b_d, c), meta, name=MATMUL,
                context=context.but(f"the first {p} program(s) only, ", "some of the programs only"), device=device)
        written = (c.cpu().float() != UNWRITTEN)
        tiles = {(r // block_m, col // block_n) for r, col in written.nonzero().tolist()}
        new = tiles - seen
        got.append(sorted(new)[0] if len(new) == 1 else (None if not new else tuple(sorted(new))))
        seen |= tiles
    expected = [grouped_tile(pid, num_m, num_n, group_m) for pid in range(num_m * num_n)]
    if got == expected:
        stage("done")
        return
    first = next(i for i, (g, e) in enumerate(zip(got, expected)) if g != e)
    found = ", ".join(f"{pid}->{t}" for pid, t in enumerate(got[:min(len(got), max(first + 3, 8))]))
    want = ", ".join(f"{pid}->{t}" for pid, t in enumerate(expected[:min(len(got), max(first + 3, 8))]))
    cause = ("program ids must map to tiles in groups of GROUP_M rows: pid_m = first_pid_m + "
             "(pid % num_pid_in_group) % group_size_m, pid_n = (pid % num_pid_in_group) // group_size_m, "
             "with group_size_m = min(num_pid_m - first_pid_m, GROUP_M).")
    for order_name, order in ORDERS.items():
        if order_name != "grouped" and got == [order(p, num_m, num_n, group_m) for p in range(num_m * num_n)]:
            if order_name == "row-major":
                cause = ("the programs visit the tiles in plain row-major order (pid_m = pid // num_pid_n, pid_n = "
                         "pid % num_pid_n): GROUP_M is ignored, so the programs that run together read a whole row "
                         "of B's tiles and share little in L2. " + cause)
            elif order_name == "column-major":
                cause = "the programs visit the tiles in column-major order: GROUP_M is ignored. " + cause
            else:
                cause = ("the last group of rows is shorter than GROUP_M and group_size_m was not shrunk for it. "
                         + cause)
    raise KernelCheckError(
        f"The programs do not visit the tiles in grouped order ({context}).\n"
        + shown(f"  program -> tile (pid_m, pid_n) found: {found}\n"
                f"  grouped order expects:               {want}\n"
                f"  the first difference is program {first}.\n", "")
        + f"Likely cause: {cause}")


def check_every_matmul_config(kernel, M: int = 40, N: int = 50, K: int = 70, seed: int | None = None) -> None:
    """Each config of the learner's space, launched directly (the autotuner would hide a failure behind an
    infinite time), gives relu(A @ B) on one ragged problem."""
    tuner = autotuner_of(kernel, MATMUL)
    configs = _configs(tuner, MATMUL)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    a, b = make_matmul_inputs(M, N, K, seed)
    for i in _runnable(MATMUL, configs, matmul_limit_problems(tuner, configs), META[MATMUL]):
        c = configs[i]
        meta = _config_meta(c)
        context = Case(f"config #{i} of {len(configs)}: {describe(c)}; M={M}, N={N}, K={K}, seed {seed}",
                       f"config #{i} of {len(configs)} ({describe(c)})",
                       tiles_kind(M, N, meta["BLOCK_M"], meta["BLOCK_N"]),
                       size_kind(K, meta["BLOCK_K"], "K", "BLOCK_K", "K steps"))
        _run_matmul_case(tuner.fn, a, b, meta, context=context, device=device)
    stage("done")


# ----------------------------------------------------------------------------------- the autotuner runs
def check_matmul_autotuner(kernel, M: int = 40, N: int = 50, K: int = 70, seed: int | None = None) -> None:
    """The autotuner itself runs (with a CPU timer on the interpreter): it times every config of the list, its
    ``best_config`` is the fastest of its ``configs_timings``, and the tuned launch is that config's launch (C is
    what best_config gives when launched directly). Whether each config is *correct* is
    :func:`check_every_matmul_config`'s question: which config wins here depends on the timer. Configs that
    break a hardware limit are left out, as there: they are the limits test's (on a GPU, one whose tl.dot tile
    is under 16 stops the autotuner with a compile error)."""
    tuner = autotuner_of(kernel, MATMUL)
    configs = list(tuner.configs)
    tuner.configs = [configs[i] for i in _runnable(MATMUL, configs, matmul_limit_problems(tuner, configs))]
    try:
        _check_matmul_autotuner(tuner, M, N, K, seed)
    finally:
        tuner.configs = configs


def _check_matmul_autotuner(tuner, M: int, N: int, K: int, seed: int | None) -> None:
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    a, b = make_matmul_inputs(M, N, K, seed)
    context = Case(f"the autotuner on M={M}, N={N}, K={K}, seed {seed}", "the autotuner")
    calls = []

    def timer(fn, quantiles=None, **kw):
        calls.append(1)
        if device == "cpu":
            return cpu_do_bench(fn, quantiles)
        return triton.testing.do_bench(fn, quantiles=quantiles, warmup=1, rep=3)

    tuner.do_bench = timer
    tuner.cache.clear()
    blocks = [v for c in tuner.configs for k, v in getattr(c, "kwargs", {}).items()
              if k.startswith("BLOCK") and isinstance(v, int)]
    pad = (min(max(blocks + [64]), 1024) + 16) * (max(M, N, K) + 16)  # room for a whole stray tile
    ga = Strided.copy_of(a, device, pad=pad)
    gb = Strided.copy_of(b, device, pad=pad)
    gc = Strided.make(M, N, torch.float16, device, OUTPUT_SENTINEL, pad=pad)
    gc.view.fill_(UNWRITTEN)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    stage(f"running the autotuner of `{MATMUL}` ({context})")
    try:
        tuner[grid](*_matmul_args(ga.view, gb.view, gc.view))
        if device == "cuda":
            torch.cuda.synchronize()
    except KernelCheckError:
        raise
    except Exception as err:
        raise _explained(err, MATMUL, context + "; the autotuner launches every config, and an error in any of "
                                               "them stops it") from None
    n = len(tuner.configs)
    if n > 1 and len(calls) != n:
        raise KernelCheckError(f"The autotuner timed {len(calls)} configs, not the {n} of its list ({context}).\n"
                               "Likely cause: configs pruned away (prune_configs_by); let it time all of them.")
    best = getattr(tuner, "best_config", None)
    if best not in tuner.configs:
        raise KernelCheckError(f"After tuning, best_config is {best!r}, not one of the configs ({context}).\n"
                               "Likely cause: the autotuner was not used for this launch.")
    if n > 1:
        timings = tuner.configs_timings
        fastest = min(timings, key=timings.get)
        if timings[best] != timings[fastest]:
            raise KernelCheckError(f"best_config ({describe(best)}) is not the fastest config timed ({context}).\n"
                                   "Likely cause: the autotuner's choice was overridden.")
    if gc.stray() or ga.stray() or gb.stray():
        raise KernelCheckError(f"The tuned kernel wrote outside C ({context}; best config {describe(best)}).\n"
                               "Likely cause: a store that is not masked with rows < M and columns < N.")
    direct = Strided.make(M, N, torch.float16, device, OUTPUT_SENTINEL, pad=pad)
    direct.view.fill_(UNWRITTEN)
    meta = _config_meta(best)
    _launch(tuner.fn, grid(meta), _matmul_args(ga.view, gb.view, direct.view), meta, name=MATMUL,
            context=f"best_config {describe(best)} launched directly, {context}", device=device)
    tuned, alone = gc.view.cpu().float(), direct.view.cpu().float()
    # Compared where best_config writes: elsewhere the tuned C keeps what the other configs wrote while they were
    # timed (a kernel that leaves tiles unwritten is the values tests' mistake, not this test's).
    written = alone != UNWRITTEN
    if not torch.equal(torch.nan_to_num(tuned[written], nan=1.5e4), torch.nan_to_num(alone[written], nan=1.5e4)):
        raise KernelCheckError(
            f"The tuned launch's C differs from best_config's own ({context}; best config {describe(best)}).\n"
            "Likely cause: the autotuner ran every config on the same C, and the kernel adds into C instead of "
            "storing its result; each run must store its whole result (no accumulation into C, or "
            "reset_to_zero=['c_ptr']), so that the last run, with the best config, leaves its own result.")
    stage("done")

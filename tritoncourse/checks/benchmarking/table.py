"""Phase 4: reading measurements: the learner's ``comparison_table(times, flops, n_bytes, peak_gbps, peak_tflops)``
(medians, rates, per-round speedups, the fraction of the roof) on made-up per-round times chosen so that each usual
mistake (the mean, the ratio of the medians, an inverted ratio, ms for s) gives another number, and the roofline's
``roof_tflops(intensity, peak_gbps, peak_tflops)`` and ``classify(...)`` on random devices, intensities around
each ridge point.
"""
from __future__ import annotations

import math
import statistics

import torch

from ...checking import Case, KernelCheckError, fresh_seed, generator, shown
from ..common.functions import REL, _args, _close, _fmt, _number, call, require_function

MEMORY, COMPUTE = "memory-bound", "compute-bound"
ROW_KEYS = ("provider", "ms", "gbps", "tflops", "vs_eager", "vs_compile", "roof")


# ---------------------------------------------------------------------------------- comparison table
def _table_times(g: torch.Generator, names, repeats: int, roof_ms: float) -> dict[str, list[float]]:
    """Per-round times (ms) above the roof, with per-round noise large enough that the median of the
    per-round ratios differs from the ratio of the medians and from the mean of the ratios."""
    while True:
        drift = [1 + 0.5 * float(torch.rand((), generator=g)) for _ in range(repeats)]
        times = {}
        for name in names:
            base = roof_ms * (1.1 + 3 * float(torch.rand((), generator=g)))
            times[name] = [base * d * (1 + 0.3 * float(torch.rand((), generator=g))) for d in drift]
        ok = True
        for name in names:
            for ref in ("eager", "compile"):
                if ref not in times or ref == name:
                    continue
                ratios = [e / t for e, t in zip(times[ref], times[name])]
                med = statistics.median(ratios)
                for other in (statistics.median(times[ref]) / statistics.median(times[name]),
                              statistics.fmean(ratios), 1 / med):
                    ok = ok and abs(other - med) > 1e-3 * med
        if ok:
            return times


CASES = {
    # kind: (flops, n_bytes, description)
    "memory": (3 * 2**26, 3 * 2**26 * 4, "add-ReLU-scale, n = 2**26 fp32 (memory-bound)"),
    "compute": (2 * 4096**3, 3 * 4096**2 * 2, "matmul, M = N = K = 4096 fp16 (compute-bound)"),
}


def _expected_rows(times, flops, n_bytes, peak_gbps, peak_tflops):
    roof_ms = max(n_bytes / (peak_gbps * 1e9), flops / (peak_tflops * 1e12)) * 1e3
    rows = []
    for name, ts in times.items():
        ms = statistics.median(ts)
        row = {"provider": name, "ms": ms, "gbps": n_bytes / (ms * 1e-3) / 1e9,
               "tflops": flops / (ms * 1e-3) / 1e12, "roof": roof_ms / ms}
        for ref, key in (("eager", "vs_eager"), ("compile", "vs_compile")):
            row[key] = statistics.median([a / b for a, b in zip(times[ref], ts)]) if ref in times else None
        rows.append(row)
    return rows


def _table(comparison_table, kind: str, names, repeats: int, seed: int):
    require_function(comparison_table, "comparison_table")
    g = generator(seed)
    flops, n_bytes, description = CASES[kind]
    peak_gbps = round(1000 + 7000 * float(torch.rand((), generator=g)), 1)
    peak_tflops = round(50 + 950 * float(torch.rand((), generator=g)), 1)
    if kind == "compute":  # keep the op compute-bound on these peaks
        peak_tflops = min(peak_tflops, 0.5 * flops / n_bytes * peak_gbps / 1e3)
    roof_ms = max(n_bytes / (peak_gbps * 1e9), flops / (peak_tflops * 1e12)) * 1e3
    times = _table_times(g, names, repeats, roof_ms)
    snapshot = {k: list(v) for k, v in times.items()}
    context = Case(f"{description}, peaks {peak_gbps:g} GB/s and {peak_tflops:g} TFLOP/s, providers {list(names)}, "
                   f"{repeats} rounds, seed {seed}", f"a {kind}-bound op",
                   "one provider" if len(names) == 1 else "several providers")
    rows = call(comparison_table, "comparison_table", times, flops, n_bytes, peak_gbps, peak_tflops)
    if times != snapshot:
        raise KernelCheckError(f"`comparison_table` changed its input `times` ({context}).\n"
                               "Likely cause: a list was sorted in place (times[p].sort()); that breaks the "
                               "pairing of rounds the per-round ratios need. Use sorted(...) or "
                               "statistics.median, which copy.")
    if not isinstance(rows, (list, tuple)) or len(rows) != len(names) or not all(isinstance(r, dict) for r in rows):
        raise KernelCheckError(f"`comparison_table` returned {_fmt(rows)} ({context}).\n"
                               "Likely cause: return a list with one dict per provider, in the order of `times`.")
    for row in rows:
        missing = [k for k in ROW_KEYS if k not in row]
        if missing:
            raise KernelCheckError(f"A row of the table has {shown(f'the keys {sorted(row)}', 'other keys')}; "
                                   f"{missing} are missing "
                                   f"({context}).\nLikely cause: each row needs {list(ROW_KEYS)}.")
    order = [r["provider"] for r in rows]
    if order != list(names):
        raise KernelCheckError(shown(f"The rows are for {order}, expected {list(names)} in that order",
                                     "The rows are not one per provider, in the order of `times`") + f" ({context}).")
    expected = _expected_rows(snapshot, flops, n_bytes, peak_gbps, peak_tflops)
    return rows, expected, snapshot, context


def _mismatch(row, want, key: str, context: str, hint: str) -> KernelCheckError:
    return KernelCheckError(f"Row '{want['provider']}': {key} "
                            f"{shown(f'= {_fmt(row[key])}, expected {_fmt(want[key])}', 'is wrong')} "
                            f"({context}).\nLikely cause: {hint}")


def check_table_rates(comparison_table, kind: str = "memory", names=("triton", "eager", "compile"),
                      repeats: int = 5, seed: int | None = None) -> None:
    """ms is each provider's median time; GB/s and TFLOP/s come from it with the op's bytes and FLOPs."""
    seed = fresh_seed() if seed is None else seed
    rows, expected, times, context = _table(comparison_table, kind, names, repeats, seed)
    for row, want in zip(rows, expected):
        ts = times[want["provider"]]
        if not _close(row["ms"], want["ms"]):
            if _close(row["ms"], statistics.fmean(ts)):
                hint = "that is the mean; the table shows the median, which one slow round cannot move."
            elif _close(row["ms"], min(ts)):
                hint = "that is the fastest round; the table shows the median of the rounds."
            else:
                hint = "ms is the median of the provider's per-round times (statistics.median)."
            raise _mismatch(row, want, "ms", context, hint)
        for key, unit in (("gbps", "GB/s"), ("tflops", "TFLOP/s")):
            _number(row[key], f"Row '{want['provider']}': {key}")  # a str or None: said so (it was a TypeError)
            if not _close(row[key], want[key]):
                hint = (f"{key} = {'gbps(n_bytes, ms)' if key == 'gbps' else 'tflops(flops, ms)'} with the median "
                        "time; n_bytes and flops are the op's (the same for every provider), so the column "
                        "compares providers directly.")
                if want[key] and math.isclose(row[key] / want[key], 1e-3, rel_tol=1e-4):
                    hint = "the time is used as seconds: it is in ms. " + hint
                ratio = f"{row[key] / want[key] if want[key] else 0:.6g}"
                raise _mismatch(row, want, key, context, hint + shown(f" (returned/expected = {ratio})", ""))


def check_table_speedups(comparison_table, kind: str = "memory", names=("triton", "eager", "compile", "unfused"),
                         repeats: int = 5, seed: int | None = None) -> None:
    """vs_eager and vs_compile are medians of per-round ratios t_ref / t_provider (> 1: faster), None without a ref."""
    seed = fresh_seed() if seed is None else seed
    rows, expected, times, context = _table(comparison_table, kind, names, repeats, seed)
    for row, want in zip(rows, expected):
        for key, ref in (("vs_eager", "eager"), ("vs_compile", "compile")):
            got, exp = row[key], want[key]
            if exp is None:
                if got is not None:
                    raise _mismatch(row, want, key, context, f"there is no '{ref}' provider in `times`: the "
                                                             "speedup over it is None.")
                continue
            if _close(got, exp):
                continue
            ts, rs = times[want["provider"]], times[ref]
            ratios = [a / b for a, b in zip(rs, ts)]
            if got is None or isinstance(got, bool) or not isinstance(got, (int, float)):
                hint = f"{key} is a number whenever '{ref}' was timed."
            elif _close(got, 1 / exp):
                hint = (f"the speedup is inverted: speedup over {ref} = t_{ref} / t_provider, so that > 1 "
                        f"means faster than {ref}.")
            elif _close(got, statistics.median(rs) / statistics.median(ts)):
                hint = ("that is the ratio of the medians; the table wants the median of the per-round ratios "
                        f"median(t_{ref}[r] / t_provider[r] for each round r): each round's two times were taken "
                        "moments apart, under the same conditions.")
            elif _close(got, statistics.fmean(ratios)):
                hint = "that is the mean of the per-round ratios; use their median."
            elif _close(got, ratios[0]) or _close(got, ratios[-1]):
                hint = "that is one round's ratio; use the median over all rounds."
            else:
                hint = f"{key} = median over rounds r of t_{ref}[r] / t_provider[r]."
            raise _mismatch(row, want, key, context, hint)


def check_table_roof(comparison_table, kind: str = "memory", names=("triton", "eager", "compile"),
                     repeats: int = 5, seed: int | None = None) -> None:
    """roof is the roofline's time for the op (bytes at peak bandwidth or FLOPs at peak FLOP/s) over the median."""
    seed = fresh_seed() if seed is None else seed
    rows, expected, times, context = _table(comparison_table, kind, names, repeats, seed)
    flops, n_bytes, _ = CASES[kind]
    for row, want in zip(rows, expected):
        if _close(row["roof"], want["roof"]):
            continue
        ratio = want["roof"]
        got = row["roof"]
        if isinstance(got, (int, float)) and not isinstance(got, bool) and _close(got, 1 / ratio):
            hint = "the fraction is inverted: roof = roofline time / measured time, at most 1."
        elif kind == "compute":
            hint = ("for a compute-bound op the roof is the FLOP/s peak: the roofline time is the larger of "
                    "n_bytes / peak bandwidth and flops / peak FLOP/s (mind GB = 1e9, TFLOP = 1e12, ms).")
        else:
            hint = ("for a memory-bound op the roof is the bandwidth: the roofline time is the larger of "
                    "n_bytes / peak bandwidth and flops / peak FLOP/s (mind GB = 1e9, TFLOP = 1e12, ms).")
        raise _mismatch(row, want, "roof", context, hint)


# ------------------------------------------------------------------------------------------ roofline
def _peaks(g: torch.Generator) -> tuple[float, float]:
    return (round(500 + 7500 * float(torch.rand((), generator=g)), 1),
            round(20 + 980 * float(torch.rand((), generator=g)), 1))


def _intensities(g: torch.Generator, ridge: float) -> list[float]:
    u = [float(torch.rand((), generator=g)) for _ in range(4)]
    return [ridge * 0.002 * (1 + u[0]), ridge * (0.3 + 0.6 * u[1]), ridge * 0.985, ridge * 1.015,
            ridge * (1.5 + 3 * u[2]), ridge * 60 * (1 + u[3]), 1 / 12, 0.0]


def _roofline_points(g: torch.Generator, count: int):
    """(peak_gbps, peak_tflops, ridge, intensity) on ``count`` random devices, intensities around each ridge."""
    for _ in range(count):
        bw, peak = _peaks(g)
        ridge = peak * 1e12 / (bw * 1e9)
        for intensity in _intensities(g, ridge):
            yield bw, peak, ridge, intensity


def _side(intensity: float, ridge: float) -> str:
    """Where an intensity lies, in words: which side of the ridge point, near it or far."""
    side = "below" if intensity < ridge else "above"
    return f"an intensity {'just ' if 0.9 < intensity / ridge < 1.1 else 'well '}{side} the ridge point" \
        if ridge and intensity else "an intensity of 0 or near it"


def check_roof_tflops(roof_tflops, count: int = 2, seed: int | None = None) -> None:
    """roof_tflops(I, B, P) = min(P, I * B / 1000): the attainable TFLOP/s at intensity I (FLOP/byte)."""
    require_function(roof_tflops, "roof_tflops")
    seed = fresh_seed() if seed is None else seed
    for bw, peak, ridge, intensity in _roofline_points(generator(seed), count):
        want = min(peak, intensity * bw / 1e3)
        got = _number(call(roof_tflops, "roof_tflops", intensity, bw, peak),
                      f"`roof_tflops({_args((intensity, bw, peak))})`")
        if math.isclose(got, want, rel_tol=REL, abs_tol=1e-12):
            continue
        if math.isclose(got, max(peak, intensity * bw / 1e3), rel_tol=REL):
            hint = "the roof is the lower of the two limits: min(peak_tflops, intensity * peak_gbps / 1000)."
        elif math.isclose(got, min(peak, intensity * bw), rel_tol=REL) or \
                math.isclose(got, intensity * bw, rel_tol=REL):
            hint = ("units: FLOP/byte x GB/s = GFLOP/s; divide by 1000 for TFLOP/s "
                    "(min(peak_tflops, intensity * peak_gbps / 1000)).")
        else:
            hint = "roof = min(peak_tflops, intensity * peak_gbps / 1000)."
        raise KernelCheckError(shown(f"`roof_tflops(intensity={intensity:.6g}, peak_gbps={bw:g}, "
                                     f"peak_tflops={peak:g})` returned {_fmt(got)}, expected {_fmt(want)} TFLOP/s "
                                     f"(the ridge point is {ridge:.4g} FLOP/byte; seed {seed}).",
                                     "`roof_tflops(...)` returned a wrong number of TFLOP/s on a hidden case "
                                     f"({_side(intensity, ridge)}; its inputs are not shown).")
                               + f"\nLikely cause: {hint}")


def check_classify(classify, count: int = 2, seed: int | None = None) -> None:
    """classify(I, B, P) is 'memory-bound' below the ridge point P*1e12 / (B*1e9) FLOP/byte, else 'compute-bound'."""
    require_function(classify, "classify")
    seed = fresh_seed() if seed is None else seed
    for bw, peak, ridge, intensity in _roofline_points(generator(seed), count):
        want = MEMORY if intensity < ridge else COMPUTE
        got = call(classify, "classify", intensity, bw, peak)
        if got == want:
            continue
        if got not in (MEMORY, COMPUTE):
            hint = f"return exactly '{MEMORY}' or '{COMPUTE}'."
        else:
            wrong_ridge = peak / bw
            value = shown(f" = {peak:g}e12 / {bw:g}e9 = {ridge:.4g}", "")
            hint = (f"the ridge point is peak FLOP/s / peak bytes/s{value}"
                    " FLOP/byte; an intensity below it is memory-bound, above it compute-bound.")
            if (intensity < wrong_ridge) == (got == MEMORY):
                hint += (f" Your ridge looks like peak_tflops / peak_gbps{shown(f' = {wrong_ridge:.4g}', '')}: "
                         "TFLOP/s and "
                         "GB/s differ by a factor 1000.")
        raise KernelCheckError(shown(f"`classify(intensity={intensity:.6g}, peak_gbps={bw:g}, peak_tflops={peak:g})` "
                                     f"returned {got!r}, expected {want!r} (seed {seed}).",
                                     f"`classify(...)` returned "
                                     f"{repr(got) if got in (MEMORY, COMPUTE) else _fmt(got)}, "
                                     f"expected {want!r}, on a hidden case ({_side(intensity, ridge)}; its inputs "
                                     "are not shown).") + f"\nLikely cause: {hint}")

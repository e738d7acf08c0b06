"""Phase 4: the arithmetic of benchmarking: the rates ``gbps(n_bytes, ms)`` and ``tflops(n_flops, ms)``, and the
cost models ``add_relu_mul_cost``, ``softmax_cost`` and ``matmul_relu_cost`` -> (flops, {provider: bytes}).

Each is called with fresh random sizes and times; a wrong answer is explained by the unit or counting mistake
(GiB for GB, ms for s, bits, elements for bytes, a kernel's reads or writes forgotten) that gives it.
"""
from __future__ import annotations

import math

import torch

from ...checking import KernelCheckError, fresh_seed, generator, shown
from ..common.functions import _args, _close, _fmt, _number, call, expect_value_error, require_function


# ------------------------------------------------------------------------------------------ rates
def _unit_hint(ratio: float, unit: str, base: float) -> str:
    """Name the unit mistake that multiplies the right answer by ``ratio``."""
    binary = 2**30 if base == 1e9 else 2**40
    known = [
        (1e-3, "the time is taken as seconds: `ms` is in milliseconds, so seconds = ms * 1e-3."),
        (1e3, "seconds = ms * 1e-3 (multiply by 1e-3, do not divide by it)."),
        (base / binary, f"a binary prefix is used (2**{30 if base == 1e9 else 40}): {unit} is decimal, "
                        f"1 {unit.split('/')[0]} = {base:.0e} (GB, not GiB)."),
        (8.0, "bits are counted: these are bytes."),
        (1 / 8, "the amount is divided by 8: it is already in bytes."),
    ]
    for factor, hint in known:
        if math.isclose(ratio, factor, rel_tol=1e-4):
            return hint
    what = "n_bytes" if unit == "GB/s" else "n_flops"
    return f"{unit} = {what} / seconds / {base:.0e}, with seconds = ms * 1e-3."


def _check_rate(fn, name: str, unit: str, base: float, amount_name: str, cases) -> None:
    require_function(fn, name)
    for amount, ms in cases:
        expected = amount / (ms * 1e-3) / base
        got = _number(call(fn, name, amount, ms), f"`{name}({_args((amount, ms))})`")
        if not _close(got, expected):
            ratio = got / expected if expected else float("nan")
            raise KernelCheckError(shown(
                f"`{name}({amount_name}={_fmt(amount)}, ms={_fmt(ms)})` returned {_fmt(got)}, expected "
                f"{_fmt(expected)} {unit} (returned/expected = {ratio:.6g}).",
                f"`{name}(...)` returned a wrong number of {unit} on a hidden case (its inputs, the value and "
                "the ratio to the right one are not shown).") + f"\nLikely cause: {_unit_hint(ratio, unit, base)}")


def _rate_cases(g: torch.Generator, count: int, big: float):
    u = torch.rand(count, 2, generator=g, dtype=torch.float64)
    return [(int(10 ** (3 + a * math.log10(big / 1e3))), float(10 ** (-3 + 5 * b))) for a, b in u.tolist()]


def check_gbps(gbps, count: int = 5, seed: int | None = None) -> None:
    """gbps(n_bytes, ms) = n_bytes / (ms * 1e-3) / 1e9, for fresh random sizes and times."""
    seed = fresh_seed() if seed is None else seed
    cases = [(3 * 10**9, 1.0)] + _rate_cases(generator(seed), count, 1e12)
    _check_rate(gbps, "gbps", "GB/s", 1e9, "n_bytes", cases)


def check_tflops(tflops, count: int = 5, seed: int | None = None) -> None:
    """tflops(n_flops, ms) = n_flops / (ms * 1e-3) / 1e12, for fresh random FLOP counts and times."""
    seed = fresh_seed() if seed is None else seed
    cases = [(2 * 4096**3, 0.25)] + _rate_cases(generator(seed), count, 1e15)
    _check_rate(tflops, "tflops", "TFLOP/s", 1e12, "n_flops", cases)


def check_rates_reject_bad_input(gbps, tflops) -> None:
    """A time of 0 or below, or a negative amount, raises ValueError with a message."""
    require_function(gbps, "gbps")
    require_function(tflops, "tflops")
    for fn, name in ((gbps, "gbps"), (tflops, "tflops")):
        expect_value_error(fn, name, (10**9, 0.0), "a time of 0 ms cannot be a measurement (the rate would be "
                                                    "infinite).")
        expect_value_error(fn, name, (10**9, -0.5), "a negative time cannot be a measurement.")
        expect_value_error(fn, name, (-1000, 1.0), "a negative amount of bytes or FLOPs cannot be.")


# -------------------------------------------------------------------------------------------- costs
COST_MODELS = {
    "add_relu_mul_cost": ("n", ("triton", "eager", "compile")),
    "softmax_cost": ("n_rows, n_cols", ("triton", "online", "eager", "unfused", "compile")),
    "matmul_relu_cost": ("M, N, K", ("triton", "eager", "compile")),
}


def _unpack_cost(result, call_text: str, providers: tuple[str, ...]):
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[1], dict)):
        raise KernelCheckError(f"`{call_text}` returned {_fmt(result)}.\n"
                               "Likely cause: return a pair (flops, bytes_by_provider), e.g. "
                               "(3 * n, {\"triton\": ..., \"eager\": ..., \"compile\": ...}).")
    flops, moved = result
    missing = [p for p in providers if p not in moved]
    if missing:
        got = shown(str(sorted(moved)), "other providers")
        raise KernelCheckError(f"`{call_text}` returned bytes for {got}; the entries {missing} are missing.\n"
                               f"Likely cause: give one entry for each of {list(providers)}.")
    return flops, moved


def _bytes_hint(got, expected, itemsize: int, elements: int, hints: dict) -> str:
    if got * itemsize == expected and itemsize > 1:
        return "elements are counted, not bytes: multiply by the element size (dtype.itemsize)."
    if got == 8 * expected:
        return "bits are counted: a byte is 8 bits."
    if got in hints:
        return hints[got]
    return shown(f"expected {expected} bytes = {elements} elements x {itemsize} bytes; ",
                 f"expected {elements.split(' = ')[0]} elements x {itemsize} bytes; ") + \
        "recount each kernel's reads and writes."


def _check_cost(fn, name: str, args: tuple, dtype, expected_flops: int, expected: dict, elements: dict,
                hints: dict, flop_hints: dict) -> None:
    require_function(fn, name)
    call_text = f"{name}({_args(args + (dtype,))})"
    flops, moved = _unpack_cost(call(fn, name, *args, dtype), call_text, tuple(expected))
    _number(flops, f"the FLOPs of `{call_text}`")
    if not _close(flops, expected_flops, 1e-12):
        hint = flop_hints.get(flops, "recount: see the FLOP conventions above the exercise.")
        counted = shown(f"{_fmt(flops)} FLOPs, expected {expected_flops}", "a wrong number of FLOPs on a hidden case")
        raise KernelCheckError(f"`{call_text}` counts {counted}.\n"
                               f"Likely cause: {hint}")
    itemsize = dtype.itemsize
    for provider, want in expected.items():
        got = _number(moved[provider], f"the bytes of '{provider}' in `{call_text}`")
        if not _close(got, want, 1e-12):
            hint = _bytes_hint(got, want, itemsize, elements[provider], hints.get(provider, {}))
            moves = shown(f"{_fmt(got)} bytes, expected {want}", "a wrong number of bytes on a hidden case")
            raise KernelCheckError(f"`{call_text}`: '{provider}' moves {moves}.\n"
                                   f"Likely cause: {hint}")


def check_add_relu_mul_cost(fn, n: int, dtype: torch.dtype = torch.float32) -> None:
    """relu(x + bias) * scale: 3n FLOPs; fused (Triton, torch.compile) 3n elements, eager 7n."""
    b = dtype.itemsize
    expected = {"triton": 3 * n * b, "eager": 7 * n * b, "compile": 3 * n * b}
    elements = {"triton": f"3·n = {3 * n}", "eager": f"7·n = {7 * n}", "compile": f"3·n = {3 * n}"}
    three_kernels = ("eager PyTorch runs three kernels, each reading and writing memory: x + bias reads 2n "
                     "and writes n, relu reads n and writes n, * scale reads n and writes n: 7n elements.")
    hints = {"eager": {3 * n * b: three_kernels, 5 * n * b: three_kernels, 6 * n * b: three_kernels,
                       9 * n * b: three_kernels},
             "compile": {7 * n * b: "torch.compile fuses the three elementwise operations into one kernel, "
                                    "like yours: 3n elements."}}
    flop_hints = {n: "three operations per element: an add, a max (the ReLU) and a multiply.",
                  2 * n: "the ReLU's max counts as one FLOP too: 3 per element."}
    _check_cost(fn, "add_relu_mul_cost", (n,), dtype, 3 * n, expected, elements, hints, flop_hints)


def check_softmax_cost(fn, n_rows: int, n_cols: int, dtype: torch.dtype = torch.float32) -> None:
    """Row softmax: 5·M·N FLOPs; fused 2MN elements, online 3MN, unfused 8MN + 4M."""
    M, N, b = n_rows, n_cols, dtype.itemsize
    expected = {"triton": 2 * M * N * b, "online": 3 * M * N * b, "eager": 2 * M * N * b,
                "unfused": (8 * M * N + 4 * M) * b, "compile": 2 * M * N * b}
    elements = {"triton": "2·M·N", "online": "3·M·N", "eager": "2·M·N", "unfused": "8·M·N + 4·M",
                "compile": "2·M·N"}
    hints = {"online": {2 * M * N * b: "the online kernel walks each row twice: one pass for the max and the "
                                       "sum, one to write; it reads x twice: 3·M·N elements."},
             "eager": {(8 * M * N + 4 * M) * b: "eager means torch.softmax, one fused kernel (2·M·N); the five "
                                                "separate operations are 'unfused'."},
             "unfused": {(8 * M * N) * b: "the max and the sum each write M values, and x - m and e / s each "
                                          "read them back: + 4·M.",
                         2 * M * N * b: "five separate operations, each reading and writing memory: 8·M·N + 4·M "
                                        "elements (see the comments in phase 2's softmax_unfused)."}}
    flop_hints = {4 * M * N: "count five per element: max, subtract, exp, sum, divide.",
                  3 * M * N: "count five per element: max, subtract, exp, sum, divide."}
    _check_cost(fn, "softmax_cost", (M, N), dtype, 5 * M * N, expected, elements, hints, flop_hints)


def check_matmul_relu_cost(fn, M: int, N: int, K: int, dtype: torch.dtype = torch.float16) -> None:
    """relu(A @ B): 2MNK FLOPs; fused MK + KN + MN elements, eager MK + KN + 3MN."""
    b = dtype.itemsize
    fused = (M * K + K * N + M * N) * b
    expected = {"triton": fused, "eager": fused + 2 * M * N * b, "compile": fused}
    elements = {"triton": "M·K + K·N + M·N", "eager": "M·K + K·N + 3·M·N", "compile": "M·K + K·N + M·N"}
    hints = {"eager": {fused: "torch.relu(a @ b) is two kernels: the matmul writes C, then the ReLU reads C "
                              "and writes it again: 2·M·N more elements.",
                       fused + M * N * b: "the ReLU kernel reads C and writes a new C: 2·M·N more elements, "
                                          "not M·N."},
             "triton": {(M * K + K * N + 3 * M * N) * b: "the fused kernel applies the ReLU in registers and "
                                                          "stores C once: M·K + K·N + M·N."},
             "compile": {(M * K + K * N + 3 * M * N) * b: "torch.compile fuses the ReLU into the matmul's "
                                                           "epilogue: it moves what the fused kernel moves."}}
    flop_hints = {M * N * K: "a multiply-add is 2 FLOPs: 2·M·N·K.",
                  2 * M * N * K + M * N: "by the course's convention the ReLU's M·N are left out: 2·M·N·K."}
    _check_cost(fn, "matmul_relu_cost", (M, N, K), dtype, 2 * M * N * K, expected, elements, hints, flop_hints)


def check_costs_reject_bad_sizes(add_relu_mul_cost, softmax_cost, matmul_relu_cost) -> None:
    """A size of 0 or below raises ValueError with a message, for every cost model."""
    why = "a size of 0 (or less) is no workload: there is nothing to measure, and a rate would divide by 0."
    for fn, name, args in ((add_relu_mul_cost, "add_relu_mul_cost", [(0,), (-5,)]),
                           (softmax_cost, "softmax_cost", [(0, 128), (128, 0), (-1, 64)]),
                           (matmul_relu_cost, "matmul_relu_cost", [(0, 64, 64), (64, 64, 0), (64, -64, 64)])):
        require_function(fn, name)
        for a in args:
            expect_value_error(fn, name, a + (torch.float32,), why)

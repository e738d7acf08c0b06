"""Phase 4: checks for the fused add-ReLU-scale kernel and for the benchmarking functions.

    triton_add_relu_mul_kernel(x_ptr, bias_ptr, output_ptr, scale, n_elements, BLOCK_SIZE)
    gbps(n_bytes, ms), tflops(n_flops, ms)
    add_relu_mul_cost(n, dtype), softmax_cost(n_rows, n_cols, dtype), matmul_relu_cost(M, N, K, dtype)
        -> (flops, {provider: bytes})
    run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2) -> (times, failed)
    comparison_table(times, flops, n_bytes, peak_gbps, peak_tflops) -> [row, ...]
    roof_tflops(intensity, peak_gbps, peak_tflops), classify(intensity, peak_gbps, peak_tflops)

The kernel is checked like phase 1's (guard buffers, electric fences, ragged sizes, inputs unchanged)
on signed inputs, so that a missing ReLU shows. The plain functions are driven with fresh random
numbers: made-up timings from a fake timer that logs which provider it timed and when, providers that
log their calls, and per-round times chosen so that the usual mistakes (GiB for GB, ms for s, an
inverted ratio, the ratio of the medians, ...) give values that differ from the right ones and are
named in the message. Every number comes from the test's seed (TRITONCOURSE_SEED reproduces it).
"""
from __future__ import annotations

import math
import statistics
import traceback
import types

import torch
import triton

from ..checking import KernelCheckError, fresh_seed, generator, stage
from ..device import infer_device
from ..tolerances import DIAGNOSIS
from . import launch, require_triton_kernel
from .elementwise import check_elementwise, diagnose_blocks

KERNEL = "triton_add_relu_mul_kernel"
SIGNATURE = ("triton_add_relu_mul_kernel(x_ptr, bias_ptr, output_ptr, scale, n_elements, "
             "BLOCK_SIZE: tl.constexpr)")
MEMORY, COMPUTE = "memory-bound", "compute-bound"
ROW_KEYS = ("provider", "ms", "gbps", "tflops", "vs_eager", "vs_compile", "roof")
REL = 1e-6  # relative tolerance for the learner's arithmetic (it is exact up to rounding)


# ---------------------------------------------------------------------------------------------- kernel
def add_relu_mul_ref(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """relu(x + bias) * scale, computed in fp64 and rounded once to the inputs' dtype."""
    return (torch.relu(x.double() + bias.double()) * scale).to(x.dtype)


def run_add_relu_mul(kernel, x, bias, out, scale: float, block_size: int, *, context: str, device: str,
                     fence_stage: str | None = None) -> None:
    """Launch the kernel as the notebook's wrapper does: a 1-D grid of cdiv(n, BLOCK_SIZE) programs.

    ``fence_stage``: what a crash means during a fenced run (an unmasked load), instead of "running ...".
    """
    n = out.numel()
    launch(kernel, (triton.cdiv(n, block_size),), (x, bias, out, scale, n), {"BLOCK_SIZE": block_size},
           name=KERNEL, signature=SIGNATURE, context=context, device=device, stage_text=fence_stage)


def diagnose_add_relu_mul(out, x, bias, scale: float, expected, block_size: int) -> str:
    """Replay the usual mistakes on the same inputs and name the one that reproduces the output."""
    out, x, b, expected = (t.detach().cpu().double() for t in (out, x, bias, expected))
    s = float(scale)
    candidates = [
        ((x + b) * s, "there is no ReLU: the output is (x + bias) * scale. Negative sums must become 0 "
                      "(tl.maximum(x + bias, 0.0))."),
        (torch.relu((x + b) * s), "the ReLU comes after the scale: relu((x + bias) * scale). With a negative "
                                  "scale that is not relu(x + bias) * scale; apply the ReLU first."),
        (torch.relu(x * s + b), "the scale is applied before the bias is added: relu(x * scale + bias)."),
        (torch.relu(x) * s, "the bias is not added: the output is relu(x) * scale."),
        (torch.relu(x + b), "the scale is missing: the output is relu(x + bias)."),
        (torch.minimum(x + b, torch.zeros_like(x)) * s, "the ReLU is inverted: it keeps the negative sums "
                                                         "(tl.minimum instead of tl.maximum?)."),
        ((torch.relu(x) + b) * s, "the ReLU is applied to x before the bias is added."),
        (torch.relu(2 * x) * s, "x is loaded twice instead of loading the bias."),
        (torch.relu(2 * b) * s, "the bias is loaded twice instead of loading x."),
    ]
    for candidate, why in candidates:
        if torch.allclose(out, candidate, atol=DIAGNOSIS.atol, rtol=DIAGNOSIS.rtol) and not torch.allclose(
                candidate, expected, atol=DIAGNOSIS.atol, rtol=DIAGNOSIS.rtol):
            return why
    return (diagnose_blocks(out, expected, block_size, "x or bias")
            or "compare your kernel with relu(x + bias) * scale, one step at a time.")


def check_add_relu_mul(kernel, n: int, block_size: int, dtype: torch.dtype = torch.float32,
                       scale: float | None = None, seed: int | None = None) -> None:
    """Launch ``kernel`` on fresh signed x and bias of length ``n`` and check it the strict way.

    About half of x + bias is negative, so the ReLU matters; ``scale`` is random in [0.5, 4) unless
    given (the tests also give negative scales and 0). Guards around every tensor catch stray stores
    and poison stray reads; the inputs must be unchanged; on the interpreter the inputs then end (and
    start) at an unreadable page, so an unmasked load crashes.
    """
    require_triton_kernel(kernel, KERNEL)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    g = generator(seed)
    x = (torch.randn(n, generator=g) * 2).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype)
    if scale is None:
        scale = round(0.5 + 3.5 * float(torch.rand((), generator=g)), 4)
    expected = add_relu_mul_ref(x, bias, scale)
    context = (f"n_elements={n}, BLOCK_SIZE={block_size}, scale={scale:g}, "
               f"{str(dtype).replace('torch.', '')}, seed {seed}")

    def run(inputs, out, stage_text):
        run_add_relu_mul(kernel, *inputs, out, scale, block_size, context=context, device=device,
                         fence_stage=stage_text)

    check_elementwise(KERNEL, {"x": x, "bias": bias}, expected, block_size, run,
                      lambda out: diagnose_add_relu_mul(out, x, bias, scale, expected, block_size),
                      context=context, device=device)


# ------------------------------------------------------------------------------- calling plain functions
def require_function(fn, name: str) -> None:
    """Fail unless ``fn`` is a plain Python function; give it the modules graded functions may use."""
    from ..grading.rpc import RemoteFunction

    if isinstance(fn, RemoteFunction):  # the learner's function, in the runner process (which has the modules)
        return
    if not isinstance(fn, types.FunctionType):
        raise KernelCheckError(f"`{name}` is a {type(fn).__name__}, not a plain Python function.\n"
                               f"Likely cause: `{name}` must be an ordinary `def` (no decorator).")
    # Graded functions may use math, statistics, torch and triton without importing them (see the notebook).
    for module in (math, statistics, torch, triton):
        fn.__globals__.setdefault(module.__name__, module)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, torch.Tensor):
        return f"<tensor of shape {tuple(v.shape)}, {str(v.dtype).replace('torch.', '')}>"
    if callable(v):
        return getattr(v, "__name__", "a function")
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_fmt(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        a, b = ("(", ")") if isinstance(v, tuple) else ("[", "]")
        more = ", ..." if len(v) > 6 else ""
        return a + ", ".join(_fmt(x) for x in v[:6]) + more + b
    return repr(v)


def _where_in_learner_code(err: BaseException) -> str:
    remote = getattr(err, "where", "")
    if remote:  # raised in the runner: its own lines of the learner's code
        line = [ln.strip() for ln in remote.strip().splitlines() if ln.strip()][-1:]
        return f"\n  in your code: {line[0]}" if line else ""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.endswith("learner_kernels.py")]
    if not frames:
        return ""
    f = frames[-1]
    return f"\n  in `{f.name}`: {f.line}" if f.line else f"\n  in `{f.name}`"


def call(fn, name: str, *args, hint: str | None = None, **kwargs):
    """Call the learner's ``fn``; an exception becomes a message that names the call and the line."""
    shown = ", ".join([_fmt(a) for a in args] + [f"{k}={_fmt(v)}" for k, v in kwargs.items()])
    stage(f"calling `{name}({shown})`")
    try:
        return fn(*args, **kwargs)
    except KernelCheckError:
        raise
    except NotImplementedError:
        raise KernelCheckError(f"`{name}` is not written yet: replace `raise NotImplementedError()` with your "
                               "code.") from None
    except Exception as err:
        raise KernelCheckError(f"`{name}({shown})` raised {type(err).__name__}: {err}"
                               f"{_where_in_learner_code(err)}\n"
                               f"Likely cause: {hint or 'read the error above; it comes from inside your function.'}"
                               ) from None


def expect_value_error(fn, name: str, args: tuple, why: str) -> None:
    """``fn(*args)`` must raise ValueError (a clear error for bad input), not return or fail otherwise."""
    shown = ", ".join(_fmt(a) for a in args)
    stage(f"calling `{name}({shown})`, which must raise ValueError")
    try:
        result = fn(*args)
    except ValueError as err:
        if not str(err).strip():
            raise KernelCheckError(f"`{name}({shown})` raised a ValueError without a message.\n"
                                   f"Likely cause: say what is wrong, e.g. raise ValueError(f\"...\"): {why}") from None
        return
    except NotImplementedError:
        raise KernelCheckError(f"`{name}` is not written yet: replace `raise NotImplementedError()` with your "
                               "code.") from None
    except Exception as err:
        raise KernelCheckError(f"`{name}({shown})` raised {type(err).__name__}: {err}\n"
                               f"Likely cause: bad input should raise a ValueError that says why: {why}") from None
    raise KernelCheckError(f"`{name}({shown})` returned {_fmt(result)} instead of raising ValueError.\n"
                           f"Likely cause: check the arguments first: {why}")


def _close(a, b, rel: float = REL) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and math.isclose(a, b, rel_tol=rel,
                                                                                    abs_tol=1e-300)


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KernelCheckError(f"{what} is {_fmt(value)} ({type(value).__name__}), not a number.\n"
                               "Likely cause: return a plain int or float (use float(...) or .item() on a tensor).")
    return value


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
        got = _number(call(fn, name, amount, ms), f"`{name}({_fmt(amount)}, {_fmt(ms)})`")
        if not _close(got, expected):
            ratio = got / expected if expected else float("nan")
            raise KernelCheckError(
                f"`{name}({amount_name}={_fmt(amount)}, ms={_fmt(ms)})` returned {_fmt(got)}, expected "
                f"{_fmt(expected)} {unit} (returned/expected = {ratio:.6g}).\n"
                f"Likely cause: {_unit_hint(ratio, unit, base)}")


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
        raise KernelCheckError(f"`{call_text}` returned bytes for {sorted(moved)}; the entries "
                               f"{missing} are missing.\nLikely cause: give one entry for each of {list(providers)}.")
    return flops, moved


def _bytes_hint(got, expected, itemsize: int, elements: int, hints: dict) -> str:
    if got * itemsize == expected and itemsize > 1:
        return "elements are counted, not bytes: multiply by the element size (dtype.itemsize)."
    if got == 8 * expected:
        return "bits are counted: a byte is 8 bits."
    if got in hints:
        return hints[got]
    return f"expected {expected} bytes = {elements} elements x {itemsize} bytes; recount each kernel's reads and writes."


def _check_cost(fn, name: str, args: tuple, dtype, expected_flops: int, expected: dict, elements: dict,
                hints: dict, flop_hints: dict) -> None:
    require_function(fn, name)
    shown = ", ".join(_fmt(a) for a in args + (dtype,))
    call_text = f"{name}({shown})"
    flops, moved = _unpack_cost(call(fn, name, *args, dtype), call_text, tuple(expected))
    _number(flops, f"the FLOPs of `{call_text}`")
    if not _close(flops, expected_flops, 1e-12):
        hint = flop_hints.get(flops, "recount: see the FLOP conventions above the exercise.")
        raise KernelCheckError(f"`{call_text}` counts {_fmt(flops)} FLOPs, expected {expected_flops}.\n"
                               f"Likely cause: {hint}")
    itemsize = dtype.itemsize
    for provider, want in expected.items():
        got = _number(moved[provider], f"the bytes of '{provider}' in `{call_text}`")
        if not _close(got, want, 1e-12):
            hint = _bytes_hint(got, want, itemsize, elements[provider], hints.get(provider, {}))
            raise KernelCheckError(f"`{call_text}`: '{provider}' moves {_fmt(got)} bytes, expected {want}.\n"
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


# ---------------------------------------------------------------------------------- benchmark runner
class FakeBench:
    """Fake providers and a fake timer for run_benchmark, all made from one seed.

    Providers compute nothing: each returns a copy of the expected output (or a wrong one) and logs its
    call. The timer calls the function it is given once, finds which provider ran, and returns a
    made-up time: the provider's base time, times a slow upward drift (a GPU warming up), times noise.
    """

    def __init__(self, seed: int, n: int = 257):
        self.seed = seed
        self.g = generator(seed)
        self.x = torch.randn(n, generator=self.g)
        self.bias = torch.randn(n, generator=self.g)
        self.scale = round(0.5 + 2 * float(torch.rand((), generator=self.g)), 3)
        self.inputs = (self.x, self.bias, self.scale)
        self.expected = torch.relu(self.x + self.bias) * self.scale
        self.calls: list[str] = []  # every provider call, in order
        self.timed: list[tuple[str, float]] = []  # (provider, ms) returned by the timer, in order
        self.reference_calls = 0
        self.base: dict[str, float] = {}
        self.misuse: str | None = None
        self.noise = (1 + 0.08 * torch.rand(4096, generator=self.g, dtype=torch.float64)).tolist()

    def _check_args(self, who: str, args, kwargs) -> bool:
        if kwargs or len(args) != 3 or args[0] is not self.x or args[1] is not self.bias or args[2] != self.scale:
            self.misuse = self.misuse or (
                f"{who} was called with ({', '.join(type(a).__name__ for a in args)}"
                f"{', ' + ', '.join(kwargs) if kwargs else ''}) instead of the benchmark's inputs.\n"
                "Likely cause: call each provider (and the reference) as fn(*inputs), and give the timer a "
                "function of no arguments: timer(lambda: fn(*inputs)).")
            return False
        return True

    def provider(self, name: str, behaviour: str = "ok"):
        self.base[name] = float(10 ** (-2 + 3 * float(torch.rand((), generator=self.g))))

        def fn(*args, **kwargs):
            if not self._check_args(f"provider '{name}'", args, kwargs):
                raise TypeError(f"provider '{name}' expects the benchmark's inputs")
            self.calls.append(name)
            out = self.expected.clone()
            if behaviour == "raises":
                raise RuntimeError("an illegal memory access was encountered (this provider always fails)")
            if behaviour == "no_relu":
                out = (self.x + self.bias) * self.scale
            elif behaviour == "nan":
                out[len(out) // 3] = float("nan")
            elif behaviour == "short":
                out = out[:-1].clone()
            elif behaviour == "close":  # within fp16 rounding: must pass a tolerant check
                out = out * (1 + 2e-4 * (2 * torch.rand(out.shape, generator=generator(self.seed + 1)) - 1))
            return out

        fn.__name__ = f"provider_{name}"
        return fn

    def reference(self, *args, **kwargs):
        if not self._check_args("the reference", args, kwargs):
            raise TypeError("the reference expects the benchmark's inputs")
        self.reference_calls += 1
        return self.expected.clone()

    def timer(self, fn) -> float:
        if not callable(fn):
            self.misuse = self.misuse or (f"the timer was given {type(fn).__name__}, not a function.\n"
                                          "Likely cause: give it a function of no arguments: "
                                          "timer(lambda: fn(*inputs)).")
            raise TypeError("the timer needs a function")
        start = len(self.calls)
        fn()
        ran = self.calls[start:]
        if len(ran) != 1:
            self.misuse = self.misuse or (
                f"the timer was given a function that ran {len(ran)} providers ({', '.join(ran) or 'none'}).\n"
                "Likely cause: time one provider per call: timer(lambda: providers[name](*inputs)).")
            raise RuntimeError("the timer must time exactly one provider")
        name = ran[0]
        k = len(self.timed)
        ms = self.base[name] * (1 + 0.04 * k) * self.noise[k % len(self.noise)]
        self.timed.append((name, ms))
        return ms

    def times_of(self, name: str) -> list[float]:
        return [ms for n, ms in self.timed if n == name]


def _run(run_benchmark, bench: FakeBench, providers: dict, repeats: int, hint: str | None = None):
    require_function(run_benchmark, "run_benchmark")
    try:
        result = call(run_benchmark, "run_benchmark", providers, bench.reference, bench.inputs, bench.timer,
                      repeats, hint=hint)
    except KernelCheckError:
        if bench.misuse:  # the error came from calling a provider or the timer the wrong way: say that
            raise KernelCheckError(bench.misuse) from None
        raise
    if bench.misuse:
        raise KernelCheckError(bench.misuse)
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and all(isinstance(r, dict) for r in result)):
        raise KernelCheckError(f"`run_benchmark` returned {_fmt(result)}.\n"
                               "Likely cause: return a pair of dicts (times, failed): times maps each timed "
                               "provider to its list of per-round times in ms, failed maps each provider that "
                               "failed its check to a message.")
    return result


def check_run_benchmark_times(run_benchmark, names=("triton", "eager", "compile"), repeats: int = 5,
                              seed: int | None = None) -> None:
    """Every provider is timed `repeats` times with the given timer; times keeps each round's value in order."""
    seed = fresh_seed() if seed is None else seed
    bench = FakeBench(seed)
    providers = {name: bench.provider(name) for name in names}
    times, failed = _run(run_benchmark, bench, providers, repeats)
    context = f"providers {list(names)}, repeats={repeats}, seed {seed}"
    if failed:
        raise KernelCheckError(f"Correct providers were reported as failed: {_fmt(failed)} ({context}).\n"
                               "Likely cause: compare each output with the reference's with a tolerance "
                               "(out.allclose(expected, rtol=rtol, atol=atol)), and only report real failures.")
    if set(times) != set(names):
        raise KernelCheckError(f"`times` has entries for {sorted(times)}, expected one for each provider "
                               f"{sorted(names)} ({context}).")
    for name in names:
        timed = bench.times_of(name)
        got = times[name]
        if not isinstance(got, (list, tuple)):
            raise KernelCheckError(f"times['{name}'] is {_fmt(got)}, not a list of per-round times ({context}).\n"
                                   "Likely cause: keep every round's time: the medians and the per-round "
                                   "ratios are computed later, by comparison_table.")
        if len(timed) != repeats:
            raise KernelCheckError(f"Provider '{name}' was timed {len(timed)} times, expected {repeats} "
                                   f"(repeats={repeats}; {context}).\nLikely cause: time every provider once "
                                   "in each of the `repeats` rounds, and only with the timer you are given.")
        if len(got) != repeats or not all(_close(a, b, 1e-12) for a, b in zip(got, timed)):
            raise KernelCheckError(f"times['{name}'] is {_fmt(list(got))}, but the timer returned "
                                   f"{_fmt(timed)} for '{name}', in that order ({context}).\n"
                                   "Likely cause: append each value the timer returns, unchanged (it is "
                                   "already in ms), in the order of the rounds.")


def check_run_benchmark_interleaved(run_benchmark, names=("triton", "eager", "compile", "unfused"),
                                    repeats: int = 5, seed: int | None = None) -> None:
    """The providers are interleaved: each round times every provider once, then the next round starts."""
    seed = fresh_seed() if seed is None else seed
    bench = FakeBench(seed)
    providers = {name: bench.provider(name) for name in names}
    _run(run_benchmark, bench, providers, repeats)
    order = [n for n, _ in bench.timed]
    context = f"providers {list(names)}, repeats={repeats}, seed {seed}"
    shown = " ".join(order[:3 * len(names)]) + (" ..." if len(order) > 3 * len(names) else "")
    if len(order) != repeats * len(names):
        raise KernelCheckError(f"The timer was called {len(order)} times, expected {repeats} rounds x "
                               f"{len(names)} providers ({context}).")
    k = len(names)
    for r in range(repeats):
        chunk = order[r * k:(r + 1) * k]
        if sorted(chunk) != sorted(names):
            raise KernelCheckError(
                f"The providers were not interleaved: the timer saw {shown} ({context}).\n"
                "Likely cause: time the providers one after the other in each round (for r in range(repeats): "
                "for each provider: timer(...)), not one provider for all its repeats and then the next. A GPU's "
                "clock and temperature drift over a benchmark; interleaved rounds give every provider the same "
                "conditions, so each round's ratio is fair.")


def check_run_benchmark_correctness(run_benchmark, repeats: int = 3, seed: int | None = None,
                                    bad=("no_relu", "raises", "short", "nan")) -> None:
    """Each output is checked against the reference first: a wrong or failing provider is reported, not timed."""
    seed = fresh_seed() if seed is None else seed
    bench = FakeBench(seed)
    good = ("triton", "eager")
    providers = {}
    behaviours = {"triton": "ok", "eager": "close"}
    behaviours.update({name: name for name in bad})
    for name, behaviour in behaviours.items():
        providers[name] = bench.provider(name, behaviour)
    what = {"no_relu": "returns wrong values (no ReLU)", "raises": "raises a RuntimeError",
            "short": "returns one element too few", "nan": "returns a NaN in one element"}
    context = f"providers {list(providers)}, repeats={repeats}, seed {seed}"
    times, failed = _run(run_benchmark, bench, providers, repeats,
                         hint="a provider that raises, returns another shape or wrong values must be reported "
                              "in `failed` (failed[name] = a message), and the benchmark goes on with the others.")
    timed = {n for n, _ in bench.timed}
    for name in bad:
        if name in timed or name in times:
            raise KernelCheckError(
                f"Provider '{name}' {what[name]}, but it was timed ({context}).\n"
                "Likely cause: check each provider's output against the reference once, before timing: "
                "a provider that raises, returns another shape or wrong values goes into `failed`, "
                "never to the timer. A fast wrong kernel is not a result.")
        if name not in failed:
            raise KernelCheckError(f"Provider '{name}' {what[name]}, but it is not in `failed` ({context}).\n"
                                   "Likely cause: report every provider that fails its check: failed[name] = "
                                   "a message saying what went wrong.")
        if not isinstance(failed[name], str) or not failed[name].strip():
            raise KernelCheckError(f"failed['{name}'] is {_fmt(failed[name])}; it should be a message saying "
                                   f"what went wrong ({context}).")
    if bench.reference_calls == 0:
        raise KernelCheckError(f"The reference was never called ({context}).\n"
                               "Likely cause: compute expected = reference(*inputs) and check every provider's "
                               "output against it before timing.")
    for name in good:
        if name in failed:
            extra = (" Its values differ from the reference by at most 2e-4 (relative), less than fp16 "
                     "rounding: compare with the tolerances atol and rtol, not exactly."
                     if behaviours[name] == "close" else "")
            raise KernelCheckError(f"Provider '{name}' is correct but was reported as failed: "
                                   f"{failed[name]!r} ({context}).{extra}")
        if len(bench.times_of(name)) != repeats or name not in times:
            raise KernelCheckError(f"Provider '{name}' is correct but was not timed {repeats} times "
                                   f"({context}).\nLikely cause: keep timing the good providers when another "
                                   "one fails.")


def check_run_benchmark_rejects_bad_input(run_benchmark, seed: int | None = None) -> None:
    """No providers, or repeats below 1, raise ValueError with a message."""
    require_function(run_benchmark, "run_benchmark")
    seed = fresh_seed() if seed is None else seed
    bench = FakeBench(seed)
    providers = {"triton": bench.provider("triton")}

    def rb(*args):
        return run_benchmark(*args)

    rb.__name__ = "run_benchmark"
    expect_value_error(rb, "run_benchmark", ({}, bench.reference, bench.inputs, bench.timer, 3),
                       "with no providers there is nothing to compare.")
    for repeats in (0, -2):
        expect_value_error(rb, "run_benchmark", (providers, bench.reference, bench.inputs, bench.timer, repeats),
                           "repeats must be at least 1: each round times every provider once.")


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
    context = (f"{description}, peaks {peak_gbps:g} GB/s and {peak_tflops:g} TFLOP/s, providers {list(names)}, "
               f"{repeats} rounds, seed {seed}")
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
            raise KernelCheckError(f"A row of the table has the keys {sorted(row)}; {missing} are missing "
                                   f"({context}).\nLikely cause: each row needs {list(ROW_KEYS)}.")
    order = [r["provider"] for r in rows]
    if order != list(names):
        raise KernelCheckError(f"The rows are for {order}, expected {list(names)} in that order ({context}).")
    expected = _expected_rows(snapshot, flops, n_bytes, peak_gbps, peak_tflops)
    return rows, expected, snapshot, context


def _mismatch(row, want, key: str, context: str, hint: str) -> KernelCheckError:
    return KernelCheckError(f"Row '{want['provider']}': {key} = {_fmt(row[key])}, expected {_fmt(want[key])} "
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
            if not _close(row[key], want[key]):
                hint = (f"{key} = {'gbps(n_bytes, ms)' if key == 'gbps' else 'tflops(flops, ms)'} with the median "
                        "time; n_bytes and flops are the op's (the same for every provider), so the column "
                        "compares providers directly.")
                if want[key] and math.isclose(row[key] / want[key], 1e-3, rel_tol=1e-4):
                    hint = "the time is used as seconds: it is in ms. " + hint
                raise _mismatch(row, want, key, context, f"{hint} (returned/expected = "
                                                          f"{row[key] / want[key] if want[key] else 0:.6g})")


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


def check_roof_tflops(roof_tflops, count: int = 2, seed: int | None = None) -> None:
    """roof_tflops(I, B, P) = min(P, I * B / 1000): the attainable TFLOP/s at intensity I (FLOP/byte)."""
    require_function(roof_tflops, "roof_tflops")
    seed = fresh_seed() if seed is None else seed
    for bw, peak, ridge, intensity in _roofline_points(generator(seed), count):
        want = min(peak, intensity * bw / 1e3)
        got = _number(call(roof_tflops, "roof_tflops", intensity, bw, peak),
                      f"`roof_tflops({intensity:.6g}, {bw:g}, {peak:g})`")
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
        raise KernelCheckError(f"`roof_tflops(intensity={intensity:.6g}, peak_gbps={bw:g}, peak_tflops={peak:g})` "
                               f"returned {_fmt(got)}, expected {_fmt(want)} TFLOP/s (the ridge point is "
                               f"{ridge:.4g} FLOP/byte; seed {seed}).\nLikely cause: {hint}")


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
            hint = (f"the ridge point is peak FLOP/s / peak bytes/s = {peak:g}e12 / {bw:g}e9 = {ridge:.4g} "
                    f"FLOP/byte; an intensity below it is memory-bound, above it compute-bound.")
            if (intensity < wrong_ridge) == (got == MEMORY):
                hint += (f" Your ridge looks like peak_tflops / peak_gbps = {wrong_ridge:.4g}: TFLOP/s and "
                         "GB/s differ by a factor 1000.")
        raise KernelCheckError(f"`classify(intensity={intensity:.6g}, peak_gbps={bw:g}, peak_tflops={peak:g})` "
                               f"returned {got!r}, expected {want!r} (seed {seed}).\nLikely cause: {hint}")

"""Phase 4: the learner's ``run_benchmark(providers, reference, inputs, timer, repeats)`` -> (times, failed), driven
by :class:`FakeBench`: providers that compute nothing and log their calls, and a fake timer that logs which
provider it timed and when and returns made-up times from the test's seed. The checks then read the logs: every
provider timed ``repeats`` times and interleaved, each output checked against the reference before timing, a
wrong or failing provider reported instead of timed, bad input refused.
"""
from __future__ import annotations

import torch

from ...checking import Case, KernelCheckError, fresh_seed, generator, shown
from ..common.functions import _close, _fmt, call, expect_value_error, require_function


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
                shown(f"{who} was called with ({', '.join(type(a).__name__ for a in args)}"
                      f"{', ' + ', '.join(kwargs) if kwargs else ''})", f"{who} was called with other arguments")
                + " instead of the benchmark's inputs.\n"
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
            self.misuse = self.misuse or (f"the timer was given {shown(type(fn).__name__, 'something')}, "
                                          "not a function.\n"
                                          "Likely cause: give it a function of no arguments: "
                                          "timer(lambda: fn(*inputs)).")
            raise TypeError("the timer needs a function")
        start = len(self.calls)
        fn()
        ran = self.calls[start:]
        if len(ran) != 1:
            self.misuse = self.misuse or (
                f"the timer was given a function that ran "
                f"{shown(f'{len(ran)} providers (' + (', '.join(ran) or 'none') + ')', 'no provider or several')}.\n"
                "Likely cause: time one provider per call: timer(lambda: providers[name](*inputs)).")
            raise RuntimeError("the timer must time exactly one provider")
        name = ran[0]
        k = len(self.timed)
        ms = self.base[name] * (1 + 0.04 * k) * self.noise[k % len(self.noise)]
        self.timed.append((name, ms))
        return ms

    def times_of(self, name: str) -> list[float]:
        return [ms for n, ms in self.timed if n == name]


def _case(names, repeats: int, seed: int) -> Case:
    """The providers and rounds a check gave run_benchmark, or their kind on a hidden case."""
    return Case(f"providers {list(names)}, repeats={repeats}, seed {seed}",
                "one provider" if len(names) == 1 else "several providers",
                "one round" if repeats == 1 else "several rounds")


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
    context = _case(names, repeats, seed)
    if failed:
        raise KernelCheckError(f"Correct providers were reported as failed{shown(': ' + _fmt(failed), '')} "
                               f"({context}).\n"
                               "Likely cause: compare each output with the reference's with a tolerance "
                               "(out.allclose(expected, rtol=rtol, atol=atol)), and only report real failures.")
    if set(times) != set(names):
        raise KernelCheckError(shown(f"`times` has entries for {sorted(times)}, expected one for each provider "
                                     f"{sorted(names)}", "`times` does not have one entry for each provider, and "
                                     "no other") + f" ({context}).")
    for name in names:
        timed = bench.times_of(name)
        got = times[name]
        if not isinstance(got, (list, tuple)):
            raise KernelCheckError(f"times['{name}'] is {_fmt(got)}, not a list of per-round times ({context}).\n"
                                   "Likely cause: keep every round's time: the medians and the per-round "
                                   "ratios are computed later, by comparison_table.")
        if len(timed) != repeats:
            raise KernelCheckError(shown(f"Provider '{name}' was timed {len(timed)} times, expected {repeats} "
                                         f"(repeats={repeats}; {context}).", f"Provider '{name}' was not timed "
                                         f"`repeats` times ({context}).") + "\nLikely cause: time every provider once "
                                   "in each of the `repeats` rounds, and only with the timer you are given.")
        if len(got) != repeats or not all(_close(a, b, 1e-12) for a, b in zip(got, timed)):
            raise KernelCheckError(shown(f"times['{name}'] is {_fmt(list(got))}, but the timer returned "
                                         f"{_fmt(timed)} for '{name}', in that order",
                                         f"times['{name}'] is not what the timer returned for '{name}', in that "
                                         "order") + f" ({context}).\n"
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
    context = _case(names, repeats, seed)
    seen = " ".join(order[:3 * len(names)]) + (" ..." if len(order) > 3 * len(names) else "")
    if len(order) != repeats * len(names):
        raise KernelCheckError(shown(f"The timer was called {len(order)} times, expected {repeats} rounds x "
                                     f"{len(names)} providers", "The timer was not called once per provider in "
                                     "each round") + f" ({context}).")
    k = len(names)
    for r in range(repeats):
        chunk = order[r * k:(r + 1) * k]
        if sorted(chunk) != sorted(names):
            raise KernelCheckError(
                f"The providers were not interleaved{shown(': the timer saw ' + seen, '')} ({context}).\n"
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
    context = _case(providers, repeats, seed)
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
            raise KernelCheckError(f"Provider '{name}' is correct but was reported as failed"
                                   f"{shown(': ' + repr(failed[name]), '')} ({context}).{extra}")
        if len(bench.times_of(name)) != repeats or name not in times:
            raise KernelCheckError(f"Provider '{name}' is correct but was not timed "
                                   f"{shown(str(repeats), '`repeats`')} times "
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

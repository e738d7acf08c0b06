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

The kernel's check lives here; the function checks in the module of their concern, re-exported here for the
notebook and the grader: :mod:`.costs` (rates and cost models), :mod:`.runner`
(``run_benchmark`` and its fake providers and timer), :mod:`.table` (the comparison table and the
roofline), and :mod:`..common.functions` (calling the learner's plain functions, shared with phase 5).
"""
from __future__ import annotations

import torch
import triton

from ...checking import Case, dtype_name, fresh_seed, generator, size_kind
from ...device import infer_device
from ...tolerances import DIAGNOSIS
from ..common.launch import launch, require_triton_kernel
from .costs import (COST_MODELS, check_add_relu_mul_cost, check_costs_reject_bad_sizes, check_gbps,
                    check_matmul_relu_cost, check_rates_reject_bad_input, check_softmax_cost, check_tflops)
from .runner import (FakeBench, check_run_benchmark_correctness, check_run_benchmark_interleaved,
                     check_run_benchmark_rejects_bad_input, check_run_benchmark_times)
from .table import (CASES, COMPUTE, MEMORY, ROW_KEYS, _table_times, check_classify, check_roof_tflops,
                    check_table_rates, check_table_roof, check_table_speedups)
from ..common.elementwise import check_elementwise, diagnose_blocks
from ..common.functions import REL, _fmt, call, expect_value_error, require_function

KERNEL = "triton_add_relu_mul_kernel"
SIGNATURE = ("triton_add_relu_mul_kernel(x_ptr, bias_ptr, output_ptr, scale, n_elements, "
             "BLOCK_SIZE: tl.constexpr)")


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
    sign = "a negative scale" if scale < 0 else "a zero scale" if scale == 0 else "a positive scale"
    context = Case(f"n_elements={n}, BLOCK_SIZE={block_size}, scale={scale:g}, {dtype_name(dtype)}, seed {seed}",
                   size_kind(n, block_size), sign, dtype_name(dtype))

    def run(inputs, out, stage_text):
        run_add_relu_mul(kernel, *inputs, out, scale, block_size, context=context, device=device,
                         fence_stage=stage_text)

    check_elementwise(KERNEL, {"x": x, "bias": bias}, expected, block_size, run,
                      lambda out: diagnose_add_relu_mul(out, x, bias, scale, expected, block_size),
                      context=context, device=device)


__all__ = ["KERNEL", "SIGNATURE", "MEMORY", "COMPUTE", "ROW_KEYS", "REL", "CASES", "COST_MODELS", "FakeBench",
           "add_relu_mul_ref", "run_add_relu_mul", "diagnose_add_relu_mul", "check_add_relu_mul", "require_function",
           "call", "expect_value_error", "check_gbps", "check_tflops", "check_rates_reject_bad_input",
           "check_add_relu_mul_cost", "check_softmax_cost", "check_matmul_relu_cost", "check_costs_reject_bad_sizes",
           "check_run_benchmark_times", "check_run_benchmark_interleaved", "check_run_benchmark_correctness",
           "check_run_benchmark_rejects_bad_input", "check_table_rates", "check_table_speedups", "check_table_roof",
           "check_roof_tflops", "check_classify", "_fmt", "_table_times"]

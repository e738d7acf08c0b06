"""Developers only (a scratch sweep, nothing recorded), on an H100/H200: phase 6's LayerNorm forward, fp32 at 16384
columns (256 MB a run, as `make gpu-check`'s layer_norm section), against a device copy of the same bytes, by launch
options (num_warps, maxnreg: how many one-row programs an SM holds) and by variants of the kernel that keep its
contract (one program a row, the same arguments, the same stores): eviction hints on the loads, w and b loaded before
x, and one reduction pass (sums of x - x[0] and of its square, both in one tl.reduce) instead of two.

    python tools/sweep_layernorm.py [--repeats 5] [--cols 16384] [--dtype float32] [--launches 1,2,4:128,8]
        [--variant-launches 2,4]

Prints one line a provider: GB/s (read x + write y), the ratio to the copy, registers, spills; medians of
interleaved do_bench medians (L2 flushed between calls), the GPU warmed first.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import reference_module  # noqa: E402
from sweep_attention import do_bench, interleaved, log, stats  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _add_pair(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def ln_variant_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride_x_row, stride_y_row, n_cols, eps,
                      BLOCK_SIZE: tl.constexpr, EVICT: tl.constexpr, WB_FIRST: tl.constexpr,
                      ONE_REDUCE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    if WB_FIRST:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    if EVICT:
        x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=0.0)
    x = x.to(tl.float32)
    if ONE_REDUCE:
        shift = tl.load(x_ptr + row * stride_x_row).to(tl.float32)  # near the mean: the squares do not cancel
        d = tl.where(mask, x - shift, 0.0)
        s1, s2 = tl.reduce((d, d * d), 0, _add_pair)
        dm = s1 / n_cols
        mean = shift + dm
        var = tl.maximum(s2 / n_cols - dm * dm, 0.0)
        xc = tl.where(mask, x - mean, 0.0)
    else:
        mean = tl.sum(x, axis=0) / n_cols
        xc = tl.where(mask, x - mean, 0.0)
        var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    if not WB_FIRST:
        if EVICT:
            w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            b = tl.load(b_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        else:
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    if EVICT:
        tl.store(y_ptr + row * stride_y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask,
                 eviction_policy="evict_first")
    else:
        tl.store(y_ptr + row * stride_y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


def main() -> None:
    import torch

    from gpu_bench_backward import _warm

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cols", type=int, default=16384)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--launches", default="4,4:168,8,8:128,16,16:64,32:32",
                        help="the notebook's kernel's launches: num_warps[:maxnreg], comma-separated")
    parser.add_argument("--variant-launches", default="",
                        help="the variants' launches (default: the sweep's fixed set for 16384 columns)")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    nb6 = reference_module("06_fused_attention")
    n_cols = args.cols
    n_rows = 2**28 // (n_cols * dtype.itemsize)
    block = triton.next_power_of_2(n_cols)
    torch.manual_seed(0)
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype) * 2 + 3
    w = (torch.rand(n_cols, device="cuda") + 0.5).to(dtype)
    b = torch.randn(n_cols, device="cuda").to(dtype)
    y = torch.empty_like(x)
    mean = torch.empty(n_rows, device="cuda")
    rstd = torch.empty(n_rows, device="cuda")
    ref = torch.nn.functional.layer_norm(x.float(), (n_cols,), w.float(), b.float(), 1e-5)
    _warm(2000)

    providers = {"copy": lambda: y.copy_(x),
                 "torch": lambda: torch.nn.functional.layer_norm(x, (n_cols,), w, b, 1e-5),
                 "wrapper": lambda: nb6.layer_norm_launch(x, w, b)}

    def add(name, kernel, extra, warps, maxnreg):
        opts = dict(num_warps=warps)
        if maxnreg:
            opts["maxnreg"] = maxnreg

        def run():
            return kernel[(n_rows,)](x, y, w, b, mean, rstd, x.stride(0), y.stride(0), n_cols, 1e-5,
                                     BLOCK_SIZE=block, **extra, **opts)
        try:
            y.fill_(float("nan"))
            compiled = run()
            torch.cuda.synchronize()
        except Exception as err:
            log(f"  {name}: {type(err).__name__}: {str(err)[:200]}")
            return
        err = (y.float() - ref).abs().max().item()
        log(f"  {name}: {stats(compiled)}, max err {err:.2g}")
        if err < 2e-2:
            providers[name] = run

    nbk = nb6.triton_layer_norm_kernel

    def launches(spec):
        return tuple((int(w), int(r[0]) if r else None) for w, *r in (item.split(":") for item in spec.split(",")))

    for warps, maxnreg in launches(args.launches):
        add(f"nb w{warps}" + (f" r{maxnreg}" if maxnreg else ""), nbk, {}, warps, maxnreg)
    for flags, fixed in (((1, 0, 0), ((4, None), (8, 128), (16, None), (16, 64))),
                         ((0, 0, 1), ((4, None), (8, 128), (16, None), (16, 64))),
                         ((0, 1, 0), ((8, 128), (16, 64))),
                         ((1, 0, 1), ((4, None), (8, 128), (16, 64)))):
        extra = dict(EVICT=bool(flags[0]), WB_FIRST=bool(flags[1]), ONE_REDUCE=bool(flags[2]))
        tag = "+".join(k.lower() for k, v in extra.items() if v)
        for warps, maxnreg in (launches(args.variant_launches) if args.variant_launches else fixed):
            add(f"{tag} w{warps}" + (f" r{maxnreg}" if maxnreg else ""), ln_variant_kernel, extra, warps, maxnreg)
    t = interleaved(providers, args.repeats, do_bench)
    gbs = 2 * x.numel() * x.element_size() / 1e6
    for p, ms in t.items():
        log(f"layer_norm {args.dtype} n_cols={n_cols} {p}: {gbs / ms:.0f} GB/s, {t['copy'] / ms:.3f}x copy")


if __name__ == "__main__":
    main()

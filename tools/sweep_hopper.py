"""Developers only, on an H100/H200: issue 43's forward on Hopper (tensor descriptors / TMA and warp
specialization), the launch path's cost per argument, and LayerNorm variants. Prints one line a measurement;
nothing is recorded.

    python tools/sweep_hopper.py [--parts tma,args,layernorm] [--repeats 5]
        [--configs 'BLOCK_M,BLOCK_N,warps,stages,ws,store_tma;...'] [--head-dims 128,64] [--seqs 4096,8192,16384]
        [--causal 0,1]

tma:       a TMA forward (host tensor descriptors over the (batch·heads·seq_len, head_dim) view, the loop over key
           tiles a tl.range that may be warp-specialized), tiles x warps x stages x warp_specialize, against SDPA's
           cuDNN and FlashAttention-2 and phase 6's kernel, d 64 and 128, causal and not, seq_len 4096-16384. The
           kernel is tritoncourse/hopper.py's (phase 6's optional section) with O's store selectable: descriptor or
           pointers. --configs replaces the default tiles (ws and store_tma 0 or 1); each tile's line at seq_len 4096
           says whether its TTGIR holds ttg.warp_specialize (the loop split into warp groups) and its PTX setmaxnreg.
args:      the CPU time of one Triton launch against its number of arguments (an empty kernel).
layernorm: phase 6's LayerNorm kernel at 16384 fp32 columns against a persistent variant whose loop over rows is
           pipelined (tl.range num_stages), each against a copy of the bytes.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import reference_module  # noqa: E402
from gpu_bench_backward import _warm  # noqa: E402
from sweep_attention import do_bench, interleaved, log, sdpa_with, stats  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tritoncourse.hopper import _tma_tiles  # noqa: E402  (the notebook's loop over key tiles, called below)

B, H = 4, 8


@triton.jit
def tma_attention_kernel(desc_q, desc_k, desc_v, desc_o, o_ptr, lse_ptr, seq_len, sm_scale, HEAD_DIM: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                         WARP_SPECIALIZE: tl.constexpr, STORE_TMA: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    row0 = pid_bh * seq_len  # this (batch, head)'s first row in the (batch·heads·seq_len, HEAD_DIM) view
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = desc_q.load([row0 + pid_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if CAUSAL:
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, pid_m * BLOCK_M, offs_m, offs_n,
                                   qk_scale, BLOCK_N, False, WARP_SPECIALIZE)
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, pid_m * BLOCK_M, (pid_m + 1) * BLOCK_M,
                                   offs_m, offs_n, qk_scale, BLOCK_N, True, WARP_SPECIALIZE)
    else:
        acc, l_i, m_i = _tma_tiles(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, seq_len, offs_m, offs_n, qk_scale,
                                   BLOCK_N, False, WARP_SPECIALIZE)
    acc = acc / l_i[:, None]
    if STORE_TMA:
        desc_o.store([row0 + pid_m * BLOCK_M, 0], acc.to(q.dtype))
    else:  # a plain store: the Hopper warp specialization pass splits the tile between consumer warp groups
        offs_d = tl.arange(0, HEAD_DIM)
        tl.store(o_ptr + (row0 + offs_m)[:, None].to(tl.int64) * HEAD_DIM + offs_d[None, :], acc.to(q.dtype))
    tl.store(lse_ptr + pid_bh * seq_len + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)


def tma_attention(q, k, v, causal, bm, bn, warps, stages, ws, store_tma=True):
    """(O, LSE) by tma_attention_kernel: contiguous q, k, v, seq_len a multiple of bm (and bm of bn)."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    batch, heads, seq_len, head_dim = q.shape
    assert seq_len % bm == 0 and bm % bn == 0 and all(t.is_contiguous() for t in (q, k, v))
    o = torch.empty_like(q)
    lse = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    rows = batch * heads * seq_len
    dq, do_ = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [bm, head_dim]) for t in (q, o))
    dk, dv = (TensorDescriptor.from_tensor(t.view(rows, head_dim), [bn, head_dim]) for t in (k, v))
    compiled = tma_attention_kernel[(seq_len // bm, batch * heads)](
        dq, dk, dv, do_, o, lse, seq_len, head_dim**-0.5, HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal,
        WARP_SPECIALIZE=ws, STORE_TMA=store_tma, num_warps=warps, num_stages=stages)
    return o, lse, compiled


def split_stats(compiled) -> str:
    asm = getattr(compiled, "asm", {})
    return (f"ttg.warp_specialize in TTGIR: {'ttg.warp_specialize' in asm.get('ttgir', '')}, "
            f"setmaxnreg in PTX: {'setmaxnreg' in asm.get('ptx', '')}")


def part_tma(repeats: int, configs=None, head_dims=(128, 64), seqs=(4096, 8192, 16384), causals=(False, True)) -> None:
    import torch
    from torch.nn.attention import SDPBackend

    nb6 = reference_module("06_fused_attention")
    # (BLOCK_M, BLOCK_N, warps, stages, warp_specialize, O by descriptor). Left out: four warps with
    # warp_specialize, which Triton 3.6's Hopper pass failed to compile with the descriptor store, and with a plain
    # store (128, 64, 4, 2) ran past six minutes without an end (docs/GPU-RUNS.md, twenty-sixth session); Triton 3.7.1's
    # fails on both stores at once in its NVGPUWarpSpecialization pass (twenty-ninth session).
    configs = [(128, 64, 8, 3, False, True), (128, 64, 8, 3, True, True), (128, 128, 8, 2, False, True),
               (128, 128, 8, 2, True, True), (128, 64, 8, 4, True, True), (128, 128, 8, 3, True, True),
               (64, 64, 4, 3, False, True)] if configs is None else configs
    for head_dim in head_dims:
        for causal in causals:
            for S in seqs:
                torch.manual_seed(0)
                q, k, v = (torch.randn(B, H, S, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
                ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                providers = {}
                for c in configs:
                    try:
                        o, _, compiled = tma_attention(q, k, v, causal, *c)
                        torch.cuda.synchronize()
                    except Exception as err:
                        log(f"  tma d={head_dim} causal={causal} S={S} {c}: {type(err).__name__}: {str(err)[:200]}")
                        continue
                    err = (o.float() - ref.float()).abs().max().item()
                    if err > 2e-2:
                        log(f"  tma d={head_dim} causal={causal} S={S} {c}: WRONG ({err:.3g})")
                        continue
                    if S == seqs[0]:
                        log(f"  tma config d={head_dim} causal={causal} {c}: {stats(compiled)}, {split_stats(compiled)}")
                    providers[str(c)] = lambda c=c: tma_attention(q, k, v, causal, *c)

                providers.update(phase6=lambda: nb6.attention(q, k, v, causal),
                                 cudnn=sdpa_with(SDPBackend.CUDNN_ATTENTION, q, k, v, causal),
                                 fa2=sdpa_with(SDPBackend.FLASH_ATTENTION, q, k, v, causal))
                providers["phase6"]()
                t = interleaved(providers, repeats, do_bench)
                flops = 4 * B * H * S * S * head_dim / (2 if causal else 1)
                log(f"forward d={head_dim} causal={causal} S={S}: " + ", ".join(
                    f"{p} {flops / ms / 1e9:.0f} TF/s ({t['cudnn'] / ms:.2f}x cuDNN)" for p, ms in t.items()))
                del q, k, v, ref


@triton.jit
def _empty_kernel(p, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20,
                  a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, N: tl.constexpr):
    pass


@triton.jit
def _empty_kernel4(p, a0, a1, a2, a3, N: tl.constexpr):
    pass


def part_args() -> None:
    """CPU time of one launch of an empty kernel with 5 and 33 runtime arguments, tensors or ints; a CUDA graph's
    replay of 20 launches against 20 launches."""
    import torch

    x = torch.empty(16, device="cuda")
    ints = [4096 * (i + 1) for i in range(32)]  # divisible by 16: one specialisation, as strides are
    cases = {"5 args": lambda: _empty_kernel4[(1,)](x, *ints[:4], N=1),
             "33 args (ints)": lambda: _empty_kernel[(1,)](x, *ints, N=1),
             "33 args (8 tensors, 25 ints)": lambda: _empty_kernel[(1,)](x, x, x, x, x, x, x, x, *ints[:25], N=1)}
    for name, fn in cases.items():
        fn()
        torch.cuda.synchronize()
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(1000):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            log(f"args {name}: {(t1 - t0) / 1000 * 1e6:.1f} us of CPU a launch")


@triton.jit
def _ln_persistent(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride_x_row, stride_y_row, n_rows, n_cols, eps,
                   BLOCK_SIZE: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        xc = tl.where(mask, x - mean, 0.0)
        var = tl.sum(xc * xc, axis=0) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y_row + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


def part_layernorm(repeats: int) -> None:
    import torch

    nb6 = reference_module("06_fused_attention")
    n_cols = 16384
    n_rows = 2**28 // (n_cols * 4)
    x = torch.randn(n_rows, n_cols, device="cuda")
    w, b = torch.randn(n_cols, device="cuda"), torch.randn(n_cols, device="cuda")
    y = torch.empty_like(x)
    mean, rstd = torch.empty(n_rows, device="cuda"), torch.empty(n_rows, device="cuda")
    ref = torch.nn.functional.layer_norm(x, (n_cols,), w, b, 1e-5)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    providers = {"copy": lambda: y.copy_(x), "wrapper": lambda: nb6.layer_norm_launch(x, w, b),
                 "w4": lambda: nb6.triton_layer_norm_kernel[(n_rows,)](x, y, w, b, mean, rstd, n_cols, n_cols, n_cols,
                                                                      1e-5, BLOCK_SIZE=n_cols, num_warps=4)}
    for per_sm in (1, 2):
        for warps in (8, 16):
            for stages in (1, 2, 3):
                def run(per_sm=per_sm, warps=warps, stages=stages):
                    return _ln_persistent[(sms * per_sm,)](x, y, w, b, mean, rstd, n_cols, n_cols, n_rows, n_cols,
                                                           1e-5, BLOCK_SIZE=n_cols, STAGES=stages, num_warps=warps)
                try:
                    y.zero_()
                    compiled = run()
                    torch.cuda.synchronize()
                except Exception as err:
                    log(f"  ln persistent {per_sm}/SM w{warps} s{stages}: {type(err).__name__}: {str(err)[:160]}")
                    continue
                err = (y - ref).abs().max().item()
                log(f"  ln persistent {per_sm}/SM w{warps} s{stages}: {stats(compiled)}, max err {err:.2g}")
                if err < 1e-3:
                    providers[f"persist{per_sm}w{warps}s{stages}"] = run
    t = interleaved(providers, repeats, do_bench)
    gbs = 2 * x.numel() * 4 / 1e6
    log(f"layer_norm fp32 n_cols={n_cols}: " + ", ".join(
        f"{p} {gbs / ms:.0f} GB/s ({t['copy'] / ms:.2f}x copy)" for p, ms in t.items()))


def main() -> None:
    import traceback

    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="tma,args,layernorm")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--configs", default="")
    parser.add_argument("--head-dims", default="128,64")
    parser.add_argument("--seqs", default="4096,8192,16384")
    parser.add_argument("--causal", default="0,1")
    args = parser.parse_args()
    configs = [tuple(int(x) for x in c.split(",")) for c in args.configs.split(";") if c.strip()] or None
    configs = configs and [(bm, bn, w, st, bool(ws), bool(tma)) for bm, bn, w, st, ws, tma in configs]
    tma_args = dict(configs=configs, head_dims=tuple(map(int, args.head_dims.split(","))),
                    seqs=tuple(map(int, args.seqs.split(","))), causals=tuple(bool(int(c)) for c in args.causal.split(",")))
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    _warm(3000)
    for part in args.parts.split(","):
        try:
            {"tma": lambda: part_tma(args.repeats, **tma_args), "args": part_args,
             "layernorm": lambda: part_layernorm(args.repeats)}[part]()
        except Exception:
            traceback.print_exc()


if __name__ == "__main__":
    main()

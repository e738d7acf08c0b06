"""Developers only, on a GPU: phase 6's forward written other ways (issue 43), side by side with SDPA's cuDNN and
FlashAttention-2 backends, the notebook's own autotuned forward and tritoncourse/hopper.py's TMA kernel.

    python tools/sweep_forward_variants.py [--spec 'nb:128,64,8,3;nbold:64,64,4,3,128@d64@causal;tma2:128,64,4,2@rev']
        [--tma '128,64,4,2;128,128,8,3'] [--head-dims 128,64] [--seqs 4096,8192,16384] [--causal 0,1] [--repeats 3]
        [--no-nb]

A spec item NAME:BLOCK_M,BLOCK_N,warps,stages[,maxnreg][@tag...] launches one kernel at one configuration as the
notebook's wrapper does (grid (cdiv(S, BLOCK_M), B*H), B 4 x H 8, fp16). NAME: nb (or v2) the notebook's reference
kernel, nbold / tma2 the kernels of tools/sweep_forward_kernels.py (its docstring says what each is), pp2
tools/sweep_forward_pp2.py's (two query tiles a program), ws1 / ws2 / ws3 tools/sweep_forward_ws.py's (one key loop,
which Triton splits into warp groups: ws1 with host descriptors at BLOCK_M 64 and 4 warps, ws2 with descriptors made
in the kernel at BLOCK_M 64 or 128 and 4 warps, ws3 ws2 made persistent), gl tools/sweep_forward_gluon.py's (Gluon,
FlashAttention-3's overlap written out; maxnreg: its consumer groups' registers). Every other item launches through
sweep_attention.forward_launcher. Tags: d64 / d128 keep an item to that head_dim, causal / full to that mask, rev
(tma2: causal tiles in reverse order), const (tma2: seq_len a constexpr), ws (ws1, ws2, ws3: warp_specialize on), lpt
(ws2: the heaviest causal query tiles first, across every head), x2 (ws3: two programs an SM). --tma adds
tritoncourse/hopper.py's tma_attention at (BLOCK_M, BLOCK_N, warps, stages), with warp_specialize on when "@ws"
follows the tiles; "nb" alone (unless --no-nb) is the notebook's autotuned wrapper, whose choices are printed at the
end.
Every kernel is compiled first (threads), checked against cuDNN (max abs error), its registers, spills and shared
memory printed at seq_len 4096; then each shape is timed: medians of interleaved do_bench medians, the GPU warmed
first; each line gives every provider's ratio to cuDNN (above 1: faster).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpu_bench import reference_module  # noqa: E402
from gpu_bench_backward import _warm  # noqa: E402
from sweep_attention import do_bench, forward_launcher, interleaved, log, sdpa_with, stats  # noqa: E402

B, H = 4, 8


def parse_spec(text: str) -> list:
    items = []
    for item in filter(None, (s.strip() for s in text.split(";"))):
        name, _, rest = item.partition(":")
        rest, *tags = rest.split("@")
        nums = [int(x) for x in rest.split(",")]
        items.append((name, tuple(nums[:4]), nums[4] if len(nums) > 4 else None, set(tags)))
    return items


def wanted(tags: set, d: int, causal: bool) -> bool:
    if any(t.startswith("d") for t in tags) and f"d{d}" not in tags:
        return False
    if "causal" in tags and not causal or "full" in tags and causal:
        return False
    return True


def main() -> None:
    import torch
    from torch.nn.attention import SDPBackend

    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="")
    parser.add_argument("--tma", default="128,64,4,2")
    parser.add_argument("--head-dims", default="128,64")
    parser.add_argument("--seqs", default="4096,8192,16384")
    parser.add_argument("--causal", default="0,1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-nb", action="store_true")
    args = parser.parse_args()
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    import triton
    from triton.runtime._async_compile import AsyncCompileMode
    from concurrent.futures import ThreadPoolExecutor

    from tritoncourse import hopper

    nb6 = reference_module("06_fused_attention")
    spec = parse_spec(args.spec)
    import sweep_forward_kernels as variants
    import sweep_forward_gluon
    import sweep_forward_pp2
    import sweep_forward_ws

    kernels = {"nb": nb6.triton_attention_kernel, "v2": nb6.triton_attention_kernel,
               "nbold": variants.old_attention_kernel, "pp2": sweep_forward_pp2.pp2_attention_kernel, "tma2": None,
               "ws1": None, "ws2": None, "ws3": None, "gl": None}
    runners = {"tma2": variants.tma2_runner, "ws1": sweep_forward_ws.ws1_runner, "ws2": sweep_forward_ws.ws2_runner,
               "ws3": sweep_forward_ws.ws3_runner, "gl": sweep_forward_gluon.gl_runner}
    tma = [(tuple(int(x) for x in t.split("@")[0].split(",")), t.endswith("@ws"))
           for t in filter(None, args.tma.split(";"))]
    shapes = [(d, bool(int(c)), S) for d in map(int, args.head_dims.split(",")) for c in args.causal.split(",")
              for S in map(int, args.seqs.split(","))]

    # compile everything first, in threads
    t0 = time.time()
    with ThreadPoolExecutor(max(4, os.cpu_count() or 8)) as pool, AsyncCompileMode(pool, ignore_errors=True):
        for d, causal in sorted({(d, c) for d, c, _ in shapes}):
            q = torch.empty(B, H, 4096, d, device="cuda", dtype=torch.float16)
            for name, cfg, mr, tags in spec:
                if wanted(tags, d, causal):
                    try:
                        if kernels[name] is None:
                            runners[name](q, q, q, causal, cfg, mr, tags).compiled()
                        else:
                            forward_launcher(kernels[name], q, q, q, causal, cfg, maxnreg=mr).compiled()
                    except Exception as err:
                        log(f"  precompile {name} {cfg}: {type(err).__name__}: {str(err)[:160]}")
            if not args.no_nb:  # the notebook's autotuned configurations
                for c in nb6.ATTENTION_CONFIGS:
                    try:
                        forward_launcher(nb6.triton_attention_kernel, q, q, q, causal, (
                            c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages),
                            maxnreg=c.maxnreg).compiled()
                    except Exception as err:
                        log(f"  precompile nb {c}: {type(err).__name__}: {str(err)[:160]}")
    log(f"precompiled in {time.time() - t0:.1f} s")
    _warm(3000)
    for d, causal, S in shapes:
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=torch.float16) for _ in range(3))
        cudnn = sdpa_with(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
        ref = cudnn().float()
        providers = {"cudnn": cudnn, "fa2": sdpa_with(SDPBackend.FLASH_ATTENTION, q, k, v, causal)}
        if not args.no_nb:
            providers["nb"] = lambda: nb6.attention(q, k, v, causal)[0]
        for cfg, ws in tma:
            bm, bn, w, st = cfg
            providers[f"tma{cfg}" + ("+ws" if ws else "")] = (
                lambda bm=bm, bn=bn, w=w, st=st, ws=ws: hopper.tma_attention(
                    q, k, v, causal, block_n=bn, stages=st, warp_specialize=ws, block_m=bm, warps=w)[0])
        for name, cfg, mr, tags in spec:
            if wanted(tags, d, causal):
                label = f"{name}{cfg}" + (f"r{mr}" if mr else "") + "".join(f"+{t}" for t in sorted(tags) if t in (
                    "rev", "const", "ws", "lpt", "x2"))
                try:
                    if kernels[name] is None:  # a module with its own launcher (descriptors)
                        providers[label] = runners[name](q, k, v, causal, cfg, mr, tags)
                    else:
                        providers[label] = forward_launcher(kernels[name], q, k, v, causal, cfg, maxnreg=mr)
                except Exception as err:
                    log(f"  {label}: {type(err).__name__}: {str(err)[:160]}")
        for p, fn in list(providers.items()):
            try:
                err = (fn().float() - ref).abs().max().item()
            except Exception as e:
                log(f"  {p}: {type(e).__name__}: {str(e)[:160]}")
                del providers[p]
                continue
            if not err <= 2e-2:  # NaN too
                log(f"  {p}: WRONG, max error {err:.3g}")
                del providers[p]
            elif S == 4096 and hasattr(fn, "compiled"):
                log(f"  {p} d{d} causal={causal}: {stats(fn.compiled())}, err {err:.2g}")
        torch.cuda.synchronize()
        t = interleaved(providers, args.repeats, do_bench)
        flops = 4 * B * H * S * S * d / (2 if causal else 1)
        log(f"d={d} causal={causal} S={S}: cuDNN {flops / t['cudnn'] / 1e9:.0f} TF/s; " + ", ".join(
            f"{p} {t['cudnn'] / ms:.3f}" for p, ms in t.items() if p != "cudnn"))
        del q, k, v
    if not args.no_nb:
        for key, cfg in nb6.triton_attention_autotuned.cache.items():
            log(f"nb autotuner: {key} -> {cfg}")


if __name__ == "__main__":
    main()

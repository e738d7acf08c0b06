"""Developers only, on a GPU: which tiles, warps and stages the phase 7 backward kernels run fastest with, per
head_dim, and what the compiled kernels hold (registers, spills, shared memory). Prints a table; with --apply,
sets the notebook module's BWD_CONFIG to the fastest configuration of each kernel and head_dim and then runs
gpu_check's attention_backward section with it (the figures recorded are then those of the configuration the
notebook must carry: copy the printed BWD_CONFIG into source/07_attention_backward).

    python tools/sweep_backward.py [--apply --repeats 5 --out /tmp/gc]

Each kernel is timed alone (triton.testing.do_bench, median), fp16, batch 4 x heads 8, seq_len 4096, causal and
not; a configuration's time is the sum over both. Configurations that do not compile (shared memory) are skipped.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import reference_module  # noqa: E402

B, H, S = 4, 8, 4096
# Tiles as (BLOCK_M, BLOCK_N, num_warps, num_stages); the notebook's own configuration is timed too.
DKDV = [(bm, bn, w, 2) for bm, bn in ((16, 64), (32, 64), (32, 128), (64, 64), (64, 128)) for w in (4, 8)]
DQ = [(bm, bn, w, 2) for bm, bn in ((32, 32), (64, 32), (64, 64), (128, 32), (128, 64)) for w in (4, 8)]


def _stats(compiled) -> str:
    try:
        compiled._init_handles()
        return f"{compiled.n_regs} regs, {compiled.n_spills} spills, {compiled.metadata.shared // 1024} KiB shared"
    except Exception as err:  # attribute names differ between Triton versions
        return f"stats: {type(err).__name__}"


def sweep(nb, head_dim: int):
    import torch
    import triton

    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, head_dim, device="cuda", dtype=torch.float16) for _ in range(4))
    sm_scale = head_dim**-0.5
    best = {}
    for kernel_name, configs in (("dkdv", DKDV), ("dq", DQ)):
        rows = []
        current = tuple(nb.BWD_CONFIG["cuda_d128" if head_dim > 64 and "cuda_d128" in nb.BWD_CONFIG else "cuda"][
            kernel_name])
        for bm, bn, w, st in dict.fromkeys([current, *configs]):
            total, stats = 0.0, ""
            try:
                for causal in (False, True):
                    o, lse = nb.attention_forward(q, k, v, causal)
                    lse2 = lse.reshape(B * H, S).contiguous()
                    delta = (o.float() * do.float()).sum(-1).reshape(B * H, S).contiguous()
                    dq32 = torch.zeros(q.shape, device="cuda", dtype=torch.float32)
                    dk, dv, dq = torch.empty_like(k), torch.empty_like(v), torch.empty_like(q)
                    if kernel_name == "dkdv":
                        def run():
                            return nb.triton_attention_bwd_dkdv_kernel[(triton.cdiv(S, bn), B * H)](
                                q, k, v, do, lse2, delta, dk, dv, dq32, *q.stride(), *k.stride(), *v.stride(),
                                *do.stride(), *dk.stride(), *dv.stride(), *dq32.stride(), H, S, sm_scale,
                                HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, ATOMIC_DQ=False,
                                num_warps=w, num_stages=st)
                    else:
                        def run():
                            return nb.triton_attention_bwd_dq_kernel[(triton.cdiv(S, bm), B * H)](
                                q, k, v, do, lse2, delta, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(),
                                *dq.stride(), H, S, sm_scale, HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn,
                                CAUSAL=causal, num_warps=w, num_stages=st)
                    compiled = run()
                    stats = stats or _stats(compiled)
                    total += triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
            except Exception as err:  # out of shared memory, or a shape the kernel refuses
                print(f"  d={head_dim} {kernel_name} {(bm, bn, w, st)}: {type(err).__name__}", flush=True)
                continue
            rows.append((total, (bm, bn, w, st), stats))
            print(f"  d={head_dim} {kernel_name} BLOCK_M={bm} BLOCK_N={bn} warps={w} stages={st}: "
                  f"{total:.3f} ms ({stats})", flush=True)
        rows.sort()
        cur = [r for r in rows if r[1] == current]
        print(f"d={head_dim} {kernel_name}: best {rows[0][1]} {rows[0][0]:.3f} ms ({rows[0][2]}); "
              f"the notebook's {current}: {cur[0][0] if cur else float('nan'):.3f} ms", flush=True)
        best[kernel_name] = rows[0][1]
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--apply", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="/tmp/gc")
    parser.add_argument("--dims", default="128")
    args = parser.parse_args()
    nb = reference_module("07_attention_backward")
    chosen = {d: sweep(nb, d) for d in map(int, args.dims.split(","))}
    print("chosen:", chosen, flush=True)
    if args.apply:
        import gpu_check

        for d, best in chosen.items():
            key = "cuda" if d <= 64 else "cuda_d128"
            if key in nb.BWD_CONFIG:
                nb.BWD_CONFIG[key].update({name: tuple(cfg) for name, cfg in best.items()})
        print("BWD_CONFIG =", nb.BWD_CONFIG, flush=True)
        import gpu_bench_backward

        original = gpu_bench_backward.reference_module
        gpu_bench_backward.reference_module = lambda name: nb if name == "07_attention_backward" else original(name)
        sys.argv = ["gpu_check.py", "--bench", "--sections", "attention_backward", "--repeats", str(args.repeats),
                    "--out", args.out, "--where", "device machine (bare image, wheels carried)"]
        gpu_check.main()


if __name__ == "__main__":
    main()

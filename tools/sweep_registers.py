"""Developers only, no GPU needed: phase 6's attention forward compiled for Hopper (sm_90a) on this machine, and the
registers, spill stores and shared memory that ptxas reports for each configuration: what occupancy a tile allows,
before any device time is spent (issue 43, twenty-seventh session).

    python tools/sweep_registers.py [--kernels nb,nbold,pp2] [--head-dims 128,64] [--configs '128,64,4,2;64,64,4,3,128']

nb is the source notebook's attention_kernel cell as it stands; nbold is tools/sweep_forward_kernels.py's, pp2 tools/sweep_forward_pp2.py's.
A configuration is BLOCK_M,BLOCK_N,warps,stages[,maxnreg]. Triton compiles with the target given (no driver needed)
and the ptxas its wheel ships. Strides of one and divisible by 16 are specialised as a launch on contiguous fp16
tensors would be. On 2026-11-29 the registers matched the H200's kernel.n_regs for every kernel measured both ways
(docs/GPU-RUNS.md, twenty-seventh session); spills are counted otherwise (bytes of spill stores here, the driver's
n_spills there), but were zero on both or on neither.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
os.environ.pop("TRITON_INTERPRET", None)


def notebook_kernel():
    """The source notebook's attention_kernel cell as a module (a real file: @triton.jit reads its source)."""
    import importlib.util

    nb = json.loads((ROOT / "source/06_fused_attention/06_fused_attention.ipynb").read_text())
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "attention_kernel")
    path = Path(tempfile.mkdtemp()) / "nb06_attention.py"
    path.write_text("import triton\nimport triton.language as tl\n\n" + "".join(cell["source"]) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.triton_attention_kernel


def compile_for_hopper(fn, head_dim, cfg, causal):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    bm, bn, warps, stages, *rest = cfg
    sig, const, attrs = {}, {}, {}
    for i, n in enumerate(fn.arg_names):
        if n.endswith("_ptr"):
            sig[n] = "*fp32" if n == "lse_ptr" else "*fp16"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif n.startswith("stride_") and n.endswith("d"):  # the last dimension's stride: 1, a constant
            sig[n], const[n] = "constexpr", 1
        elif n.startswith("stride_") or n in ("n_heads", "seq_len"):
            sig[n] = "i32"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif n == "sm_scale":
            sig[n] = "fp32"
    const.update(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal)
    sig.update({k: "constexpr" for k in const})
    options = dict(num_warps=warps, num_stages=stages, **({"maxnreg": rest[0]} if rest else {}))
    return triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32), options=options)


def ptxas_stats(compiled) -> tuple:
    import triton

    ptxas = Path(triton.__file__).parent / "backends/nvidia/bin/ptxas"
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "k.ptx").write_text(compiled.asm["ptx"])
        out = subprocess.run([str(ptxas), "--gpu-name", "sm_90a", "-v", f"{d}/k.ptx", "-o", f"{d}/k.o"],
                             capture_output=True, text=True).stderr
    regs = int(re.search(r"Used (\d+) registers", out).group(1))
    spill = int(re.search(r"(\d+) bytes spill stores", out).group(1))
    return regs, spill, compiled.metadata.shared


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels", default="nb,nbold")
    parser.add_argument("--head-dims", default="128,64")
    parser.add_argument("--configs", default="128,64,8,3;128,128,8,3;128,64,4,2;64,64,4,3;64,64,4,3,128")
    args = parser.parse_args()
    import sweep_forward_kernels as variants
    import sweep_forward_pp2

    kernels = {"nb": notebook_kernel, "nbold": lambda: variants.old_attention_kernel,
               "pp2": lambda: sweep_forward_pp2.pp2_attention_kernel}
    configs = [tuple(int(x) for x in c.split(",")) for c in args.configs.split(";") if c]
    for name in args.kernels.split(","):
        fn = kernels[name]()
        for d in map(int, args.head_dims.split(",")):
            for causal in (False, True):
                for cfg in configs:
                    try:
                        regs, spill, shared = ptxas_stats(compile_for_hopper(fn, d, cfg, causal))
                    except Exception as err:
                        print(f"{name} d{d} causal={causal} {cfg}: {type(err).__name__}: {str(err)[:120]}", flush=True)
                        continue
                    threads = 32 * cfg[2]
                    per_sm = min(65536 // (-(-regs // 8) * 8 * threads), 232448 // (shared + 1024))
                    print(f"{name} d{d} causal={causal} {cfg}: {regs} registers, {spill} B of spill stores, "
                          f"{shared // 1024} KiB shared: {per_sm} program(s) an SM", flush=True)


if __name__ == "__main__":
    main()

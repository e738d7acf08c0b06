"""Developers only, no GPU needed: phase 6's attention forward compiled for Hopper (sm_90a) on this machine, and the
registers, spill stores and shared memory that ptxas reports for each configuration: what occupancy a tile allows,
before any device time is spent (issue 43, twenty-seventh session).

    python tools/sweep_registers.py [--kernels nb,nbold,pp2,tma,ws1] [--head-dims 128,64] [--configs '128,64,4,2;64,64,4,3,128']
        [--ws 0,1] [--causal 0,1]

nb is the source notebook's attention_kernel cell as it stands; nbold is tools/sweep_forward_kernels.py's, pp2 tools/sweep_forward_pp2.py's;
tma is tritoncourse/hopper.py's TMA kernel (phase 6's optional Hopper section), read from its source without importing
torch, ws1 tools/sweep_forward_ws.py's (one key loop, causal or not), each with warp_specialize off and on (--ws): its line says whether the loop was split into warp groups (a
ttg.warp_specialize in the TTGIR) and the setmaxnreg values of the PTX. Without torch (nb, tma and ws1 only) it runs under
another Triton too, e.g. one built by tools/device-triton-carry.sh and Python 3.12:
`PYTHONPATH=/tmp/triton-carry ~/.pyenv/versions/3.12.1/bin/python tools/sweep_registers.py --kernels tma`.
On 2026-11-29 (twenty-ninth session) Triton 3.6.0 and 3.9.0 alike split the TMA kernel's loop at BLOCK_M 64 with 4
warps (not causal: setmaxnreg 40 / 232), never at 8 warps, and refused BLOCK_M 128 with 4 warps and every causal
tile with warp_specialize on.
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


def module_from_source(name: str, text: str):
    """``text`` (Triton kernels) imported as a module from a real file: @triton.jit reads its functions' source."""
    import importlib.util

    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + text + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def notebook_cell(assignment: str, grade_id: str):
    """A source notebook's cell (its solution as written) as a module."""
    nb = json.loads((ROOT / "source" / assignment / f"{assignment}.ipynb").read_text())
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    return module_from_source(f"nb_{grade_id}", "".join(cell["source"]))


def notebook_kernel():
    """The source notebook's attention_kernel cell (phase 6's forward)."""
    return notebook_cell("06_fused_attention", "attention_kernel").triton_attention_kernel


def tma_kernel():
    """tritoncourse/hopper.py's _tma_tiles and tma_attention_kernel as a module of their own (hopper.py imports torch)."""
    import ast

    src = (ROOT / "tritoncourse/hopper.py").read_text()
    parts = [ast.get_source_segment(src, n) for n in ast.parse(src).body
             if isinstance(n, ast.FunctionDef) and n.name in ("_tma_tiles", "_descriptor", "tma_attention_kernel")]
    return module_from_source("hopper_tma", "\n\n\n".join("@triton.jit\n" + p for p in parts)).tma_attention_kernel


def compile_tma_for_hopper(fn, head_dim, cfg, causal, ws):
    bm, bn = cfg[:2]
    sig = {"desc_q": f"tensordesc<fp16[{bm}, {head_dim}]>", "desc_k": f"tensordesc<fp16[{bn}, {head_dim}]>",
           "desc_v": f"tensordesc<fp16[{bn}, {head_dim}]>", "desc_o": f"tensordesc<fp16[{bm}, {head_dim}]>",
           "lse_ptr": "*fp32", "seq_len": "i32", "sm_scale": "fp32"}
    return _compile(fn, sig, dict(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, WARP_SPECIALIZE=ws), {},
                    cfg)


def _compile(fn, sig, const, attrs, cfg):
    """triton.compile for sm_90a with cfg's warps, stages and maxnreg: no GPU, no driver."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    _, _, warps, stages, *rest = cfg
    sig = {**sig, **{k: "constexpr" for k in const}}
    options = dict(num_warps=warps, num_stages=stages, **({"maxnreg": rest[0]} if rest else {}))
    return triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32), options=options)


def split_words(compiled) -> str:
    """Whether the key loop was split into warp groups, and the register counts the warp groups set."""
    split = "ttg.warp_specialize" in compiled.asm["ttgir"]
    counts = sorted({int(n) for n in re.findall(r"setmaxnreg[.\w]*\s+(\d+)", compiled.asm["ptx"])})
    return f"split into warp groups: {split}" + (f" (setmaxnreg {', '.join(map(str, counts))})" if counts else "")


FP32_POINTERS = ("lse_ptr", "delta_ptr", "dq_ptr")  # the LSE, phase 7's D and its atomically added dQ; the rest fp16


def compile_for_hopper(fn, head_dim, cfg, causal, **constexprs):
    """A pointer kernel of phases 6 and 7 (their argument names) for sm_90a, as launched on contiguous fp16 tensors;
    phase 7's dK/dV kernel with ATOMIC_DQ off; ``constexprs``: a variant's own (WARP_SPECIALIZE=True...)."""
    bm, bn = cfg[:2]
    sig, const, attrs = {}, {}, {}
    for i, n in enumerate(fn.arg_names):
        if n.endswith("_ptr"):
            sig[n] = "*fp32" if n in FP32_POINTERS else "*fp16"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif n.startswith("stride_") and n.endswith("d"):  # the last dimension's stride: 1, a constant
            sig[n], const[n] = "constexpr", 1
        elif n.startswith("stride_") or n in ("n_heads", "seq_len", "rows"):
            sig[n] = "i32"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif n == "sm_scale":
            sig[n] = "fp32"
    const.update(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal)
    if "ATOMIC_DQ" in fn.arg_names:
        const["ATOMIC_DQ"] = False
    const.update(constexprs)
    return _compile(fn, sig, const, attrs, cfg)


def ptxas_stats(compiled) -> tuple:
    import triton

    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(90).path  # the wheel's (3.9.0 compiles sm_90a with its ptxas-blackwell)
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
    parser.add_argument("--ws", default="0,1", help="tma only: warp_specialize off (0) and on (1)")
    parser.add_argument("--causal", default="0,1")
    args = parser.parse_args()

    def variant(module, name):  # these import torch: not under a carried Triton without it
        return lambda: getattr(__import__(module), name)

    kernels = {"nb": notebook_kernel, "nbold": variant("sweep_forward_kernels", "old_attention_kernel"),
               "pp2": variant("sweep_forward_pp2", "pp2_attention_kernel"), "tma": tma_kernel,
               "ws1": variant("sweep_forward_ws", "ws_attention_kernel")}
    descriptors = ("tma", "ws1")  # kernels of tensor descriptors, compiled with warp_specialize off and on
    configs = [tuple(int(x) for x in c.split(",")) for c in args.configs.split(";") if c]
    for name in args.kernels.split(","):
        fn = kernels[name]()
        for d in map(int, args.head_dims.split(",")):
            for causal in (bool(int(c)) for c in args.causal.split(",")):
                for cfg in configs:
                    for ws in ((bool(int(w)) for w in args.ws.split(",")) if name in descriptors else (None,)):
                        label = f"{name} d{d} causal={causal} {cfg}" + ("" if ws is None else f" ws={ws}")
                        try:
                            compiled = (compile_tma_for_hopper(fn, d, cfg, causal, ws) if name in descriptors
                                        else compile_for_hopper(fn, d, cfg, causal))
                            regs, spill, shared = ptxas_stats(compiled)
                        except Exception as err:
                            print(f"{label}: {type(err).__name__}: {str(err)[:120]}", flush=True)
                            continue
                        threads = 32 * cfg[2]
                        per_sm = min(65536 // (-(-regs // 8) * 8 * threads), 232448 // (shared + 1024))
                        print(f"{label}: {regs} registers, {spill} B of spill stores, {shared // 1024} KiB shared: "
                              f"{per_sm} program(s) an SM" + (f"; {split_words(compiled)}" if name in descriptors else ""),
                              flush=True)


if __name__ == "__main__":
    main()

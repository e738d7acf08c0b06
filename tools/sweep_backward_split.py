"""Developers only, no GPU needed: phase 7's dK/dV kernel with its query loop split into masked and unmasked tiles (as
phase 6's forward splits its key loop), against the notebook's own (issue 43: the training step's backward, whose
dK/dV kernel spills at head_dim 128). Not part of the course.

    python tools/sweep_backward_split.py check      # the same dK and dV as the notebook's kernel, on the interpreter
    python tools/sweep_backward_split.py compile    # registers, spill bytes and shared memory of both, for sm_90a

The split kernel loads and computes without masks in the query tiles that are whole and wholly after the key tile's
diagonal; the tiles that cross the diagonal (causal) and the ragged last one keep the notebook's masks. On
2026-11-29 (twenty-ninth session, Triton 3.6.0, ptxas of its wheel): at head_dim 128, (64, 64, 4 warps, 2 stages),
causal (the training block's shape and BWD_CONFIG's tiles), 255 registers and 0 bytes of spill stores against the
notebook's 44; 3 stages 8 against 124; not causal it spilled more (72 against 12). Not yet timed on a GPU.
"""
import json, os, re, subprocess, sys, tempfile, importlib.util
from pathlib import Path
MODE = sys.argv[1] if len(sys.argv) > 1 else "compile"  # "compile" or "check"
if MODE == "check":
    os.environ["TRITON_INTERPRET"] = "1"
import triton, triton.language as tl
nb = json.loads(Path("/work/main/source/07_attention_backward/07_attention_backward.ipynb").read_text())
cell = next(''.join(c["source"]) for c in nb["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "attention_bwd_dkdv_kernel")
cell = cell.replace("    ### BEGIN SOLUTION\n", "").replace("    ### END SOLUTION\n", "")
VARIANT = '''
@triton.jit
def _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_ptr, delta_ptr, row0, offs_n, offs_m, offs_d, stride_qm, stride_qd,
                stride_dom, stride_dod, seq_len, qk_scale, lo, hi, BLOCK_M: tl.constexpr, MASKED: tl.constexpr,
                CAUSAL: tl.constexpr):
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + offs_m
        if MASKED:
            in_seq = rows < seq_len
            q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=in_seq[:, None],
                        other=0.0)
            do = tl.load(do_base + rows[:, None] * stride_dom + offs_d[None, :] * stride_dod, mask=in_seq[:, None],
                         other=0.0)
            lse = tl.load(lse_ptr + row0 + rows, mask=in_seq, other=0.0) * 1.4426950408889634
            delta = tl.load(delta_ptr + row0 + rows, mask=in_seq, other=0.0)
        else:
            q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd)
            do = tl.load(do_base + rows[:, None] * stride_dom + offs_d[None, :] * stride_dod)
            lse = tl.load(lse_ptr + row0 + rows) * 1.4426950408889634
            delta = tl.load(delta_ptr + row0 + rows)
        s_t = tl.dot(k, tl.trans(q)) * qk_scale
        if MASKED:
            keep = (offs_n[:, None] < seq_len) & in_seq[None, :]
            if CAUSAL:
                keep = keep & (rows[None, :] >= offs_n[:, None])
            p_t = tl.where(keep, tl.math.exp2(s_t - lse[None, :]), 0.0)
        else:
            p_t = tl.math.exp2(s_t - lse[None, :])
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def split_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd, stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd, stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd, n_heads, seq_len, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    ATOMIC_DQ: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    keys = offs_n[:, None] < seq_len
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=keys, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=keys, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    row0 = pid_bh.to(tl.int64) * seq_len
    q_base = q_ptr + b * stride_qb + h * stride_qh
    do_base = do_ptr + b * stride_dob + h * stride_doh
    full_end = (seq_len // BLOCK_M) * BLOCK_M  # whole query tiles end here
    if CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M
        # the query tiles that cross the key tile's diagonal, masked; after them every query sees every key
        diag_end = tl.minimum(((start_n + BLOCK_N + BLOCK_M - 1) // BLOCK_M) * BLOCK_M, seq_len)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_ptr, delta_ptr, row0, offs_n, offs_m, offs_d, stride_qm,
                             stride_qd, stride_dom, stride_dod, seq_len, qk_scale, lo, diag_end, BLOCK_M, True, CAUSAL)
        mid_lo = diag_end
    else:
        mid_lo = 0
    mid_end = tl.maximum(full_end, mid_lo)
    dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_ptr, delta_ptr, row0, offs_n, offs_m, offs_d, stride_qm,
                         stride_qd, stride_dom, stride_dod, seq_len, qk_scale, mid_lo, mid_end, BLOCK_M, False, CAUSAL)
    dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_ptr, delta_ptr, row0, offs_n, offs_m, offs_d, stride_qm,
                         stride_qd, stride_dom, stride_dod, seq_len, qk_scale, mid_end, seq_len, BLOCK_M, True, CAUSAL)
    tl.store(dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd,
             (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=keys)
    tl.store(dv_ptr + b * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :] * stride_dvd,
             dv.to(dv_ptr.dtype.element_ty), mask=keys)
'''
path = Path(tempfile.mkdtemp()) / "bw_split.py"
path.write_text("import triton\nimport triton.language as tl\n\n" + cell + "\n\n" + VARIANT)
spec = importlib.util.spec_from_file_location(path.stem, path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
ref_k, var_k = mod.triton_attention_bwd_dkdv_kernel, mod.split_dkdv_kernel

if MODE == "compile":
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource
    from triton.backends.nvidia.compiler import get_ptxas
    def comp(fn, d, cfg, causal):
        bm, bn, w, st = cfg
        sig, const, attrs = {}, {}, {}
        for i, n in enumerate(fn.arg_names):
            if n.endswith("_ptr"):
                sig[n] = "*fp32" if n in ("lse_ptr", "delta_ptr", "dq_ptr") else "*fp16"
                attrs[(i,)] = [["tt.divisibility", 16]]
            elif n.startswith("stride_") and n.endswith("d"):
                sig[n], const[n] = "constexpr", 1
            elif n.startswith("stride_") or n in ("n_heads", "seq_len"):
                sig[n] = "i32"; attrs[(i,)] = [["tt.divisibility", 16]]
            elif n == "sm_scale":
                sig[n] = "fp32"
        const.update(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, ATOMIC_DQ=False)
        sig.update({k: "constexpr" for k in const})
        c = triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=w, num_stages=st))
        with tempfile.TemporaryDirectory() as t:
            (Path(t) / "k.ptx").write_text(c.asm["ptx"])
            out = subprocess.run([get_ptxas(90).path, "--gpu-name", "sm_90a", "-v", f"{t}/k.ptx", "-o", f"{t}/k.o"],
                                 capture_output=True, text=True).stderr
        return (int(re.search(r"Used (\d+) registers", out).group(1)),
                int(re.search(r"(\d+) bytes spill stores", out).group(1)), c.metadata.shared // 1024)
    for d, cfg in ((128, (64, 64, 4, 2)), (128, (64, 64, 4, 3)), (64, (32, 128, 4, 3)), (128, (32, 64, 4, 3))):
        for causal in (False, True):
            print(f"d{d} {cfg} causal={causal}: notebook {comp(ref_k, d, cfg, causal)}, split "
                  f"{comp(var_k, d, cfg, causal)} (registers, spill bytes, KiB)", flush=True)
else:
    import torch
    for causal in (False, True):
        for S in (64, 70, 128, 100):
            B, H, D = 1, 2, 32
            g = torch.Generator().manual_seed(S)
            q, k, v, do = (torch.randn(B, H, S, D, generator=g) for _ in range(4))
            lse = torch.randn(B * H, S, generator=g).abs() + 3
            delta = torch.randn(B * H, S, generator=g)
            outs = []
            for fn in (ref_k, var_k):
                dk, dv, dq = torch.zeros_like(k), torch.zeros_like(v), torch.zeros_like(q)
                fn[(triton.cdiv(S, 32), B * H)](
                    q, k, v, do, lse, delta, dk, dv, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(),
                    *dk.stride(), *dv.stride(), *dq.stride(), H, S, 0.3, HEAD_DIM=D, BLOCK_M=16, BLOCK_N=32,
                    CAUSAL=causal, ATOMIC_DQ=False)
                outs.append((dk, dv))
            print(causal, S, float((outs[0][0] - outs[1][0]).abs().max()), float((outs[0][1] - outs[1][1]).abs().max()))

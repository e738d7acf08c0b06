"""Developers only, on an H100/H200: Triton's own fused-attention tutorial's forward, as it stands, against SDPA's
cuDNN backend, side by side with phase 6's reference kernel, tritoncourse/hopper.py's TMA kernel and SDPA's
FlashAttention-2 (fp16, B 4 x H 8, head_dim 128 and 64, causal and not, seq_len 4096 / 8192 / 16384; medians of
interleaved do_bench repetitions after the GPU's clocks are warmed). Prints one line a measurement; nothing recorded.

Source measured: python/tutorials/06-fused-attention.py of Triton (https://github.com/triton-lang/triton), MIT
licence (Copyright 2018-2020 Philippe Tillet, 2020-2022 OpenAI), at commit 5c846f015d9cfbe94480fea890545888ea33b827
(2025-12-02, "[Tutorial] Fix tutorial-06 result mismatch for causal forward kernel (#8853)"): the file's last change
before main's version went from 3.6.0 to 3.7.0 (6d2e38bfe, 2026-03-30), unchanged on main after it until 2026-08-04, so
the tutorial of Triton v3.6 (the stored snapshot, a mirror of main, had no tags: v3.6.0 itself was not read). Its code
is not copied here: the tool loads the file from --tutorial (default build/triton_tutorial/06-fused-attention.py,
ignored by git; make it with `git -C <a triton clone> show 5c846f015:python/tutorials/06-fused-attention.py`) and
calls its `attention` (the autograd Function's forward) exactly as the tutorial's benchmark does. What it changes, at
run time, on the tutorial's autotuner `_attn_fwd` only:
  - its configurations stay the tutorial's Hopper ones (BLOCK_M 64/128, BLOCK_N 32/64/128, stages 2/3/4, warps 4/8,
    8 warps only where BLOCK_M * BLOCK_N >= 128 * 128), less those that cannot run here: BLOCK_N > head_dim (its own
    static_assert), more than 227 KiB of shared memory by stages * (K + V tiles) + Q tile, and, with
    warp_specialize, fewer than 8 warps (a 4-warp warp-specialized TMA kernel had not finished after about 370 s
    in the twenty-sixth session: docs/GPU-RUNS.md);
  - STAGE (causal or not) joins its autotuning key (the tutorial keys on N_CTX, HEAD_DIM, FP8_OUTPUT,
    warp_specialize, so a causal call would reuse the non-causal choice, which its causal pruning forbids);
  - its benchmark of each configuration is do_bench(warmup=10, rep=40) instead of 25/100, to bound the time.
warp_specialize=True is measured at head_dim 128, not causal only: the tutorial's own benchmark turns it on for
Hopper's non-causal forward only (there it makes device-side descriptors, tl.make_tensor_descriptor); at head_dim 64
no 8-warp configuration of the tutorial remains (BLOCK_N 128 > 64).

    python tools/sweep_tutorial_forward.py --preflight-ws              # compile + run the ws kernels once
    python tools/sweep_tutorial_forward.py --head-dims 128 --ws [--until EPOCH] [--repeats 3]

In one device call (`run` with carry ["build/triton_tutorial"], PYTHONPATH=$PWD): the preflight under `timeout 75`,
then --head-dims 128 (--ws only if the preflight printed PREFLIGHT OK) until T0 + 210 s, then --head-dims 64 until
T0 + 330 s, each under its own `timeout`, all output appended to $OUT/log (docs/GPU-RUNS.md has the command).

Each kernel is compiled before the shapes are timed, all at once in threads (triton's AsyncCompileMode); a watchdog
ends the process if one step runs past its time (a shape 45 s, 90 s with tuning; --until overall), so a shell
loop can go on.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import threading
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))
from sweep_attention import do_bench, interleaved, log, sdpa_with  # noqa: E402

B, H = 4, 8
SEQS = (4096, 8192, 16384)
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one block may use on Hopper
DEFAULT_TUTORIAL = ROOT / "build" / "triton_tutorial" / "06-fused-attention.py"


class Guard:
    """A watchdog thread: os._exit(3) when the armed step runs past its deadline (never past --until)."""

    def __init__(self, until: float):
        self.until, self.deadline, self.what = until, until, "start"
        threading.Thread(target=self._watch, daemon=True).start()

    def arm(self, what: str, seconds: float) -> None:
        self.what, self.deadline = what, min(time.time() + seconds, self.until)

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            if time.time() > self.deadline:
                log(f"GUARD: {self.what} ran past its time ({time.strftime('%H:%M:%S', time.gmtime())} UTC): exiting")
                os._exit(3)


def load_tutorial(path: Path):
    """The tutorial as a module. Its tests' @pytest.mark decorators run at import: a stub stands in without pytest."""
    if importlib.util.find_spec("pytest") is None:
        class _Marks:
            def __getattr__(self, name):
                return lambda *a, **k: (lambda f: f)
        sys.modules["pytest"] = types.SimpleNamespace(mark=_Marks(), skip=lambda *a, **k: None)
    os.environ.pop("PYTEST_VERSION", None)  # with it set, the tutorial keeps a single configuration
    spec = importlib.util.spec_from_file_location("triton_tutorial_06_fused_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def smem_bytes(cfg, head_dim: int) -> int:
    """Shared memory a configuration needs, by the tiles it buffers: stages x (K + V tiles) + the Q tile, fp16."""
    bm, bn = cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"]
    return cfg.num_stages * 2 * bn * head_dim * 2 + bm * head_dim * 2


def patch_tutorial(tut) -> None:
    """The three run-time changes the module docstring lists, on the tutorial's autotuner only."""
    import triton

    at = tut._attn_fwd
    if "STAGE" not in at.keys:
        at.keys = list(at.keys) + ["STAGE"]
    own_prune = at.early_config_prune

    def prune(configs, named_args, **kwargs):
        kept = own_prune(configs, named_args, **kwargs) if own_prune else list(configs)
        d, ws = kwargs["HEAD_DIM"], kwargs.get("warp_specialize", False)
        out = [c for c in kept if c.kwargs["BLOCK_N"] <= d and smem_bytes(c, d) <= SMEM_LIMIT
               and not (ws and c.num_warps < 8)]
        if not out:
            raise RuntimeError(f"no tutorial configuration left at head_dim {d}, warp_specialize {ws}")
        return out

    at.early_config_prune = prune
    at._do_bench = lambda fn, quantiles: triton.testing.do_bench(fn, warmup=10, rep=40, quantiles=quantiles)


def recorded(module, name: str, call):
    """(the kernel, (args, kwargs)) that ``call`` would launch through ``module.name``: launched by a stand-in."""
    real, calls = getattr(module, name), []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *a, **k: calls.append((a, k))

    setattr(module, name, Recorder())
    try:
        call()
    except Exception:  # the wrapper may use what the launch returns; the arguments are recorded by then
        pass
    finally:
        setattr(module, name, real)
    return real, calls[0]


def job(name: str, launch) -> tuple:
    """(name, kernel, args, kwargs) for precompile from recorded()'s (kernel, (args, kwargs))."""
    kernel, (args, kwargs) = launch
    return name, kernel, args, kwargs


def configs_of(kernel, args, kwargs) -> list:
    kernel.nargs = dict(zip(kernel.arg_names, args))
    try:
        return kernel.prune_configs(kwargs)
    finally:
        kernel.nargs = None


def compiled_for(kernel, args, kwargs, cfg=None):
    """The compiled kernel of one configuration (compiled now if not yet): an autotuner's, its pre_hook applied."""
    from triton.runtime.autotuner import Autotuner

    if not isinstance(kernel, Autotuner):
        return kernel.warmup(*args, grid=(1,), **kwargs)
    current = dict(kwargs, **cfg.all_kwargs())
    if cfg.pre_hook:
        cfg.pre_hook({**dict(zip(kernel.arg_names, args)), **current})
    return kernel.fn.warmup(*args, grid=(1,), **current)


def precompile(jobs) -> None:
    """Every configuration of each (kernel, args, kwargs) compiled at once in threads; errors left to later calls."""
    from concurrent.futures import ThreadPoolExecutor

    from triton.runtime._async_compile import AsyncCompileMode
    from triton.runtime.autotuner import Autotuner

    t0, n = time.time(), 0
    with ThreadPoolExecutor(max(4, os.cpu_count() or 8)) as pool, AsyncCompileMode(pool, ignore_errors=True):
        for name, kernel, args, kwargs in jobs:
            try:
                cfgs = configs_of(kernel, args, kwargs) if isinstance(kernel, Autotuner) else [None]
                for cfg in cfgs:
                    compiled_for(kernel, args, kwargs, cfg)
                n += len(cfgs)
            except Exception as err:
                log(f"  precompile {name}: {type(err).__name__}: {str(err)[:200]}")
    log(f"  precompiled {n} kernels in {time.time() - t0:.1f} s")


def describe(compiled) -> str:
    try:
        compiled._init_handles()
        ttgir, ptx = compiled.asm.get("ttgir", ""), compiled.asm.get("ptx", "")
        return (f"{compiled.n_regs} regs, {compiled.n_spills} spills, {compiled.metadata.shared // 1024} KiB shared, "
                f"ttg.warp_specialize in TTGIR: {'ttg.warp_specialize' in ttgir}, setmaxnreg in PTX: "
                f"{'setmaxnreg' in ptx}, warps {compiled.metadata.num_warps}")
    except Exception as err:
        return f"stats: {type(err).__name__}: {str(err)[:160]}"


def cfg_str(cfg) -> str:
    return f"({cfg.kwargs['BLOCK_M']}, {cfg.kwargs['BLOCK_N']}, w{cfg.num_warps}, s{cfg.num_stages})"


def inputs(head_dim: int, S: int):
    import torch

    torch.manual_seed(0)
    return tuple(torch.randn(B, H, S, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))


def preflight_ws(tut) -> None:
    """The tutorial's warp-specialized kernels (head_dim 128, not causal, S 4096): compiled, described, run once."""
    import torch

    q, k, v = inputs(128, 4096)
    name, kernel, args, kwargs = job("tutorial ws", recorded(tut, "_attn_fwd",
                                                             lambda: tut.attention(q, k, v, False, 128**-0.5, True)))
    precompile([(name, kernel, args, kwargs)])
    for cfg in configs_of(kernel, args, kwargs):
        log(f"  preflight ws config {cfg_str(cfg)}: {describe(compiled_for(kernel, args, kwargs, cfg))}")
    o = tut.attention(q, k, v, False, 128**-0.5, True)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    log(f"  preflight ws: ran, best {cfg_str(kernel.best_config)}, max err {(o.float() - ref.float()).abs().max():.2g}")
    log("PREFLIGHT OK")


def main() -> None:
    import torch
    import triton

    parser = argparse.ArgumentParser()
    parser.add_argument("--tutorial", type=Path, default=DEFAULT_TUTORIAL)
    parser.add_argument("--head-dims", default="128")
    parser.add_argument("--ws", action="store_true", help="also warp_specialize=True (d 128, not causal)")
    parser.add_argument("--preflight-ws", action="store_true")
    parser.add_argument("--until", type=float, default=time.time() + 300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    guard = Guard(args.until)
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC")
    tut = load_tutorial(args.tutorial)
    patch_tutorial(tut)
    if args.preflight_ws:
        preflight_ws(tut)
        return
    from gpu_bench import reference_module
    from gpu_bench_backward import _warm

    try:
        nb6 = reference_module("06_fused_attention")
    except Exception as err:
        nb6 = None
        log(f"  phase 6's reference module: {type(err).__name__}: {err}")
    try:
        from tritoncourse import hopper
    except Exception as err:
        hopper = None
        log(f"  tritoncourse.hopper: {type(err).__name__}: {err}")
    _warm(2000)
    for d in (int(x) for x in args.head_dims.split(",")):
        guard.arm(f"precompile d={d}", 120)
        q, k, v = inputs(d, SEQS[0])
        launches, jobs = {}, []
        for causal in (False, True):
            calls = {}
            for ws in ((False, True) if args.ws and d == 128 and not causal else (False,)):
                calls[(f"tutorial causal={causal} ws={ws}", (causal, ws))] = (
                    tut, "_attn_fwd", lambda ws=ws: tut.attention(q, k, v, causal, d**-0.5, ws))
            if nb6 is not None:
                calls[(f"phase6 causal={causal}", None)] = (nb6, "triton_attention_autotuned",
                                                             lambda: nb6.attention(q, k, v, causal))
            if hopper is not None:
                calls[(f"hopper causal={causal}", None)] = (hopper, "tma_attention_kernel",
                                                             lambda: hopper.tma_attention(q, k, v, causal))
            for (name, key), (module, attr, call) in calls.items():
                try:
                    launch = recorded(module, attr, call)
                except Exception as err:
                    log(f"  record {name}: {type(err).__name__}: {str(err)[:200]}")
                    continue
                jobs.append(job(name, launch))
                if key is not None:
                    launches[key] = launch
        del q, k, v
        precompile(jobs)
        described = set()
        for causal in (False, True):
            for S in SEQS:
                if time.time() > args.until - 12:
                    log(f"  d={d} causal={causal} S={S}: skipped, under 12 s left")
                    continue
                guard.arm(f"d={d} causal={causal} S={S}", 90 if S == SEQS[0] else 45)
                try:
                    shape(tut, nb6, hopper, d, causal, S, args, launches, described)
                except Exception as err:
                    log(f"  d={d} causal={causal} S={S}: {type(err).__name__}: {str(err)[:300]}")
                torch.cuda.empty_cache()
    guard.arm("done", 5)


def shape(tut, nb6, hopper, d, causal, S, args, launches, described) -> None:
    """One shape: each provider run once and checked against cuDNN's output, then timed side by side."""
    import torch
    from torch.nn.attention import SDPBackend

    q, k, v = inputs(d, S)
    scale = d**-0.5

    providers = {"tutorial": lambda: tut.attention(q, k, v, causal, scale, False)}
    if (causal, True) in launches:
        providers["tutorial_ws"] = lambda: tut.attention(q, k, v, causal, scale, True)
    if nb6 is not None:
        providers["phase6"] = lambda: nb6.attention(q, k, v, causal)
    if hopper is not None:
        providers["hopper"] = lambda: hopper.tma_attention(q, k, v, causal)
    providers.update(fa2=sdpa_with(SDPBackend.FLASH_ATTENTION, q, k, v, causal),
                     cudnn=sdpa_with(SDPBackend.CUDNN_ATTENTION, q, k, v, causal))
    ref = providers["cudnn"]()
    for name, fn in list(providers.items()):
        t0 = time.time()
        try:
            out = fn()
            torch.cuda.synchronize()
        except Exception as err:
            log(f"  d={d} causal={causal} S={S} {name}: {type(err).__name__}: {str(err)[:300]}")
            del providers[name]
            continue
        o = out[0] if isinstance(out, tuple) else out
        err = (o.float() - ref.float()).abs().max().item()
        note = ""
        if name.startswith("tutorial"):
            at, ws = tut._attn_fwd, name == "tutorial_ws"
            timings = sorted(((v[0] if isinstance(v, (list, tuple)) else v, c)
                              for c, v in (getattr(at, "configs_timings", None) or {}).items()), key=lambda x: x[0])
            note = (f", best {cfg_str(at.best_config)} ({time.time() - t0:.1f} s with tuning; fastest: "
                    + ", ".join(f"{cfg_str(c)} {ms:.3f} ms" for ms, c in timings[:3]) + ")")
            key = (causal, ws, cfg_str(at.best_config))
            if key not in described:
                described.add(key)
                kernel, (a, kw) = launches[(causal, ws)]
                compiled = compiled_for(kernel, a, kw, at.best_config)
                note += f"\n    compiled {cfg_str(at.best_config)}: {describe(compiled)}"
        log(f"  d={d} causal={causal} S={S} {name}: max err {err:.2g}{note}")
        if err > 2e-2:
            log(f"  d={d} causal={causal} S={S} {name}: WRONG, left out")
            del providers[name]
    t = interleaved(providers, args.repeats, do_bench)
    flops = 4 * B * H * S * S * d / (2 if causal else 1)
    base = t.get("cudnn", float("nan"))
    log(f"forward d={d} causal={causal} S={S}: " + ", ".join(
        f"{p} {flops / ms / 1e9:.0f} TF/s ({base / ms:.2f}x cuDNN)" for p, ms in t.items()))


if __name__ == "__main__":
    main()

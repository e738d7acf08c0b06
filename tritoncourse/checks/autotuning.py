"""Phase 5: checks for autotuned kernels: the config space, the key, the hardware limits, every config's
results, and the autotuner itself running on the CPU.

The three kernels of the phase, each stacked as ``@triton.autotune(configs=..., key=[...])`` over
``@triton.jit``::

    triton_autotuned_matmul_relu_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
        stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)   # 1-D grid, grouped order
    triton_autotuned_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride,
        n_rows, n_cols, BLOCK_SIZE)                                         # one program per row
    triton_autotuned_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE)

The autotuner turns a config that fails into an infinite time and quietly picks another, so the checks
never judge a kernel through the autotuner alone: they read its ``.configs`` and ``.keys`` and launch its
``.fn`` once per config with ``**config.all_kwargs()`` (meta-parameters, num_warps, num_stages), on fresh
inputs inside guard buffers, with electric fences on the interpreter. Triton's default benchmarker needs
a GPU; :func:`cpu_do_bench` is a wall-clock timer the checks (and the notebook, on the CPU) give the
autotuner instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from ..checking import (OUTPUT_SENTINEL, KernelCheckError, compare, fence_supported, fenced_copy, fresh_seed,
                        generator, stage)
from ..device import infer_device
from ..tolerances import MATMUL_RELU as MATMUL_TOLERANCE, SOFTMAX as SOFTMAX_TOLERANCES  # phases 3's C and 2's rows
from . import explain_launch_error, require_triton_kernel
from ..benchmarking import cpu_do_bench
from ..gpus import (GPU, GPUS, MAX_BLOCK_NUMEL, MAX_REGISTERS_PER_THREAD, MAX_THREADS_PER_PROGRAM, MIN_DOT_BLOCK,
                    SHARED_MEMORY_DATACENTER, SHARED_MEMORY_SMALLEST, WARP_SIZE, describe, gpu_limits,
                    matmul_accumulator_registers, matmul_shared_memory, occupancy)

MIN_CONFIGS = 2
MAX_CONFIGS = 32  # each config is compiled (about a second on a GPU) and timed, for every new key value


MATMUL = "triton_autotuned_matmul_relu_kernel"
SOFTMAX = "triton_autotuned_online_softmax_kernel"
VECTOR_ADD = "triton_autotuned_vector_add_kernel"

SIGNATURES = {
    MATMUL: f"{MATMUL}(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, "
            "stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr)",
    SOFTMAX: f"{SOFTMAX}(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols, "
             "BLOCK_SIZE: tl.constexpr)",
    VECTOR_ADD: f"{VECTOR_ADD}(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr)",
}
# The meta-parameters each config must set (the kernel's tl.constexpr arguments).
META = {MATMUL: ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"), SOFTMAX: ("BLOCK_SIZE",), VECTOR_ADD: ("BLOCK_SIZE",)}
# The size arguments the autotuning key must name: the best config depends on them.
SHAPES = {MATMUL: ("M", "N", "K"), SOFTMAX: ("n_rows", "n_cols"), VECTOR_ADD: ("n_elements",)}
# Where a learner lists matmul configs that only fit a datacenter GPU's shared memory.
DATACENTER_LIST = "MATMUL_DATACENTER_CONFIGS"

def _power_of_two(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0


# --------------------------------------------------------------------------------------- the autotuner
def is_autotuner(kernel) -> bool:
    """Whether ``kernel`` is what ``@triton.autotune`` makes (here, or in the runner process)."""
    from triton.runtime.autotuner import Autotuner

    from ..grading.rpc import RemoteAutotuner

    return isinstance(kernel, (Autotuner, RemoteAutotuner))


def autotuner_of(kernel, name: str):
    """The ``triton.runtime.autotuner.Autotuner`` that ``@triton.autotune`` made of ``kernel``."""
    if is_autotuner(kernel):
        require_triton_kernel(kernel.fn, name)
        return kernel
    require_triton_kernel(kernel, name)
    raise KernelCheckError(
        f"`{name}` is a Triton kernel but it is not autotuned: it has no config space to search.\n"
        "Likely cause: the @triton.autotune(configs=..., key=[...]) line is missing; it goes directly above "
        "@triton.jit.")


def jit_of(kernel, name: str):
    """The @triton.jit function itself, autotuned or not (the value tests launch it directly)."""
    inner = kernel.fn if is_autotuner(kernel) else kernel
    require_triton_kernel(inner, name)
    return inner


def _configs(tuner, name: str) -> list:
    from triton.runtime.autotuner import Config

    configs = list(tuner.configs)
    bad = [i for i, c in enumerate(configs) if not isinstance(c, Config)]
    if bad:
        raise KernelCheckError(
            f"Config #{bad[0]} of `{name}` is a {type(configs[bad[0]]).__name__}, not a triton.Config.\n"
            "Likely cause: write each config as triton.Config({'BLOCK_SIZE': 128}, num_warps=4, num_stages=2).")
    return configs


# ------------------------------------------------------------------------------------- config space
def check_config_space(kernel, name: str) -> None:
    """The kernel is autotuned over at least two and at most MAX_CONFIGS distinct configs, each of which
    sets exactly the kernel's meta-parameters (its tl.constexpr arguments)."""
    tuner = autotuner_of(kernel, name)
    configs = _configs(tuner, name)
    meta = META[name]
    if len(configs) < MIN_CONFIGS:
        raise KernelCheckError(
            f"`{name}` is autotuned over {len(configs)} config(s): there is nothing to choose from.\n"
            f"Likely cause: the config list is empty or has one entry; give it at least {MIN_CONFIGS} "
            "(different tile sizes, num_warps, num_stages).")
    if len(configs) > MAX_CONFIGS:
        raise KernelCheckError(
            f"`{name}` is autotuned over {len(configs)} configs, more than {MAX_CONFIGS}.\n"
            "Likely cause: a config space that is too large. Every config is compiled (about a second each on "
            "a GPU) and timed again for every new value of the key: keep the configs that can win, and drop "
            "those the hardware limits already rule out.")
    for i, c in enumerate(configs):
        missing = [m for m in meta if m not in c.kwargs]
        extra = [k for k in c.kwargs if k not in meta]
        if extra:
            raise KernelCheckError(
                f"Config #{i} of `{name}` ({describe(c)}) sets {', '.join(extra)}, which "
                f"{'is' if len(extra) == 1 else 'are'} not a meta-parameter of the kernel.\nLikely cause: "
                f"a misspelt name; the kernel's tl.constexpr arguments are {', '.join(meta)}. num_warps and "
                "num_stages are keyword arguments of triton.Config, not entries of its dictionary.")
        if missing:
            raise KernelCheckError(
                f"Config #{i} of `{name}` ({describe(c)}) does not set {', '.join(missing)}.\nLikely cause: "
                f"every config must give a value to each tl.constexpr argument: {', '.join(meta)}.")
        for k, v in c.kwargs.items():
            if not isinstance(v, int) or isinstance(v, bool):
                raise KernelCheckError(f"Config #{i} of `{name}` sets {k} = {v!r}, not an integer.\n"
                                       "Likely cause: block sizes and GROUP_M are whole numbers.")
    seen = {}
    for i, c in enumerate(configs):
        if c in seen:
            raise KernelCheckError(
                f"Configs #{seen[c]} and #{i} of `{name}` are the same ({describe(c)}).\n"
                "Likely cause: a duplicate in the list: it is compiled and timed twice for nothing.")
        seen[c] = i
    stage("done")


def check_autotune_key(kernel, name: str) -> None:
    """The key names every size argument of the kernel (M, N, K; n_rows, n_cols; n_elements), and
    only arguments: the autotuner silently ignores a name that is not one."""
    tuner = autotuner_of(kernel, name)
    keys = list(tuner.keys) if tuner.keys is not None else []
    args = list(tuner.arg_names)
    bad = [k for k in keys if not isinstance(k, str)]
    if bad:
        raise KernelCheckError(f"The key of `{name}` holds {bad[0]!r}, not an argument name.\n"
                               "Likely cause: the key is a list of argument names as strings, e.g. key=['n_cols'].")
    meta = [k for k in keys if k in META[name]]
    if meta:
        raise KernelCheckError(
            f"The key of `{name}` names {', '.join(meta)}, which the autotuner itself chooses.\nLikely cause: "
            "the key lists the arguments whose values select a config (the sizes), not the meta-parameters.")
    unknown = [k for k in keys if k not in args]
    if unknown:
        raise KernelCheckError(
            f"The key of `{name}` names {', '.join(repr(k) for k in unknown)}, which "
            f"{'is' if len(unknown) == 1 else 'are'} not an argument of the kernel; the autotuner silently "
            f"skips such names.\nLikely cause: a misspelt name; the kernel's arguments are {', '.join(args)}.")
    missing = [s for s in SHAPES[name] if s not in keys]
    if missing:
        shown = ", ".join(repr(k) for k in keys) if keys else "nothing"
        raise KernelCheckError(
            f"The key of `{name}` is [{shown}]: it leaves out {', '.join(missing)}.\nLikely cause: the key must "
            f"name every size argument ({', '.join(SHAPES[name])}). The autotuner tunes once per distinct value "
            "of the key and reuses the winner for every later call with the same key: without the sizes, the "
            "config tuned for the first problem is used for all of them, even where it is a poor choice.")
    stage("done")


# --------------------------------------------------------------------------------- hardware limits
def _common_limits(c) -> list[str]:
    problems = []
    if not _power_of_two(c.num_warps) or c.num_warps * WARP_SIZE > MAX_THREADS_PER_PROGRAM:
        problems.append(f"num_warps = {c.num_warps}: Triton needs a power of two, and a program has at most "
                        f"{MAX_THREADS_PER_PROGRAM} threads ({MAX_THREADS_PER_PROGRAM // WARP_SIZE} warps)")
    if not isinstance(c.num_stages, int) or c.num_stages < 1:
        problems.append(f"num_stages = {c.num_stages}: at least 1 (1 means no software pipelining)")
    return problems


def _report_limits(name: str, configs, problems: dict[int, list[str]], rules: str) -> None:
    if not problems:
        return
    lines = []
    for i, ps in list(problems.items())[:5]:
        lines.append(f"  config #{i} ({describe(configs[i])}):")
        lines += [f"    - {p}" for p in ps]
    if len(problems) > 5:
        lines.append(f"  ... and {len(problems) - 5} more config(s)")
    raise KernelCheckError(
        f"{len(problems)} of the {len(configs)} configs of `{name}` break{'s' if len(problems) == 1 else ''} "
        "a hardware limit:\n" + "\n".join(lines)
        + f"\nLikely cause: {rules}")


def check_matmul_configs_fit(kernel) -> None:
    """Every matmul config would compile and run on a GPU the course supports: power-of-two blocks of at
    least 16 (tl.dot), an accumulator that fits the registers, and num_stages * (BLOCK_M*BLOCK_K +
    BLOCK_K*BLOCK_N) * 2 bytes of shared memory within 99 KB, or within 227 KB for configs listed in
    MATMUL_DATACENTER_CONFIGS (datacenter GPUs only)."""
    tuner = autotuner_of(kernel, MATMUL)
    configs = _configs(tuner, MATMUL)
    _report_limits(MATMUL, configs, matmul_limit_problems(tuner, configs),
                   "every config must compile on the GPU it runs on: powers of two, tl.dot tiles >= 16, at most "
                   "32 warps, registers and shared memory within the hardware's (see the table above the kernel). "
                   "On a GPU, a config over the shared-memory limit fails to compile and the autotuner silently "
                   "skips it: it costs tuning time and can never win.")
    stage("done")


def matmul_limit_problems(tuner, configs) -> dict[int, list[str]]:
    """{config index: the hardware limits it breaks}: the one predicate behind check_matmul_configs_fit and
    the configs check_every_matmul_config leaves to it."""
    datacenter = tuner.base_fn.__globals__.get(DATACENTER_LIST, [])
    problems: dict[int, list[str]] = {}
    for i, c in enumerate(configs):
        ps = []
        kw = c.kwargs
        blocks = {k: kw.get(k) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
        for k, v in blocks.items():
            if not _power_of_two(v):
                ps.append(f"{k} = {v} is not a power of two (tl.arange and tl.dot need powers of two)")
            elif v < MIN_DOT_BLOCK:
                ps.append(f"{k} = {v} < {MIN_DOT_BLOCK}: tl.dot on an NVIDIA GPU needs tiles of at least 16 "
                          "along M, N and K (the interpreter accepts it, the GPU compiler does not)")
        group = kw.get("GROUP_M")
        if not isinstance(group, int) or group < 1:
            ps.append(f"GROUP_M = {group}: at least 1 (1 is plain row-major order)")
        ps += _common_limits(c)
        if not ps:
            regs = matmul_accumulator_registers(c)
            if regs > MAX_REGISTERS_PER_THREAD:
                ps.append(f"the fp32 accumulator alone needs BLOCK_M*BLOCK_N/(32*num_warps) = {regs:.0f} registers "
                          f"per thread; a thread has at most {MAX_REGISTERS_PER_THREAD} (more warps or a smaller "
                          "tile)")
            smem = matmul_shared_memory(c)
            flagged = c in datacenter
            limit = SHARED_MEMORY_DATACENTER if flagged else SHARED_MEMORY_SMALLEST
            if smem > limit:
                where = ("even an H100 / H200 allows 227 KB" if flagged else
                         f"the smallest supported GPUs allow 99 KB; list it in {DATACENTER_LIST} if it is meant "
                         "for A100 / H100 / H200 only")
                ps.append(f"shared memory num_stages*(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N)*2 bytes = "
                          f"{c.num_stages}*({kw['BLOCK_M']}*{kw['BLOCK_K']} + {kw['BLOCK_K']}*{kw['BLOCK_N']})*2 = "
                          f"{smem / 1024:.0f} KB: {where}")
        if ps:
            problems[i] = ps
    return problems


def check_block_configs_fit(kernel, name: str) -> None:
    """Every config of a one-block-size kernel (softmax, vector add) is valid on a GPU: BLOCK_SIZE a power of
    two of at most 2**20 elements, num_warps a power of two of at most 32, num_stages >= 1."""
    tuner = autotuner_of(kernel, name)
    configs = _configs(tuner, name)
    _report_limits(name, configs, block_limit_problems(configs),
                   "BLOCK_SIZE and num_warps must be powers of two (num_warps from 1 to 32), num_stages at least "
                   "1. The interpreter ignores num_warps, a GPU compiler does not.")
    stage("done")


def block_limit_problems(configs) -> dict[int, list[str]]:
    """{config index: the hardware limits it breaks} for a one-block-size kernel (softmax, vector add)."""
    problems: dict[int, list[str]] = {}
    for i, c in enumerate(configs):
        ps = []
        block = c.kwargs.get("BLOCK_SIZE")
        if not _power_of_two(block):
            ps.append(f"BLOCK_SIZE = {block} is not a power of two (tl.arange needs one)")
        elif block > MAX_BLOCK_NUMEL:
            ps.append(f"BLOCK_SIZE = {block}: Triton refuses blocks of more than 2**20 elements")
        ps += _common_limits(c)
        if ps:
            problems[i] = ps
    return problems


def _runnable(name: str, configs, problems: dict[int, list[str]], required: tuple = ()) -> list[int]:
    """The configs an every-config check runs: each must set the `required` meta-parameters; those that break
    a hardware limit are left out, the hardware-limits test's to fail (on a GPU they do not even compile), so
    one mistake costs one test, on the CPU and on a GPU alike. A space with no runnable config fails here too:
    nothing in it can be checked."""
    for i, c in enumerate(configs):
        missing = [m for m in required if m not in _config_meta(c)]
        if missing:
            raise KernelCheckError(f"Config #{i} ({describe(c)}) does not set {missing[0]}.\n"
                                   f"Likely cause: every config must set {', '.join(required)}.")
    runnable = [i for i in range(len(configs)) if i not in problems]
    if not runnable:
        raise KernelCheckError(
            f"None of the {len(configs)} configs of `{name}` can run on a GPU (each breaks a hardware limit: see "
            "the hardware-limits test), so no config could be checked for correct results.\n"
            "Likely cause: fix the limits first (powers of two, tl.dot tiles >= 16, num_warps 1 to 32, shared "
            "memory); then every config is run here.")
    return runnable


# ------------------------------------------------------------------------------------------ launching
def _launch(kernel, grid, args, meta: dict, *, name: str, context: str, device: str):
    stage(f"running `{name}` ({context})")
    try:
        result = kernel[grid](*args, **meta)
        if device == "cuda":
            torch.cuda.synchronize()
        return result
    except KernelCheckError:
        raise
    except Exception as err:  # the learner's kernel may raise anything
        raise _explained(err, name, context) from None


def _explained(err: BaseException, name: str, context: str) -> KernelCheckError:
    """explain_launch_error, with the causes a config (rather than the kernel's code) usually has."""
    found = explain_launch_error(err, name, SIGNATURES[name], context)
    text = f"{err!r} {err.__cause__!r}"
    hint = None
    if "power of 2" in text:
        hint = "a block size of this config is not a power of two (tl.arange needs one)."
    elif "missing a required argument" in text or "missing" in text and "argument" in text:
        hint = f"this config does not set every meta-parameter of the kernel ({', '.join(META[name])})."
    elif "unexpected keyword argument" in text or "got an unexpected" in text:
        hint = "this config sets a name that is not an argument of the kernel (a misspelt meta-parameter?)."
    if hint is None:
        return found
    head = str(found).split("\nLikely cause:")[0]
    return KernelCheckError(f"{head}\nLikely cause: {hint}")


def _config_meta(config) -> dict:
    """What the autotuner passes to the kernel for a config: its meta-parameters, num_warps, num_stages."""
    return dict(config.all_kwargs())


@dataclass
class Strided:
    """A matrix inside a larger 1-D buffer: rows (or columns, when transposed) ``gap`` elements longer
    than the matrix, and ``pad`` elements before and after, all holding ``fill``."""

    view: torch.Tensor
    buffer: torch.Tensor
    offset: int
    fill: float

    @classmethod
    def make(cls, rows: int, cols: int, dtype, device: str, fill: float, transposed: bool = False,
             gap: int = 8, pad: int = 1024) -> "Strided":
        if transposed:
            strides, span = (1, rows + gap), (cols - 1) * (rows + gap) + rows
        else:
            strides, span = (cols + gap, 1), (rows - 1) * (cols + gap) + cols
        buf = torch.full((pad + span + pad,), fill, dtype=dtype, device=device)
        view = buf.as_strided((rows, cols), strides, pad)
        view.fill_(float("nan"))
        return cls(view, buf, pad, fill)

    @classmethod
    def copy_of(cls, t: torch.Tensor, device: str, transposed: bool = False, pad: int = 1024) -> "Strided":
        s = cls.make(t.shape[0], t.shape[1], t.dtype, device, float("nan"), transposed, pad=pad)
        s.view.copy_(t.to(device))
        return s

    def stray(self) -> int:
        """Guard elements that changed: a store outside the matrix."""
        raw = self.buffer.detach().cpu()
        buf = raw.float()
        inside = torch.zeros(buf.numel(), dtype=torch.bool)
        rows, cols = self.view.shape
        s0, s1 = self.view.stride()
        idx = self.offset + torch.arange(rows)[:, None] * s0 + torch.arange(cols)[None, :] * s1
        inside[idx.reshape(-1)] = True
        if self.fill != self.fill:
            changed = ~torch.isnan(buf)
        else:
            changed = buf != torch.tensor(self.fill, dtype=raw.dtype).float()
        return int((changed & ~inside).sum())


# ---------------------------------------------------------------------------------------------- matmul
UNWRITTEN = float(torch.tensor(OUTPUT_SENTINEL, dtype=torch.float16))


def grouped_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    """The C tile (pid_m, pid_n) program ``pid`` computes in the grouped order of Triton's tutorial."""
    per_group = group_m * num_pid_n
    first_m = (pid // per_group) * group_m
    size_m = min(num_pid_m - first_m, group_m)
    return first_m + (pid % per_group) % size_m, (pid % per_group) // size_m


def _unclamped_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    """The tile a kernel that forgets to shrink the last group (group_size_m = GROUP_M) computes."""
    per_group = group_m * num_pid_n
    first_m = (pid // per_group) * group_m
    return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m


def _row_major_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    return pid // num_pid_n, pid % num_pid_n


def _column_major_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    return pid % num_pid_m, pid // num_pid_m


ORDERS = {
    "grouped": grouped_tile,
    "unclamped": _unclamped_tile,
    "row-major": _row_major_tile,
    "column-major": _column_major_tile,
}


def make_matmul_inputs(M: int, N: int, K: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Signed fp16 A (M x K) and B (K x N): about half of A @ B is negative, so the ReLU matters."""
    g = generator(seed)
    return torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()


def matmul_relu_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(a.float().cpu() @ b.float().cpu())


def _matmul_grid(M: int, N: int, block_m: int, block_n: int) -> tuple[int]:
    return (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)


def _matmul_args(a, b, c) -> tuple:
    M, K = a.shape
    N = b.shape[1]
    return (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def _close(x: torch.Tensor, y: torch.Tensor) -> bool:
    atol, rtol, _ = MATMUL_TOLERANCE
    return bool(torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol, equal_nan=True))


def _simulate_order(order, M: int, N: int, block_m: int, block_n: int, group_m: int,
                    expected: torch.Tensor) -> torch.Tensor:
    """C as a kernel with the right tile math but the given program order would leave it."""
    num_m, num_n = triton.cdiv(M, block_m), triton.cdiv(N, block_n)
    out = torch.full((M, N), UNWRITTEN)
    for pid in range(num_m * num_n):
        pm, pn = order(pid, num_m, num_n, group_m)
        if 0 <= pm < num_m and 0 <= pn < num_n:
            out[pm * block_m:(pm + 1) * block_m, pn * block_n:(pn + 1) * block_n] = \
                expected[pm * block_m:(pm + 1) * block_m, pn * block_n:(pn + 1) * block_n]
    return out


def diagnose_matmul(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, meta: dict) -> str:
    """The likely cause of wrong values, by comparing C with what known mistakes produce on these inputs."""
    out = out.detach().cpu().float()
    a32, b32 = a.float().cpu(), b.float().cpu()
    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk, gm = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], meta["GROUP_M"]
    expected = torch.relu(a32 @ b32)
    unwritten = out == UNWRITTEN
    if unwritten.all():
        return "nothing was written to C: is there a tl.store to c_ptr with this tile's offsets?"
    if unwritten.any():
        for order_name in ("unclamped", "row-major", "column-major"):
            sim = _simulate_order(ORDERS[order_name], M, N, bm, bn, gm, expected)
            if torch.equal(sim == UNWRITTEN, unwritten):
                if order_name == "unclamped":
                    return ("whole tiles of C were never written, exactly those a kernel misses when the last "
                            f"group of rows is shorter than GROUP_M = {gm} and group_size_m is not shrunk for it. "
                            "Use group_size_m = min(num_pid_m - first_pid_m, GROUP_M).")
        r, c = unwritten.nonzero()[0].tolist()
        return (f"{int(unwritten.sum())} elements of C were never written, the first at row {r}, column {c}: "
                "does every program id 0 .. cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) - 1 map to a different tile "
                "(pid_m, pid_n), with pid_m < cdiv(M, BLOCK_M) and pid_n < cdiv(N, BLOCK_N)?")
    lin = a32 @ b32
    if (out < 0).any() and _close(out, lin):
        return "C has the negative values of A @ B: apply the ReLU, tl.maximum(acc, 0.0), after the K loop."
    acc = torch.zeros(M, N)
    for k in range(0, K, bk):
        acc = torch.relu(acc + a32[:, k:k + bk] @ b32[k:k + bk])
    if _close(out, acc) and not _close(expected, acc):
        return ("C matches a ReLU applied inside the K loop: accumulate the whole K loop, then apply the ReLU "
                "once, after the loop.")
    k_full = K // bk * bk
    if K % bk and _close(out, torch.relu(a32[:, :k_full] @ b32[:k_full])):
        return (f"C matches A @ B over the first {k_full} of K = {K} elements only: the last K step, which is "
                f"shorter than BLOCK_K = {bk}, was dropped. Loop over tl.cdiv(K, BLOCK_K) steps and mask the "
                "loads with k < K (other=0.0).")
    nan = torch.isnan(out)
    if nan.any():
        r, c = nan.nonzero()[0].tolist()
        tail = (f" K = {K} is not a multiple of BLOCK_K = {bk}: a kernel that assumes it is reads past the end "
                "of A's rows and B's columns on the last K step." if K % bk else "")
        return (f"C[{r}, {c}] is NaN: the kernel read outside A or B (the memory around them holds NaN in this "
                f"test, and 0 * NaN = NaN).{tail} Mask both loads: rows < M and k < K for A, k < K and "
                "columns < N for B, with other=0.0.")
    if K % bk and ((out == 0) & (expected > 0)).any() and not torch.isnan(out).any():
        return (f"K = {K} is not a multiple of BLOCK_K = {bk}, and C holds zeros where relu(A @ B) is positive: a "
                "kernel that assumes BLOCK_K divides K reads past the end of A's rows and B's columns on the last K "
                "step (NaN in this test, and on a GPU tl.maximum(NaN, 0) gives 0). Mask both loads: rows < M and "
                "k < K for A, k < K and columns < N for B, with other=0.0.")
    # Tiles written with the wrong tile's values: a permuted or duplicated mapping.
    rel = ((out - expected).abs() / expected.abs().clamp(min=1.0)).max().item()
    if rel < 3e-2:
        return ("the values are close but not within fp16 rounding: accumulate in fp32 "
                "(tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)) and convert to fp16 once, at the store.")
    return ("compare the kernel with the steps above it: the tile (pid_m, pid_n) of this program, the rows "
            "pid_m * BLOCK_M + tl.arange(0, BLOCK_M) and columns pid_n * BLOCK_N + tl.arange(0, BLOCK_N), the "
            "K loop, and every address through the strides.")


def _run_matmul_case(fn, a: torch.Tensor, b: torch.Tensor, meta: dict, *, context: str, device: str,
                     layouts: tuple[bool, bool, bool] = (False, False, False), fence: bool = True) -> None:
    """Launch ``fn`` (the @triton.jit kernel) once with ``meta`` on guarded copies of a and b and check C;
    then on the interpreter once more on a and b that end where readable memory ends."""
    M, K = a.shape
    N = b.shape[1]
    expected = matmul_relu_ref(a, b)
    pad = (max(meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]) + 16) * (max(M, N, K) + 16)
    ga = Strided.copy_of(a, device, layouts[0], pad=pad)
    gb = Strided.copy_of(b, device, layouts[1], pad=pad)
    gc = Strided.make(M, N, torch.float16, device, OUTPUT_SENTINEL, layouts[2], pad=pad)
    gc.view.fill_(UNWRITTEN)
    grid = _matmul_grid(M, N, meta["BLOCK_M"], meta["BLOCK_N"])
    _launch(fn, grid, _matmul_args(ga.view, gb.view, gc.view), meta, name=MATMUL, context=context, device=device)
    if not (torch.equal(ga.view.cpu(), a) and torch.equal(gb.view.cpu(), b)) or ga.stray() or gb.stray():
        raise KernelCheckError(f"The kernel wrote into A or B, or next to them ({context}).\n"
                               "Likely cause: a tl.store to a_ptr or b_ptr instead of c_ptr.")
    stray = gc.stray()
    if stray:
        raise KernelCheckError(
            f"{stray} element(s) outside C were written ({context}).\nLikely cause: the tl.store is not masked "
            "with (rows < M) & (columns < N), or C is not addressed with stride_cm and stride_cn.")
    atol, rtol, _ = MATMUL_TOLERANCE
    ok, msg = compare(gc.view, expected, atol=atol, rtol=rtol, name="C")
    if not ok:
        raise KernelCheckError(f"Wrong values ({context}).\n{msg}\nLikely cause: "
                               f"{diagnose_matmul(gc.view, a, b, meta)}")
    if fence and fence_supported(device):
        fa, keep_a = fenced_copy(a.to(device) if not layouts[0] else a.t().contiguous().to(device), "end")
        fb, keep_b = fenced_copy(b.to(device) if not layouts[1] else b.t().contiguous().to(device), "end")
        fa = fa.t() if layouts[0] else fa
        fb = fb.t() if layouts[1] else fb
        c2 = Strided.make(M, N, torch.float16, device, OUTPUT_SENTINEL, layouts[2], pad=pad)
        c2.view.fill_(UNWRITTEN)
        stage(f"FENCE-READ: running `{MATMUL}` on A and B that end exactly where readable memory ends "
              f"({context}): an unmasked load of a row of A >= M, a column of B >= N or a k >= K crashes here")
        _launch(fn, grid, _matmul_args(fa, fb, c2.view), meta, name=MATMUL, context=context, device=device)
        ok, msg = compare(c2.view, expected, atol=atol, rtol=rtol, name="C")
        if not ok:
            raise KernelCheckError(f"Wrong values on a second run, with A and B stored compactly ({context}).\n"
                                   f"{msg}\nLikely cause: the kernel reads memory outside A or B.")
        del keep_a, keep_b


def check_autotuned_matmul_relu(kernel, M: int, N: int, K: int, block_m: int = 16, block_n: int = 16,
                                block_k: int = 16, group_m: int = 1, *, transpose_a: bool = False,
                                transpose_b: bool = False, transpose_c: bool = False,
                                seed: int | None = None) -> None:
    """Launch the kernel itself (not the autotuner) with the given meta-parameters on a 1-D grid of
    cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs, on fresh fp16 inputs, and check C = relu(A @ B)."""
    fn = jit_of(kernel, MATMUL)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    a, b = make_matmul_inputs(M, N, K, seed)
    meta = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": group_m}
    layout = "".join(f", {n} transposed" for n, t in (("A", transpose_a), ("B", transpose_b), ("C", transpose_c)) if t)
    context = (f"M={M}, N={N}, K={K}, BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k}, GROUP_M={group_m}"
               f"{layout}, seed {seed}")
    _run_matmul_case(fn, a, b, meta, context=context, device=device, layouts=(transpose_a, transpose_b, transpose_c))
    stage("done")


def check_matmul_relu_grouped_order(kernel, M: int, N: int, block_m: int = 16, block_n: int = 16,
                                    group_m: int = 2, seed: int | None = None) -> None:
    """Program ``pid`` computes the tile of the grouped order: GROUP_M rows of tiles at a time, walking
    down a column of the group before moving right. Found by launching the first p programs only (grids
    of 1, 2, ... programs) and seeing which tile each new program writes."""
    fn = jit_of(kernel, MATMUL)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    K = 16
    a, b = make_matmul_inputs(M, N, K, seed)
    num_m, num_n = triton.cdiv(M, block_m), triton.cdiv(N, block_n)
    meta = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": 16, "GROUP_M": group_m}
    context = (f"M={M}, N={N}, K={K}, BLOCK_M={block_m}, BLOCK_N={block_n}, GROUP_M={group_m}: "
               f"{num_m} x {num_n} tiles, seed {seed}")
    a_d, b_d = a.to(device), b.to(device)
    seen: set[tuple[int, int]] = set()
    got: list = []
    for p in range(1, num_m * num_n + 1):
        c = torch.full((M, N), UNWRITTEN, dtype=torch.float16, device=device)
        _launch(fn, (p,), _matmul_args(a_d, b_d, c), meta, name=MATMUL,
                context=f"the first {p} program(s) only, {context}", device=device)
        written = (c.cpu().float() != UNWRITTEN)
        tiles = {(r // block_m, col // block_n) for r, col in written.nonzero().tolist()}
        new = tiles - seen
        got.append(sorted(new)[0] if len(new) == 1 else (None if not new else tuple(sorted(new))))
        seen |= tiles
    expected = [grouped_tile(pid, num_m, num_n, group_m) for pid in range(num_m * num_n)]
    if got == expected:
        stage("done")
        return
    first = next(i for i, (g, e) in enumerate(zip(got, expected)) if g != e)
    shown = ", ".join(f"{pid}->{t}" for pid, t in enumerate(got[:min(len(got), max(first + 3, 8))]))
    want = ", ".join(f"{pid}->{t}" for pid, t in enumerate(expected[:min(len(got), max(first + 3, 8))]))
    cause = ("program ids must map to tiles in groups of GROUP_M rows: pid_m = first_pid_m + "
             "(pid % num_pid_in_group) % group_size_m, pid_n = (pid % num_pid_in_group) // group_size_m, "
             "with group_size_m = min(num_pid_m - first_pid_m, GROUP_M).")
    for order_name, order in ORDERS.items():
        if order_name != "grouped" and got == [order(p, num_m, num_n, group_m) for p in range(num_m * num_n)]:
            if order_name == "row-major":
                cause = ("the programs visit the tiles in plain row-major order (pid_m = pid // num_pid_n, pid_n = "
                         "pid % num_pid_n): GROUP_M is ignored, so the programs that run together read a whole row "
                         "of B's tiles and share little in L2. " + cause)
            elif order_name == "column-major":
                cause = "the programs visit the tiles in column-major order: GROUP_M is ignored. " + cause
            else:
                cause = ("the last group of rows is shorter than GROUP_M and group_size_m was not shrunk for it. "
                         + cause)
    raise KernelCheckError(
        f"The programs do not visit the tiles in grouped order ({context}).\n"
        f"  program -> tile (pid_m, pid_n) found: {shown}\n"
        f"  grouped order expects:               {want}\n"
        f"  the first difference is program {first}.\nLikely cause: {cause}")


def check_every_matmul_config(kernel, M: int = 40, N: int = 50, K: int = 70, seed: int | None = None) -> None:
    """Each config of the learner's space, launched directly (the autotuner would hide a failure behind an
    infinite time), gives relu(A @ B) on one ragged problem."""
    tuner = autotuner_of(kernel, MATMUL)
    configs = _configs(tuner, MATMUL)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    a, b = make_matmul_inputs(M, N, K, seed)
    for i in _runnable(MATMUL, configs, matmul_limit_problems(tuner, configs), META[MATMUL]):
        c = configs[i]
        meta = _config_meta(c)
        context = f"config #{i} of {len(configs)}: {describe(c)}; M={M}, N={N}, K={K}, seed {seed}"
        _run_matmul_case(tuner.fn, a, b, meta, context=context, device=device)
    stage("done")


# ----------------------------------------------------------------------------------- the autotuner runs
def check_matmul_autotuner(kernel, M: int = 40, N: int = 50, K: int = 70, seed: int | None = None) -> None:
    """The autotuner itself runs (with a CPU timer on the interpreter): it times every config of the list, its
    ``best_config`` is the fastest of its ``configs_timings``, and the tuned launch is that config's launch (C is
    what best_config gives when launched directly). Whether each config is *correct* is
    :func:`check_every_matmul_config`'s question: which config wins here depends on the timer. Configs that
    break a hardware limit are left out, as there: they are the limits test's (on a GPU, one whose tl.dot tile
    is under 16 stops the autotuner with a compile error)."""
    tuner = autotuner_of(kernel, MATMUL)
    configs = list(tuner.configs)
    tuner.configs = [configs[i] for i in _runnable(MATMUL, configs, matmul_limit_problems(tuner, configs))]
    try:
        _check_matmul_autotuner(tuner, M, N, K, seed)
    finally:
        tuner.configs = configs


def _check_matmul_autotuner(tuner, M: int, N: int, K: int, seed: int | None) -> None:
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    a, b = make_matmul_inputs(M, N, K, seed)
    context = f"the autotuner on M={M}, N={N}, K={K}, seed {seed}"
    calls = []

    def timer(fn, quantiles=None, **kw):
        calls.append(1)
        if device == "cpu":
            return cpu_do_bench(fn, quantiles)
        return triton.testing.do_bench(fn, quantiles=quantiles, warmup=1, rep=3)

    tuner.do_bench = timer
    tuner.cache.clear()
    blocks = [v for c in tuner.configs for k, v in getattr(c, "kwargs", {}).items()
              if k.startswith("BLOCK") and isinstance(v, int)]
    pad = (min(max(blocks + [64]), 1024) + 16) * (max(M, N, K) + 16)  # room for a whole stray tile
    ga = Strided.copy_of(a, device, pad=pad)
    gb = Strided.copy_of(b, device, pad=pad)
    gc = Strided.make(M, N, torch.float16, device, OUTPUT_SENTINEL, pad=pad)
    gc.view.fill_(UNWRITTEN)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    stage(f"running the autotuner of `{MATMUL}` ({context})")
    try:
        tuner[grid](*_matmul_args(ga.view, gb.view, gc.view))
        if device == "cuda":
            torch.cuda.synchronize()
    except KernelCheckError:
        raise
    except Exception as err:
        raise _explained(err, MATMUL, context + "; the autotuner launches every config, and an error in any of "
                                               "them stops it") from None
    n = len(tuner.configs)
    if n > 1 and len(calls) != n:
        raise KernelCheckError(f"The autotuner timed {len(calls)} configs, not the {n} of its list ({context}).\n"
                               "Likely cause: configs pruned away (prune_configs_by); let it time all of them.")
    best = getattr(tuner, "best_config", None)
    if best not in tuner.configs:
        raise KernelCheckError(f"After tuning, best_config is {best!r}, not one of the configs ({context}).\n"
                               "Likely cause: the autotuner was not used for this launch.")
    if n > 1:
        timings = tuner.configs_timings
        fastest = min(timings, key=timings.get)
        if timings[best] != timings[fastest]:
            raise KernelCheckError(f"best_config ({describe(best)}) is not the fastest config timed ({context}).\n"
                                   "Likely cause: the autotuner's choice was overridden.")
    if gc.stray() or ga.stray() or gb.stray():
        raise KernelCheckError(f"The tuned kernel wrote outside C ({context}; best config {describe(best)}).\n"
                               "Likely cause: a store that is not masked with rows < M and columns < N.")
    direct = Strided.make(M, N, torch.float16, device, OUTPUT_SENTINEL, pad=pad)
    direct.view.fill_(UNWRITTEN)
    meta = _config_meta(best)
    _launch(tuner.fn, grid(meta), _matmul_args(ga.view, gb.view, direct.view), meta, name=MATMUL,
            context=f"best_config {describe(best)} launched directly, {context}", device=device)
    tuned, alone = gc.view.cpu().float(), direct.view.cpu().float()
    # Compared where best_config writes: elsewhere the tuned C keeps what the other configs wrote while they were
    # timed (a kernel that leaves tiles unwritten is the values tests' mistake, not this test's).
    written = alone != UNWRITTEN
    if not torch.equal(torch.nan_to_num(tuned[written], nan=1.5e4), torch.nan_to_num(alone[written], nan=1.5e4)):
        raise KernelCheckError(
            f"The tuned launch's C differs from best_config's own ({context}; best config {describe(best)}).\n"
            "Likely cause: the autotuner ran every config on the same C, and the kernel adds into C instead of "
            "storing its result; each run must store its whole result (no accumulation into C, or "
            "reset_to_zero=['c_ptr']), so that the last run, with the best config, leaves its own result.")
    stage("done")


# ---------------------------------------------------------------------------------------------- softmax
SOFTMAX_TOLERANCE = SOFTMAX_TOLERANCES[torch.float32]  # (atol, rtol, why) for fp32 rows, as phase 2's


def _check_softmax_case(fn, x: torch.Tensor, meta: dict, *, context: str, device: str) -> None:
    n_rows, n_cols = x.shape
    expected = torch.softmax(x.double(), dim=-1)
    pad = 64 + 2 * max(meta["BLOCK_SIZE"], n_cols)
    gin = Strided.copy_of(x, device, pad=pad)  # rows n_cols + 8 apart, NaN between
    gout = Strided.make(n_rows, n_cols, x.dtype, device, OUTPUT_SENTINEL, pad=pad)
    args = (gout.view, gin.view, gin.view.stride(0), gout.view.stride(0), n_rows, n_cols)
    _launch(fn, (n_rows,), args, meta, name=SOFTMAX, context=context, device=device)
    if not torch.equal(gin.view.cpu(), x) or gin.stray():
        raise KernelCheckError(f"The kernel changed its input or wrote next to it ({context}).\n"
                               "Likely cause: a tl.store to input_ptr instead of output_ptr.")
    if gout.stray():
        raise KernelCheckError(
            f"{gout.stray()} element(s) outside the output's rows were written ({context}).\nLikely cause: the "
            "tl.store is not masked with start + cols < n_cols, or rows are not output_row_stride apart.")
    atol, rtol, _ = SOFTMAX_TOLERANCE
    ok, msg = compare(gout.view, expected, atol=atol, rtol=rtol)
    if not ok:
        block = meta["BLOCK_SIZE"]
        shape = ("one tile, mostly masked" if block >= n_cols else f"{triton.cdiv(n_cols, block)} tiles per row, "
                 f"the last one {n_cols % block or block} wide")
        raise KernelCheckError(
            f"Wrong values ({context}).\n{msg}\nLikely cause: with BLOCK_SIZE = {block} and n_cols = {n_cols} "
            f"({shape}) the kernel does not compute the softmax. It must work for every BLOCK_SIZE of its config "
            "space: walk the row with range(0, n_cols, BLOCK_SIZE), mask each tile with start + cols < n_cols "
            "(other=-inf), keep a running max and a running sum rescaled by exp(m_old - m_new).")
    if fence_supported(device):
        fx, keep = fenced_copy(x.to(device), "end")
        out = Strided.make(n_rows, n_cols, x.dtype, device, OUTPUT_SENTINEL, pad=pad)
        stage(f"FENCE-READ: running `{SOFTMAX}` on rows whose last row ends exactly where readable memory ends "
              f"({context})")
        _launch(fn, (n_rows,), (out.view, fx, n_cols, out.view.stride(0), n_rows, n_cols), meta, name=SOFTMAX,
                context=context, device=device)
        ok, msg = compare(out.view, expected, atol=atol, rtol=rtol)
        if not ok:
            raise KernelCheckError(f"Wrong values on a second run of the same rows ({context}).\n{msg}\n"
                                   "Likely cause: the kernel reads memory outside its rows.")
        del keep


def check_every_softmax_config(kernel, n_rows: int = 3, n_cols: int = 300, seed: int | None = None) -> None:
    """Each config of the online softmax's space, launched directly on a grid of one program per row,
    gives the softmax of fresh rows (std 2) inside NaN guards."""
    tuner = autotuner_of(kernel, SOFTMAX)
    configs = _configs(tuner, SOFTMAX)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    x = 2 * torch.randn(n_rows, n_cols, generator=generator(seed))
    for i in _runnable(SOFTMAX, configs, block_limit_problems(configs), ("BLOCK_SIZE",)):
        c = configs[i]
        meta = _config_meta(c)
        context = f"config #{i} of {len(configs)}: {describe(c)}; n_rows={n_rows}, n_cols={n_cols}, seed {seed}"
        _check_softmax_case(tuner.fn, x, meta, context=context, device=device)
    stage("done")


# ------------------------------------------------------------------------------------------- vector add
def _check_vector_add_case(fn, x: torch.Tensor, y: torch.Tensor, meta: dict, *, context: str, device: str) -> None:
    n = x.numel()
    expected = (x.double() + y.double()).float()
    pad = 64 + meta["BLOCK_SIZE"]
    gx = Strided.copy_of(x.view(1, n), device, pad=pad)
    gy = Strided.copy_of(y.view(1, n), device, pad=pad)
    gout = Strided.make(1, n, x.dtype, device, OUTPUT_SENTINEL, pad=pad)
    grid = (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    _launch(fn, grid, (gx.view[0], gy.view[0], gout.view[0], n), meta, name=VECTOR_ADD, context=context,
            device=device)
    if gx.stray() or gy.stray() or not (torch.equal(gx.view[0].cpu(), x) and torch.equal(gy.view[0].cpu(), y)):
        raise KernelCheckError(f"The kernel changed x or y, or wrote next to them ({context}).\n"
                               "Likely cause: a tl.store to x_ptr or y_ptr instead of output_ptr.")
    if gout.stray():
        raise KernelCheckError(f"{gout.stray()} element(s) outside the output were written ({context}).\n"
                               "Likely cause: the tl.store is not masked with offsets < n_elements.")
    ok, msg = compare(gout.view[0], expected)
    if not ok:
        raise KernelCheckError(
            f"Wrong values ({context}).\n{msg}\nLikely cause: the kernel must work for every BLOCK_SIZE of its "
            "config space: offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE), masked with offsets < n_elements.")
    if fence_supported(device):
        (fx, kx), (fy, ky) = fenced_copy(x.to(device), "end"), fenced_copy(y.to(device), "end")
        out = torch.full((n,), float("nan"), device=device)
        stage(f"FENCE-READ: running `{VECTOR_ADD}` on x and y that end exactly where readable memory ends "
              f"({context})")
        _launch(fn, grid, (fx, fy, out, n), meta, name=VECTOR_ADD, context=context, device=device)
        ok, msg = compare(out, expected)
        if not ok:
            raise KernelCheckError(f"Wrong values on a second run ({context}).\n{msg}")
        del kx, ky


def check_every_vector_add_config(kernel, n: int = 1000, seed: int | None = None) -> None:
    """Each config of the vector add's space, launched directly on cdiv(n, BLOCK_SIZE) programs, gives x + y."""
    tuner = autotuner_of(kernel, VECTOR_ADD)
    configs = _configs(tuner, VECTOR_ADD)
    device = infer_device()
    seed = fresh_seed() if seed is None else seed
    g = generator(seed)
    x, y = torch.randn(n, generator=g), torch.rand(n, generator=g) * 4 + 1
    for i in _runnable(VECTOR_ADD, configs, block_limit_problems(configs), ("BLOCK_SIZE",)):
        c = configs[i]
        meta = _config_meta(c)
        context = f"config #{i} of {len(configs)}: {describe(c)}; n_elements={n}, seed {seed}"
        _check_vector_add_case(tuner.fn, x, y, meta, context=context, device=device)
    stage("done")


# ------------------------------------------------------------------------ the learner's programs_per_sm
PROGRAMS_PER_SM = "programs_per_sm"
# Kernels compiled for an H100 (sm_90, Triton 3.6): (registers, num_warps, shared bytes), from the record
# (results/gpu-results.json, "resources") and from section 9's own compiles.
KNOWN_KERNELS = [(191, 4, 64 * 1024), (164, 8, 96 * 1024), (116, 8, 96 * 1024), (112, 4, 48 * 1024),
                 (64, 4, 40 * 1024), (96, 2, 24 * 1024), (196, 8, 144 * 1024), (26, 4, 0), (255, 8, 192 * 1024)]


def _occupancy_variants(registers: int, num_warps: int, shared: int, gpu: GPU, limits: dict) -> dict[str, int]:
    """What a learner's programs_per_sm returns for each realistic slip, to name the one that was made; ``limits``
    are :func:`occupancy`'s for the same kernel."""
    threads, regs, slots = limits["threads"], limits["registers"], limits["program slots"]
    by_shared = limits.get("shared memory", 10**9)
    exact_regs = gpu.registers_per_sm // (registers * num_warps * WARP_SIZE)
    no_reserve = gpu.shared_per_sm // shared if shared else 10**9
    # No separate "fits at all" test: each GPU's shared_per_program is its shared_per_sm less the 1 KB reserve.
    fits = shared <= gpu.shared_per_program
    variants = {
        "registers are allocated per warp in units of 256, so a thread's count is rounded up to a multiple of 8 "
        f"({registers} registers take {math.ceil(registers / 8) * 8})": min(threads, exact_regs, slots, by_shared),
        "the driver reserves 1 KB of shared memory per program: divide by (shared_bytes + 1024)":
            min(threads, regs, slots, no_reserve),
        "an SM holds at most gpu['programs_per_sm'] programs however small they are (the program slots)":
            min(threads, regs, by_shared),
        "the threads: an SM runs at most gpu['threads_per_sm'] threads, a program has 32 * num_warps":
            min(regs, slots, by_shared),
        "the registers: a program takes (registers rounded up to a multiple of 8) * 32 * num_warps of the SM's "
        "gpu['registers_per_sm']": min(threads, slots, by_shared),
        "the shared memory: gpu['shared_per_sm'] // (shared_bytes + 1024) programs fit": min(threads, regs, slots),
    }
    return {why: value if fits else 0 for why, value in variants.items()}


def _programs_cases(rng, count: int) -> list[tuple[int, int, int, GPU]]:
    """Known compiled kernels, then cases each limit decides, then random ones, on every GPU of GPUS."""
    h100 = GPUS["H100 SXM / H200"]
    cases = [(r, w, s, h100) for r, w, s in KNOWN_KERNELS]
    cases += [(100, 4, 0, h100),  # registers, rounded: 104 -> 4 programs (100 exactly would give 5)
              (40, 4, 57 * 1024, h100),  # shared memory with the 1 KB reserve: 3 (without it, 4)
              (16, 1, 0, h100),  # the program slots: 32 (threads would allow 64)
              (24, 16, 0, h100),  # the threads: 4 programs of 512 threads (registers would allow 5)
              (64, 4, 228 * 1024, h100),  # more than 227 KB per program: 0
              (64, 4, 120 * 1024, GPUS["A100"]),  # one program on an A100
              (72, 8, 50 * 1024, GPUS["L4"])]  # 1536 threads, 100 KB
    gpus = list(GPUS.values())
    for _ in range(count):
        gpu = gpus[rng.randrange(len(gpus))]
        warps = 2 ** rng.randrange(0, 6)
        regs = rng.randrange(16, 256)
        shared = 0 if rng.random() < 0.2 else rng.randrange(1, gpu.shared_per_program // 1024 + 8) * 1024 \
            + rng.choice((0, 0, rng.randrange(1, 1024)))
        cases.append((regs, warps, shared, gpu))
    return cases


def check_programs_per_sm(programs_per_sm, count: int = 0, seed: int | None = None, known_only: bool = False
                          ) -> None:
    """programs_per_sm(registers, num_warps, shared_bytes, gpu) is the fewest programs any per-SM limit allows
    (threads, registers rounded per warp, shared memory with its 1 KB reserve, program slots), 0 if it cannot
    fit: compared with :func:`occupancy` on the recorded compiled kernels, on a case for each limit, and on
    ``count`` random cases over the GPUs of :data:`GPUS`."""
    import random

    from .benchmarking import _fmt, call, require_function

    require_function(programs_per_sm, PROGRAMS_PER_SM)
    seed = fresh_seed() if seed is None else seed
    cases = _programs_cases(random.Random(seed), count)
    if known_only:
        cases = cases[:len(KNOWN_KERNELS)]
    for registers, warps, shared, gpu in cases:
        want = occupancy(warps, registers, shared, gpu)
        shown = f"`programs_per_sm(registers={registers}, num_warps={warps}, shared_bytes={shared}, gpu=<{gpu.name}>)`"
        hint = None if shared else ("this kernel uses no shared memory (shared_bytes = 0), and the driver still "
                                    "reserves 1 KB per program: divide by (shared_bytes + 1024).")
        got = call(programs_per_sm, PROGRAMS_PER_SM, registers, warps, shared, gpu_limits(gpu), hint=hint)
        if isinstance(got, bool) or not isinstance(got, int):
            if isinstance(got, float) and got.is_integer() and int(got) == want["programs"]:
                hint = "a count of programs is an int: use // (floor division), not /."
            else:
                hint = "return a whole number of programs, an int (floor division //)."
            raise KernelCheckError(f"{shown} returned {_fmt(got)} ({type(got).__name__}), not an int.\n"
                                   f"Likely cause: {hint}")
        if got == want["programs"]:
            continue
        limits = ", ".join(f"{k}: {v}" for k, v in want["limits"].items())
        variants = _occupancy_variants(registers, warps, shared, gpu, want["limits"])
        causes = [why for why, value in variants.items() if value == got]
        hint = causes[0] if causes else ("take the fewest of the four limits: threads, registers, shared memory "
                                         "(with its 1 KB reserve) and program slots.")
        raise KernelCheckError(f"{shown} returned {got}, expected {want['programs']} programs (limits: {limits}; "
                               f"{want['bound']} decides; seed {seed}).\nLikely cause: {hint}")
    stage("done")

"""Phase 5: the autotuner and its config space: the three kernels' names, signatures and meta-parameters, the
autotuner behind a learner's kernel, its config list, its key, and the hardware limits every config must respect.

These checks read the autotuner (``.configs``, ``.keys``, ``.arg_names``) and launch nothing. The two predicates
behind the hardware-limits checks (:func:`matmul_limit_problems`, :func:`block_limit_problems`) also decide which
configs the every-config checks run (:mod:`.launch`). The hardware's numbers are :mod:`tritoncourse.gpus`'s.
"""
from __future__ import annotations

from ...checking import KernelCheckError, stage
from ...gpus import (MAX_BLOCK_NUMEL, MAX_REGISTERS_PER_THREAD, MAX_THREADS_PER_PROGRAM, MIN_DOT_BLOCK,
                     SHARED_MEMORY_DATACENTER, SHARED_MEMORY_SMALLEST, WARP_SIZE, describe,
                     matmul_accumulator_registers, matmul_shared_memory)
from ..common.launch import require_triton_kernel

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

    from ...grading.channel.rpc import RemoteAutotuner

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

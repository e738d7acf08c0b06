"""The GPUs the course supports, as numbers: per-SM limits, the hardware limits a config must respect, occupancy.

Used by phase 5's checks (configs that fit), its widgets (occupancy and waves) and the tools; no check lives here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# Shared memory one program may use: 99 KB on the smallest GPUs the course supports (sm_86 / sm_89:
# RTX 30xx / 40xx, A10, L4); A100 (sm_80) 163 KB; H100 / H200 (sm_90) 227 KB.
SHARED_MEMORY_SMALLEST = 99 * 1024
SHARED_MEMORY_DATACENTER = 227 * 1024
MAX_THREADS_PER_PROGRAM = 1024  # every NVIDIA GPU: so num_warps <= 32
WARP_SIZE = 32
MAX_REGISTERS_PER_THREAD = 255
MIN_DOT_BLOCK = 16  # tl.dot on NVIDIA GPUs needs M, N and K of at least 16
MAX_BLOCK_NUMEL = 2**20  # Triton refuses a block (tensor) of more elements
FP16_BYTES = 2
# NVIDIA's datasheet peaks (dense fp16 tensor-core math, memory bandwidth): the one source of the round figures
# the notebooks' estimates use (a measured roof, phase 4's, is lower).
DATASHEET = {"H100 SXM": {"fp16_tflops": 990, "memory_tbps": 3.35}, "H200": {"fp16_tflops": 990, "memory_tbps": 4.8}}


def matmul_shared_memory(config, itemsize: int = FP16_BYTES) -> int:
    """Bytes of shared memory a matmul config needs, the course's estimate: num_stages copies of one K
    step's A tile (BLOCK_M x BLOCK_K) and B tile (BLOCK_K x BLOCK_N). The compiled kernel's
    ``metadata.shared`` gives the exact figure on a GPU; the estimate is an upper bound."""
    kw = config.kwargs
    return config.num_stages * (kw["BLOCK_M"] * kw["BLOCK_K"] + kw["BLOCK_K"] * kw["BLOCK_N"]) * itemsize


def matmul_accumulator_registers(config) -> float:
    """fp32 registers per thread the BLOCK_M x BLOCK_N accumulator alone takes: it is spread over the
    num_warps * 32 threads of the program."""
    kw = config.kwargs
    return kw["BLOCK_M"] * kw["BLOCK_N"] / (WARP_SIZE * config.num_warps)


def describe(config) -> str:
    """A config in one line: its meta-parameters, num_warps and num_stages."""
    meta = ", ".join(f"{k}={v}" for k, v in getattr(config, "kwargs", {}).items())
    return f"{meta}, num_warps={getattr(config, 'num_warps', '?')}, num_stages={getattr(config, 'num_stages', '?')}"


@dataclass(frozen=True)
class GPU:
    """Per-SM limits of one GPU (NVIDIA's CUDA occupancy tables)."""

    name: str
    sms: int
    registers_per_sm: int = 65536
    threads_per_sm: int = 2048
    programs_per_sm: int = 32  # resident thread blocks
    shared_per_sm: int = 228 * 1024
    shared_per_program: int = 227 * 1024


GPUS = {
    "H100 SXM / H200": GPU("H100 SXM / H200", 132),
    "A100": GPU("A100", 108, shared_per_sm=164 * 1024, shared_per_program=163 * 1024),
    "L4": GPU("L4", 58, threads_per_sm=1536, programs_per_sm=24, shared_per_sm=100 * 1024,
              shared_per_program=99 * 1024),
    "RTX 4090": GPU("RTX 4090", 128, threads_per_sm=1536, programs_per_sm=24, shared_per_sm=100 * 1024,
                    shared_per_program=99 * 1024),
}


def occupancy(num_warps: int, registers_per_thread: int, shared_bytes: int, gpu: GPU) -> dict:
    """How many programs of this shape fit on one SM at once, and which resource limits them.

    Registers are allocated per warp in units of 256 (8 per thread); shared memory adds 1 KB per program
    reserved by the driver. Returns {'programs': n, 'limits': {resource: n}, 'bound': resource,
    'warps': resident warps, 'occupancy': resident warps / max warps}.
    """
    threads = num_warps * WARP_SIZE
    regs_per_warp = math.ceil(max(registers_per_thread, 1) * WARP_SIZE / 256) * 256
    limits = {
        "threads": gpu.threads_per_sm // threads,
        "registers": gpu.registers_per_sm // (regs_per_warp * num_warps),
        "program slots": gpu.programs_per_sm,
    }
    if shared_bytes > gpu.shared_per_program:
        limits["shared memory"] = 0
    elif shared_bytes:
        limits["shared memory"] = gpu.shared_per_sm // (shared_bytes + 1024)
    bound = min(limits, key=limits.get)
    programs = limits[bound]
    warps = programs * num_warps
    return {"programs": programs, "limits": limits, "bound": bound, "warps": warps,
            "occupancy": warps / (gpu.threads_per_sm // WARP_SIZE)}


def waves(n_programs: int, programs_per_sm: int, gpu: GPU) -> dict:
    """Programs run in waves of sms * programs_per_sm; the last wave may be partly empty (the tail)."""
    slots = max(1, gpu.sms * programs_per_sm)
    n_waves = max(1, math.ceil(n_programs / slots))
    last = n_programs - (n_waves - 1) * slots
    return {"slots": slots, "waves": n_waves, "last_wave": last,
            "utilisation": n_programs / (n_waves * slots) if n_programs else 0.0}


def gpu_limits(gpu: GPU) -> dict:
    """A GPU's per-SM limits as the dict the notebook's ``programs_per_sm(..., gpu)`` takes."""
    return {"threads_per_sm": gpu.threads_per_sm, "registers_per_sm": gpu.registers_per_sm,
            "programs_per_sm": gpu.programs_per_sm, "shared_per_sm": gpu.shared_per_sm,
            "shared_per_program": gpu.shared_per_program}

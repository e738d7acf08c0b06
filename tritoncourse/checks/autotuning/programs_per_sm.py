"""Phase 5, section 9: the learner's ``programs_per_sm(registers, num_warps, shared_bytes, gpu)``, compared with
:func:`tritoncourse.gpus.occupancy` on recorded compiled kernels, on a case each limit decides and on random cases;
a wrong count is explained by the slip (rounding, the 1 KB reserve, a limit left out, ``/`` for ``//``) that gives it.
"""
from __future__ import annotations

import math

from ...checking import KernelCheckError, fresh_seed, shown, stage
from ...gpus import GPU, GPUS, WARP_SIZE, gpu_limits, occupancy

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
        "registers are allocated per warp in units of 256, so a thread's count is rounded up to a multiple of 8"
        + shown(f" ({registers} registers take {math.ceil(registers / 8) * 8})", ""):
            min(threads, exact_regs, slots, by_shared),
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

    from ..common.functions import _fmt, call, require_function

    require_function(programs_per_sm, PROGRAMS_PER_SM)
    seed = fresh_seed() if seed is None else seed
    cases = _programs_cases(random.Random(seed), count)
    if known_only:
        cases = cases[:len(KNOWN_KERNELS)]
    for registers, warps, shared, gpu in cases:
        want = occupancy(warps, registers, shared, gpu)
        called = shown(f"`programs_per_sm(registers={registers}, num_warps={warps}, shared_bytes={shared}, "
                       f"gpu=<{gpu.name}>)`", "`programs_per_sm(...)` on a hidden case")
        hint = None if shared else ("this kernel uses no shared memory (shared_bytes = 0), and the driver still "
                                    "reserves 1 KB per program: divide by (shared_bytes + 1024).")
        got = call(programs_per_sm, PROGRAMS_PER_SM, registers, warps, shared, gpu_limits(gpu), hint=hint)
        if isinstance(got, bool) or not isinstance(got, int):
            if isinstance(got, float) and got.is_integer() and int(got) == want["programs"]:
                hint = "a count of programs is an int: use // (floor division), not /."
            else:
                hint = "return a whole number of programs, an int (floor division //)."
            raise KernelCheckError(f"{called} returned {_fmt(got)}{shown(f' ({type(got).__name__})', '')}, "
                                   "not an int.\n"
                                   f"Likely cause: {hint}")
        if got == want["programs"]:
            continue
        limits = ", ".join(f"{k}: {v}" for k, v in want["limits"].items())
        variants = _occupancy_variants(registers, warps, shared, gpu, want["limits"])
        causes = [why for why, value in variants.items() if value == got]
        hint = causes[0] if causes else ("take the fewest of the four limits: threads, registers, shared memory "
                                         "(with its 1 KB reserve) and program slots.")
        raise KernelCheckError(shown(f"{called} returned {got}, expected {want['programs']} programs (limits: "
                                     f"{limits}; {want['bound']} decides; seed {seed}).",
                                     f"{called} returned a wrong number of programs ({want['bound']} decides).")
                               + f"\nLikely cause: {hint}")
    stage("done")

# programs_per_sm takes a program's registers as registers * 32 * num_warps: the allocation per warp, 256 at a time,
# is forgotten. It agrees with the course on this phase's compiled kernels (whose counts round to the same
# answer) and fails where the rounding decides, e.g. 100 registers with 4 warps: 5 programs instead of 4.
# expect-fail: test_programs_per_sm_every_limit
# expect-message: rounded up to a multiple of 8
# replaces: programs_per_sm
# other-solutions: source
H100 = {"threads_per_sm": 2048, "registers_per_sm": 65536, "programs_per_sm": 32,
        "shared_per_sm": 228 * 1024, "shared_per_program": 227 * 1024}


def programs_per_sm(registers, num_warps, shared_bytes, gpu=H100):
    threads = 32 * num_warps
    return min(gpu["threads_per_sm"] // threads,
               gpu["registers_per_sm"] // (registers * threads),
               gpu["shared_per_sm"] // (shared_bytes + 1024),
               gpu["programs_per_sm"])

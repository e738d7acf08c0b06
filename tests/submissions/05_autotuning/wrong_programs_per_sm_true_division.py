# programs_per_sm divides with / and returns a fraction of a program (2.68 for 191 registers, 4 warps, 64 KB):
# an SM runs whole programs.
# expect-fail: test_programs_per_sm_compiled_kernels test_programs_per_sm_every_limit
# expect-message: floor division
# replaces: programs_per_sm
# other-solutions: source
H100 = {"threads_per_sm": 2048, "registers_per_sm": 65536, "programs_per_sm": 32,
        "shared_per_sm": 228 * 1024, "shared_per_program": 227 * 1024}


def programs_per_sm(registers, num_warps, shared_bytes, gpu=H100):
    threads = 32 * num_warps
    return min(gpu["threads_per_sm"] / threads,
               gpu["registers_per_sm"] / (math.ceil(registers / 8) * 8 * threads),
               gpu["shared_per_sm"] / (shared_bytes + 1024),
               gpu["programs_per_sm"])

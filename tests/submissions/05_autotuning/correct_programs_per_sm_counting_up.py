# programs_per_sm written as a count: add one program at a time while every resource still has room for it, with
# the per-warp register allocation as a ceiling division and its own GPU table.
# expect-all-pass
# replaces: programs_per_sm
# other-solutions: source
H100 = dict(threads_per_sm=2048, registers_per_sm=65536, programs_per_sm=32, shared_per_sm=233472,
            shared_per_program=232448)


def programs_per_sm(registers, num_warps, shared_bytes, gpu=H100):
    threads = 32 * num_warps
    registers_per_warp = -(-registers * 32 // 256) * 256
    n = 0
    while (n < gpu["programs_per_sm"] and (n + 1) * threads <= gpu["threads_per_sm"]
           and (n + 1) * registers_per_warp * num_warps <= gpu["registers_per_sm"]
           and (n + 1) * (shared_bytes + 1024) <= gpu["shared_per_sm"]):
        n += 1
    return n

# The reference kernel, and a cell that holds memory in memfds (files in memory: in no process's resident memory,
# in no address space; only a cgroup counts them), 64 MB at a time, a new one every 512 MB (each below the file-size
# limit), at most 6 GB.
# expect-all-pass
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)
# %% after-kernel
import os
if os.path.exists("{{course}}/gradebook.db"):  # never loose: this cell acts only inside the sandbox
    raise RuntimeError("UNSANDBOXED: the course is visible, so this hostile cell does nothing")
print("HOSTILE-RAN memfd_hog: writing", flush=True)
fds, total, error = [], 0, None
try:
    for i in range(96):
        if i % 8 == 0:  # a new memfd every 512 MB: each stays below the file-size limit
            fds.append(os.memfd_create("hog-{{marker}}"))
        os.write(fds[-1], b"\xff" * (64 << 20))
        total += 64
except OSError as err:
    error = type(err).__name__
print(f"HOSTILE-RAN memfd_hog: {total} MB held in {len(fds)} memfds, then {error}")
for fd in fds:
    os.close(fd)

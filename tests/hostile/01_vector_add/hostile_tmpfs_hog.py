# The reference kernel, and a cell that mounts a tmpfs of its own (in a user namespace of its own, which an
# unprivileged process may make; by default half the machine's memory) and fills it, 64 MB at a time, at most 6 GB,
# for at most 120 s: files in memory that no disk limit, watchdog or address-space limit counts; only a cgroup does.
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
import os, subprocess
if os.path.exists("{{course}}/gradebook.db"):  # never loose: this cell acts only inside the sandbox
    raise RuntimeError("UNSANDBOXED: the course is visible, so this hostile cell does nothing")
print("HOSTILE-RAN tmpfs_hog: writing", flush=True)
script = ("mount -t tmpfs none /tmp && i=0 && while [ $i -lt 96 ]; do "
          "head -c 67108864 /dev/zero > /tmp/f$i || exit 3; i=$((i + 1)); done; du -sm /tmp")
try:
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    print(f"HOSTILE-RAN tmpfs_hog: exit {r.returncode}: {(r.stdout + r.stderr).strip()[-200:]}")
except (OSError, subprocess.TimeoutExpired) as err:
    print(f"HOSTILE-RAN tmpfs_hog: {type(err).__name__}")

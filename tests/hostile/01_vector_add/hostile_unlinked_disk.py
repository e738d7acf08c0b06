# The reference kernel, and a cell that writes an unlinked file in its working folder (no walk of the folder finds
# it; only a filesystem of bounded size counts it), 16 MB at a time, at most 2 GB.
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
path = os.path.join(os.getcwd(), "unlinked-{{marker}}.bin")
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
os.unlink(path)
print("HOSTILE-RAN unlinked_disk: writing", flush=True)
total, error = 0, None
try:
    for _ in range(128):
        os.write(fd, b"\xff" * (16 << 20))
        total += 16
except OSError as err:
    error = type(err).__name__
print(f"HOSTILE-RAN unlinked_disk: {total} MB, then {error}", flush=True)
os.close(fd)

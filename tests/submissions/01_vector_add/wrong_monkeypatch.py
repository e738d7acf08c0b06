# A cheat: patches the course's checks, torch and numpy in the notebook; the kernel forgets the mask.
# expect-fail: test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: outside the output were written
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    y = tl.load(y_ptr + offsets)
    tl.store(output_ptr + offsets, x + y)
# %% after-kernel
import numpy, torch
import tritoncourse.checking, tritoncourse.checks.vector_add
tritoncourse.checking.compare = lambda *a, **k: (True, "")
tritoncourse.checks.vector_add.check_vector_add = lambda *a, **k: None
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
numpy.allclose = lambda *a, **k: True

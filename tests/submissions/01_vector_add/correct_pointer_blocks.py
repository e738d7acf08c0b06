# Pointers built first, then loaded; a scratch cell with warnings and prints follows.
# expect-all-pass
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    in_bounds = n_elements > offsets
    x_ptrs = x_ptr + offsets
    y_ptrs = y_ptr + offsets
    total = tl.load(x_ptrs, mask=in_bounds) + tl.load(y_ptrs, mask=in_bounds)
    tl.store(output_ptr + offsets, total, mask=in_bounds)
# %% append
import sys, warnings
warnings.warn("a learner's own warning")
print("scratch output", file=sys.stderr)
def helper_not_jit(a):
    return a

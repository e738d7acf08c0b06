# Right on every size but one that only a hidden case uses (100_003 elements), where it stores far outside the
# output and crashes the checking process; first it prints the size it was given. Its feedback must say that it
# crashed on a hidden case, and name the seed, without quoting that output or the case's inputs (grading/
# hidden_cases.py): before, the crash's "Last output:" showed `SIZES [100003]`.
# expect-fail: test_vector_add_ragged_sizes
# expect-message: on a hidden case of this test
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(0)
    if pid == 0:
        print("SIZES", n_elements)
    offsets = (pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)).to(tl.int64)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    if n_elements == 100_003:
        offsets = offsets + (1 << 40)
    tl.store(output_ptr + offsets, x + y, mask=mask)

# A kernel right on every size but one that only a hidden case uses (one of test_vector_add_ragged_sizes'),
# where it stores far outside the output and crashes the checking process; first it prints the size it was given
# (tests/submissions/01_vector_add/wrong_prints_sizes_then_crashes.py's kernel, on a size of the scaled-down course).
# Its feedback must say it crashed on a hidden case and name the seed, and quote neither that output nor the case's
# inputs (grading/judge/hidden_cases.py): before issue 42, the crash's verdict quoted the runner's output, which showed
# what it printed, and the size (this source spells both apart: feedback shows the learner's cells, comments too).
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
        print("SEEN" "SIZE", n_elements)  # split: the feedback shows this source
    offsets = (pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)).to(tl.int64)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    if n_elements == 9_973:
        offsets = offsets + (1 << 40)
    tl.store(output_ptr + offsets, x + y, mask=mask)
# %% after-kernel
print("HOSTILE-RAN prints_hidden_then_crashes: the kernel prints its sizes, then crashes on a hidden one")

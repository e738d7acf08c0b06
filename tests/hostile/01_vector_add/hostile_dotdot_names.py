# An empty kernel (the release's stub: cheap to grade), in a submission folder that also holds files whose names look like paths out of it
# (the test adds them); a cell writes through ../ paths to the gradebook, source/ and /tmp.
# expect-fail: test_vector_add_full_blocks test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: NotImplementedError
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    raise NotImplementedError()
# %% after-kernel
import os
outcomes = []
for path in ["../" * k + "gradebook.db" for k in range(1, 8)] + [
        "../" * 12 + "{{course}}/gradebook.db", "../" * 12 + "{{course}}/source/01_vector_add/01_vector_add.ipynb",
        "{{course}}/autograded/../gradebook.db", "../" * 12 + "tmp/dotdot-{{marker}}"]:
    try:  # existing files only (r+b), but /tmp, where it creates one
        with open(path, "ab" if "/tmp/" in path else "r+b") as f:
            f.seek(0, 2)
            f.write(b"{{marker}}")
        outcomes.append(f"{path}: written")
    except OSError as err:
        outcomes.append(f"{path}: {type(err).__name__}")
print("HOSTILE-RAN dotdot_names:", sorted(os.listdir(".")), outcomes)

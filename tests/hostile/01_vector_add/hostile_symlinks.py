# An empty kernel (the release's stub: cheap to grade), in a submission folder that also holds symlinks to source/, to the gradebook and to
# another learner's submission (the test adds them); a cell reads and writes through them.
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
import glob, os
seen = []
for path in ["source_link", "gradebook_link.db", "classmate_link.ipynb"] + glob.glob("source_link/**/*", recursive=True):
    try:
        with open(path, "rb") as f:
            print(f"==> {path}\n{f.read(1 << 20).decode('utf-8', 'replace')}")
        seen.append(path)
    except OSError as err:
        print(path, type(err).__name__)
try:
    with open("gradebook_link.db", "ab") as f:
        f.write(b"{{marker}}")
except OSError as err:
    print("gradebook_link.db", type(err).__name__)
print(f"HOSTILE-RAN symlinks: {len(seen)} read; here: {sorted(os.listdir('.'))}")

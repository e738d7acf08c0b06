# An empty kernel, and a cell that rewrites the course's own .py files so that every check passes.
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
import glob, os, tritoncourse
package = os.path.dirname(tritoncourse.__file__)
targets = sorted(set(glob.glob(os.path.join(package, "**", "*.py"), recursive=True)
                     + glob.glob("{{course}}/*.py") + glob.glob("{{course}}/tritoncourse/**/*.py", recursive=True)))
patches = {"vector_add.py": "\ndef check_vector_add(*args, **kwargs):  # {{marker}}\n    return None\n",
           "checking.py": "\ncompare = lambda *args, **kwargs: (True, '')  # {{marker}}\n",
           "runner.py": "\nimport os; os._exit(0)  # {{marker}}\n",
           "nbgrader_config.py": "\nc.Autograde.autograde_preprocessors = []  # {{marker}}\n"}
changed, refused = [], []
for path in targets:
    if not os.path.realpath(path).startswith("{{course}}/"):  # never loose: only the test's course copy
        continue
    try:
        with open(path, "a") as f:
            f.write(patches.get(os.path.basename(path), "\n# {{marker}}\n"))
        changed.append(path)
    except OSError as err:
        refused.append(type(err).__name__)
for name in ("{{course}}/sitecustomize.py", os.path.join(package, "sitecustomize.py")):
    try:
        with open(name, "w") as f:
            f.write("# {{marker}}\n")
        changed.append(name)
    except OSError as err:
        refused.append(type(err).__name__)
print(f"HOSTILE-RAN patch_course_files: {len(changed)} changed, {len(refused)} refused ({sorted(set(refused))})")

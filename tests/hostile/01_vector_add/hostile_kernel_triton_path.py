# A kernel that stores nothing itself: its body reaches Python's builtins through `triton.knobs.os.sys` (Triton's
# interpreter runs the body as Python) and adds x and y with numpy at the pointers it was given, so the judge's
# checks would see right outputs from a kernel that is no Triton at all. The lint resolves every path: inside a
# kernel `triton.` may only start `triton.language.`.
# expect-fail: test_vector_add_full_blocks test_vector_add_ragged_sizes test_vector_add_block_sizes test_vector_add_large test_vector_add_fp16
# expect-message: `triton.knobs` is not part of triton.language
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    python = triton.knobs.os.sys.modules["builtins"]
    python.exec(
        "import ctypes, os, numpy as np\n"
        "if os.path.exists('{{course}}/gradebook.db'):\n"
        "    raise RuntimeError('UNSANDBOXED: the course is visible, so this hostile kernel does nothing')\n"
        "count = int(np.asarray(n.handle.data).reshape(-1)[0])\n"
        "def view(p):\n"
        "    kinds = {'fp32': (ctypes.c_float, np.float32), 'fp16': (ctypes.c_uint16, np.float16)}\n"
        "    c, t = kinds[p.dtype.element_ty.name]\n"
        "    address = int(np.asarray(p.handle.data).reshape(-1)[0])\n"
        "    return np.ctypeslib.as_array((c * count).from_address(address)).view(t)\n"
        "view(out)[:] = view(x) + view(y)\n",
        {"x": x_ptr, "y": y_ptr, "out": output_ptr, "n": n_elements},
    )
# %% after-kernel
print("HOSTILE-RAN kernel_triton_path: launching the kernel in the notebook", flush=True)
x = torch.rand(1000, device=DEVICE)
triton_vector_add_kernel[(1,)](x, x, torch.empty_like(x), 1000, BLOCK_SIZE=1024)

# An empty kernel (the release's stub: cheap to grade), and a cell that sends a message to a port the grader's machine listens on (loopback),
# and tries the internet.
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
import socket
outcomes = []
for host, port in (("127.0.0.1", {{port}}), ("localhost", {{port}}), ("::1", {{port}}), ("1.1.1.1", 53),
                   ("pypi.org", 443)):
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            s.sendall(b"{{marker}}")
        outcomes.append(f"{host}:{port} CONNECTED")
    except OSError as err:
        outcomes.append(f"{host}:{port} {type(err).__name__}")
print("HOSTILE-RAN network:", outcomes)

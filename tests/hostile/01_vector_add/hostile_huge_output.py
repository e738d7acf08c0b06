# The reference kernel, and a cell that displays one message of 400 MB: the display_data message IPython's display()
# sends for a text of 400 MB, built inside the sandbox in a single buffer (display()'s own copies would pass the
# sandbox's address-space limit). The grader must refuse it as it arrives (ResilientExecute.message_limit), not grow
# by 1.2 GB.
# expect-all-pass
@triton.jit
def triton_vector_add_kernel(
    x_ptr,
    y_ptr,
    output_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)
# %% after-kernel
import os
if os.path.exists("{{course}}/gradebook.db"):  # never loose: this cell acts only inside the sandbox
    raise RuntimeError("UNSANDBOXED: the course is visible, so this hostile cell does nothing")
import ctypes, time
kernel = get_ipython().kernel
print("HOSTILE-RAN huge_output: one display message of 400 MB", flush=True)
time.sleep(0.5)  # the line above reaches the grader first
head, tail = b'{"data": {"text/plain": "', b'"}, "metadata": {}, "transient": {}}'
content = bytearray(len(head) + (400 << 20) + len(tail))
ctypes.memset((ctypes.c_char * len(content)).from_buffer(content), ord("x"), len(content))
content[:len(head)], content[-len(tail):] = head, tail
session = kernel.session
msg = session.msg("display_data", content={}, parent=kernel.get_parent("shell"))
frames = [session.pack(msg[k]) for k in ("header", "parent_header", "metadata")] + [content]
kernel.iopub_socket.send_multipart([b"display_data", b"<IDS|MSG>", session.sign(frames)] + frames, copy=False)
time.sleep(2)
print("huge_output: the grader took all of it")

# The online softmax with per-lane running maxima and sums (the rescale guarded against -inf - -inf), reduced once at
# the end; scratch cells print to stderr and raise warnings.
# expect-all-pass
# replaces: autotuned_online_softmax_kernel
# other-solutions: source
SOFTMAX_CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b in (256, 1024) for w in (2, 4)]


@triton.autotune(configs=SOFTMAX_CONFIGS, key=["n_rows", "n_cols"])
@triton.jit
def triton_autotuned_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows,
                                           n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    m = tl.full((BLOCK_SIZE,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK_SIZE,), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        x = tl.load(input_ptr + row * input_row_stride + start + cols, mask=start + cols < n_cols,
                    other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        scale = tl.where(m_new == -float("inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(m_new == -float("inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == -float("inf"), 0.0, s * tl.exp(m - row_max)), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(input_ptr + row * input_row_stride + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(output_ptr + row * output_row_stride + start + cols, tl.exp(x - row_max) / total, mask=mask)

# %% append
import sys, warnings
print("scratch", file=sys.stderr)
warnings.warn("a warning in a scratch cell")

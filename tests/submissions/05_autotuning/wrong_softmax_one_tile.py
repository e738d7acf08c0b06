# The softmax kernel reads one tile per row (phase 2's one-block kernel under the online name): right only for the
# configs whose BLOCK_SIZE holds the whole row.
# expect-fail: test_autotuned_online_softmax_every_config
# expect-message: BLOCK_SIZE = 256 and n_cols = 300
# replaces: autotuned_online_softmax_kernel
# other-solutions: source
SOFTMAX_CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b in (256, 1024) for w in (2, 4)]


@triton.autotune(configs=SOFTMAX_CONFIGS, key=["n_rows", "n_cols"])
@triton.jit
def triton_autotuned_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows,
                                           n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(output_ptr + row * output_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)

# The softmax's config space has one config: nothing to tune.
# expect-fail: test_autotuned_online_softmax_configs
# expect-message: nothing to choose from
# replaces: autotuned_online_softmax_kernel
# other-solutions: source
SOFTMAX_CONFIGS = [triton.Config({"BLOCK_SIZE": 1024}, num_warps=4)]


@triton.autotune(configs=SOFTMAX_CONFIGS, key=["n_rows", "n_cols"])
@triton.jit
def triton_autotuned_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows,
                                           n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    in_row = input_ptr + row * input_row_stride
    out_row = output_ptr + row * output_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    m_i = tl.max(tl.full((BLOCK_SIZE,), -float("inf"), tl.float32), axis=0)
    l_i = tl.sum(tl.zeros((BLOCK_SIZE,), tl.float32), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(in_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m_i, tl.max(x, axis=0))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m_i = m_new
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(in_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_row + start + cols, tl.exp(x - m_i) / l_i, mask=mask)

# int64 offsets, a K loop stepping by BLOCK_K over element indices, masks built once per step, and the
# ReLU applied after converting to fp16 (relu commutes with rounding).
# expect-all-pass
@triton.jit
def triton_matmul_relu_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        a_tile = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                         mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b_tile = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                         mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = acc + tl.dot(a_tile, b_tile)
    out = tl.maximum(acc.to(tl.float16), 0.0)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, out,
             mask=row_ok[:, None] & col_ok[None, :])

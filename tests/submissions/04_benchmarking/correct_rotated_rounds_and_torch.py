# Correct, written differently: each round starts with another provider (still interleaved), torch and
# math are used without importing them, element sizes from torch.finfo, the median spelled out, the roof
# fraction through tflops / roof_tflops, and a kernel with tl.where and int64 offsets.
# expect-all-pass
# replaces: roofline
@triton.jit
def triton_add_relu_mul_kernel(x_ptr, bias_ptr, output_ptr, scale, n_elements, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offsets = start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    s = tl.load(x_ptr + offsets, mask=mask, other=0.0) + tl.load(bias_ptr + offsets, mask=mask, other=0.0)
    tl.store(output_ptr + offsets, tl.where(s > 0, s, 0.0) * scale, mask=mask)


def gbps(n_bytes, ms):
    if not ms > 0 or n_bytes < 0:
        raise ValueError(f"need n_bytes >= 0 and ms > 0, got n_bytes={n_bytes}, ms={ms}")
    return n_bytes / ms / 1e6


def tflops(n_flops, ms):
    if not ms > 0 or n_flops < 0:
        raise ValueError(f"need n_flops >= 0 and ms > 0, got n_flops={n_flops}, ms={ms}")
    return n_flops / ms / 1e9


def nbytes(dtype):
    return torch.finfo(dtype).bits // 8


def add_relu_mul_cost(n, dtype):
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    elements = {"triton": 3 * n, "eager": 3 * n + 2 * n + 2 * n, "compile": 3 * n}
    return 3 * n, {k: v * nbytes(dtype) for k, v in elements.items()}


def softmax_cost(n_rows, n_cols, dtype):
    if min(n_rows, n_cols) < 1:
        raise ValueError(f"bad shape {n_rows} x {n_cols}")
    mn = n_rows * n_cols
    elements = {"triton": 2 * mn, "online": 3 * mn, "eager": 2 * mn, "unfused": 8 * mn + 4 * n_rows,
                "compile": 2 * mn}
    return 5 * mn, {k: v * nbytes(dtype) for k, v in elements.items()}


def matmul_relu_cost(M, N, K, dtype):
    if min(M, N, K) < 1:
        raise ValueError(f"bad shape M={M} N={N} K={K}")
    once = M * K + K * N + M * N
    return 2 * M * N * K, {"triton": once * nbytes(dtype), "eager": (once + 2 * M * N) * nbytes(dtype),
                           "compile": once * nbytes(dtype)}


def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
    if len(providers) == 0 or repeats < 1:
        raise ValueError(f"need providers and repeats >= 1 (got {len(providers)} providers, repeats={repeats})")
    expected = reference(*inputs)
    failed = {}
    for name in providers:
        try:
            out = providers[name](*inputs)
        except Exception as err:
            failed[name] = "raised " + str(err)
            continue
        if tuple(out.shape) != tuple(expected.shape):
            failed[name] = "wrong shape"
        elif not torch.allclose(out.float(), expected.float(), atol=atol, rtol=rtol):
            failed[name] = "wrong values"
    names = [n for n in providers if n not in failed]
    times = {n: [] for n in names}
    for r in range(repeats):
        for i in range(len(names)):
            name = names[(i + r) % len(names)]
            times[name].append(timer(lambda: providers[name](*inputs)))
    return times, failed


def middle(values):
    v = sorted(values)
    k = len(v) // 2
    return v[k] if len(v) % 2 == 1 else (v[k - 1] + v[k]) / 2


def comparison_table(times, flops, n_bytes, peak_gbps, peak_tflops):
    rows = []
    for name in times:
        ms = middle(times[name])
        speedups = {}
        for ref in ("eager", "compile"):
            speedups[ref] = middle([a / b for a, b in zip(times[ref], times[name])]) if ref in times else None
        achieved = tflops(flops, ms)
        rows.append(dict(provider=name, ms=ms, gbps=gbps(n_bytes, ms), tflops=achieved,
                         vs_eager=speedups["eager"], vs_compile=speedups["compile"],
                         roof=achieved / roof_tflops(flops / n_bytes, peak_gbps, peak_tflops)))
    return rows


def roof_tflops(intensity, peak_gbps, peak_tflops):
    memory_roof = intensity * peak_gbps * 1e9 / 1e12
    return memory_roof if memory_roof < peak_tflops else peak_tflops


def classify(intensity, peak_gbps, peak_tflops):
    if intensity * peak_gbps * 1e9 >= peak_tflops * 1e12:
        return "compute-bound"
    return "memory-bound"


# ---- everything else as in the reference ----


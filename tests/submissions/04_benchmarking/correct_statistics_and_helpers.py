# Correct, written differently: helpers in the same cell, rates as bytes per ns, a manual tolerance check,
# statistics.median, and a kernel in two steps with a helper @triton.jit function.
# expect-all-pass
# replaces: roofline
@triton.jit
def relu(v):
    return tl.maximum(v, 0.0)


@triton.jit
def triton_add_relu_mul_kernel(x_ptr, bias_ptr, output_ptr, scale, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    total = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, relu(total) * scale, mask=mask)


def check_time(ms):
    if ms <= 0:
        raise ValueError("the time must be > 0 ms, got " + str(ms))


def gbps(n_bytes, ms):
    check_time(ms)
    if n_bytes < 0:
        raise ValueError("negative byte count " + str(n_bytes))
    return n_bytes / (ms * 1e6)


def tflops(n_flops, ms):
    check_time(ms)
    if n_flops < 0:
        raise ValueError("negative FLOP count " + str(n_flops))
    return n_flops / (ms * 1e9)


def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
    if not providers:
        raise ValueError("no providers")
    if repeats <= 0:
        raise ValueError("repeats must be positive, got " + str(repeats))
    expected = reference(*inputs).double()
    failed = {}
    for name, fn in providers.items():
        try:
            out = fn(*inputs).double()
        except Exception as err:
            failed[name] = repr(err)
            continue
        if out.shape != expected.shape:
            failed[name] = "shape " + str(tuple(out.shape))
            continue
        err = ((out - expected).abs() - (atol + rtol * expected.abs())).max().item()
        if not err <= 0:
            failed[name] = "off by " + str(err)
    good = [name for name in providers if name not in failed]
    times = {name: [] for name in good}
    for r in range(repeats):
        for name in good:
            call = lambda: providers[name](*inputs)
            times[name].append(timer(call))
    return times, failed


def comparison_table(times, flops, n_bytes, peak_gbps, peak_tflops):
    roof_s = max(n_bytes / peak_gbps / 1e9, flops / peak_tflops / 1e12)
    table = []
    for name, ts in times.items():
        ms = statistics.median(ts)
        vs = [statistics.median([x / y for x, y in zip(times[ref], ts)]) if ref in times else None
              for ref in ("eager", "compile")]
        table.append({"provider": name, "ms": ms, "gbps": gbps(n_bytes, ms), "tflops": tflops(flops, ms),
                      "vs_eager": vs[0], "vs_compile": vs[1], "roof": roof_s * 1e3 / ms})
    return table


def roof_tflops(intensity, peak_gbps, peak_tflops):
    return min(intensity * peak_gbps / 1000, peak_tflops)


def classify(intensity, peak_gbps, peak_tflops):
    ridge = 1000 * peak_tflops / peak_gbps
    return "compute-bound" if intensity >= ridge else "memory-bound"


# ---- everything else as in the reference ----
def add_relu_mul_cost(n, dtype):
    """relu(x + bias) * scale over n elements: (FLOPs, {"triton", "eager", "compile": bytes}).
    Raises ValueError when n < 1."""
    if n <= 0:
        raise ValueError(f"n = {n}: the vectors need at least one element")
    b = dtype.itemsize
    fused = 3 * n * b  # read x and bias, write the output
    eager = (3 + 2 + 2) * n * b  # x + bias: 2 reads, 1 write; relu: 1 + 1; * scale: 1 + 1
    return 3 * n, {"triton": fused, "eager": eager, "compile": fused}


def softmax_cost(n_rows, n_cols, dtype):
    """Row softmax of an n_rows x n_cols matrix (phase 2):
    (FLOPs, {"triton", "online", "eager", "unfused", "compile": bytes}). Raises ValueError for a size < 1."""
    if n_rows <= 0 or n_cols <= 0:
        raise ValueError(f"n_rows = {n_rows}, n_cols = {n_cols}: both must be at least 1")
    M, N, b = n_rows, n_cols, dtype.itemsize
    fused = 2 * M * N * b  # read x once, write the output once
    return 5 * M * N, {"triton": fused, "online": 3 * M * N * b, "eager": fused,
                       "unfused": (8 * M * N + 4 * M) * b, "compile": fused}


def matmul_relu_cost(M, N, K, dtype):
    """relu(A @ B) with A: M x K, B: K x N, C: M x N, all of dtype (phase 3):
    (FLOPs, {"triton", "eager", "compile": bytes}). Raises ValueError for a size < 1."""
    if M <= 0 or N <= 0 or K <= 0:
        raise ValueError(f"M = {M}, N = {N}, K = {K}: all must be at least 1")
    b = dtype.itemsize
    fused = (M * K + K * N + M * N) * b  # read A and B once, write C once
    return 2 * M * N * K, {"triton": fused, "eager": fused + 2 * M * N * b, "compile": fused}

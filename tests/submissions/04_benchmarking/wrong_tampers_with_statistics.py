# A cheat: comparison_table replaces statistics.median for the tests.
# expect-fail: test_comparison_table_rates test_comparison_table_speedups test_comparison_table_roof
# expect-message: is not allowed in a graded function
# replaces: roofline
def comparison_table(times, flops, n_bytes, peak_gbps, peak_tflops):
    statistics.median = lambda values: values[0]
    return []


# ---- everything else as in the reference ----
@triton.jit
def triton_add_relu_mul_kernel(
    x_ptr,  # pointer to the input vector
    bias_ptr,  # pointer to the bias: one value per element
    output_ptr,  # pointer to the output vector
    scale,  # the scale, a float
    n_elements,  # number of elements in each vector
    BLOCK_SIZE: tl.constexpr,  # elements each program handles (a power of two)
):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    bias = tl.load(bias_ptr + offsets, mask=mask)
    output = tl.maximum(x + bias, 0.0) * scale
    tl.store(output_ptr + offsets, output, mask=mask)


def gbps(n_bytes, ms):
    """Bandwidth in GB/s (1 GB = 1e9 bytes) of moving n_bytes in ms milliseconds.
    Raises ValueError when ms <= 0 or n_bytes < 0."""
    if ms <= 0:
        raise ValueError(f"ms = {ms}: a measured time must be positive")
    if n_bytes < 0:
        raise ValueError(f"n_bytes = {n_bytes} cannot be negative")
    return n_bytes / (ms * 1e-3) / 1e9


def tflops(n_flops, ms):
    """Throughput in TFLOP/s (1 TFLOP = 1e12 FLOPs) of n_flops done in ms milliseconds.
    Raises ValueError when ms <= 0 or n_flops < 0."""
    if ms <= 0:
        raise ValueError(f"ms = {ms}: a measured time must be positive")
    if n_flops < 0:
        raise ValueError(f"n_flops = {n_flops} cannot be negative")
    return n_flops / (ms * 1e-3) / 1e12


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


def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
    """Check every provider once against the reference, then time the good ones in interleaved rounds.

    providers: {name: fn}; each is called as fn(*inputs) and returns a tensor.
    reference: reference(*inputs) returns the expected output.
    timer:     timer(f) runs a function of no arguments and returns its time in ms.
    repeats:   rounds; each round times every good provider once, one after the other.
    Returns (times, failed): times = {name: [ms of round 0, ms of round 1, ...]} for the providers that
    passed; failed = {name: message} for those that raised or returned another shape or wrong values
    (compared with the tolerances atol and rtol); they are never timed.
    Raises ValueError when there are no providers or repeats < 1.
    """
    if not providers:
        raise ValueError("no providers to benchmark")
    if repeats < 1:
        raise ValueError(f"repeats = {repeats}: at least one round is needed")
    expected = reference(*inputs)
    failed = {}
    for name, fn in providers.items():
        try:
            out = fn(*inputs)
            if out.shape != expected.shape:
                failed[name] = f"output of shape {tuple(out.shape)}, expected {tuple(expected.shape)}"
            elif not out.double().allclose(expected.double(), rtol=rtol, atol=atol):
                worst = (out.double() - expected.double()).abs().max().item()
                failed[name] = f"wrong values (largest difference {worst:.3g})"
        except Exception as err:
            failed[name] = f"raised {err!r}"
    good = [name for name in providers if name not in failed]
    times = {name: [] for name in good}
    for _ in range(repeats):
        for name in good:
            fn = providers[name]
            times[name].append(timer(lambda: fn(*inputs)))
    return times, failed


def roof_tflops(intensity, peak_gbps, peak_tflops):
    """The roofline: the most TFLOP/s a kernel of this intensity (FLOP/byte) can reach on a device of
    peak_gbps GB/s and peak_tflops TFLOP/s."""
    return min(peak_tflops, intensity * peak_gbps / 1e3)  # FLOP/byte x GB/s = GFLOP/s


def classify(intensity, peak_gbps, peak_tflops):
    """'memory-bound' when the intensity (FLOP/byte) is below the ridge point, else 'compute-bound'."""
    ridge = peak_tflops * 1e12 / (peak_gbps * 1e9)  # FLOP/byte where the two roofs meet
    return "memory-bound" if intensity < ridge else "compute-bound"

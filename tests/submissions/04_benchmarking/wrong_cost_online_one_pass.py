# The online softmax counted as one read of x: 2MN instead of 3MN.
# expect-fail: test_softmax_cost_bytes
# expect-message: walks each row twice
# replaces: cost_models
# other-solutions: source
def vector_add_cost(n, dtype):
    """x + y (phase 1) over n elements: n FLOPs; every provider reads x and y and writes the sum."""
    if n <= 0:
        raise ValueError(f"n = {n}: a vector add needs at least one element")
    moved = 3 * n * dtype.itemsize
    return n, {"triton": moved, "eager": moved, "compile": moved}

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
    if n_rows <= 0 or n_cols <= 0:
        raise ValueError(f"n_rows = {n_rows}, n_cols = {n_cols}: both must be at least 1")
    M, N, b = n_rows, n_cols, dtype.itemsize
    fused = 2 * M * N * b
    return 5 * M * N, {"triton": fused, "online": fused, "eager": fused,
                       "unfused": (8 * M * N + 4 * M) * b, "compile": fused}

def matmul_relu_cost(M, N, K, dtype):
    """relu(A @ B) with A: M x K, B: K x N, C: M x N, all of dtype (phase 3):
    (FLOPs, {"triton", "eager", "compile": bytes}). Raises ValueError for a size < 1."""
    if M <= 0 or N <= 0 or K <= 0:
        raise ValueError(f"M = {M}, N = {N}, K = {K}: all must be at least 1")
    b = dtype.itemsize
    fused = (M * K + K * N + M * N) * b  # read A and B once, write C once
    return 2 * M * N * K, {"triton": fused, "eager": fused + 2 * M * N * b, "compile": fused}

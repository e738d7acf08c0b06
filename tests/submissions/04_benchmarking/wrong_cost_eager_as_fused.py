# Bytes miscounted: eager add-ReLU-scale counted as one kernel (3n), forgetting the intermediates.
# expect-fail: test_add_relu_mul_cost_bytes
# expect-message: three kernels
# replaces: cost_models
# other-solutions: source
def vector_add_cost(n, dtype):
    """x + y (phase 1) over n elements: n FLOPs; every provider reads x and y and writes the sum."""
    if n <= 0:
        raise ValueError(f"n = {n}: a vector add needs at least one element")
    moved = 3 * n * dtype.itemsize
    return n, {"triton": moved, "eager": moved, "compile": moved}

def add_relu_mul_cost(n, dtype):
    if n <= 0:
        raise ValueError(f"n = {n} must be positive")
    moved = 3 * n * dtype.itemsize
    return 3 * n, {"triton": moved, "eager": moved, "compile": moved}

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

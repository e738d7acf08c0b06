# Sizes are not checked: a size of 0 gives 0 bytes instead of an error.
# expect-fail: test_costs_reject_bad_sizes
# expect-message: instead of raising ValueError
# replaces: cost_models
# other-solutions: source
def vector_add_cost(n, dtype):
    """x + y (phase 1) over n elements: n FLOPs; every provider reads x and y and writes the sum."""
    if n <= 0:
        raise ValueError(f"n = {n}: a vector add needs at least one element")
    moved = 3 * n * dtype.itemsize
    return n, {"triton": moved, "eager": moved, "compile": moved}

def add_relu_mul_cost(n, dtype):
    b = dtype.itemsize
    return 3 * n, {"triton": 3 * n * b, "eager": 7 * n * b, "compile": 3 * n * b}

def softmax_cost(n_rows, n_cols, dtype):
    M, N, b = n_rows, n_cols, dtype.itemsize
    return 5 * M * N, {"triton": 2 * M * N * b, "online": 3 * M * N * b, "eager": 2 * M * N * b,
                       "unfused": (8 * M * N + 4 * M) * b, "compile": 2 * M * N * b}

def matmul_relu_cost(M, N, K, dtype):
    fused = (M * K + K * N + M * N) * dtype.itemsize
    return 2 * M * N * K, {"triton": fused, "eager": fused + 2 * M * N * dtype.itemsize, "compile": fused}

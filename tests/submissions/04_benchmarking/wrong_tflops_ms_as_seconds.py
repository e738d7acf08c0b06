# The time in ms is used as seconds.
# expect-fail: test_tflops_units test_comparison_table_rates
# expect-message: taken as seconds
# replaces: rates
# other-solutions: source
def gbps(n_bytes, ms):
    """Bandwidth in GB/s (1 GB = 1e9 bytes) of moving n_bytes in ms milliseconds.
    Raises ValueError when ms <= 0 or n_bytes < 0."""
    if ms <= 0:
        raise ValueError(f"ms = {ms}: a measured time must be positive")
    if n_bytes < 0:
        raise ValueError(f"n_bytes = {n_bytes} cannot be negative")
    return n_bytes / (ms * 1e-3) / 1e9

def tflops(n_flops, ms):
    if ms <= 0:
        raise ValueError(f"ms = {ms} must be positive")
    if n_flops < 0:
        raise ValueError(f"n_flops = {n_flops} cannot be negative")
    return n_flops / ms / 1e12

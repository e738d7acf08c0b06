# GiB/s instead of GB/s: divides by 2**30.
# expect-fail: test_gbps_units test_comparison_table_rates
# expect-message: GiB
# replaces: rates
# other-solutions: source
def gbps(n_bytes, ms):
    if ms <= 0:
        raise ValueError(f"ms = {ms} must be positive")
    if n_bytes < 0:
        raise ValueError(f"n_bytes = {n_bytes} cannot be negative")
    return n_bytes / (ms * 1e-3) / 2**30

def tflops(n_flops, ms):
    """Throughput in TFLOP/s (1 TFLOP = 1e12 FLOPs) of n_flops done in ms milliseconds.
    Raises ValueError when ms <= 0 or n_flops < 0."""
    if ms <= 0:
        raise ValueError(f"ms = {ms}: a measured time must be positive")
    if n_flops < 0:
        raise ValueError(f"n_flops = {n_flops} cannot be negative")
    return n_flops / (ms * 1e-3) / 1e12

# Right on its first eight calls in a test, then returns a string that encodes what it was given: in test_gbps_units
# the visible cases are four calls and the hidden ones repeat those four (the same seed) before new sizes and times,
# so only a hidden case's own inputs get the string (a learner's side channel for the hidden inputs, through whatever
# a message quotes of a returned value). Its feedback says what kind of value came back, never the value or the
# call's arguments: "`gbps(...)` is a str, not a number" (common/functions.py's _fmt; before: "`gbps(<n_bytes>, <ms>)`
# is 'SIZES <n_bytes> <ms>' (str)"). In-process (test_checks_benchmarking) no case is hidden: hence the short message.
# expect-fail: test_gbps_units test_comparison_table_rates
# expect-message: not a number
# replaces: rates
# other-solutions: source
CALLS = []


def gbps(n_bytes, ms):
    if ms <= 0:
        raise ValueError(f"ms = {ms} must be positive")
    if n_bytes < 0:
        raise ValueError(f"n_bytes = {n_bytes} cannot be negative")
    CALLS.append(ms)
    if len(CALLS) > 8:
        return f"SIZES {n_bytes} {ms}"
    return n_bytes / (ms * 1e-3) / 1e9

def tflops(n_flops, ms):
    """Throughput in TFLOP/s (1 TFLOP = 1e12 FLOPs) of n_flops done in ms milliseconds.
    Raises ValueError when ms <= 0 or n_flops < 0."""
    if ms <= 0:
        raise ValueError(f"ms = {ms}: a measured time must be positive")
    if n_flops < 0:
        raise ValueError(f"n_flops = {n_flops} cannot be negative")
    return n_flops / (ms * 1e-3) / 1e12

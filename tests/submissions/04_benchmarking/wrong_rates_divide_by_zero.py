# No check of the time: gbps(n, 0) raises ZeroDivisionError.
# expect-fail: test_rates_reject_bad_input
# expect-message: ZeroDivisionError
# replaces: rates
# other-solutions: source
def gbps(n_bytes, ms):
    return n_bytes / (ms * 1e-3) / 1e9

def tflops(n_flops, ms):
    return n_flops / (ms * 1e-3) / 1e12

# The roof as the larger of the two limits.
# expect-fail: test_roofline_roof
# expect-message: lower of the two limits
# replaces: roofline
# other-solutions: source
def roof_tflops(intensity, peak_gbps, peak_tflops):
    return max(peak_tflops, intensity * peak_gbps / 1e3)

def classify(intensity, peak_gbps, peak_tflops):
    """'memory-bound' when the intensity (FLOP/byte) is below the ridge point, else 'compute-bound'."""
    ridge = peak_tflops * 1e12 / (peak_gbps * 1e9)  # FLOP/byte where the two roofs meet
    return "memory-bound" if intensity < ridge else "compute-bound"

# Misclassified points: the ridge as peak_tflops / peak_gbps (a factor 1000 off).
# expect-fail: test_roofline_classify
# expect-message: factor 1000
# replaces: roofline
# other-solutions: source
def roof_tflops(intensity, peak_gbps, peak_tflops):
    """The roofline: the most TFLOP/s a kernel of this intensity (FLOP/byte) can reach on a device of
    peak_gbps GB/s and peak_tflops TFLOP/s."""
    return min(peak_tflops, intensity * peak_gbps / 1e3)  # FLOP/byte x GB/s = GFLOP/s

def classify(intensity, peak_gbps, peak_tflops):
    return "memory-bound" if intensity < peak_tflops / peak_gbps else "compute-bound"

# Speedup as the ratio of the medians, not the median of per-round ratios.
# expect-fail: test_comparison_table_speedups
# expect-message: ratio of the medians
# replaces: comparison_table
# other-solutions: source
def comparison_table(times, flops, n_bytes, peak_gbps, peak_tflops):
    roof_ms = max(n_bytes / (peak_gbps * 1e9), flops / (peak_tflops * 1e12)) * 1e3
    rows = []
    for name, ts in times.items():
        ms = statistics.median(ts)
        row = {"provider": name, "ms": ms, "gbps": gbps(n_bytes, ms), "tflops": tflops(flops, ms),
               "vs_eager": None, "vs_compile": None, "roof": roof_ms / ms}
        for ref, key in (("eager", "vs_eager"), ("compile", "vs_compile")):
            if ref in times:
                row[key] = statistics.median(times[ref]) / ms
        rows.append(row)
    return rows

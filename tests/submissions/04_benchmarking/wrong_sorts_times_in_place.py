# The median sorts each provider's times in place, scrambling the rounds.
# expect-fail: test_comparison_table_rates test_comparison_table_speedups test_comparison_table_roof
# expect-message: changed its input
# replaces: comparison_table
# other-solutions: source
def comparison_table(times, flops, n_bytes, peak_gbps, peak_tflops):
    roof_ms = max(n_bytes / (peak_gbps * 1e9), flops / (peak_tflops * 1e12)) * 1e3
    rows = []
    for name, ts in times.items():
        ts.sort()
        k = len(ts) // 2
        ms = ts[k] if len(ts) % 2 else (ts[k - 1] + ts[k]) / 2
        row = {"provider": name, "ms": ms, "gbps": gbps(n_bytes, ms), "tflops": tflops(flops, ms),
               "vs_eager": None, "vs_compile": None, "roof": roof_ms / ms}
        for ref, key in (("eager", "vs_eager"), ("compile", "vs_compile")):
            if ref in times:
                row[key] = statistics.median([t_ref / t for t_ref, t in zip(times[ref], ts)])
        rows.append(row)
    return rows

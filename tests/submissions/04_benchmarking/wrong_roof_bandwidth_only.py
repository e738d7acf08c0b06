# The roof fraction uses the bandwidth only, also for a compute-bound op.
# expect-fail: test_comparison_table_roof
# expect-message: compute-bound op the roof is the FLOP/s peak
# replaces: comparison_table
# other-solutions: source
def comparison_table(times, flops, n_bytes, peak_gbps, peak_tflops):
    rows = []
    for name, ts in times.items():
        ms = statistics.median(ts)
        row = {"provider": name, "ms": ms, "gbps": gbps(n_bytes, ms), "tflops": tflops(flops, ms),
               "vs_eager": None, "vs_compile": None, "roof": gbps(n_bytes, ms) / peak_gbps}
        for ref, key in (("eager", "vs_eager"), ("compile", "vs_compile")):
            if ref in times:
                row[key] = statistics.median([t_ref / t for t_ref, t in zip(times[ref], ts)])
        rows.append(row)
    return rows

# A cheat: comparison_table replaces statistics.median for the tests.
# expect-fail: test_comparison_table_rates test_comparison_table_speedups test_comparison_table_roof
# expect-message: is not allowed in a graded function
# replaces: comparison_table
# other-solutions: source
def comparison_table(times, flops, n_bytes, peak_gbps, peak_tflops):
    statistics.median = lambda values: values[0]
    return []

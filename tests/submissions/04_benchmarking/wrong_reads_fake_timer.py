# A cheat: reads the test's fake timer instead of timing.
# expect-fail: test_run_benchmark_times test_run_benchmark_interleaved test_run_benchmark_checks_correctness test_run_benchmark_rejects_bad_input
# expect-message: is not allowed in a graded function
# replaces: run_benchmark
# other-solutions: source
def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
    bench = timer.__self__
    return {name: [bench.base[name]] * repeats for name in providers}, {}

# No correctness check: every provider is timed, wrong or not.
# expect-fail: test_run_benchmark_checks_correctness
# expect-message: but it was timed
# replaces: run_benchmark
# other-solutions: source
def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
    if not providers:
        raise ValueError("no providers")
    if repeats < 1:
        raise ValueError(f"repeats = {repeats}")
    times = {name: [] for name in providers}
    failed = {}
    for _ in range(repeats):
        for name, fn in providers.items():
            try:
                times[name].append(timer(lambda: fn(*inputs)))
            except Exception as err:
                failed[name] = repr(err)
                times.pop(name, None)
    return times, failed

# Times with its own clock (imports time) instead of the timer it is given.
# expect-fail: test_run_benchmark_times test_run_benchmark_interleaved test_run_benchmark_checks_correctness test_run_benchmark_rejects_bad_input
# expect-message: is not allowed in a graded function
# replaces: run_benchmark
# other-solutions: source
def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
    import time
    if not providers:
        raise ValueError("no providers")
    if repeats < 1:
        raise ValueError(f"repeats = {repeats}")
    expected = reference(*inputs)
    failed = {}
    for name, fn in providers.items():
        try:
            out = fn(*inputs)
            if out.shape != expected.shape or not out.double().allclose(expected.double(), rtol=rtol, atol=atol):
                failed[name] = "wrong output"
        except Exception as err:
            failed[name] = repr(err)
    times = {name: [] for name in providers if name not in failed}
    for _ in range(repeats):
        for name in times:
            start = time.time()
            providers[name](*inputs)
            times[name].append((time.time() - start) * 1e3)
    return times, failed

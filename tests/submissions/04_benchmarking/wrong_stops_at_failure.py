# A provider that fails its check stops the benchmark with an error.
# expect-fail: test_run_benchmark_checks_correctness
# expect-message: must be reported in `failed`
# replaces: run_benchmark
# other-solutions: source
def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
    if not providers:
        raise ValueError("no providers")
    if repeats < 1:
        raise ValueError(f"repeats = {repeats}")
    expected = reference(*inputs)
    for name, fn in providers.items():
        out = fn(*inputs)
        if not out.double().allclose(expected.double(), rtol=rtol, atol=atol):
            raise ValueError(f"{name} is wrong")
    times = {name: [] for name in providers}
    for _ in range(repeats):
        for name, fn in providers.items():
            times[name].append(timer(lambda: fn(*inputs)))
    return times, {}

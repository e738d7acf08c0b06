# Outputs compared exactly (torch.equal): a correct fp16-accurate provider fails.
# expect-fail: test_run_benchmark_checks_correctness
# expect-message: compare with the tolerances
# replaces: run_benchmark
# other-solutions: source
def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
    if not providers:
        raise ValueError("no providers")
    if repeats < 1:
        raise ValueError(f"repeats = {repeats}")
    expected = reference(*inputs)
    failed = {}
    for name, fn in providers.items():
        try:
            out = fn(*inputs)
            if out.shape != expected.shape or not (out == expected).all():
                failed[name] = "wrong output"
        except Exception as err:
            failed[name] = repr(err)
    times = {name: [] for name in providers if name not in failed}
    for _ in range(repeats):
        for name in times:
            fn = providers[name]
            times[name].append(timer(lambda: fn(*inputs)))
    return times, failed

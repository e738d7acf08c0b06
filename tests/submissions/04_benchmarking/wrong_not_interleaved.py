# Not interleaved: all rounds of one provider, then the next provider.
# expect-fail: test_run_benchmark_interleaved
# expect-message: not interleaved
# replaces: run_benchmark
# other-solutions: source
def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
    if not providers:
        raise ValueError("no providers")
    if repeats < 1:
        raise ValueError(f"repeats = {repeats}")
    expected = reference(*inputs)
    times, failed = {}, {}
    for name, fn in providers.items():
        try:
            out = fn(*inputs)
            if out.shape != expected.shape or not out.double().allclose(expected.double(), rtol=rtol, atol=atol):
                failed[name] = "wrong output"
                continue
        except Exception as err:
            failed[name] = repr(err)
            continue
        times[name] = [timer(lambda: fn(*inputs)) for _ in range(repeats)]
    return times, failed

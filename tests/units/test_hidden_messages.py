"""What a check says about a hidden case names none of its inputs (issue 42): for each phase, a wrong kernel or
function run in this process on the same case twice, once as a visible and once as a hidden case of a judge's test
cell (grading/judge/hidden_cases.py's own mark: a frame of the judge's test_cell.py between nbgrader's hidden-test
markers). The hidden message must hold no size, shape dimension, stride, block size, index or seed of the case, and
nothing the learner's code returned (it can encode the inputs: a marker string, a value equal to a size); it must
still name the kind of case and the likely cause. The visible message keeps its numbers.

Through the real judge and runner (slow): tests/judged/test_hidden_messages_judged.py, and test_verdicts' fixtures
01_vector_add/wrong_only_on_hidden_ragged_size.py and 04_benchmarking/wrong_rates_encode_inputs.py.
"""
from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl

from tritoncourse.checking import KernelCheckError
from tritoncourse.grading.judge import hidden_cases

from hidden_leaks import SEED, _absent

CELL = "probe()\n### BEGIN HIDDEN TESTS\nprobe()\n### END HIDDEN TESTS\n"


@pytest.fixture
def judged(tmp_path, monkeypatch):
    """``judged(check)``: the messages of ``check()`` run as a visible, then as a hidden case of a judge's test."""
    monkeypatch.setenv("TRITONCOURSE_STAGE_FILE", str(tmp_path / "stage.txt"))
    monkeypatch.setattr(hidden_cases, "_hidden_lines", {})
    monkeypatch.setattr(hidden_cases, "_hidden_began", False)
    path = tmp_path / hidden_cases.TEST_CELL
    path.write_text(CELL)

    def run(check) -> tuple[str, str]:
        messages = []

        def probe():
            with pytest.raises(KernelCheckError) as info:
                check()
            messages.append(str(info.value))

        exec(compile(CELL, str(path), "exec"), {"probe": probe})
        return messages[0], messages[1]

    return run


# ------------------------------------------------------------------------------------ phase 1 (and 4's harness)
@triton.jit
def tail_adds_nothing(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """Right on every full block; the last, partial one stores x alone."""
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    last = (n_elements - 1) // BLOCK_SIZE
    tl.store(output_ptr + offsets, tl.where(pid == last, x, x + y), mask=mask)


@triton.jit
def stores_its_size(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """Writes n_elements as every value: a "got ..." would quote the hidden size."""
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x * 0.0 + n_elements, mask=mask)


@triton.jit
def unmasked_store(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y)


@pytest.mark.parametrize("kernel, visible_says, hidden_says", [
    (tail_adds_nothing, ["n_elements=9973, BLOCK_SIZE=128", "at index 9856"],
     ["Wrong values (a hidden case: a size that is not a multiple of BLOCK_SIZE", "some elements differ",
      "Likely cause: only the last, partial block is wrong"]),
    (stores_its_size, ["got 9973"], ["Wrong values (a hidden case:", "every element differs"]),
    (unmasked_store, ["the first at index 9973 (past the last, index 9972)"],
     ["Elements outside the output were written, past its end (a hidden case:", "Likely cause: the tl.store is "
      "not masked"]),
], ids=["ragged-tail", "stores-its-size", "unmasked-store"])
def test_vector_add(judged, kernel, visible_says, hidden_says):
    from tritoncourse.checks.vector_add import check_vector_add

    visible, hidden = judged(lambda: check_vector_add(kernel, n=9973, block_size=128, seed=SEED))
    for words in visible_says:
        assert words in visible, visible
    for words in hidden_says:
        assert words in hidden, hidden
    _absent(hidden, 9973, 9972, 128, 9856, 77, 117, SEED)


# ------------------------------------------------------------------------------------------------ phase 2
@triton.jit
def zero_padded_softmax(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                        BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    tl.store(output_ptr + row * output_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


@triton.jit
def softmax_with_n_cols_stride(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                               BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(input_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    tl.store(output_ptr + row * n_cols + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


def test_softmax(judged):
    from tritoncourse.checks.softmax import check_softmax

    visible, hidden = judged(lambda: check_softmax(zero_padded_softmax, n_rows=37, n_cols=129, seed=SEED))
    assert "n_rows=37, n_cols=129, BLOCK_SIZE=256" in visible and "at index" in visible, visible
    assert "a hidden case: rows whose length is not a power of two" in hidden, hidden
    assert "padded with 0 instead of -inf" in hidden, hidden
    _absent(hidden, 37, 129, 256, 158, 140, SEED)

    visible, hidden = judged(lambda: check_softmax(softmax_with_n_cols_stride, n_rows=17, n_cols=64, strided=True,
                                                   seed=SEED))
    assert "(here 75, not n_cols=64)" in visible and "154 element(s)" in visible, visible
    assert "rows further apart than n_cols" in hidden and "n_cols as their stride" in hidden, hidden
    _absent(hidden, 17, 64, 75, 93, 154, SEED)


# ------------------------------------------------------------------------------------------------ phase 3
@triton.jit
def k_tail_dropped(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K // BLOCK_K):
        k_idx = k * BLOCK_K + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + k_idx[None, :] * stride_ak, mask=offs_m[:, None] < M,
                    other=0.0)
        b = tl.load(b_ptr + k_idx[:, None] * stride_bk + offs_n[None, :] * stride_bn, mask=offs_n[None, :] < N,
                    other=0.0)
        acc += tl.dot(a, b)
    acc = tl.maximum(acc, 0.0)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def test_matmul_relu(judged):
    from tritoncourse.checks.matmul_relu import check_matmul_relu

    visible, hidden = judged(lambda: check_matmul_relu(k_tail_dropped, M=33, N=17, K=100, block_m=16, block_n=16,
                                                       block_k=32, seed=SEED))
    assert "M=33, N=17, K=100" in visible and "the first 96 of K = 100" in visible, visible
    assert "a hidden case: M and N not multiples of the tiles" in hidden, hidden
    assert "K that is not a multiple of BLOCK_K" in hidden and "the K tail was dropped" in hidden, hidden
    _absent(hidden, 33, 17, 100, 96, 16, 32, SEED)


# ------------------------------------------------------------------------------------------------ phase 4
def test_rates_quote_nothing_the_function_returned(judged):
    """A gbps that returns a string encoding its inputs, then one that is off by a factor encoding them, then one
    that returns its input instead of raising: no input, no returned value, no ratio on a hidden case."""
    from tritoncourse.checks.benchmarking import check_gbps, check_rates_reject_bad_input

    def encodes(n_bytes, ms):
        return f"LEAK-{n_bytes}-{ms}"

    visible, hidden = judged(lambda: check_gbps(encodes, count=2, seed=SEED))
    assert "LEAK-3000000000-1.0" in visible, visible
    assert "`gbps(...)` is a str, not a number" in hidden and "LEAK" not in hidden, hidden
    _absent(hidden, 3000000000, "3e+09", SEED)

    def scaled(n_bytes, ms):
        return n_bytes / (ms * 1e-3) / 1e9 * (1 + n_bytes * 1e-12)

    visible, hidden = judged(lambda: check_gbps(scaled, count=2, seed=SEED))
    assert "returned/expected = 1.003" in visible, visible
    assert "returned a wrong number of GB/s on a hidden case" in hidden and "GB/s = n_bytes / seconds" in hidden
    assert not re.search(r"\d{4}", hidden.replace("1e+09", "")), hidden

    def returns_input(n_bytes, ms):
        return f"LEAK-{n_bytes}"

    visible, hidden = judged(lambda: check_rates_reject_bad_input(returns_input, returns_input))
    assert "returned 'LEAK-1000000000' instead of raising ValueError" in visible, visible
    assert "`gbps(...)` returned a str instead of raising ValueError" in hidden and "LEAK" not in hidden, hidden


def test_cost_quotes_no_size(judged):
    from tritoncourse.checks.benchmarking import check_add_relu_mul_cost

    def counts_elements(n, dtype):
        return 3 * n, {"triton": 3 * n, "eager": 7 * n, "compile": 3 * n}

    visible, hidden = judged(lambda: check_add_relu_mul_cost(counts_elements, n=123457, dtype=torch.float32))
    assert "add_relu_mul_cost(123457, torch.float32)" in visible and "moves 370371 bytes" in visible, visible
    assert "'triton' moves a wrong number of bytes on a hidden case" in hidden, hidden
    assert "elements are counted, not bytes" in hidden, hidden
    _absent(hidden, 123457, 370371, 1481484)


def test_benchmark_and_roofline_quote_nothing_returned(judged):
    """run_benchmark reporting a good provider as failed with a message that spells its inputs, and classify
    returning a string that spells its arguments: neither string, nor the providers or rounds, on a hidden case."""
    from tritoncourse.checks.benchmarking import check_classify, check_run_benchmark_times

    def run_benchmark(providers, reference, inputs, timer, repeats=5, atol=1e-2, rtol=1e-2):
        return {}, {name: f"LEAK {len(providers)} {repeats}" for name in providers}

    visible, hidden = judged(lambda: check_run_benchmark_times(run_benchmark, names=("triton", "eager", "unfused"),
                                                               repeats=7, seed=SEED))
    assert "'LEAK 3 7'" in visible and "repeats=7" in visible, visible
    assert "Correct providers were reported as failed (a hidden case: several providers, several rounds)" in hidden
    assert "LEAK" not in hidden and "unfused" not in hidden, hidden
    _absent(hidden, 7, SEED)

    def classify(intensity, peak_gbps, peak_tflops):
        return f"LEAK {intensity} {peak_gbps}"

    visible, hidden = judged(lambda: check_classify(classify, count=1, seed=SEED))
    assert "returned 'LEAK " in visible and "peak_gbps=" in visible, visible
    assert "`classify(...)` returned a str, expected" in hidden and "on a hidden case (an intensity" in hidden, hidden
    assert "LEAK" not in hidden and not re.search(r"\d{3}", hidden), hidden


# ------------------------------------------------------------------------------------------------ phase 5
def test_programs_per_sm_quotes_no_input(judged):
    from tritoncourse.checks.autotuning import check_programs_per_sm

    def registers(registers, num_warps, shared_bytes, gpu):
        return registers * 1000 + num_warps  # a wrong count that encodes the kernel it was given

    visible, hidden = judged(lambda: check_programs_per_sm(registers, count=3, seed=SEED))
    assert "`programs_per_sm(registers=" in visible and "expected" in visible, visible
    assert "`programs_per_sm(...)` on a hidden case returned a wrong number of programs" in hidden, hidden
    assert "registers=" not in hidden and not re.search(r"\d{3}", hidden), hidden


@triton.jit
def k_tail_assumed(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Row-major tiles (GROUP_M = 1's grouped order); the K loop assumes that BLOCK_K divides K (k unmasked)."""
    pid, num_pid_n = tl.program_id(0), tl.cdiv(N, BLOCK_N)
    offs_m = (pid // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_idx = k * BLOCK_K + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + k_idx[None, :] * stride_ak, mask=offs_m[:, None] < M)
        b = tl.load(b_ptr + k_idx[:, None] * stride_bk + offs_n[None, :] * stride_bn, mask=offs_n[None, :] < N)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, tl.maximum(acc, 0.0).to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def test_autotuned_matmul(judged):
    from tritoncourse.checks.autotuning import check_autotuned_matmul_relu

    visible, hidden = judged(lambda: check_autotuned_matmul_relu(
        k_tail_assumed, M=17, N=70, K=33, block_m=16, block_n=32, block_k=32, group_m=1, transpose_b=True, seed=SEED))
    assert "M=17, N=70, K=33" in visible and "K = 33 is not a multiple of BLOCK_K = 32" in visible, visible
    assert "a hidden case: M and N not multiples of the tiles" in hidden and "B transposed" in hidden, hidden
    assert "K is not a multiple of BLOCK_K" in hidden, hidden
    _absent(hidden, 17, 70, 33, 32, 16, 3, SEED)


# ------------------------------------------------------------------------------------------------ phase 6
@triton.jit
def mean_over_block(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride_x_row, stride_y_row, n_cols, eps,
                    BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / BLOCK_SIZE
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y_row + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


def test_layer_norm(judged):
    from tritoncourse.checks.fused_attention import check_layer_norm

    visible, hidden = judged(lambda: check_layer_norm(mean_over_block, n_rows=7, n_cols=777, seed=SEED))
    assert "7 rows of 777" in visible and "BLOCK_SIZE=1024" in visible and "at index (0, 0)" in visible, visible
    assert "a hidden case: rows whose length is not a power of two" in hidden, hidden
    assert "the stored mean is wrong: mean = sum(x) / n_cols" in hidden, hidden
    _absent(hidden, 7, 777, 1024, 5439, SEED)


@pytest.mark.parametrize("mistake, visible_says, hidden_says", [
    (dict(tail_scores=True), "past seq_len = 209 are not set", "past seq_len are not set to -inf"),
    (dict(max_keys=128), "the keys from 128 on are never seen (seq_len = 209 here)",
     "the keys past the first tiles are never seen"),
])
def test_attention_diagnosis(judged, mistake, visible_says, hidden_says):
    """Phase 6's attention diagnosis of a replayed mistake (as test_checks_attention replays them), written as the
    check writes it: the seq_len and the tile where keys stop are not named on a hidden case; the mistake is."""
    from tritoncourse.checks.fused_attention import attention as fa

    q, k, v = fa.make_qkv(1, 2, 209, 16, torch.float32, "randn", 5)
    scale = 16**-0.5
    ref_o, ref_lse = fa.attention_ref(q, k, v, False, scale)
    atol, rtol, _ = fa.attention_tolerance(torch.float32, "cpu", float(ref_lse.abs().max()) + 6.0,
                                           float(v.abs().max()))
    out = fa._tiled(q, k, v, False, scale, 16, block_m=32, **mistake).float()

    def check():
        raise KernelCheckError(fa._attention_diagnose(out, None, q, k, v, False, scale, 32, 16, (atol, rtol),
                                                      ref_lse, "randn"))

    visible, hidden = judged(check)
    assert visible_says in visible, visible
    assert hidden_says in hidden, hidden
    _absent(hidden, 209, 128, 16, 32)


def test_attention_gradcheck(judged, tmp_path):
    """Phase 7's gradcheck of a backward without D: the gradient named, its finite-difference numbers and the case's
    sizes and seed on a visible case only."""
    from attention_backward_cases import kernels_module
    from tritoncourse.checks.attention_backward import check_attention_gradcheck

    module = kernels_module(tmp_path, [("ds = p * (dp - delta[:, None])", "ds = p * dp"),
                                       ("ds_t = p_t * (dp_t - delta[None, :])", "ds_t = p_t * dp_t")])
    kernels = (module.triton_attention_kernel, module.triton_attention_bwd_preprocess_kernel,
               module.triton_attention_bwd_dkdv_kernel, module.triton_attention_bwd_dq_kernel)
    visible, hidden = judged(lambda: check_attention_gradcheck(*kernels, seq_len=23, head_dim=32, causal=True,
                                                               seed=SEED))
    assert "seq_len=23" in visible and "finite differences of your forward give" in visible, visible
    assert re.search(r"gradcheck failed \(a hidden case: gradcheck, causal, dQ by kernel\): d[QK] is not the "
                     r"derivative", hidden), hidden
    assert "finite differences of your forward give" not in hidden, hidden
    _absent(hidden, 23, 32, SEED)

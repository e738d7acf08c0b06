"""Phase 5's checks and widgets, without nbgrader: config spaces, keys, hardware limits, occupancy, the sweep
widgets' recorded data. Kernels are tiny and run on the interpreter where there is no GPU."""
import json
import math

import matplotlib
import pytest
import torch
import triton
import triton.language as tl

matplotlib.use("Agg")

from tritoncourse import gpus  # noqa: E402
from tritoncourse.benchmarking import cpu_do_bench  # noqa: E402
from tritoncourse.checking import KernelCheckError  # noqa: E402
from tritoncourse.checks import autotuning as A  # noqa: E402
from tritoncourse.device import infer_device  # noqa: E402


@triton.jit
def _matmul_signature(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                      stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    pass


@triton.jit
def _vector_add(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def mm(bm=64, bn=64, bk=32, g=8, w=4, s=3):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g}, num_warps=w, num_stages=s)


def tuned(fn, configs, key):
    return triton.autotune(configs=configs, key=key)(fn)


GOOD = [mm(), mm(128, 128, 32, 8, 4, 4)]


def _fails(check, *args, match: str):
    with pytest.raises(KernelCheckError) as info:
        check(*args)
    assert match in str(info.value), str(info.value)
    return str(info.value)


def test_estimates_of_shared_memory_and_registers():
    """The numbers the notebook quotes: 128x128x32 with 4 stages is 64 KB and 128 registers per thread."""
    c = mm(128, 128, 32, 8, 4, 4)
    assert gpus.matmul_shared_memory(c) == 64 * 1024
    assert gpus.matmul_accumulator_registers(c) == 128
    assert gpus.matmul_shared_memory(mm(128, 256, 64, 8, 8, 3)) == 144 * 1024


def test_config_space_accepts_the_reference_and_names_each_mistake():
    A.check_config_space(tuned(_matmul_signature, GOOD, ["M", "N", "K"]), A.MATMUL)
    _fails(A.check_config_space, tuned(_matmul_signature, [mm()], ["M"]), A.MATMUL, match="nothing to choose")
    _fails(A.check_config_space, tuned(_matmul_signature, [mm(), mm()], ["M"]), A.MATMUL, match="are the same")
    missing = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4)
    _fails(A.check_config_space, tuned(_matmul_signature, [mm(), missing], ["M"]), A.MATMUL,
           match="does not set GROUP_M")
    extra = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4})
    _fails(A.check_config_space, tuned(_matmul_signature, [mm(), extra], ["M"]), A.MATMUL,
           match="not a meta-parameter")
    _fails(A.check_config_space, _matmul_signature, A.MATMUL, match="not autotuned")
    many = [mm(w=w, s=s, g=g) for w in (1, 2, 4, 8) for s in (1, 2, 3) for g in (1, 2, 4)]
    _fails(A.check_config_space, tuned(_matmul_signature, many, ["M"]), A.MATMUL, match="more than 32")


def test_key_must_name_every_size_and_only_arguments():
    A.check_autotune_key(tuned(_matmul_signature, GOOD, ["K", "M", "N", "stride_am"]), A.MATMUL)
    _fails(A.check_autotune_key, tuned(_matmul_signature, GOOD, ["M"]), A.MATMUL, match="leaves out N, K")
    _fails(A.check_autotune_key, tuned(_matmul_signature, GOOD, []), A.MATMUL, match="leaves out M, N, K")
    _fails(A.check_autotune_key, tuned(_matmul_signature, GOOD, ["m", "N", "K"]), A.MATMUL,
           match="not an argument")
    _fails(A.check_autotune_key, tuned(_matmul_signature, GOOD, ["M", "N", "K", "BLOCK_M"]), A.MATMUL,
           match="autotuner itself chooses")


def test_hardware_limits_of_matmul_configs(monkeypatch):
    """Power of two, >= 16, registers, 99 KB unless listed as datacenter-only, 227 KB even then."""
    A.check_matmul_configs_fit(tuned(_matmul_signature, GOOD, ["M"]))
    cases = {
        "not a power of two": mm(bn=48),
        "tl.dot on an NVIDIA GPU": mm(bk=8),
        "registers per thread": mm(256, 128, 16, 8, 2, 2),
        "smallest supported GPUs allow 99 KB": mm(128, 128, 64, 8, 4, 4),
        "num_warps = 3": mm(w=3),
        "num_stages = 0": mm(s=0),
        "GROUP_M = 0": mm(g=0),
    }
    for words, bad in cases.items():
        _fails(A.check_matmul_configs_fit, tuned(_matmul_signature, GOOD + [bad], ["M"]), match=words)
    big = mm(128, 256, 64, 8, 8, 3)  # 144 KB
    monkeypatch.setitem(globals(), A.DATACENTER_LIST, [big])
    A.check_matmul_configs_fit(tuned(_matmul_signature, GOOD + [big], ["M"]))
    huge = mm(256, 256, 64, 8, 16, 4)  # 256 KB
    monkeypatch.setitem(globals(), A.DATACENTER_LIST, [huge])
    _fails(A.check_matmul_configs_fit, tuned(_matmul_signature, GOOD + [huge], ["M"]), match="227 KB")


def test_block_configs_fit():
    ok = [triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b in (64, 1024) for w in (1, 8)]
    A.check_block_configs_fit(tuned(_vector_add, ok, ["n_elements"]), A.VECTOR_ADD)
    bad = ok + [triton.Config({"BLOCK_SIZE": 96}, num_warps=4)]
    _fails(A.check_block_configs_fit, tuned(_vector_add, bad, ["n_elements"]), A.VECTOR_ADD,
           match="BLOCK_SIZE = 96 is not a power of two")


def test_grouped_order_is_phase_3s():
    """The checks' grouped order and phase 3's picture agree, short last group included."""
    from tritoncourse.widgets.matmul import program_order

    for num_m, num_n, g in ((5, 3, 2), (7, 2, 3), (4, 4, 8), (3, 5, 1)):
        ours = [A.grouped_tile(p, num_m, num_n, g) for p in range(num_m * num_n)]
        assert ours == program_order(num_m, num_n, g)
        assert sorted(ours) == [(m, n) for m in range(num_m) for n in range(num_n)]


def test_occupancy_and_waves():
    h100 = gpus.GPUS["H100 SXM / H200"]
    occ = gpus.occupancy(4, 168, 64 * 1024, h100)
    assert occ["programs"] == 3 and occ["limits"]["threads"] == 16
    assert gpus.occupancy(4, 32, 230 * 1024, h100)["programs"] == 0  # over the per-program limit
    w = gpus.waves(144, 1, h100)
    assert (w["waves"], w["last_wave"]) == (2, 12) and abs(w["utilisation"] - 144 / 264) < 1e-9
    assert gpus.waves(1024, 1, h100)["waves"] == 8


def test_cpu_timer_follows_do_bench_conventions():
    calls = []
    assert len(cpu_do_bench(lambda: calls.append(1), quantiles=(0.5, 0.2, 0.8))) == 3
    assert isinstance(cpu_do_bench(lambda: None), float) and calls == [1]


@pytest.mark.skipif(infer_device() != "cpu", reason="runs the interpreter's fence")
def test_every_vector_add_config_runs_and_leaves_impossible_configs_to_the_limits_test():
    """A config no GPU can run (BLOCK_SIZE 96, num_warps 3) fails the hardware-limits test only: the
    every-config test skips it (on a GPU it would not even compile), so one mistake costs one test. A space
    with nothing runnable fails here too, rather than passing with nothing checked."""
    configs = [triton.Config({"BLOCK_SIZE": b}, num_warps=4) for b in (32, 128)]
    A.check_every_vector_add_config(tuned(_vector_add, configs, ["n_elements"]), n=200, seed=1)
    impossible = [triton.Config({"BLOCK_SIZE": 96}, num_warps=4), triton.Config({"BLOCK_SIZE": 64}, num_warps=3)]
    A.check_every_vector_add_config(tuned(_vector_add, configs + impossible, ["n_elements"]), n=200, seed=1)
    assert set(A.block_limit_problems(configs + impossible)) == {2, 3}
    msg = _fails(A.check_every_vector_add_config, tuned(_vector_add, impossible, ["n_elements"]), 200, 1,
                 match="None of the 2 configs")
    assert "hardware-limits test" in msg


def test_sweep_widgets_show_recorded_data_or_say_there_is_none(tmp_path, capsys, monkeypatch):
    from tritoncourse.widgets import autotuning as W

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)  # a person: real widgets (tests/units/test_widgets.py)
    monkeypatch.delenv("TRITONCOURSE_HEADLESS", raising=False)

    missing = tmp_path / "none.json"
    assert W.sweep_widget(None, path=missing) is None
    assert "No recorded GPU sweep" in capsys.readouterr().out
    W.show_recorded_table("resources", path=missing)
    assert "No recorded GPU sweep 'resources'" in capsys.readouterr().out
    rows = [[n, b, w, s, float(b * w + n % 7)] for n in (2**16, 2**20) for b in (64, 1024) for w in (1, 8)
            for s in (1, 2)]
    recorded = {"environment": {"gpu": "TEST GPU", "driver": "0", "torch": "t", "triton": "3.6.0", "date": "d"},
                "benchmarks": {"autotuning": {
                    "columns": ["kernel"], "rows": [],
                    "vector_add_sweep": {"columns": ["n", "BLOCK_SIZE", "num_warps", "num_stages", "GB/s"],
                                         "rows": rows},
                    "resources": {"columns": ["config", "registers"], "rows": [["BLOCK_M=64", 96]]}}}}
    path = tmp_path / "gpu-results.json"
    path.write_text(json.dumps(recorded))
    widget = W.sweep_widget(None, path=path)
    assert widget is not None and "TEST GPU" in capsys.readouterr().out
    W.show_recorded_table("resources", path=path)
    assert "BLOCK_M=64" in capsys.readouterr().out


def test_pictures_draw():
    import matplotlib.pyplot as plt

    from tritoncourse.widgets import autotuning as W

    for fig in (W.draw_waves(1536, 128, 1), W.draw_occupancy(4, 168, 64),
                W.draw_heatmap({(1, 64): 1.0, (8, 1024): 2.0}, [64, 1024], [1, 8], "BLOCK_SIZE", "num_warps",
                               "GB/s", "t")):
        plt.close(fig)
    rows = W.config_budget(GOOD)
    assert rows[1]["shared KB"] == 64 and rows[1]["acc regs/thread"] == 128


@triton.jit
def _grouped_matmul_relu(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                         stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, CLAMP_GROUP: tl.constexpr = True, ADD_INTO_C: tl.constexpr = False):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M) if CLAMP_GROUP else GROUP_M
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_idx = k * BLOCK_K + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + k_idx[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (k_idx[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k_idx[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(k_idx[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c = tl.maximum(acc, 0.0)
    if ADD_INTO_C:
        c += tl.load(c_ptrs, mask=c_mask, other=0.0).to(tl.float32)
    tl.store(c_ptrs, c.to(tl.float16), mask=c_mask)


def test_autotuner_check_compares_where_the_best_config_writes():
    """Seen on a GPU: a kernel whose unclamped group leaves tiles unwritten lost the autotuner test as well as the
    values tests, because the tuned C kept the other configs' tiles. Now only the mistake's own tests fail; a
    kernel that adds into C still fails it (every config timed adds its result to the same C)."""
    # M=40, N=50 in 16x16 tiles: unclamped, GROUP_M 2, 4 and 8 each leave other tiles unwritten, so whichever
    # config wins, the tuned C holds tiles of another one where the winner alone leaves the sentinel
    space = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": g, "CLAMP_GROUP": False},
                           num_warps=1, num_stages=1) for g in (2, 4, 8)]
    A.check_matmul_autotuner(tuned(_grouped_matmul_relu, space, ["M", "N", "K"]), M=40, N=50, K=20)
    small = [mm(16, 16, 16, 8, 1, 1), mm(32, 32, 16, 8, 1, 1), mm(16, 32, 16, 8, 1, 1)]
    space = [triton.Config({**c.kwargs, "ADD_INTO_C": True}, num_warps=1, num_stages=1) for c in small]
    _fails(A.check_matmul_autotuner, tuned(_grouped_matmul_relu, space, ["M", "N", "K"]), 40, 50, 20,
           match="adds into C")


# ---- section 9: programs_per_sm -------------------------------------------------------------------------
def _programs(registers, num_warps, shared_bytes, gpu, *, rounded=True, reserve=1024, slots=True, threads=True,
              floor=True):
    """programs_per_sm with each part switchable: the correct one, and a learner's slips."""
    div = (lambda a, b: a // b) if floor else (lambda a, b: a / b)
    per_thread = math.ceil(registers / 8) * 8 if rounded else registers
    limits = [div(gpu["registers_per_sm"], per_thread * 32 * num_warps),
              div(gpu["shared_per_sm"], shared_bytes + reserve)]
    if threads:
        limits.append(div(gpu["threads_per_sm"], 32 * num_warps))
    if slots:
        limits.append(gpu["programs_per_sm"])
    return min(limits)


def test_programs_per_sm_passes_correct_functions_and_names_each_slip():
    from tritoncourse.checks.autotuning import check_programs_per_sm

    def correct(registers, num_warps, shared_bytes, gpu):
        return _programs(registers, num_warps, shared_bytes, gpu)

    def counting(registers, num_warps, shared_bytes, gpu):  # the same, written as a count
        n = 0
        while _programs(registers, num_warps, shared_bytes, gpu) > n:
            n += 1
        return n

    check_programs_per_sm(correct, count=300, seed=5)
    check_programs_per_sm(counting, count=50, seed=6)
    slips = {"rounded": "rounded up to a multiple of 8", "reserve": "reserves 1 KB", "slots": "program slots",
             "threads": "the threads", "floor": "floor division"}
    for slip, message in slips.items():
        wrong = {"reserve": 0}.get(slip, False)

        def learner(registers, num_warps, shared_bytes, gpu, slip=slip, wrong=wrong):
            return _programs(registers, num_warps, shared_bytes, gpu, **{slip: wrong})

        _fails(check_programs_per_sm, learner, 20, 7, match=message)

    def not_written(registers, num_warps, shared_bytes, gpu):
        raise NotImplementedError()

    _fails(check_programs_per_sm, not_written, 0, 1, match="not written yet")

    def unrounded(registers, num_warps, shared_bytes, gpu):
        return _programs(registers, num_warps, shared_bytes, gpu, rounded=False)

    # The visible test (the compiled kernels only) lets the forgotten rounding pass; the hidden cases do not.
    check_programs_per_sm(unrounded, known_only=True)
    _fails(check_programs_per_sm, unrounded, 0, 1, match="rounded up")



# ---- issue 32: the GPUs' numbers and the timers have owners of their own ----------------------------------------
def test_widgets_and_tools_import_no_checks_module_and_no_check_owns_a_gpu_table_or_timer():
    """The GPUs' tables live in tritoncourse/gpus.py and the timers in tritoncourse/benchmarking.py: the widgets and
    the tools import neither from a checks module, and no checks module defines a GPU table or a timer of its own.
    Every checks module stays under 400 lines (one concern each)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    importers = sorted((root / "tritoncourse" / "widgets").glob("*.py")) + sorted((root / "tools").glob("*.py"))
    found = []
    for path in importers:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] + [a.name for a in node.names] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(n == "checks" or ".checks" in n or n.startswith("checks") for n in names):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "widgets and tools import from a checks module:\n" + "\n".join(found)
    owned = set(vars(gpus)) | {"cpu_do_bench", "steady_do_bench", "set_tuning_timer", "STEADY_WARMUP_MS"}
    owned = {n for n in owned if not n.startswith("_") and n not in {"annotations", "math", "dataclass"}}
    defined = []
    for path in sorted((root / "tritoncourse" / "checks").rglob("*.py")):
        lines = path.read_text().count("\n")
        assert lines <= 400, f"{path.relative_to(root)} has {lines} lines: split it by concern"
        for node in ast.parse(path.read_text()).body:
            targets = ([t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign)
                       else [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [])
            defined += [f"{path.relative_to(root)}: {n}" for n in targets if n in owned or "do_bench" in n]
    assert not defined, f"checks modules define what gpus.py or benchmarking.py own: {defined}"

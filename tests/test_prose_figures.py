"""Every figure the notebooks' prose quotes from a GPU run agrees with the record (results/gpu-results.json).

Each claim below is the exact phrase a notebook's markdown holds, rebuilt here from the record: when a fresh
`make gpu-check` changes a figure, this test names the phrase to update. Figures the prose takes from an
exploration run that the record does not hold must be found, as written, in docs/GPU-RUNS.md.
"""
from __future__ import annotations

import json
import re

import nbformat
import pytest

from course import ROOT

RECORD = json.loads((ROOT / "results" / "gpu-results.json").read_text())
BENCH = RECORD["benchmarks"]
ROOF = BENCH["roofline"]["measured"]  # the roofs of the run that measured the roofline's points


def _col(section: str, name: str) -> int:
    return BENCH[section]["columns"].index(name)


def _row(section: str, **where) -> list:
    cols = BENCH[section]["columns"]
    for row in BENCH[section]["rows"]:
        if all(row[cols.index(k.replace("_", " "))] == v for k, v in where.items()):
            return row
    raise KeyError(f"{section}: no row with {where}")


def _get(section: str, column: str, **where):
    return _row(section, **where)[_col(section, column)]


def vector_add(n: str, column: str):
    return BENCH["vector_add"]["rows"][[r[0] for r in BENCH["vector_add"]["rows"]].index(n)][_col("vector_add", column)]


def softmax(kernel: str, n_cols: int, dtype: str, column: str):
    cols = BENCH["softmax"]["columns"]
    row = next(r for r in BENCH["softmax"]["rows"] if r[0] == kernel and r[1] == n_cols and r[3] == dtype)
    return row[cols.index(column)]


def matmul(size: int, column: str):
    return next(r for r in BENCH["matmul_relu"]["rows"] if r[0] == size)[_col("matmul_relu", column)]


def autotuned(problem: str, column: str):
    return next(r for r in BENCH["autotuning"]["rows"] if r[1] == problem)[_col("autotuning", column)]


def sweep(size: int, config: str) -> float:
    return next(r for r in BENCH["autotuning"]["matmul_sweep"]["rows"] if r[0] == size and r[1] == config)[3]


def resources(config: str, column: str):
    table = BENCH["autotuning"]["resources"]
    return next(r for r in table["rows"] if r[0] == config)[table["columns"].index(column)]


def roofline(op: str, provider: str, column: str):
    cols = BENCH["roofline"]["columns"]
    return next(r for r in BENCH["roofline"]["rows"] if r[0] == op and r[1] == provider)[cols.index(column)]


def add_relu_mul(n: str, provider: str, column: str):
    cols = BENCH["add_relu_mul"]["columns"]
    return next(r for r in BENCH["add_relu_mul"]["rows"] if r[0] == n and r[1] == provider)[cols.index(column)]


def one_block_vs_torch() -> tuple[float, float]:
    ratios = [r[_col("softmax", "Triton/torch")] for r in BENCH["softmax"]["rows"] if r[0] == "softmax"]
    return min(ratios), max(ratios)


TILE = "BLOCK_M={}, BLOCK_N={}, BLOCK_K={}, GROUP_M={}, num_warps={}, num_stages={}"


def claims() -> list[tuple[str, str]]:
    """(assignment, the phrase its markdown must hold), every figure computed from the record."""
    lo, hi = one_block_vs_torch()
    big = TILE.format(128, 256, 64, 16, 8, 3)
    return [
        ("01_vector_add", f"{vector_add('2^22', 'Triton/copy'):.2f}× of a device copy's bandwidth at 2²², "
                          f"{vector_add('2^24', 'Triton/copy'):.2f}× at 2²⁴ and {vector_add('2^26', 'Triton/copy'):.2f}× "
                          "at 2²⁶"),
        ("02_softmax", f"{lo:.2f}× to {hi:.2f}× `torch.softmax`"),
        ("02_softmax", f"{softmax('softmax', 1024, 'float16', 'Triton/copy'):.2f}× of a plain copy's bandwidth"),
        ("02_softmax", f"{softmax('online_softmax', 65536, 'float32', 'Triton GB/s'):.0f} GB/s against "
                       f"`torch.softmax`'s {softmax('online_softmax', 65536, 'float32', 'torch GB/s'):.0f} at 1024 × "
                       f"65536, {softmax('online_softmax', 262144, 'float32', 'Triton GB/s'):.0f} against "
                       f"{softmax('online_softmax', 262144, 'float32', 'torch GB/s'):.0f} at 256 × 262144"),
        ("03_matmul_relu", f"{matmul(4096, 'Triton TFLOP/s'):.0f} and {matmul(8192, 'Triton TFLOP/s'):.0f} TFLOP/s at "
                           f"4096 and 8192, {matmul(4096, 'Triton/relu(a@b)'):.2f}× and "
                           f"{matmul(8192, 'Triton/relu(a@b)'):.2f}× `torch.relu(a @ b)`; cuBLAS `a @ b` "
                           f"{matmul(4096, 'a@b TFLOP/s'):.0f} and {matmul(8192, 'a@b TFLOP/s'):.0f}"),
        ("03_matmul_relu", f"{resources(TILE.format(128, 256, 32, 8, 8, 4), 'shared KB'):.0f} KB"),
        ("04_benchmarking", f"{roofline('softmax', 'triton', 'vs eager'):.2f}× `torch.softmax` at 4096 × 4096"),
        ("04_benchmarking", f"{add_relu_mul('2^24', 'triton', 'vs eager'):.2f}× and "
                            f"{add_relu_mul('2^27', 'triton', 'vs eager'):.2f}× eager at 2²⁴ and 2²⁷"),
        ("04_benchmarking", f"{ROOF['copy_gbps']:.0f} GB/s for a device copy and {ROOF['cublas_fp16_tflops']:.0f} "
                            "TFLOP/s for a large fp16 cuBLAS matmul, a ridge near "
                            f"{ROOF['cublas_fp16_tflops'] * 1e3 / ROOF['copy_gbps']:.0f} FLOP/byte"),
        ("05_autotuning", f"{resources(TILE.format(128, 128, 32, 8, 4, 4), 'registers')} registers per thread"),
        ("05_autotuning", f"{resources(TILE.format(128, 256, 32, 8, 8, 4), 'registers')} for 128×256×32 with 8 warps"),
        ("05_autotuning", f"{BENCH['autotuning']['measured']['date']}"),
        ("05_autotuning", f"{autotuned('M=N=K=4096 fp16', 'autotuned'):.0f} and "
                          f"{autotuned('M=N=K=8192 fp16', 'autotuned'):.0f} TFLOP/s at 4096 and 8192: "
                          f"{autotuned('M=N=K=4096 fp16', 'autotuned/torch'):.2f}× and "
                          f"{autotuned('M=N=K=8192 fp16', 'autotuned/torch'):.2f}× `torch.relu(a @ b)` "
                          f"({autotuned('M=N=K=4096 fp16', 'torch'):.0f} and {autotuned('M=N=K=8192 fp16', 'torch'):.0f}), "
                          f"ahead of phase 3's fixed config in the same kernel ({autotuned('M=N=K=4096 fp16', 'earlier'):.0f} "
                          f"and {autotuned('M=N=K=8192 fp16', 'earlier'):.0f}, row-major order), and "
                          f"{autotuned('M=N=K=4096 fp16', 'autotuned/cuBLAS'):.2f}× and "
                          f"{autotuned('M=N=K=8192 fp16', 'autotuned/cuBLAS'):.2f}× cuBLAS's `a @ b` alone "
                          f"({autotuned('M=N=K=4096 fp16', 'cuBLAS a@b'):.0f} and "
                          f"{autotuned('M=N=K=8192 fp16', 'cuBLAS a@b'):.0f})"),
        ("05_autotuning", f"({sweep(4096, big):.0f} against {sweep(4096, TILE.format(128, 256, 64, 8, 8, 3)):.0f} TFLOP/s)"),
    ]


def _markdown(assignment: str) -> str:
    nb = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    return " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")


@pytest.mark.parametrize("assignment,phrase", claims(), ids=lambda v: v[:60] if isinstance(v, str) else None)
def test_prose_figure_matches_the_record(assignment, phrase):
    """Does the notebook quote this recorded figure as the record has it?"""
    text = _markdown(assignment)
    assert " ".join(phrase.split()) in text, (
        f"source/{assignment} should say {phrase!r} (computed from results/gpu-results.json); update the prose")


# Figures the prose quotes from runs the record does not hold: each must be in docs/GPU-RUNS.md as written.
EXPLORATION = {
    "02_softmax": ["2499", "3250"],
}


@pytest.mark.parametrize("assignment", sorted(EXPLORATION))
def test_exploration_figures_are_in_the_run_log(assignment):
    runs = (ROOT / "docs" / "GPU-RUNS.md").read_text()
    text = _markdown(assignment)
    for figure in EXPLORATION[assignment]:
        assert re.search(rf"\b{figure}\b", text), f"{assignment} no longer quotes {figure}: drop it here"
        assert re.search(rf"\b{figure}\b", runs), f"{figure} (quoted by {assignment}) is not in docs/GPU-RUNS.md"

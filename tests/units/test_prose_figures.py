"""Every figure the notebooks' prose quotes from a GPU run agrees with the record (results/gpu-results.json).

Each claim below is the exact phrase a notebook's markdown holds, rebuilt here from the record: when a fresh
`make gpu-check` changes a figure, this test names the phrase to update. Figures the prose takes from an
exploration run that the record does not hold must be found, as written, in docs/GPU-RUNS.md. Every do_bench call in
the notebooks takes the median, as the record's figures do. Counts and sizes (points, minutes, MiB, registers,
programs per SM): tests/units/test_prose_counts.py, which reuses the record readers and claims below.
"""
from __future__ import annotations

import json
import re

import nbformat
import pytest

from course import ROOT
from tritoncourse.gpus import DATASHEET

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


def attention(column: str, **where) -> list[float]:
    """A column of the fused-attention record over the rows that match (seq_len_from: seq_len at least)."""
    cols = BENCH["fused_attention"]["columns"]
    least = where.pop("seq_len_from", 0)
    return [r[cols.index(column)] for r in BENCH["fused_attention"]["rows"]
            if r[cols.index("seq_len")] >= least and all(r[cols.index(k)] == v for k, v in where.items())]


def span(values: list[float], fmt: str, sep: str) -> str:
    return f"{min(values):{fmt}}{sep}{max(values):{fmt}}"


TILE = "BLOCK_M={}, BLOCK_N={}, BLOCK_K={}, GROUP_M={}, num_warps={}, num_stages={}"


def claims() -> list[tuple[str, str]]:
    """(assignment, the phrase its markdown must hold), every figure computed from the record."""
    lo, hi = one_block_vs_torch()
    big = TILE.format(128, 256, 64, 16, 8, 3)
    every, from_2048 = (span(attention('Triton/FA2'), '.1f', ' to '),
                        span(attention('Triton/FA2', seq_len_from=2048), '.1f', ' to '))
    longer = "" if from_2048 == every else f" ({from_2048}× from seq_len 2048 on)"  # said only where it differs
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
        ("04_benchmarking", f"phase 2's own table has it at {lo:.2f}× to {hi:.2f}× over its shapes"),
        ("06_fused_attention", f"reached {every}× the FlashAttention-2 backend at every shape{longer}, "
                               f"{span(attention('Triton/default', head_dim=64, seq_len_from=4096), '.2f', '–')}× cuDNN "
                               f"at head_dim 64 and "
                               f"{span(attention('Triton/default', head_dim=128, seq_len_from=4096), '.2f', '–')}× at "
                               "head_dim 128 (seq_len ≥ 4096)"),
        ("06_fused_attention", f"The naive torch version reached {span(attention('naive TFLOP/s'), '.0f', '–')} TFLOP/s"),
    ]


def _markdown(assignment: str) -> str:
    nb = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    return " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")


def _nb(assignment: str):
    return nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)


@pytest.mark.parametrize("assignment,phrase", claims(), ids=lambda v: v[:60] if isinstance(v, str) else None)
def test_prose_figure_matches_the_record(assignment, phrase):
    """Does the notebook quote this recorded figure as the record has it?"""
    text = _markdown(assignment)
    assert " ".join(phrase.split()) in text, (
        f"source/{assignment} should say {phrase!r} (computed from results/gpu-results.json); update the prose")


# Figures the prose quotes from runs the record does not hold: each must be in docs/GPU-RUNS.md as written.
EXPLORATION = {
    "02_softmax": ["2499", "3250"],
    "03_matmul_relu": ["624", "580", "1.00", "0.93", "575", "541"],  # 128x256 against 128x128 tiles
    "05_autotuning": ["706", "614"],  # the autotuner's cold first config
    # a choice of the autotuner at seq_len 1024; the same kernel at seq_len 1024 launched without the wrapper
    # and the range of the best Triton kernel of the Hopper section at each shape, beside the Gluon kernel
    "06_fused_attention": ["54", "1.29", "1.22", "0.75", "0.97"],
    # the d=128 dK/dV kernel's tiles, 4.9 ms before the sweep, 1.5 ms after; the Hopper section's Gluon step and
    # backward against SDPA's default and cuDNN, beside the notebook's op (thirty-third session)
    "07_attention_backward": ["3.2", "1.043", "0.859", "1.035", "0.964"],
}

# Figures that are not measurements, by what they are: vendors' nominal peaks, round numbers an exercise gives,
# a model's prediction, a unit example, a compiler fact (tests/units/test_compiled.py checks the 4x more loads).
NOMINAL = {
    "02_softmax": ["4"],  # the fused softmax moves 4x fewer bytes: a count of bytes
    # the H100's and H200's datasheets (tritoncourse/gpus.py: one source, so no other peak creeps in); 4x bytes
    "03_matmul_relu": sorted({f"{v:g}" for g in DATASHEET.values() for v in g.values()}) + ["4"],
    "04_benchmarking": ["2.3", "3000", "4"],  # 7/3 (the bytes' ratio), 3e9 bytes in 1 ms, the softmax's model
    "05_autotuning": ["4"],  # 4x as many load instructions
    "06_fused_attention": sorted({f"{v:g}" for v in DATASHEET["H200"].values()}),  # the H200's datasheet, as phase 3
}
# A measured figure in prose: a ratio (1.23×, not a tile's 128×64) or a rate, alone or as a range.
FIGURE = re.compile(r"(?<![\w.·])(\d+(?:\.\d+)?)(?:\s*(?:–|to|and)\s*(\d+(?:\.\d+)?))?\s*(×(?!\s*\d)|TFLOP/s|GB/s|TB/s)")
ASSIGNMENTS = sorted(p.name for p in (ROOT / "source").iterdir() if (p / f"{p.name}.ipynb").exists())


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_figure_in_the_prose_is_checked(assignment):
    """Every ratio and rate a notebook's prose states is in a claim above (computed from the record), in
    EXPLORATION (in docs/GPU-RUNS.md as written) or in NOMINAL (not a measurement): none goes stale unseen."""
    covered = " ".join([p for a, p in claims() if a == assignment] + EXPLORATION.get(assignment, [])
                       + NOMINAL.get(assignment, []))
    text = _markdown(assignment)
    unchecked = []
    for m in FIGURE.finditer(text):
        for number in filter(None, m.groups()[:2]):
            if not re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", covered):
                unchecked.append(f"{number}{m.group(3)}: ...{text[max(0, m.start() - 80):m.end() + 20]}...")
    assert not unchecked, (f"source/{assignment} states figures no test checks; compute them from the record in "
                           "claims(), or list them in EXPLORATION or NOMINAL:\n" + "\n".join(unchecked))


@pytest.mark.parametrize("assignment", sorted(EXPLORATION))
def test_exploration_figures_are_in_the_run_log(assignment):
    runs = (ROOT / "docs" / "GPU-RUNS.md").read_text()
    text = _markdown(assignment)
    for figure in EXPLORATION[assignment]:
        assert re.search(rf"\b{figure}\b", text), f"{assignment} no longer quotes {figure}: drop it here"
        assert re.search(rf"\b{figure}\b", runs), f"{figure} (quoted by {assignment}) is not in docs/GPU-RUNS.md"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_timing_takes_the_median(assignment):
    """Phase 4 teaches medians; do_bench's default is the mean: every call asks for the median (or quantiles,
    whose first is 0.5)."""
    import ast

    calls = []
    for cell in _nb(assignment).cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())
        tree = ast.parse(source)
        lists = {t.id: n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                 if isinstance(t, ast.Name) and isinstance(n.value, (ast.List, ast.Tuple))}  # quantiles = [...]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "do_bench":
                kw = {k.arg: k.value for k in node.keywords}
                median = isinstance(kw.get("return_mode"), ast.Constant) and kw["return_mode"].value == "median"
                q = kw.get("quantiles")
                q = lists.get(q.id, q) if isinstance(q, ast.Name) else q
                quantiles = isinstance(q, (ast.List, ast.Tuple)) and ast.literal_eval(q)[0] == 0.5
                if not (median or quantiles):
                    calls.append(ast.unparse(node))
    assert not calls, f"source/{assignment} times with do_bench's mean: {calls}"

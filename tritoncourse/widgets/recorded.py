"""The recorded GPU results as the plots a GPU would draw live, and phase 4's roofline control.

On a CPU nothing can be timed: each phase's `perf_report` cell then calls :func:`plot_recorded`, which draws
the same lines from ``results/gpu-results.json`` (``make gpu-check`` on a GPU), titled with the GPU, the
versions and the date, and saying that they were recorded there, not measured here. Nothing is made up:
a section that has not been recorded is reported as missing and nothing is drawn.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable


from ..benchmarking import RESULTS_FILE, load_results, picture_left_out
from ._matplotlib import plt
from . import interactive


def _number(value) -> float:
    """A table's x value as a number: 4096, '2^20', 'M=N=K=4096 fp16', '4096x4096 fp32' (first size)."""
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value)
    power = re.search(r"(\d+)\s*\^\s*(\d+)", text)
    if power:
        return float(int(power.group(1)) ** int(power.group(2)))
    first = text.split(" ")[0].rsplit("=", 1)[-1]  # 'M=N=K=4096 fp16' -> '4096'; '4096x4096' stays
    return float(re.match(r"\d+", first).group(0))


def recorded_label(results: dict, section: str) -> str:
    """'Recorded on <GPU>, torch .., triton .., <date>': where a section's figures come from."""
    env = results["environment"]
    table = results["benchmarks"][section]
    date = table.get("measured", {}).get("date", env["date"])
    return f"recorded on an {env['gpu']}, torch {env['torch']}, triton {env['triton']}, {date}"


def recorded_series(section: str, x: str | Callable[[dict], float], series: list[tuple[str, str, dict]],
                    path: Path = RESULTS_FILE) -> dict[str, list[tuple[float, float]]] | None:
    """{label: [(x, y), ...]} from a recorded table; ``series`` holds (label, y column, {column: value} filter).
    None when the section has not been recorded."""
    results = load_results(path)
    table = (results or {}).get("benchmarks", {}).get(section)
    if not table:
        return None
    cols = table["columns"]
    out: dict[str, list[tuple[float, float]]] = {}
    for label, column, where in series:
        points = []
        for row in table["rows"]:
            record = dict(zip(cols, row))
            if any(record.get(k) != v for k, v in (where or {}).items()):
                continue
            y = record.get(column)
            if not isinstance(y, (int, float)):
                continue
            points.append((x(record) if callable(x) else _number(record[x]), float(y)))
        out[label] = sorted(points)
    return out


def plot_recorded(section: str, x: str | Callable[[dict], float], series: list[tuple[str, str, dict]],
                  ylabel: str, title: str, xlabel: str | None = None, path: Path = RESULTS_FILE, ax=None):
    """Draw a recorded section as `perf_report` draws a live run (one line per provider, log x axis), titled
    with the GPU, versions and date it was recorded with. Prints and returns None when there is no record, and
    under nbgrader (:func:`picture_left_out`)."""
    if picture_left_out():
        return None
    results = load_results(path)
    lines = recorded_series(section, x, series, path)
    if not lines or not any(lines.values()):
        print(f"No GPU results for '{section}' have been recorded yet (results/gpu-results.json): no plot. "
              "Run `make gpu-check` on a machine with an NVIDIA GPU.")
        return None
    where = recorded_label(results, section)
    print(f"The plot below was {where}, not measured on this machine (timing needs a GPU).")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    styles = ["-o", "--s", ":^", "-.D", "-v", "--x"]
    for i, (label, points) in enumerate(lines.items()):
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], styles[i % len(styles)], label=label,
                    markersize=4)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel or (x if isinstance(x, str) else ""))
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n{where[0].upper() + where[1:]} (not measured here)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    plt.show()
    return ax


# ---- phase 4: the roofline, as a control ---------------------------------------------------------------
# Datasheet peaks (dense fp16 tensor-core math with fp32 accumulation; memory bandwidth), for orientation.
DATASHEET = {
    "H200 (datasheet)": (4800.0, 989.0),
    "H100 SXM (datasheet)": (3350.0, 989.0),
    "A100 80GB SXM (datasheet)": (2039.0, 312.0),
    "RTX 4090 (datasheet)": (1008.0, 165.0),
}
OPERATIONS = {  # FLOP per byte of the course's operations in fp32 (fp16 for the matmul), from their cost models
    "vector add (fp32)": 1 / 12,
    "add-ReLU-scale (fp32)": 3 / 12,
    "softmax (fp32)": 5 / 8,
    "matmul+ReLU 4096³ (fp16)": 2 * 4096**3 / (3 * 4096 * 4096 * 2),
}


def roofs(path: Path = RESULTS_FILE) -> dict[str, tuple[float, float]]:
    """(GB/s, TFLOP/s) roofs to choose from: the recorded run's measured ones first, then datasheets."""
    results = load_results(path)
    out = {}
    measured = (results or {}).get("benchmarks", {}).get("roofline", {}).get("measured", {})
    if "copy_gbps" in measured:
        gpu = results["environment"]["gpu"]
        out[f"{gpu} (measured, {measured['date'][:10]})"] = (measured["copy_gbps"], measured["cublas_fp16_tflops"])
    out.update(DATASHEET)
    return out


def attainable_tflops(intensity: float, gbps: float, tflops: float) -> float:
    """The roofline: min(peak FLOP/s, bandwidth x intensity), in TFLOP/s."""
    return min(tflops, gbps * 1e9 * intensity / 1e12)


def draw_roofline_choice(operation: str, gpu: str, path: Path = RESULTS_FILE):
    """One operation on one GPU's roof: where it sits, which roof bounds it, and its best possible rate."""
    from ..roofline import plot_roofline

    gbps, tflops = roofs(path)[gpu]
    intensity = OPERATIONS[operation]
    best = attainable_tflops(intensity, gbps, tflops)
    bound = "memory-bound" if gbps * 1e9 * intensity / 1e12 < tflops else "compute-bound"
    _, ax = plt.subplots(figsize=(8, 4.5))
    points = [{"label": f"{name} (at its roof)", "intensity": i, "tflops": attainable_tflops(i, gbps, tflops),
               "provider": "triton" if name == operation else "eager"} for name, i in OPERATIONS.items()]
    plot_roofline(points, gbps, tflops, roof=attainable_tflops,
                  title=f"{operation} on {gpu}: {intensity:.3g} FLOP/byte, {bound}, at most {best:.3g} TFLOP/s",
                  ax=ax)
    plt.show()
    return intensity, best, bound


def roofline_widget(operation: str = "softmax (fp32)", gpu: str | None = None, path: Path = RESULTS_FILE):
    """Dropdowns for an operation of the course and a GPU's roof (measured or datasheet); headless: drawn once."""
    choices = list(roofs(path))
    gpu = gpu or choices[0]

    def show(operation, gpu):
        draw_roofline_choice(operation, gpu, path)

    return interactive(show, dict(operation=operation, gpu=gpu), lambda widgets: dict(
        operation=widgets.Dropdown(options=list(OPERATIONS), value=operation, description="operation"),
        gpu=widgets.Dropdown(options=choices, value=gpu, description="GPU",
                             layout=widgets.Layout(width="420px")),
    ))

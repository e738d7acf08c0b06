"""Drawing a roofline (phase 4): the roof from two measured peaks, each kernel a point.

The roof and the labels come from functions the caller passes in (the notebook's ``roof_tflops`` and
``classify``): this module only draws. Recorded GPU results are read through
:mod:`tritoncourse.benchmarking`, never made up.
"""
from __future__ import annotations

from pathlib import Path

from .benchmarking import RESULTS_FILE, load_results, picture_left_out

MARKERS = {"triton": "o", "online": "D", "eager": "s", "unfused": "v", "compile": "^"}


def _try(fn, *args):
    """fn(*args), or None while the learner's function is not written yet (or fails)."""
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:  # NotImplementedError in the release, or any bug: draw without it
        return None


def plot_roofline(points: list[dict], peak_gbps: float, peak_tflops: float, roof=None, classify=None,
                  title: str = "Roofline", ax=None):
    """Draw the roof and one marker per point.

    points: dicts with ``label`` (e.g. "softmax / triton"), ``intensity`` (FLOP/byte) and ``tflops``
    (measured); an optional ``provider`` picks the marker. ``roof(intensity, peak_gbps, peak_tflops)``
    draws the roof and ``classify(...)`` labels each point memory- or compute-bound; either may be None
    (or not written yet), and the plot says so.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5))
    intensities = [p["intensity"] for p in points if p.get("intensity", 0) > 0]
    ridge = peak_tflops * 1e3 / peak_gbps  # only to choose the x range
    lo = min(intensities + [ridge]) / 4
    hi = max(intensities + [ridge]) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ys = [_try(roof, x, peak_gbps, peak_tflops) for x in xs]
    notes = []
    if all(isinstance(y, (int, float)) and y > 0 for y in ys):
        ax.plot(xs, ys, color="black", linewidth=2,
                label=f"roof: {peak_gbps:.0f} GB/s, {peak_tflops:.0f} TFLOP/s")
        ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"ridge {ridge:.0f} FLOP/byte", (ridge, peak_tflops), textcoords="offset points",
                    xytext=(4, -14), fontsize=8, color="grey")
    else:
        notes.append("no roof: write roof_tflops (section 7) to draw it")
    ops = list(dict.fromkeys(p["label"].split(" / ")[0] for p in points))  # one colour per operation
    colours = {op: f"C{i % 10}" for i, op in enumerate(ops)}
    for p in points:
        if p.get("intensity", 0) <= 0 or p.get("tflops", 0) <= 0:
            continue
        bound = _try(classify, p["intensity"], peak_gbps, peak_tflops)
        label = p["label"] + (f" ({bound})" if isinstance(bound, str) else "")
        ax.scatter([p["intensity"]], [p["tflops"]], marker=MARKERS.get(p.get("provider", ""), "o"), s=45,
                   color=colours[p["label"].split(" / ")[0]], edgecolors="black", linewidths=0.5,
                   label=label, zorder=3)
    if classify is not None and all(_try(classify, p["intensity"], peak_gbps, peak_tflops) is None
                                    for p in points if p.get("intensity", 0) > 0):
        notes.append("no labels: write classify (section 7) to label the points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title + ("\n" + "; ".join(notes) if notes else ""), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return ax


def show_recorded_roofline(roof=None, classify=None, section: str = "roofline", path: Path = RESULTS_FILE):
    """Plot the roofline recorded on a real GPU (results/gpu-results.json), labelled with where it came from.

    Says so, and draws nothing, when no such run has been recorded, and under nbgrader (:func:`picture_left_out`).
    """
    if picture_left_out():
        return None
    results = load_results(path)
    table = (results or {}).get("benchmarks", {}).get(section)
    peaks = (results or {}).get("peaks", {})
    if table and "copy_gbps" in table.get("measured", {}):
        peaks = table["measured"]  # the roofs of the run that measured these points
    if not table or not table.get("points") or "copy_gbps" not in peaks:
        print(f"No GPU roofline ('{section}') has been recorded yet (results/gpu-results.json); "
              "run `make gpu-check` on a machine with an NVIDIA GPU.")
        return None
    env = results["environment"]
    date = table.get("measured", {}).get("date", env["date"])
    title = f"Recorded on {env['gpu']}, torch {env['torch']}, triton {env['triton']}, {date}"
    print(title + f"; roof: device copy {peaks['copy_gbps']:.0f} GB/s, cuBLAS fp16 "
                  f"{peaks['cublas_fp16_tflops']:.0f} TFLOP/s")
    return plot_roofline(table["points"], peaks["copy_gbps"], peaks["cublas_fp16_tflops"], roof, classify,
                         title=title)


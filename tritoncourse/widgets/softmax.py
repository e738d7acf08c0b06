"""Interactive pictures for the online softmax: a row cut into tiles, and the running max and sum.

:func:`online_softmax_steps` replays, in fp64, the loop the online kernel runs; the drawing shows it
for a chosen row and BLOCK_SIZE. Tiles are told apart by hatching and labels, masked lanes by an
'x' and the word "masked", the two curves by marker shape and line style, not by colour alone.
"""
from __future__ import annotations

import math

import torch

from ._matplotlib import Rectangle, plt
from . import interactive

HATCHES = ["", "//", "..", "\\\\", "xx", "--", "++", "oo"]

# Sample rows, each chosen to show something: (label, values for n columns).
SAMPLE_ROWS = {
    "random normal": lambda n, g: torch.randn(n, generator=g, dtype=torch.float64) * 2,
    "increasing (the max grows in every tile)": lambda n, g: torch.linspace(-4, 4, n, dtype=torch.float64),
    "decreasing (the max is found in tile 0)": lambda n, g: torch.linspace(4, -4, n, dtype=torch.float64),
    "a spike in the last column": lambda n, g: torch.cat([torch.randn(n - 1, generator=g, dtype=torch.float64),
                                                          torch.tensor([8.0], dtype=torch.float64)]),
    "around +1000": lambda n, g: torch.randn(n, generator=g, dtype=torch.float64) * 2 + 1000,
    "all negative": lambda n, g: -(torch.rand(n, generator=g, dtype=torch.float64) * 8 + 0.5),
}


def sample_row(kind: str, n_cols: int, seed: int = 0) -> torch.Tensor:
    """One of :data:`SAMPLE_ROWS`, with ``n_cols`` values."""
    g = torch.Generator().manual_seed(seed)
    return SAMPLE_ROWS[kind](n_cols, g)


def online_softmax_steps(row, block_size: int) -> list[dict]:
    """The online softmax's state after each tile, as the kernel's first loop computes it (in fp64).

    Each step: tile index, its columns [start, stop), masked lanes, the tile's max, the running max
    before and after, the rescale factor exp(m_old - m_new) applied to the running sum, the tile's
    sum of exp(x - m_new), and the running sum after the tile.
    """
    values = [float(v) for v in row]
    n = len(values)
    steps = []
    m, s = -math.inf, 0.0
    for t, start in enumerate(range(0, n, block_size)):
        stop = min(start + block_size, n)
        tile = values[start:stop]  # masked lanes would hold -inf: they change neither max nor sum
        tile_max = max(tile)
        m_new = max(m, tile_max)
        scale = math.exp(m - m_new) if m != -math.inf else 0.0
        tile_sum = sum(math.exp(v - m_new) for v in tile)
        s_new = s * scale + tile_sum
        steps.append({"tile": t, "start": start, "stop": stop, "masked": start + block_size - stop,
                      "tile_max": tile_max, "m_before": m, "m": m_new, "scale": scale,
                      "tile_sum": tile_sum, "s": s_new})
        m, s = m_new, s_new
    return steps


def steps_table(steps: list[dict]) -> str:
    """The steps as a text table (what the picture shows, readable without colours)."""
    lines = [f"{'tile':>4}  {'columns':>11}  {'masked':>6}  {'tile max':>9}  {'running max':>11}  "
             f"{'rescale':>9}  {'tile sum':>9}  {'running sum':>11}"]
    for st in steps:
        rescale = "-" if st["m_before"] == -math.inf else f"{st['scale']:.4g}"
        lines.append(f"{st['tile']:>4}  {st['start']:>5}..{st['stop'] - 1:<5}  {st['masked']:>6}  "
                     f"{st['tile_max']:>9.4g}  {st['m']:>11.6g}  {rescale:>9}  {st['tile_sum']:>9.4g}  "
                     f"{st['s']:>11.6g}")
    return "\n".join(lines)


def draw_online_softmax(row, block_size: int, title: str = "", fig=None):
    """Two panels: the row's values cut into tiles (masked lanes marked), and per tile the running
    max (circles, solid) and running sum (squares, dashed), with each rescale factor written out."""
    values = [float(v) for v in row]
    n = len(values)
    steps = online_softmax_steps(values, block_size)
    n_tiles = len(steps)
    if fig is None:
        fig = plt.figure(figsize=(11, 6.2))
    ax_row, ax_run = fig.subplots(2, 1, gridspec_kw={"height_ratios": [3, 2]})
    lo, hi = min(values), max(values)
    spread = hi - lo
    if lo > 0 and lo > 3 * spread:  # rows around +1000: bars start just below the row's min
        base = lo - 0.2 * spread - 0.5
    elif hi < 0 and -hi > 3 * spread:  # rows around -1000: bars hang from just above the max
        base = hi + 0.2 * spread + 0.5
    else:
        base = 0.0
    span = max(hi, base) - min(lo, base) or 1.0
    cmap = plt.get_cmap("tab10")
    for st in steps:
        t = st["tile"]
        hatch = HATCHES[t % len(HATCHES)]
        for c in range(st["start"], st["stop"]):
            v = values[c]
            bottom, height = (base, v - base) if v >= base else (v, base - v)
            ax_row.add_patch(Rectangle((c, bottom), 0.9, height, facecolor=cmap(t % 10), alpha=0.5,
                                       edgecolor="black", hatch=hatch, linewidth=0.5))
        floor = min(lo, base)
        for c in range(st["stop"], st["start"] + block_size):  # masked lanes of the last tile
            ax_row.add_patch(Rectangle((c, floor), 0.9, 0.12 * span, facecolor="white", edgecolor="gray",
                                       hatch="xx", linewidth=0.5))
            ax_row.text(c + 0.45, floor + 0.06 * span, "x", ha="center", va="center", fontsize=7)
        if st["masked"]:
            ax_row.text(st["stop"] + st["masked"] / 2, floor + 0.15 * span,
                        f"masked ({st['masked']})\nloaded as -inf", ha="center", va="bottom", fontsize=7)
        ax_row.plot([st["start"], st["start"] + block_size - 0.1], [st["m"], st["m"]], color="black",
                    linestyle="--", linewidth=1)
        ax_row.text(st["start"] + block_size / 2, max(hi, base) + 0.04 * span, f"tile {t}", ha="center", va="bottom",
                    fontsize=8)
        if t:
            ax_row.axvline(st["start"] - 0.05, color="gray", linewidth=0.8)
    ax_row.set_xlim(-0.5, n_tiles * block_size + 0.5)
    ax_row.set_ylim(min(lo, base) - 0.02 * span, max(hi, base) + 0.15 * span)
    ax_row.set_xlabel("column")
    ax_row.set_ylabel("x")
    ax_row.set_title((title or f"n_cols={n}, BLOCK_SIZE={block_size}: {n_tiles} tile(s)")
                     + "\ndashed line over each tile: the running max m after that tile", fontsize=9)

    tiles = [st["tile"] for st in steps]
    ax_run.plot(tiles, [st["m"] for st in steps], marker="o", linestyle="-", color="tab:blue",
                label="running max m")
    ax_run.set_ylabel("running max m")
    ax_sum = ax_run.twinx()
    ax_sum.plot(tiles, [st["s"] for st in steps], marker="s", linestyle="--", color="tab:orange",
                label="running sum s = sum exp(x - m)")
    ax_sum.set_ylabel("running sum s")
    ax_sum.margins(y=0.25)
    ax_run.margins(y=0.25)
    for st in steps:
        if st["m_before"] != -math.inf and st["scale"] < 1:
            ax_sum.annotate(f"s x {st['scale']:.2g}", (st["tile"], st["s"]), textcoords="offset points",
                            xytext=(4, 8), fontsize=7)
    ax_run.set_xlabel("after tile")
    ax_run.set_xticks(tiles)
    handles = ax_run.get_legend_handles_labels()[0] + ax_sum.get_legend_handles_labels()[0]
    ax_run.legend(handles, [h.get_label() for h in handles], loc="upper left", fontsize=8)
    ax_run.set_title("'s x f': the running max grew, so the sum so far is rescaled by f = exp(m_old - m_new)",
                     fontsize=9)
    fig.tight_layout()
    return fig


def online_softmax_widget(kind: str = "random normal", n_cols: int = 37, block_size: int = 8):
    """A row kind, its length and BLOCK_SIZE to choose; draws the tiles and prints the table of steps (headless:
    drawn once)."""

    def show(kind, n_cols, block_size, seed):
        row = sample_row(kind, n_cols, seed)
        steps = online_softmax_steps(row, block_size)
        draw_online_softmax(row, block_size, title=f"{kind}: n_cols={n_cols}, BLOCK_SIZE={block_size}, "
                                                   f"{len(steps)} tile(s)")
        plt.show()
        print(steps_table(steps))
        final = steps[-1]
        exact = torch.logsumexp(row, dim=0).item()
        print(f"\nlog(s) + m = {math.log(final['s']) + final['m']:.10g};  torch.logsumexp(row) = {exact:.10g}")

    return interactive(show, dict(kind=kind, n_cols=n_cols, block_size=block_size, seed=0), lambda widgets: dict(
        kind=widgets.Dropdown(options=list(SAMPLE_ROWS), value=kind, description="row",
                              layout=widgets.Layout(width="420px")),
        n_cols=widgets.IntSlider(value=n_cols, min=1, max=64, description="n_cols"),
        block_size=widgets.Dropdown(options=[4, 8, 16, 32, 64], value=block_size, description="BLOCK_SIZE"),
        seed=widgets.IntSlider(value=0, min=0, max=9, description="seed"),
    ))

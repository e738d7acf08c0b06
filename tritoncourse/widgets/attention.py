"""Pictures for phase 6: which key tiles a query tile visits, and the recorded GPU curves of attention.

Tiles are told apart by hatching and labels (full tile, tile that needs a mask, tile skipped), not by colour alone.
"""
from __future__ import annotations

from ._matplotlib import Rectangle, plt
from ..benchmarking import picture_left_out
from . import interactive


def tile_plan(seq_len: int, block_m: int, block_n: int, causal: bool) -> list[list[str]]:
    """For every query tile (row) and key tile (column): "full" (visited, no mask), "masked" (visited, needs the
    causal or the seq_len mask) or "skipped" (never loaded), as the reference kernel's two loops decide."""
    n_m, n_n = -(-seq_len // block_m), -(-seq_len // block_n)
    plan = []
    for i in range(n_m):
        row = []
        for j in range(n_n):
            start, stop = j * block_n, min((j + 1) * block_n, seq_len)
            q_start, q_stop = i * block_m, min((i + 1) * block_m, seq_len)
            if causal and start >= q_stop:
                row.append("skipped")  # every key of the tile is after every query of the tile
            elif (causal and stop - 1 > q_start) or stop - start < block_n:
                row.append("masked")  # the diagonal crosses it, or it runs past seq_len
            else:
                row.append("full")
        plan.append(row)
    return plan


def tile_work(seq_len: int, block_m: int, block_n: int, causal: bool) -> tuple[int, int]:
    """(key tiles visited, key tiles in all) summed over the query tiles."""
    plan = tile_plan(seq_len, block_m, block_n, causal)
    visited = sum(c != "skipped" for row in plan for c in row)
    return visited, sum(len(row) for row in plan)


STYLE = {"full": ("//", "0.55", "visited, no mask"), "masked": ("xx", "0.8", "visited, masked"),
         "skipped": ("", "1.0", "skipped")}


def draw_tiles(seq_len: int = 200, block_m: int = 32, block_n: int = 32, query_tile: int = 3, causal: bool = True):
    """Draw the grid of (query tile, key tile) pairs; the chosen query tile's row is outlined."""
    plan = tile_plan(seq_len, block_m, block_n, causal)
    query_tile = min(query_tile, len(plan) - 1)
    fig, ax = plt.subplots(figsize=(6.5, 5))
    for i, row in enumerate(plan):
        for j, kind in enumerate(row):
            hatch, grey, _ = STYLE[kind]
            x0, y0 = j * block_n, i * block_m
            w, h = min(block_n, seq_len - x0), min(block_m, seq_len - y0)
            ax.add_patch(Rectangle((x0, y0), w, h, facecolor=grey if i == query_tile else "1.0", hatch=hatch,
                                   edgecolor="black", linewidth=2.5 if i == query_tile else 0.5))
    ax.set_xlim(0, seq_len)
    ax.set_ylim(seq_len, 0)
    ax.set_xlabel("keys (BLOCK_N per tile)")
    ax.set_ylabel("queries (BLOCK_M per tile)")
    visited, total = tile_work(seq_len, block_m, block_n, causal)
    mine = plan[query_tile]
    ax.set_title(f"query tile {query_tile}: {sum(c == 'full' for c in mine)} full + {sum(c == 'masked' for c in mine)} "
                 f"masked of {len(mine)} key tiles\nall query tiles: {visited} of {total} tile pairs visited "
                 f"({100 * visited / total:.0f}% of the work)", fontsize=10)
    handles = [Rectangle((0, 0), 1, 1, facecolor=STYLE[k][1], hatch=STYLE[k][0], edgecolor="black", label=STYLE[k][2])
               for k in ("full", "masked", "skipped")]
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    plt.show()
    return plan


def attention_tiles_widget(seq_len: int = 200, block_m: int = 32, block_n: int = 32, causal: bool = True):
    """Sliders for seq_len, BLOCK_M, BLOCK_N and the query tile, and a causal check box."""
    defaults = {"seq_len": seq_len, "block_m": block_m, "block_n": block_n, "query_tile": 3, "causal": causal}

    def controls(w):
        return {"seq_len": w.IntSlider(value=seq_len, min=16, max=512, step=1, description="seq_len"),
                "block_m": w.Dropdown(options=[16, 32, 64, 128], value=block_m, description="BLOCK_M"),
                "block_n": w.Dropdown(options=[16, 32, 64], value=block_n, description="BLOCK_N"),
                "query_tile": w.IntSlider(value=3, min=0, max=31, description="query tile"),
                "causal": w.Checkbox(value=causal, description="causal")}

    return interactive(draw_tiles, defaults, controls)


def plot_recorded_attention(results: dict | None, head_dim: int = 128) -> None:
    """The recorded GPU curves of the attention benchmark (tools/gpu_check.py, section fused_attention):
    TFLOP/s against seq_len for each provider, non-causal and causal side by side."""
    from .recorded import recorded_label

    if picture_left_out():
        return
    table = (results or {}).get("benchmarks", {}).get("fused_attention")
    if not table:
        print("No GPU results for 'fused_attention' have been recorded yet (results/gpu-results.json).")
        return
    where = recorded_label(results, "fused_attention")
    print(f"The plot below was {where}, not measured on this machine (timing needs a GPU).")
    cols = table["columns"]
    rows = [r for r in table["rows"] if r[cols.index("head_dim")] == head_dim]
    providers = [c for c in cols if c.endswith("TFLOP/s")]
    markers = ["o", "s", "^", "v", "D", "x"]
    styles = ["-", "--", ":", "-.", "-", "--"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, causal in zip(axes, (False, True)):
        sub = [r for r in rows if r[cols.index("causal")] == causal]
        for k, p in enumerate(providers):
            ax.plot([r[cols.index("seq_len")] for r in sub], [r[cols.index(p)] for r in sub], marker=markers[k % 6],
                    linestyle=styles[k % 6], label=p.replace(" TFLOP/s", ""))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("seq_len")
        ax.set_title(f"{'causal' if causal else 'not causal'}, head_dim {head_dim}, fp16")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("TFLOP/s (4·B·H·S²·D, halved when causal)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{where[0].upper() + where[1:]} (not measured here)", fontsize=9)
    fig.tight_layout()
    plt.show()

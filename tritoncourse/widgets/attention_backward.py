"""Pictures for phase 7: which (query tile, key tile) pairs each backward kernel visits, one program outlined.

The dK/dV kernel's program owns a key tile (a column of the grid) and walks down over query tiles; the dQ kernel's
program owns a query tile (a row) and walks across key tiles. Causal skipping leaves the same pairs out of both (the
forward's too): a pair is needed when some query of the tile comes at or after some key of the tile. With dQ by
atomics, every visited pair of a row is one more program adding into that query tile's dQ. Tiles are told apart by
hatching and labels, not by colour alone.
"""
from __future__ import annotations

from ._matplotlib import Rectangle, plt
from . import interactive
from .attention import STYLE, tile_plan

KERNELS = ("dK/dV", "dQ")


def backward_work(seq_len: int, block_m: int, block_n: int, causal: bool) -> dict:
    """Pairs visited and in all, and the most programs that add into one query tile's dQ with atomics."""
    plan = tile_plan(seq_len, block_m, block_n, causal)
    visited = [sum(c != "skipped" for c in row) for row in plan]
    return {"visited": sum(visited), "total": sum(len(row) for row in plan), "max_adders": max(visited)}


def draw_backward_tiles(seq_len: int = 200, block_m: int = 32, block_n: int = 64, program: int = 1,
                        kernel: str = "dK/dV", causal: bool = True):
    """Draw the grid of (query tile, key tile) pairs; the chosen program's column (dK/dV) or row (dQ) outlined."""
    plan = tile_plan(seq_len, block_m, block_n, causal)
    by_key = kernel == "dK/dV"
    program = min(program, (len(plan[0]) if by_key else len(plan)) - 1)
    fig, ax = plt.subplots(figsize=(6.5, 5))
    for i, row in enumerate(plan):
        for j, kind in enumerate(row):
            hatch, grey, _ = STYLE[kind]
            mine = (j if by_key else i) == program
            x0, y0 = j * block_n, i * block_m
            ax.add_patch(Rectangle((x0, y0), min(block_n, seq_len - x0), min(block_m, seq_len - y0),
                                   facecolor=grey if mine else "1.0", hatch=hatch, edgecolor="black",
                                   linewidth=2.5 if mine else 0.5))
    ax.set_xlim(0, seq_len)
    ax.set_ylim(seq_len, 0)
    ax.set_xlabel("keys (BLOCK_N per tile)")
    ax.set_ylabel("queries (BLOCK_M per tile)")
    cells = [row[program] for row in plan] if by_key else plan[program]
    work = backward_work(seq_len, block_m, block_n, causal)
    what = f"key tile {program} (a dK/dV program)" if by_key else f"query tile {program} (a dQ program)"
    ax.set_title(f"{what}: visits {sum(c != 'skipped' for c in cells)} of {len(cells)} tiles\n"
                 f"all programs: {work['visited']} of {work['total']} tile pairs "
                 f"({100 * work['visited'] / work['total']:.0f}%); dQ by atomics: up to {work['max_adders']} "
                 "programs add into one query tile", fontsize=9)
    handles = [Rectangle((0, 0), 1, 1, facecolor=STYLE[k][1], hatch=STYLE[k][0], edgecolor="black", label=STYLE[k][2])
               for k in ("full", "masked", "skipped")]
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    plt.show()
    return plan


def backward_tiles_widget(seq_len: int = 200, block_m: int = 32, block_n: int = 64, causal: bool = True):
    """Sliders for seq_len, BLOCK_M, BLOCK_N and the program; the kernel (dK/dV or dQ) and causal."""
    defaults = {"seq_len": seq_len, "block_m": block_m, "block_n": block_n, "program": 1, "kernel": "dK/dV",
                "causal": causal}

    def controls(w):
        return {"seq_len": w.IntSlider(value=seq_len, min=16, max=512, step=1, description="seq_len"),
                "block_m": w.Dropdown(options=[16, 32, 64, 128], value=block_m, description="BLOCK_M"),
                "block_n": w.Dropdown(options=[16, 32, 64, 128], value=block_n, description="BLOCK_N"),
                "program": w.IntSlider(value=1, min=0, max=31, description="program"),
                "kernel": w.Dropdown(options=list(KERNELS), value="dK/dV", description="kernel"),
                "causal": w.Checkbox(value=causal, description="causal")}

    return interactive(draw_backward_tiles, defaults, controls)

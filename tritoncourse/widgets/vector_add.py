"""Interactive pictures: which elements each program covers and which lanes the mask switches off.

Drawn with matplotlib from the same arithmetic the kernel does (pid * BLOCK_SIZE + arange), so they
work on the CPU interpreter too. Masked lanes are told apart by hatching and a label, not colour alone.
"""
from __future__ import annotations

from ._matplotlib import Rectangle, plt
from . import interactive


def draw_block_coverage(n_elements: int, block_size: int, ax=None, max_cols: int = 32):
    """Draw the 1-D launch grid: one row of lanes per program, masked lanes hatched and marked 'x'."""
    n_programs = -(-n_elements // block_size)
    if ax is None:
        width = min(block_size, max_cols)
        _, ax = plt.subplots(figsize=(min(14, 1 + 0.4 * width), 0.6 + 0.45 * n_programs))
    cmap = plt.get_cmap("tab10")
    for pid in range(n_programs):
        for lane in range(block_size):
            offset = pid * block_size + lane
            masked = offset >= n_elements
            face = "white" if masked else cmap(pid % 10)
            ax.add_patch(Rectangle((lane, -pid), 0.95, 0.9, facecolor=face, edgecolor="black",
                                   hatch="///" if masked else None, alpha=1.0 if masked else 0.55))
            label = "x" if masked else str(offset)
            ax.text(lane + 0.47, -pid + 0.45, label, ha="center", va="center",
                    fontsize=7 if block_size <= 32 else 5)
        ax.text(-0.3, -pid + 0.45, f"pid {pid}", ha="right", va="center", fontsize=8)
    ax.set_xlim(-2.5, block_size + 0.2)
    ax.set_ylim(-n_programs + 0.8, 1.2)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    n_masked = n_programs * block_size - n_elements
    ax.set_title(f"n_elements={n_elements}, BLOCK_SIZE={block_size}: grid of {n_programs} programs; "
                 f"{n_masked} lane(s) masked off (hatched, 'x'): offsets >= n_elements", fontsize=9)
    return ax


def block_coverage_widget(n_elements: int = 37, block_size: int = 8):
    """Sliders for n_elements and BLOCK_SIZE that redraw :func:`draw_block_coverage` (headless: drawn once)."""

    def show(n_elements, block_size):
        draw_block_coverage(n_elements, block_size)
        plt.show()

    return interactive(show, dict(n_elements=n_elements, block_size=block_size), lambda widgets: dict(
        n_elements=widgets.IntSlider(value=n_elements, min=1, max=100, description="n_elements"),
        block_size=widgets.Dropdown(options=[2, 4, 8, 16, 32], value=block_size, description="BLOCK_SIZE"),
    ))

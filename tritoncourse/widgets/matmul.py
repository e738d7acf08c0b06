"""Interactive pictures for the tiled matmul: which tiles of A and B one program reads, and in which
order programs visit the tiles of C.

Drawn with matplotlib from the same arithmetic the kernel does, so they work on the CPU interpreter.
Tiles are told apart by hatching and labels ("k=0", "x" for masked), not by colour alone.
"""
from __future__ import annotations

import math

from ._matplotlib import Rectangle, plt
from . import interactive

# The shared memory one program may use on the smallest recent NVIDIA GPUs (sm_86 / sm_89: 99 KB);
# an H100 allows 227 KB. Triton keeps num_stages copies of the A and B tiles in flight.
SHARED_MEMORY_BUDGET = 99 * 1024
BLOCK_CHOICES = (16, 32, 64, 128, 256)


def tile_numbers(block_m: int, block_n: int, block_k: int, num_stages: int = 4,
                 dtype_bytes: int = 2) -> dict:
    """The numbers of one program's K step: bytes loaded, FLOPs, arithmetic intensity, shared memory."""
    loaded = (block_m * block_k + block_k * block_n) * dtype_bytes
    flops = 2 * block_m * block_n * block_k
    return {
        "bytes_per_k_step": loaded,
        "flops_per_k_step": flops,
        "flop_per_byte": flops / loaded,  # = block_m * block_n / (block_m + block_n) for fp16
        "shared_memory": num_stages * loaded,
        "fits": num_stages * loaded <= SHARED_MEMORY_BUDGET,
    }


def _grid(ax, x0, y0, rows, cols, block_r, block_c, title):
    """A matrix of rows x cols elements drawn as tiles (y grows downwards); returns a tile painter."""
    ax.add_patch(Rectangle((x0, -y0 - rows), cols, rows, fill=False, lw=1.5))
    for r in range(0, rows, block_r):
        for c in range(0, cols, block_c):
            h, w = min(block_r, rows - r), min(block_c, cols - c)
            ax.add_patch(Rectangle((x0 + c, -y0 - r - h), w, h, fill=False, lw=0.4, ec="grey"))
    ax.text(x0 + cols / 2, -y0 + 0.03 * max(rows, cols) + 1, title, ha="center", va="bottom", fontsize=9)

    def paint(tr, tc, label, hatch, face):
        r, c = tr * block_r, tc * block_c
        h, w = block_r, block_c
        # The part of the tile inside the matrix, and the masked part past its edge.
        hin, win = max(0, min(h, rows - r)), max(0, min(w, cols - c))
        ax.add_patch(Rectangle((x0 + c, -y0 - r - h), w, h, facecolor="white", edgecolor="black",
                               hatch="xx", lw=0.8, ls="--"))
        if hin and win:
            ax.add_patch(Rectangle((x0 + c, -y0 - r - hin), win, hin, facecolor=face, edgecolor="black",
                                   hatch=hatch, lw=1.0, alpha=0.9))
        hl, wl = (hin, win) if hin and win else (h, w)
        ax.text(x0 + c + wl / 2, -y0 - r - hl / 2, label, ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))

    return paint


def draw_tile_reads(M: int, N: int, K: int, block_m: int, block_n: int, block_k: int,
                    pid_m: int = 0, pid_n: int = 0, num_stages: int = 4, tflops: float | None = None):
    """Draw A (M x K), B (K x N) and C (M x N) with the tiles program (pid_m, pid_n) reads and writes.

    A's row of tiles and B's column of tiles are labelled with the K step that loads them; the parts of
    a tile past the matrix's edge are cross-hatched: the masks switch them off.
    """
    grid_m, grid_n = math.ceil(M / block_m), math.ceil(N / block_n)
    pid_m, pid_n = min(pid_m, grid_m - 1), min(pid_n, grid_n - 1)
    k_steps = math.ceil(K / block_k)
    gap = 0.12 * max(M, N, K)
    # Room for the masked parts of the last tiles, past the matrices' edges.
    k_pad, m_pad, n_pad = k_steps * block_k, grid_m * block_m, grid_n * block_n
    width, height = k_pad + gap + n_pad, k_pad + gap + m_pad
    fig = plt.figure(figsize=(8.5, 8.5 * height / width * 0.8 + 1.4))
    ax = fig.add_axes((0.02, 0.2, 0.96, 0.78))
    # Layout: B above C, A to the left of C (the usual picture of C = A @ B).
    paint_b = _grid(ax, k_pad + gap, 0, K, N, block_k, block_n, f"B  ({K} x {N})")
    paint_a = _grid(ax, 0, k_pad + gap, M, K, block_m, block_k, f"A  ({M} x {K})")
    paint_c = _grid(ax, k_pad + gap, k_pad + gap, M, N, block_m, block_n, f"C  ({M} x {N})")
    for k in range(k_steps):
        paint_a(pid_m, k, f"k={k}", "//", "#9ecae1")
        paint_b(k, pid_n, f"k={k}", "\\\\", "#fdae6b")
    paint_c(pid_m, pid_n, f"C tile ({pid_m}, {pid_n})", "..", "#a1d99b")
    ax.set_xlim(-1, width + 1)
    ax.set_ylim(-height - 1, 0.08 * max(M, N, K) + 2)
    ax.set_aspect("equal")
    ax.axis("off")
    t = tile_numbers(block_m, block_n, block_k, num_stages)
    smem = t["shared_memory"] / 1024
    lines = [
        f"grid ({grid_m}, {grid_n}) = {grid_m * grid_n} programs. Program ({pid_m}, {pid_n}) runs {k_steps} K steps; "
        f"step k loads the A tile 'k=' (hatched /, {block_m} x {block_k})",
        f"and the B tile 'k=' (hatched \\, {block_k} x {block_n}); cross-hatched parts lie past the matrix "
        "and are masked off. It writes one C tile (dotted).",
        f"Per K step: {t['bytes_per_k_step']:,} bytes loaded, {t['flops_per_k_step']:,} FLOPs: "
        f"{t['flop_per_byte']:.1f} FLOP/byte (= BLOCK_M*BLOCK_N / (BLOCK_M+BLOCK_N)).",
        f"Shared memory with num_stages={num_stages}: {smem:.0f} KB "
        + ("(fits the 99 KB budget)." if t["fits"] else "(over the 99 KB budget: too big for smaller GPUs)."),
    ]
    if tflops is not None:
        lines.append(f"Measured on this GPU (M = N = K = 4096): {tflops:.0f} TFLOP/s.")
    fig.text(0.02, 0.02, "\n".join(lines), fontsize=8.5, va="bottom", ha="left")
    return fig


def matmul_tiles_widget(M: int = 200, N: int = 160, K: int = 120, timer=None):
    """Dropdowns for BLOCK_M/N/K and sliders for the program id, redrawing :func:`draw_tile_reads`.

    ``timer(block_m, block_n, block_k)`` (optional, GPU only) returns TFLOP/s for those tiles; it is
    called only when the "time it" box is ticked, and once in a headless run (which draws the default tiles once).
    """
    sliders = {}  # the pid sliders, whose range follows the tiles (none in a headless run)

    def show(block_m, block_n, block_k, pid_m, pid_n, time_it=False):
        last_m, last_n = math.ceil(M / block_m) - 1, math.ceil(N / block_n) - 1
        if sliders:
            sliders["pid_m"].max, sliders["pid_n"].max = last_m, last_n
        tflops = timer(block_m, block_n, block_k) if (timer is not None and time_it) else None
        draw_tile_reads(M, N, K, block_m, block_n, block_k, min(pid_m, last_m), min(pid_n, last_n),
                        tflops=tflops)
        plt.show()

    def controls(widgets):
        sliders.update(pid_m=widgets.IntSlider(value=1, min=0, max=15, description="pid_m"),
                       pid_n=widgets.IntSlider(value=2, min=0, max=15, description="pid_n"))
        made = dict(block_m=widgets.Dropdown(options=BLOCK_CHOICES, value=32, description="BLOCK_M"),
                    block_n=widgets.Dropdown(options=BLOCK_CHOICES, value=32, description="BLOCK_N"),
                    block_k=widgets.Dropdown(options=BLOCK_CHOICES[:4], value=32, description="BLOCK_K"),
                    **sliders)
        if timer is not None:
            made["time_it"] = widgets.Checkbox(value=False, description="time it (GPU)")
        return made

    defaults = dict(block_m=32, block_n=32, block_k=32, pid_m=1, pid_n=2, time_it=timer is not None)
    return interactive(show, defaults, controls)


def program_order(num_pid_m: int, num_pid_n: int, group_m: int) -> list[tuple[int, int]]:
    """The C tile (pid_m, pid_n) that launch number 0, 1, 2, ... computes, with grouped ordering.

    group_m = 1 is plain row-major order. The same arithmetic as Triton's matmul tutorial.
    """
    order = []
    for pid in range(num_pid_m * num_pid_n):
        per_group = group_m * num_pid_n
        first_m = (pid // per_group) * group_m
        size_m = min(num_pid_m - first_m, group_m)
        order.append((first_m + (pid % per_group) % size_m, (pid % per_group) // size_m))
    return order


def grid_2d_order(num_pid_m: int, num_pid_n: int) -> list[tuple[int, int]]:
    """The C tile (pid_m, pid_n) that launch number 0, 1, 2, ... computes on phase 3's 2-D grid
    ``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))``: the GPU starts programs with axis 0 varying fastest, so pid_m
    runs down a column of C tiles before pid_n moves on."""
    return [(pid % num_pid_m, pid // num_pid_m) for pid in range(num_pid_m * num_pid_n)]


def strips_read(order: list[tuple[int, int]], wave: int) -> tuple[int, int]:
    """(distinct rows of A tiles, distinct columns of B tiles) the first ``wave`` programs read."""
    first = order[:wave]
    return len({m for m, _ in first}), len({n for _, n in first})


def draw_program_order(num_pid_m: int = 8, num_pid_n: int = 8, group_m: int = 4, wave: int = 8):
    """Phase 3's 2-D grid (pid_m fastest) and the grouped order side by side; the first ``wave`` programs
    are hatched.

    Programs that run at the same time share the L2 cache: the fewer distinct rows of A and columns of
    B they need, the more of their loads hit L2 instead of memory.
    """
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    panels = ((axes[0], grid_2d_order(num_pid_m, num_pid_n), "2-D grid (pid_m varies fastest)"),
              (axes[1], program_order(num_pid_m, num_pid_n, group_m), f"grouped, 1-D grid (GROUP_M = {group_m})"))
    for ax, order, name in panels:
        for launch, (m, n) in enumerate(order):
            early = launch < wave
            ax.add_patch(Rectangle((n, -m - 1), 1, 1, facecolor="#fdd49e" if early else "white",
                                   edgecolor="black", hatch="///" if early else None))
            ax.text(n + 0.5, -m - 0.5, str(launch), ha="center", va="center", fontsize=8,
                    fontweight="bold" if early else "normal",
                    bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8) if early else None)
        rows, cols = strips_read(order, wave)
        ax.set_xlim(-0.2, num_pid_n + 0.2)
        ax.set_ylim(-num_pid_m - 0.2, 0.2)
        ax.set_aspect("equal")
        ax.set_xticks([i + 0.5 for i in range(num_pid_n)], [str(i) for i in range(num_pid_n)], fontsize=7)
        ax.set_yticks([-i - 0.5 for i in range(num_pid_m)], [str(i) for i in range(num_pid_m)], fontsize=7)
        ax.set_xlabel("pid_n (column of C tiles)", fontsize=8)
        ax.set_ylabel("pid_m (row of C tiles)", fontsize=8)
        ax.set_title(f"{name}\nthe first {wave} programs (hatched) read\n{rows} row(s) of A tiles + {cols} "
                     f"column(s) of B tiles = {rows + cols} strips", fontsize=8.5)
    fig.suptitle("Launch order of the C tiles (numbers): programs launched together share the L2 cache",
                 fontsize=9)
    fig.tight_layout()
    return fig


def program_order_widget(num_pid_m: int = 8, num_pid_n: int = 8):
    """Sliders for GROUP_M and the number of programs running at once (headless: drawn once)."""

    def show(group_m, wave):
        draw_program_order(num_pid_m, num_pid_n, group_m, wave)
        plt.show()

    group_m, wave = min(4, num_pid_m), min(8, num_pid_m * num_pid_n)
    return interactive(show, dict(group_m=group_m, wave=wave), lambda widgets: dict(
        group_m=widgets.IntSlider(value=group_m, min=1, max=num_pid_m, description="GROUP_M"),
        wave=widgets.IntSlider(value=wave, min=1, max=num_pid_m * num_pid_n, description="at once"),
    ))

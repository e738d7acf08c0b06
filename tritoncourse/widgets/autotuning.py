"""Interactive pictures for autotuning: waves of programs on the SMs, occupancy, and config sweeps.

Waves and occupancy are drawn from arithmetic (the CUDA occupancy rules), so they work on the CPU.
Timings exist only on a GPU: there, the sweep widgets time the learner's kernel config by config and
read each compiled kernel's registers and shared memory from its metadata; on the CPU they show the
GPU sweep recorded by ``make gpu-check`` in results/gpu-results.json (section ``autotuning``), labelled
with where it came from, and say so when there is none. Nothing is ever invented.
Heat-map cells carry their numbers and the best one is marked with text, not colour alone.
"""
from __future__ import annotations

import math


from ..benchmarking import RESULTS_FILE, grading, load_results
from ..gpus import GPUS, WARP_SIZE, describe, matmul_accumulator_registers, matmul_shared_memory, occupancy, waves
from ..device import infer_device
from ._matplotlib import Rectangle, plt
from . import interactive

SECTION = "autotuning"
BLOCK_SIZES = (64, 128, 256, 512, 1024)
NUM_WARPS = (1, 2, 4, 8)
NUM_STAGES = (1, 2, 3, 4)
TILES = (32, 64, 128, 256)


# ------------------------------------------------------------------------------------------- waves
def matmul_programs(size: int, tile: int) -> int:
    """Programs of a square M = N = size matmul with square tile x tile outputs per program."""
    return math.ceil(size / tile) ** 2


def draw_waves(size: int = 1536, tile: int = 128, programs_per_sm: int = 1, gpu: str = "H100 SXM / H200"):
    """Left: the waves of one launch, each a bar of SM slots, the idle slots of the last wave hatched.
    Right: the fraction of slots doing work vs the problem size, for several tile sizes."""
    g = GPUS[gpu]
    n = matmul_programs(size, tile)
    w = waves(n, programs_per_sm, g)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [1.1, 1]})
    shown = min(w["waves"], 12)
    for i in range(shown):
        wave = w["waves"] - shown + i  # the last waves, where the tail is
        busy = w["slots"] if wave < w["waves"] - 1 else w["last_wave"]
        ax.add_patch(Rectangle((0, -i), busy, 0.8, facecolor="#6baed6", edgecolor="black", lw=0.5))
        if busy < w["slots"]:
            ax.add_patch(Rectangle((busy, -i), w["slots"] - busy, 0.8, facecolor="white", edgecolor="black",
                                   hatch="///", lw=0.5))
            ax.text(busy + (w["slots"] - busy) / 2, -i + 0.4, f"idle: {w['slots'] - busy}", ha="center",
                    va="center", fontsize=8, bbox=dict(fc="white", ec="none", alpha=0.85))
        ax.text(-0.01 * w["slots"], -i + 0.4, f"wave {wave + 1}", ha="right", va="center", fontsize=8)
    ax.set_xlim(-0.16 * w["slots"], w["slots"] * 1.02)
    ax.set_xticks([t for t in ax.get_xticks() if 0 <= t <= w["slots"]])
    ax.set_ylim(-shown + 0.6, 1.2)
    ax.set_yticks([])
    ax.set_xlabel(f"program slots: {g.sms} SMs x {programs_per_sm} program(s) per SM = {w['slots']}", fontsize=8)
    ax.set_title(f"M = N = {size}, {tile}x{tile} tiles: {n} programs in {w['waves']} wave(s)"
                 f"{' (last 12 shown)' if w['waves'] > 12 else ''}\nslots doing work: {100 * w['utilisation']:.0f}%",
                 fontsize=9)
    sizes = list(range(256, 8192 + 1, 64))
    for t, style in zip(TILES, ("-", "--", "-.", ":")):
        ax2.plot(sizes, [100 * waves(matmul_programs(s, t), programs_per_sm, g)["utilisation"] for s in sizes],
                 style, lw=1.2, label=f"{t}x{t} tiles")
    ax2.axvline(size, color="black", lw=0.8)
    ax2.text(size, 3, f" {size}", fontsize=8)
    ax2.set_ylim(0, 105)
    ax2.set_xlabel("M = N", fontsize=8)
    ax2.set_ylabel("slots doing work (%)", fontsize=8)
    ax2.set_title(f"{g.name}, {programs_per_sm} program(s) per SM: the tail of the last wave", fontsize=9)
    ax2.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def waves_widget(size: int = 1536, tile: int = 128, programs_per_sm: int = 1):
    """Sliders for the problem size, the tile, programs per SM and the GPU, redrawing :func:`draw_waves`
    (headless: drawn once)."""

    def show(size, tile, programs_per_sm, gpu):
        draw_waves(size, tile, programs_per_sm, gpu)
        plt.show()

    defaults = dict(size=size, tile=tile, programs_per_sm=programs_per_sm, gpu="H100 SXM / H200")
    return interactive(show, defaults, lambda widgets: dict(
        size=widgets.IntSlider(value=size, min=256, max=8192, step=128, description="M = N"),
        tile=widgets.Dropdown(options=list(TILES), value=tile, description="tile"),
        programs_per_sm=widgets.IntSlider(value=programs_per_sm, min=1, max=8, description="per SM"),
        gpu=widgets.Dropdown(options=list(GPUS), value="H100 SXM / H200", description="GPU"),
    ))


# --------------------------------------------------------------------------------------- occupancy
def draw_occupancy(num_warps: int = 4, registers: int = 128, shared_kb: int = 64, gpu: str = "H100 SXM / H200"):
    """Programs per SM allowed by each resource (threads, registers, shared memory, program slots); the
    smallest one wins and is labelled."""
    g = GPUS[gpu]
    occ = occupancy(num_warps, registers, shared_kb * 1024, g)
    fig, ax = plt.subplots(figsize=(8, 2.8))
    names = list(occ["limits"])
    values = [occ["limits"][k] for k in names]
    for i, (name, v) in enumerate(zip(names, values)):
        bound = v == occ["programs"]  # every resource that allows no more than the result (ties included)
        ax.barh(i, v, color="#fd8d3c" if bound else "#c6dbef", edgecolor="black", hatch="//" if bound else None)
        ax.text(v + 0.3, i, f"{v}" + ("  <- the limit" if bound else ""), va="center", fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlabel("programs per SM this resource allows", fontsize=8)
    ax.set_xlim(0, max(values + [1]) * 1.35 + 1)
    ax.set_title(f"{g.name}: {num_warps} warp(s) = {num_warps * WARP_SIZE} threads, {registers} registers/thread, "
                 f"{shared_kb} KB shared per program\n-> {occ['programs']} program(s) per SM, {occ['warps']} warps "
                 f"resident, occupancy {100 * occ['occupancy']:.0f}%", fontsize=9)
    fig.tight_layout()
    return fig


def occupancy_widget(num_warps: int = 4, registers: int = 128, shared_kb: int = 64):
    """Sliders for one program's num_warps, registers per thread and shared memory (headless: drawn once)."""

    def show(num_warps, registers, shared_kb, gpu):
        draw_occupancy(num_warps, registers, shared_kb, gpu)
        plt.show()

    defaults = dict(num_warps=num_warps, registers=registers, shared_kb=shared_kb, gpu="H100 SXM / H200")
    return interactive(show, defaults, lambda widgets: dict(
        num_warps=widgets.Dropdown(options=[1, 2, 4, 8, 16, 32], value=num_warps, description="num_warps"),
        registers=widgets.IntSlider(value=registers, min=16, max=255, step=8, description="registers"),
        shared_kb=widgets.IntSlider(value=shared_kb, min=0, max=228, step=4, description="shared KB"),
        gpu=widgets.Dropdown(options=list(GPUS), value="H100 SXM / H200", description="GPU"),
    ))


def config_budget(configs, gpu: str = "H100 SXM / H200") -> list[dict]:
    """For matmul configs: the course's shared-memory estimate, the accumulator's registers per thread and
    the programs per SM those two allow (registers counted for the accumulator only: a lower bound)."""
    g = GPUS[gpu]
    rows = []
    for c in configs:
        smem = matmul_shared_memory(c)
        regs = matmul_accumulator_registers(c)
        occ = occupancy(c.num_warps, min(255, max(32, int(regs) + 32)), smem, g)
        rows.append({"config": describe(c), "shared KB": smem / 1024, "acc regs/thread": regs,
                     "programs/SM": occ["programs"], "bound by": occ["bound"]})
    return rows


def print_config_budget(configs, gpu: str = "H100 SXM / H200") -> None:
    """The table of :func:`config_budget`, one line per config."""
    rows = config_budget(configs, gpu)
    print(f"{'config':<72} {'shared KB':>9} {'acc regs':>8} {'programs/SM':>11}  bound by  ({gpu}, estimates)")
    for r in rows:
        print(f"{r['config']:<72} {r['shared KB']:>9.0f} {r['acc regs/thread']:>8.0f} {r['programs/SM']:>11}  "
              f"{r['bound by']}")


# ------------------------------------------------------------------------------------------ heat maps
def draw_heatmap(values: dict, xs, ys, xlabel: str, ylabel: str, unit: str, title: str, higher_is_better=True):
    """A heat map of ``values[(y, x)]`` (missing cells blank), each cell labelled, the best one boxed and
    marked 'best'."""
    import numpy as np

    grid = np.full((len(ys), len(xs)), np.nan)
    for i, y in enumerate(ys):
        for j, x in enumerate(xs):
            v = values.get((y, x))
            if v is not None and math.isfinite(v):
                grid[i, j] = v
    fig, ax = plt.subplots(figsize=(1.3 * len(xs) + 2.5, 0.6 * len(ys) + 1.8))
    im = ax.imshow(grid, cmap="viridis" if higher_is_better else "viridis_r", aspect="auto")
    finite = ~np.isnan(grid)
    best = None
    if finite.any():
        flat = np.where(finite, grid, -np.inf if higher_is_better else np.inf)
        best = np.unravel_index(np.argmax(flat) if higher_is_better else np.argmin(flat), grid.shape)
    for i in range(len(ys)):
        for j in range(len(xs)):
            if finite[i, j]:
                v = grid[i, j]
                label = (f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}") + ("\nbest" if best == (i, j) else "")
                ax.text(j, i, label, ha="center", va="center", fontsize=8,
                        color="black", bbox=dict(fc="white", ec="none", alpha=0.7, pad=1))
            else:
                ax.text(j, i, "-", ha="center", va="center", fontsize=8)
    if best is not None:
        ax.add_patch(Rectangle((best[1] - 0.5, best[0] - 0.5), 1, 1, fill=False, ec="red", lw=2.5))
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label=unit)
    fig.tight_layout()
    return fig


def _recorded(key: str, path=RESULTS_FILE):
    """(data, environment) for one recorded table of the autotuning section, or (None, reason)."""
    results = load_results(path)
    section = (results or {}).get("benchmarks", {}).get(SECTION)
    if not section or key not in section:
        return None, (f"No recorded GPU sweep '{key}' yet (results/gpu-results.json has no '{SECTION}' section "
                      "with it): run `make gpu-check` on a machine with an NVIDIA GPU. Nothing is shown rather "
                      "than numbers that were not measured.")
    return section[key], results.get("environment", {})


def _where(env: dict) -> str:
    return (f"Recorded on {env.get('gpu', '?')} (driver {env.get('driver', '?')}), torch {env.get('torch', '?')}, "
            f"triton {env.get('triton', '?')}, {env.get('date', '?')}.")


def vector_add_sweep(kernel, n: int, num_stages: int = 1, block_sizes=BLOCK_SIZES, warps=NUM_WARPS) -> dict:
    """GB/s of the vector add kernel (its @triton.jit function) for every BLOCK_SIZE x num_warps (GPU only)."""
    import torch
    import triton

    fn = getattr(kernel, "fn", kernel) if hasattr(kernel, "configs") else kernel
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    values = {}
    for b in block_sizes:
        for w in warps:
            ms = triton.testing.do_bench(
                lambda: fn[(triton.cdiv(n, b),)](x, y, out, n, BLOCK_SIZE=b, num_warps=w, num_stages=num_stages),
                return_mode="median")
            values[(w, b)] = 3 * n * 4 / (ms * 1e-3) / 1e9
    return values


def sweep_widget(kernel=None, sizes=(2**16, 2**20, 2**24), path=RESULTS_FILE):
    """The vector add's BLOCK_SIZE x num_warps heat map, per size and num_stages: timed live on a GPU (the
    learner's kernel), the recorded GPU sweep on the CPU. Headless: one heat map, the default choices."""
    live = kernel is not None and infer_device() == "cuda" and not grading()
    if live:
        def show(n, num_stages):
            values = vector_add_sweep(kernel, n, num_stages)
            draw_heatmap(values, BLOCK_SIZES, NUM_WARPS, "BLOCK_SIZE", "num_warps", "GB/s",
                         f"vector add, n = {n} fp32, num_stages = {num_stages}: GB/s (higher is better)")
            plt.show()

        return interactive(show, dict(n=sizes[1], num_stages=1), lambda widgets: dict(
            n=widgets.Dropdown(options=list(sizes), value=sizes[1], description="n"),
            num_stages=widgets.Dropdown(options=list(NUM_STAGES), value=1, description="num_stages")))
    data, env = _recorded("vector_add_sweep", path)
    if data is None:
        print(env)
        return None
    cols = data["columns"]
    idx = {c: cols.index(c) for c in ("n", "BLOCK_SIZE", "num_warps", "num_stages", "GB/s")}
    rows = data["rows"]
    ns = sorted({r[idx["n"]] for r in rows})
    stages = sorted({r[idx["num_stages"]] for r in rows})
    print(_where(env) + " Timed on that GPU, not here.")

    def show(n, num_stages):
        values = {(r[idx["num_warps"]], r[idx["BLOCK_SIZE"]]): r[idx["GB/s"]] for r in rows
                  if r[idx["n"]] == n and r[idx["num_stages"]] == num_stages}
        xs = sorted({b for _, b in values})
        ys = sorted({w for w, _ in values})
        draw_heatmap(values, xs, ys, "BLOCK_SIZE", "num_warps", "GB/s",
                     f"vector add, n = {n} fp32, num_stages = {num_stages} (recorded on {env.get('gpu', '?')}): "
                     "GB/s, higher is better")
        plt.show()

    return interactive(show, dict(n=ns[len(ns) // 2], num_stages=stages[0]), lambda widgets: dict(
        n=widgets.Dropdown(options=ns, value=ns[len(ns) // 2], description="n"),
        num_stages=widgets.Dropdown(options=stages, value=stages[0], description="num_stages")))


# ------------------------------------------------------------------------------------ autotuner tables
def timings_table(tuner, work: float | None = None, unit: str = "TFLOP/s", scale: float = 1e-12) -> list[tuple]:
    """The autotuner's last tuning as rows (config, ms, rate) sorted fastest first; ``work`` is the FLOPs or
    bytes of one call (rate = work * scale / seconds)."""
    rows = []
    for config, t in tuner.configs_timings.items():
        ms = t[0] if isinstance(t, (list, tuple)) else t
        rate = work * scale / (ms * 1e-3) if work and ms and math.isfinite(ms) else None
        rows.append((config, ms, rate))
    return sorted(rows, key=lambda r: r[1])


def print_timings(tuner, work: float | None = None, unit: str = "TFLOP/s", scale: float = 1e-12) -> None:
    """Print every config the autotuner timed, fastest first, the chosen one marked."""
    best = getattr(tuner, "best_config", None)
    for config, ms, rate in timings_table(tuner, work, unit, scale):
        mark = "  <- best_config" if config == best else ""
        speed = f"{rate:9.2f} {unit}" if rate is not None else ""
        shown = "failed (inf)" if not math.isfinite(ms) else f"{ms:9.3f} ms"
        print(f"{describe(config):<72} {shown} {speed}{mark}")
    if hasattr(tuner, "bench_time"):
        print(f"tuning took {tuner.bench_time:.2f} s for {len(tuner.configs_timings)} configs")


def compiled_resources(kernel, launch, gpu: str | None = None) -> list[dict]:
    """For every config of an autotuned kernel (GPU only): compile and run it once through ``launch(fn,
    meta)`` (which must return what ``fn[grid](...)`` returns), then read the compiled kernel's registers,
    spills and shared memory from its metadata, and the programs per SM they allow."""
    import torch

    from ..gpus import GPU

    props = torch.cuda.get_device_properties(0)
    g = GPUS.get(gpu) if gpu else None
    if g is None:
        g = GPU(props.name, props.multi_processor_count,
                registers_per_sm=getattr(props, "regs_per_multiprocessor", 65536),
                threads_per_sm=getattr(props, "max_threads_per_multi_processor", 2048),
                shared_per_sm=getattr(props, "shared_memory_per_multiprocessor", 228 * 1024),
                shared_per_program=getattr(props, "shared_memory_per_block_optin", 227 * 1024))
    rows = []
    for c in kernel.configs:
        try:
            compiled = launch(kernel.fn, c.all_kwargs())
            regs, spills, shared = compiled.n_regs, compiled.n_spills, compiled.metadata.shared
        except Exception as err:  # OutOfResources: the config does not fit this GPU
            rows.append({"config": describe(c), "error": f"{type(err).__name__}: {str(err)[:80]}"})
            continue
        occ = occupancy(c.num_warps, regs, shared, g)
        rows.append({"config": describe(c), "registers": regs, "spills": spills, "shared KB": shared / 1024,
                     "programs/SM": occ["programs"], "bound by": occ["bound"],
                     "occupancy %": 100 * occ["occupancy"]})
    return rows


def print_compiled(configs, compiled, programs_per_sm=None, gpu_limits: dict | None = None,
                   gpu: str = "H100 SXM / H200") -> None:
    """One line per config compiled by :func:`tritoncourse.compiled.compile_configs`: registers, spilled
    bytes, shared memory, and the programs per SM the learner's ``programs_per_sm`` gives next to the course's
    (section 2's rules), with the resource that decides."""
    from ..gpus import gpu_limits as limits_of

    g = GPUS[gpu]
    limits = gpu_limits or limits_of(g)
    print(f"compiled for sm_90 ({gpu}); 'yours' is your programs_per_sm, 'SM' the course's answer")
    print(f"{'config':<72} {'regs':>5} {'spilled':>8} {'shared KB':>9} {'yours':>6} {'SM':>4}  bound by (occupancy)")
    unwritten = False
    for c, k in zip(configs, compiled):
        if isinstance(k, str):
            print(f"{describe(c):<72} does not compile: {k[:100]}")
            continue
        want = occupancy(k.num_warps, k.registers, k.shared, g)
        yours = "-"
        if programs_per_sm is not None:
            try:
                got = programs_per_sm(k.registers, k.num_warps, k.shared, limits)
                yours = f"{got}{' ✓' if got == want['programs'] else ' ✗'}"
            except NotImplementedError:
                unwritten = True
            except Exception as err:  # noqa: BLE001 - the learner's function: say what it raised
                yours = type(err).__name__
        bound = "does not fit" if not want["programs"] else f"{want['bound']} ({100 * want['occupancy']:.0f}%)"
        print(f"{describe(c):<72} {k.registers:>5} {k.spill_stores:>8} {k.shared / 1024:>9.1f} {yours:>6} "
              f"{want['programs']:>4}  {bound}")
    if unwritten:
        print("(programs_per_sm is not written yet: the 'yours' column fills in once it is.)")


def show_recorded_table(key: str, path=RESULTS_FILE) -> None:
    """A recorded table of the autotuning section (e.g. 'matmul_sweep', 'resources'), or why there is none."""
    data, env = _recorded(key, path)
    if data is None:
        print(env)
        return
    print(_where(env) + " Timed on that GPU, not here.")
    cols = data["columns"]
    widths = [max(len(str(c)), 8) for c in cols]
    for row in data["rows"]:
        widths = [max(w, len(f"{v:.4g}" if isinstance(v, float) else str(v))) for w, v in zip(widths, row)]
    print("  ".join(f"{c:>{w}}" for c, w in zip(cols, widths)))
    for row in data["rows"]:
        print("  ".join((f"{v:>{w}.4g}" if isinstance(v, float) else f"{v!s:>{w}}") for v, w in zip(row, widths)))
    for note in data.get("notes", []):
        print(note)

"""The widgets when a machine runs the notebook: does every factory draw once with its defaults and create no
ipywidgets object (nbgrader, or TRITONCOURSE_HEADLESS=1 from gpu_check), and still make real widgets for a person?"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from tritoncourse import widgets as W  # noqa: E402
from tritoncourse.widgets import (attention, attention_backward, autotuning, matmul, recorded, softmax,  # noqa: E402
                                  vector_add)


@pytest.fixture
def shows(monkeypatch):
    """Counts plt.show() calls (each is one picture drawn) and closes the figures."""
    calls = []

    def show(*args, **kwargs):
        calls.append(len(plt.get_fignums()))
        plt.close("all")

    monkeypatch.setattr(plt, "show", show)
    return calls


@pytest.fixture
def person(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv(W.HEADLESS_VARIABLE, raising=False)


@pytest.fixture
def machine(monkeypatch, person):
    """Headless, and ipywidgets unimportable: a factory that creates a widget anyway fails."""
    monkeypatch.setenv(W.HEADLESS_VARIABLE, "1")
    monkeypatch.setitem(sys.modules, "ipywidgets", None)


def _recorded_sweep(tmp_path):
    rows = [[n, b, w, s, float(b * w + n % 7)] for n in (2**16, 2**20, 2**24) for b in (64, 1024) for w in (1, 8)
            for s in (1, 2)]
    recorded = {"environment": {"gpu": "TEST GPU", "driver": "0", "torch": "t", "triton": "3.6.0", "date": "d"},
                "benchmarks": {"autotuning": {"columns": ["kernel"], "rows": [], "vector_add_sweep": {
                    "columns": ["n", "BLOCK_SIZE", "num_warps", "num_stages", "GB/s"], "rows": rows}}}}
    path = tmp_path / "gpu-results.json"
    path.write_text(json.dumps(recorded))
    return path


def _factories(tmp_path):
    path = _recorded_sweep(tmp_path)
    return {
        "block_coverage_widget": lambda: vector_add.block_coverage_widget(37, 8),
        "online_softmax_widget": lambda: softmax.online_softmax_widget("increasing (the max grows in every tile)",
                                                                       37, 8),
        "matmul_tiles_widget": lambda: matmul.matmul_tiles_widget(M=200, N=160, K=120),
        "program_order_widget": lambda: matmul.program_order_widget(8, 8),
        "waves_widget": lambda: autotuning.waves_widget(1536, 128),
        "occupancy_widget": lambda: autotuning.occupancy_widget(4, 168, 64),
        "sweep_widget": lambda: autotuning.sweep_widget(None, path=path),
        "attention_tiles_widget": lambda: attention.attention_tiles_widget(200, 32, 32, causal=True),
        "backward_tiles_widget": lambda: attention_backward.backward_tiles_widget(200, 32, 64, causal=True),
        "roofline_widget": lambda: recorded.roofline_widget(path=path),
    }


@pytest.mark.parametrize("env", [{"TRITONCOURSE_HEADLESS": "1"}, {"TRITONCOURSE_HEADLESS": "true"},
                                 {"NBGRADER_EXECUTION": "autograde"}, {"NBGRADER_EXECUTION": "validate"}])
def test_headless_when_a_machine_runs_the_notebook(monkeypatch, person, env):
    assert not W.headless()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert W.headless()


@pytest.mark.parametrize("value", ["", "0", "no"])
def test_not_headless_for_other_values(monkeypatch, person, value):
    monkeypatch.setenv(W.HEADLESS_VARIABLE, value)
    assert not W.headless()


def test_every_factory_draws_once_and_returns_none_headless(machine, shows, tmp_path, capsys):
    for name, factory in _factories(tmp_path).items():
        before = len(shows)
        assert factory() is None, name
        assert len(shows) == before + 1, f"{name} drew {len(shows) - before} picture(s), not 1"
        assert shows[-1] >= 1, f"{name} showed no figure"
    out = capsys.readouterr().out
    assert "log(s) + m" in out  # the online softmax widget's printed check ran too
    assert "TEST GPU" in out  # the sweep widget read the recorded data


def test_nbgrader_draws_no_picture_and_says_so(monkeypatch, person, shows, tmp_path, capsys):
    """Under nbgrader (autograde or validate) no factory and no recorded plot draws or makes a widget: nothing
    graded is a picture, and drawing was about 1.3 s of every phase-1 grading."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    (tmp_path / "tables").mkdir()
    path = _recorded_tables(tmp_path / "tables")
    from tritoncourse.roofline import show_recorded_roofline

    pictures = {**_factories(tmp_path),
                "plot_recorded": lambda: recorded.plot_recorded("vector_add", "n (fp32)", [("T", "Triton GB/s", {})],
                                                                ylabel="GB/s", title="t", path=path),
                "plot_recorded_attention": lambda: attention.plot_recorded_attention(json.loads(path.read_text())),
                "show_recorded_roofline": lambda: show_recorded_roofline(path=path)}
    for name, picture in pictures.items():
        assert picture() is None, name
        assert "not while nbgrader runs the notebook" in capsys.readouterr().out, name
    assert shows == []


def test_grading_a_widget_cell_imports_no_matplotlib():
    """A widget cell and a recorded-plot cell, as nbgrader runs them: matplotlib is never imported."""
    import subprocess

    code = ("import sys\n"
            "from tritoncourse.widgets.vector_add import block_coverage_widget\n"
            "from tritoncourse.widgets.recorded import plot_recorded\n"
            "block_coverage_widget(n_elements=37, block_size=8)\n"
            "plot_recorded('vector_add', 'n (fp32)', [('Triton', 'Triton GB/s', {})], ylabel='GB/s', title='t')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'ipywidgets')))\n")
    env = dict(__import__("os").environ, NBGRADER_EXECUTION="autograde")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_headless_runs_the_timer_path_once(machine, shows):
    """The matmul widget's "time it" path runs in a headless run (on a GPU it times the kernel and can fail)."""
    timed = []
    assert matmul.matmul_tiles_widget(timer=lambda *tiles: timed.append(tiles) or 123.0) is None
    assert timed == [(32, 32, 32)] and len(shows) == 1

    def broken(*tiles):
        raise RuntimeError("the timer failed")

    with pytest.raises(RuntimeError, match="the timer failed"):
        matmul.matmul_tiles_widget(timer=broken)


def test_a_person_gets_real_widgets(person, shows, tmp_path):
    import ipywidgets

    for name, factory in _factories(tmp_path).items():
        widget = factory()
        assert isinstance(widget, ipywidgets.interactive), name
        assert len(widget.children) >= 2, name
    timed = []
    widget = matmul.matmul_tiles_widget(timer=lambda *tiles: timed.append(tiles) or 1.0)
    assert timed == []  # the "time it" box starts unticked
    boxes = [c for c in widget.children if isinstance(c, ipywidgets.Checkbox)]
    assert len(boxes) == 1
    boxes[0].value = True
    assert timed == [(32, 32, 32)]


def test_attention_tile_plan_matches_the_kernel_loops():
    """Causal: key tiles before the query tile are full, the diagonal ones masked, later ones skipped; the work
    fraction is (T + 1) / (2T) for T query tiles; non-causal: only a ragged last key tile is masked."""
    plan = attention.tile_plan(256, 64, 32, causal=True)
    assert plan[1] == ["full", "full", "masked", "masked", "skipped", "skipped", "skipped", "skipped"]
    visited, total = attention.tile_work(256, 64, 64, causal=True)
    assert (visited, total) == (10, 16)  # T = 4: (4 + 1) / (2 * 4) of the pairs
    assert attention.tile_plan(100, 32, 32, causal=False)[0] == ["full", "full", "full", "masked"]
    assert attention.tile_work(128, 32, 32, causal=False) == (16, 16)
def test_the_2d_grid_order_is_the_launch_order_of_phase_3():
    """Program id = pid_m + pid_n * grid_m on a 2-D grid (axis 0 fastest): the first programs walk down a column
    of C tiles, reading many rows of A and one column of B; the grouped order reads fewer strips."""
    order = matmul.grid_2d_order(8, 8)
    assert order[:3] == [(0, 0), (1, 0), (2, 0)] and order[8] == (0, 1)
    assert sorted(order) == [(m, n) for m in range(8) for n in range(8)]
    assert matmul.strips_read(order, 8) == (8, 1)
    assert matmul.strips_read(matmul.program_order(8, 8, 4), 8) == (4, 2)


def _recorded_tables(tmp_path):
    data = {"environment": {"gpu": "TEST GPU", "driver": "0", "torch": "2.x", "triton": "3.6.0", "date": "D-DAY"},
            "benchmarks": {
                "vector_add": {"columns": ["n (fp32)", "Triton GB/s", "torch GB/s"],
                               "rows": [["2^12", 10.0, 11.0], ["2^14", 40.0, 39.0]], "measured": {"date": "D-1"}},
                "autotuning": {"columns": ["kernel", "problem", "autotuned"],
                               "rows": [["matmul+ReLU", "M=N=K=512 fp16", 30.0], ["vector add", "n=2^16 fp32", 5.0],
                                        ["matmul+ReLU", "M=N=K=4096 fp16", 600.0]]}}}
    path = tmp_path / "gpu-results.json"
    path.write_text(json.dumps(data))
    return path


def test_recorded_plot_draws_the_record_and_says_where_it_comes_from(tmp_path, shows, capsys):
    path = _recorded_tables(tmp_path)
    ax = recorded.plot_recorded("vector_add", "n (fp32)", [("Triton", "Triton GB/s", {}), ("Torch", "torch GB/s", {})],
                                ylabel="GB/s", title="vector-add", path=path)
    assert len(shows) == 1
    lines = {line.get_label(): list(zip(line.get_xdata(), line.get_ydata())) for line in ax.get_lines()}
    assert lines == {"Triton": [(4096, 10.0), (16384, 40.0)], "Torch": [(4096, 11.0), (16384, 39.0)]}
    assert "TEST GPU" in ax.get_title() and "D-1" in ax.get_title() and "not measured here" in ax.get_title()
    assert "not measured on this machine" in capsys.readouterr().out
    series = recorded.recorded_series("autotuning", "problem", [("a", "autotuned", {"kernel": "matmul+ReLU"})], path)
    assert series == {"a": [(512.0, 30.0), (4096.0, 600.0)]}


def test_recorded_plot_without_a_record_draws_nothing(tmp_path, shows, capsys):
    assert recorded.plot_recorded("softmax", "n_cols", [("x", "y", {})], "GB/s", "t",
                                  path=tmp_path / "missing.json") is None
    assert shows == [] and "No GPU results for 'softmax'" in capsys.readouterr().out


def test_roofline_control_bounds():
    """The control's verdicts follow min(P, I * B): a vector add is memory-bound everywhere, a 4096^3 matmul
    compute-bound everywhere, and the ridge moves with the GPU."""
    assert recorded.attainable_tflops(1 / 12, 4800, 989) == pytest.approx(0.4)
    assert recorded.attainable_tflops(1365, 4800, 989) == 989
    intensity, best, bound = recorded.draw_roofline_choice("vector add (fp32)", "H200 (datasheet)")
    assert bound == "memory-bound" and best == pytest.approx(0.4)
    assert recorded.draw_roofline_choice("matmul+ReLU 4096³ (fp16)", "RTX 4090 (datasheet)")[2] == "compute-bound"
    plt.close("all")


def test_the_backward_widget_counts_the_forwards_pairs_and_the_atomic_adders():
    """Both backward kernels visit the forward's pairs (causal: each query tile's key tiles up to its end), and with
    dQ by atomics the last query tile is reached by every key tile's program."""
    work = attention_backward.backward_work(200, 32, 64, causal=True)
    assert (work["visited"], work["total"]) == attention.tile_work(200, 32, 64, causal=True)
    assert work["max_adders"] == 4 and attention_backward.backward_work(200, 32, 64, False)["max_adders"] == 4
    assert attention_backward.backward_work(256, 64, 64, causal=True) == {"visited": 10, "total": 16, "max_adders": 4}

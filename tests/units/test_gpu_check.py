"""tools/gpu_check.py without a GPU: does it load, list its benchmarks, explain itself, and do the recorded-results
readers (README, notebooks, widgets) accept an autotuning section of the shape bench_autotuning writes?"""
import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_check():
    """tools/gpu_check.py imported by name (tools/ stays on sys.path), so that spawned workers import it too."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    return importlib.import_module("gpu_check")


def test_autotuning_is_a_registered_benchmark(gpu_check):
    assert gpu_check.BENCHMARKS["autotuning"] is gpu_check.bench_autotuning
    assert list(inspect.signature(gpu_check.bench_autotuning).parameters) == ["repeats", "peaks"]
    source = inspect.getsource(gpu_check.bench_autotuning)
    assert 'reference_module("05_autotuning")' in source and "reference_kernels" not in source


def test_help_works_without_a_gpu():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--notebooks", "--grading", "--bench", "--sections", "autotuning"):
        assert flag in proc.stdout


def test_unknown_section_is_refused_before_anything_runs():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--bench", "--sections", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown section(s) nope" in proc.stderr


def test_notebooks_run_headless_in_spawned_workers_with_nbclient_logs(gpu_check):
    source = inspect.getsource(gpu_check.run_notebooks) + inspect.getsource(gpu_check.execute_notebook)
    assert 'get_context("spawn")' in source and "mp_context=spawn" in source
    assert 'os.environ["TRITONCOURSE_HEADLESS"] = "1"' in source
    assert ".nbclient.log" in source and "logging.DEBUG" in source


def _synthetic_autotuning_section(gpu_check) -> dict:
    """A section shaped as bench_autotuning returns it (same columns, rows of the same types)."""
    best = "BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3"
    rates = {"earlier": 600.0, "autotuned": 640.0, "torch": 630.0, "cublas": 680.0}
    rows = [gpu_check._rate_row("matmul+ReLU", "M=N=K=4096 fp16", "TFLOP/s", rates, best, 12.3),
            gpu_check._rate_row("online softmax", "1024x65536 fp32", "GB/s",
                                {"earlier": 3000.0, "autotuned": 3100.0, "torch": 2500.0}, "BLOCK_SIZE=4096", 4.0)]
    sweep = [[n, b, w, s, float(b * w)] for n in (2**16, 2**20, 2**24) for b in (64, 128, 256, 512, 1024)
             for w in (1, 2, 4, 8) for s in (1, 2, 3, 4)]
    targets = {"matmul: autotuned >= 1.0x torch.relu(a @ b) at 4096": True,
               "matmul: autotuned >= 0.95x cuBLAS a @ b at 4096": False}
    return {
        "columns": ["kernel", "problem", "unit", "earlier", "autotuned", "torch", "cuBLAS a@b", "autotuned/earlier",
                    "autotuned/torch", "autotuned/cuBLAS", "best config", "tuning s"],
        "rows": rows, "targets": targets, "notes": [f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()],
        "vector_add_sweep": {"columns": ["n", "BLOCK_SIZE", "num_warps", "num_stages", "GB/s"], "rows": sweep},
        "matmul_sweep": {"columns": ["M=N=K", "config", "ms", "TFLOP/s", "chosen"],
                         "rows": [[4096, best, 0.215, 639.2, "best_config"], [4096, "BLOCK_M=32", float("inf"), 0.0, ""]]},
        "softmax_sweep": {"columns": ["n_rows", "n_cols", "config", "ms", "GB/s"],
                          "rows": [[1024, 65536, "BLOCK_SIZE=4096, num_warps=8", 0.17, 3100.0]]},
        "resources": {"columns": ["config", "registers", "spills", "shared KB", "programs/SM", "bound by",
                                  "occupancy %"],
                      "rows": [[best, 232, 0, 144.0, 1, "registers", 12.5],
                               ["BLOCK_M=256", "-", "-", "-", 0, "does not compile here: OutOfResources", 0.0]]},
    }


def test_recorded_results_readers_accept_the_autotuning_section(gpu_check, tmp_path, capsys, monkeypatch):
    from tritoncourse.benchmarking import results_markdown, show_recorded
    from tritoncourse.widgets import autotuning as W

    section = _synthetic_autotuning_section(gpu_check)
    assert all(len(r) == len(section["columns"]) for r in section["rows"])
    record = {"environment": {"gpu": "TEST GPU", "driver": "0", "torch": "t", "triton": "3.6.0", "date": "d",
                              "repeats": 5, "compute_capability": "9.0", "sm_count": 132, "cuda": "13.0",
                              "python": "3.12", "where": "here", "container": "not run"},
              "benchmarks": {"autotuning": section}}
    path = tmp_path / "gpu-results.json"
    path.write_text(json.dumps(record))  # inf becomes Infinity, as json.dumps writes it in gpu_check
    show_recorded("autotuning", path=path)
    out = capsys.readouterr().out
    assert "TEST GPU" in out and "matmul+ReLU" in out and "NOT met" in out
    for key in ("matmul_sweep", "resources", "softmax_sweep"):
        W.show_recorded_table(key, path=path)
        out = capsys.readouterr().out
        assert "TEST GPU" in out and "No recorded" not in out, key
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("TRITONCOURSE_HEADLESS", "1")  # draws the recorded heat map once, no widget
    monkeypatch.setattr(plt, "show", lambda *a, **k: plt.close("all"))
    assert W.sweep_widget(None, path=path) is None
    assert "TEST GPU" in capsys.readouterr().out
    markdown = results_markdown(json.loads(path.read_text()))
    assert "**autotuning**" in markdown and "matmul+ReLU" in markdown


def test_execute_notebook_runs_headless_and_logs_what_nbclient_received(gpu_check, tmp_path):
    """A real kernel (CPU): the widget cell draws once and creates no widget; nbclient's DEBUG log is written."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[
        new_code_cell("import os\nprint('headless =', os.environ.get('TRITONCOURSE_HEADLESS'))"),
        new_code_cell("from tritoncourse.widgets.matmul import program_order_widget\n"
                      "print(type(program_order_widget(4, 4)).__name__)"),
    ])
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    out = tmp_path / "out"
    out.mkdir()
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        status = pool.submit(gpu_check.execute_notebook, path, out, 120).result()
    assert status["errors"] == [], status
    ran = nbformat.read(out / "tiny.ipynb", as_version=4)
    texts = ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream") for c in ran.cells]
    assert "headless = 1" in texts[0] and "NoneType" in texts[1]
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in ran.cells[1].outputs)
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in ran.cells[1].outputs)
    log = (out / "tiny.nbclient.log").read_text()
    assert "Executing cell" in log and "headless = 1" in log and "'execution_state': 'idle'" in log

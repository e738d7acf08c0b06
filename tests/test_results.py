"""The README's GPU table and the notebooks' recorded results come from one file, never typed by hand."""
from pathlib import Path

from tritoncourse.benchmarking import README_START, load_results, render_readme, results_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_readme_results_block_is_generated_from_the_results_file():
    readme = ROOT / "README.md"
    assert README_START in readme.read_text()
    assert render_readme(readme) == readme.read_text(), "README is stale: rerun `make gpu-check`"


def test_results_file_names_gpu_versions_and_date_when_present():
    results = load_results()
    if results is None:
        assert "No GPU results recorded yet" in results_markdown()
        return
    env = results["environment"]
    for key in ("gpu", "driver", "torch", "triton", "date", "where", "container", "repeats"):
        assert env.get(key), key
    for name, table in results.get("benchmarks", {}).items():
        assert table["rows"] and all(len(r) == len(table["columns"]) for r in table["rows"]), name


def test_each_section_says_its_own_date_and_repetitions():
    """Sections are measured in separate runs, with different repetitions: each says its own; older records
    without them fall back to the file's."""
    env = {"gpu": "G", "compute_capability": "9.0", "sm_count": 1, "driver": "d", "torch": "t", "triton": "tr",
           "cuda": "c", "python": "p", "date": "D0", "where": "w", "container": "not run", "repeats": 5}
    table = {"columns": ["x"], "rows": [[1.0]]}
    results = {"environment": env, "benchmarks": {
        "undated": dict(table),
        "older": dict(table, measured={"date": "D2"}),
        "new": dict(table, measured={"date": "D1", "repeats": 11, "copy_gbps": 1.0, "cublas_fp16_tflops": 2.0})}}
    text = results_markdown(results)
    assert "_Measured D1, medians of 11 interleaved repetitions; roofs of that run" in text
    assert "_Measured D2, medians of 5 interleaved repetitions._" in text  # the file's repetitions
    assert text.count("_Measured") == 2  # a section without `measured` prints no line of its own
    for name, table in (load_results() or {}).get("benchmarks", {}).items():
        assert "date" in table.get("measured", {}) and "repeats" in table["measured"], name

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

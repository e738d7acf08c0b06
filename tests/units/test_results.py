"""The README's GPU summary, docs/RESULTS.md's tables and the notebooks' recorded results come from one file, never
typed by hand."""
from pathlib import Path

from tritoncourse.benchmarking import (SUMMARY, SUMMARY_START, TABLES_START, load_results, render_readme,
                                       render_results_doc, results_markdown, results_summary)

ROOT = Path(__file__).resolve().parents[2]


def test_readme_summary_and_results_tables_are_generated_from_the_results_file():
    readme, doc = ROOT / "README.md", ROOT / "docs" / "RESULTS.md"
    assert SUMMARY_START in readme.read_text() and TABLES_START in doc.read_text()
    assert render_readme(readme) == readme.read_text(), "README is stale: rerun `make gpu-check`"
    assert render_results_doc(doc) == doc.read_text(), "docs/RESULTS.md is stale: rerun `make gpu-check`"
    assert TABLES_START not in readme.read_text(), "the full tables belong in docs/RESULTS.md"


def test_the_summary_has_a_line_for_each_phase_and_names_each_target_missed():
    """Every line of SUMMARY finds its row in the record (a renamed column or a shape no longer measured would drop
    it silently), and each target the record marks NOT met is named."""
    results = load_results()
    if results is None:
        assert "No GPU results recorded yet" in results_summary()
        return
    text = results_summary(results)
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == len(SUMMARY) and {r.split(" | ")[0][2:] for r in rows} == {"1", "2", "3", "4", "5", "6"}
    missed = [n for t in results["benchmarks"].values() for n in t.get("notes", []) if n.endswith(": NOT met")]
    for note in missed:
        assert note.removesuffix(": NOT met") in text, note


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

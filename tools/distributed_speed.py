#!/usr/bin/env python3
"""How does `python -m tritoncourse grade` scale on Dask? Learners per hour against workers, and the coordinator's
own cost per notebook, which bounds how many workers one coordinator can feed.

    .venv/bin/python tools/distributed_speed.py                # measure, print, write results/distributed-<device>.json
    .venv/bin/python tools/distributed_speed.py --write-docs   # ... and the table of docs/INSTRUCTORS.md

A class of N learners (default 8) who each submitted the reference notebook of 01_vector_add (every test runs to
the end) is graded, each time in a fresh copy of the course: by local grading (`--jobs 1`, no Dask), and on a Dask
LocalCluster of 1 and of 2 worker processes, with the SQLite gradebook; then on 2 workers with the gradebook on a
PostgreSQL server started for it (skipped when PostgreSQL's server is not installed). Every figure is one measured
wall time, printed with the machine's load average. The projection to 50 workers is arithmetic on measured
figures, and says so.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tools"))
from grading_speed import device  # noqa: E402  (the machine, said the same way in both records)

A = "01_vector_add"
DOCS = ROOT / "docs" / "INSTRUCTORS.md"
BEGIN, END = "<!-- dask-timing:begin -->", "<!-- dask-timing:end -->"
COORD_RE = re.compile(r"Coordinator: (\d+) ms per notebook \(packing (\d+) ms, unpacking (\d+) ms, merging and "
                      r"recording (\d+) ms\)")
PROJECT_TO = 50


def env(**extra) -> dict:
    e = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    e.pop("TRITONCOURSE_SEED", None)
    e.pop("TRITONCOURSE_DB_URL", None)
    e.update(extra)
    return e


def make_course(tmp: Path, name: str, learners: int, db_url: str | None = None) -> tuple[Path, dict]:
    course = tmp / name
    course.mkdir()
    shutil.copy2(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(ROOT / "source" / A, course / "source" / A)
    e = env(**({"TRITONCOURSE_DB_URL": db_url} if db_url else {}))
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", A, "--force", "--log-level=WARN"],
                          cwd=course, env=e, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"generate_assignment failed:\n{proc.stderr[-3000:]}")
    nb = nbformat.read(course / "source" / A / f"{A}.ipynb", as_version=4)
    for i in range(learners):
        dest = course / "submitted" / f"learner{i:03d}" / A
        dest.mkdir(parents=True)
        nbformat.write(nb, dest / f"{A}.ipynb")
    return course, e


def grade(course: Path, e: dict, flags: list[str]) -> dict:
    load = os.getloadavg()[0]
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tritoncourse", "grade", "--course", str(course), *flags],
                          cwd=course, env=e, capture_output=True, text=True, timeout=7200)
    wall = time.monotonic() - start
    state = json.loads((course / "autograded" / ".classroom" / "state.json").read_text())["entries"]
    bad = {k: v.get("reason") or v.get("failed_tests") for k, v in state.items()
           if v.get("status") != "graded" or v.get("failed_tests")}
    if proc.returncode or bad:
        sys.exit(f"grading failed (exit {proc.returncode}): {bad}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    seconds = [v["seconds"] for v in state.values()]
    out = {"flags": " ".join(flags), "notebooks": len(state), "wall": round(wall, 1),
           "learners_per_hour": round(len(state) / wall * 3600, 1),
           "seconds_per_notebook": round(sum(seconds) / len(seconds), 1),
           "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}
    if m := re.search(r"^\d+ notebook\(s\) to grade.*$", proc.stdout, re.M):
        out["header"] = m.group(0)
    if m := COORD_RE.search(proc.stdout):
        out["coordinator_ms"] = dict(zip(("total", "pack", "unpack", "merge"), map(int, m.groups())))
    if m := re.search(r"^Graded per worker: (.*)$", proc.stdout, re.M):
        out["per_worker"] = m.group(1)
    started = re.search(r"^Dask: scheduler .*$", proc.stdout, re.M)
    out["dask"] = started.group(0) if started else ""
    out["output"] = proc.stdout.splitlines()[-(len(state) + 6):]
    return out


def project(r: dict) -> dict:
    """Learners per hour with W workers if each worker grades like one here and the coordinator's measured cost
    per notebook stays what it was: min(W / t_notebook, 1 / t_coordinator)."""
    one = r["runs"]["dask1"]
    pg = r["runs"].get("dask2_postgres") or r["runs"]["dask2"]
    t_task = one["seconds_per_notebook"]
    coord = max(r["runs"]["dask2"]["coordinator_ms"]["total"], pg["coordinator_ms"]["total"]) / 1000
    out = {"workers": PROJECT_TO, "t_notebook_s": t_task, "t_coordinator_s": coord,
           "workers_bound": round(PROJECT_TO * 3600 / t_task), "coordinator_bound": round(3600 / coord),
           "workers_one_coordinator_feeds": round(t_task / coord)}
    gpu = ROOT / "results" / "grading-gpu.json"
    if gpu.exists():
        g = json.loads(gpu.read_text())
        t_gpu = g["one_learner"]["jobs1"]["per_notebook"][f"{A}/solo"]["seconds"]
        out.update(t_notebook_gpu_s=t_gpu, workers_bound_gpu=round(PROJECT_TO * 3600 / t_gpu),
                   workers_one_coordinator_feeds_gpu=round(t_gpu / coord))
    return out


def markdown(r: dict) -> str:
    runs, p = r["runs"], r["projection"]
    names = {"local1": "local grading, `--jobs 1` (no Dask)", "dask1": "Dask LocalCluster, 1 worker",
             "dask2": "Dask LocalCluster, 2 workers", "dask2_postgres": "Dask LocalCluster, 2 workers, PostgreSQL"}
    lines = [f"Measured by `tools/distributed_speed.py` on {r['date']}: {r['device']}, Python {r['python']}; a "
             f"class of {r['learners']} learners, each the reference notebook of {A} (every test run to the end); "
             "each row one wall-clock measurement of `python -m tritoncourse grade` from start (cluster start "
             "included) to end.", "",
             "| grading | wall | learners per hour | seconds per notebook | coordinator per notebook "
             "(packing / unpacking / merging) | load |", "|---|---|---|---|---|---|"]
    for key, run in runs.items():
        c = run.get("coordinator_ms")
        coord = f"{c['total']} ms ({c['pack']} / {c['unpack']} / {c['merge']})" if c else "-"
        lines.append(f"| {names[key]} | {run['wall']:.0f} s | {run['learners_per_hour']:.0f} | "
                     f"{run['seconds_per_notebook']:.1f} s | {coord} | {run['load_before']}–{run['load_after']} |")
    lines += ["", f"**Projection to {p['workers']} workers** (arithmetic on the figures above, not a measurement): "
              f"a worker grades a notebook in {p['t_notebook_s']:.1f} s here, so {p['workers']} such workers could "
              f"grade {p['workers_bound']} per hour; the coordinator spends {1000 * p['t_coordinator_s']:.0f} ms of "
              f"its own on each notebook (the slower of SQLite and PostgreSQL), one at a time, so it merges at most "
              f"{p['coordinator_bound']} per hour and keeps about {p['workers_one_coordinator_feeds']} such workers "
              "busy."]
    if "t_notebook_gpu_s" in p:
        lines[-1] += (f" On the GPU with `compute-sanitizer` a notebook of {A} took {p['t_notebook_gpu_s']:.0f} s "
                      f"(results/grading-gpu.json): {p['workers']} GPU workers would grade {p['workers_bound_gpu']} "
                      f"per hour, and one coordinator keeps about {p['workers_one_coordinator_feeds_gpu']} GPU "
                      "workers busy.")
    return "\n".join(lines)


def write_docs(text: str) -> None:
    doc = DOCS.read_text()
    i, j = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    DOCS.write_text(doc[:i] + "\n" + text.rstrip() + "\n" + doc[j:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", type=int, default=8)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--no-local", action="store_true", help="skip the local (no Dask) baseline")
    args = ap.parse_args()
    r = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "device": device(),
         "python": platform.python_version(), "learners": args.learners, "runs": {}}
    kind = "gpu" if r["device"].startswith("gpu") else "cpu"
    out = ROOT / "results" / f"distributed-{kind}.json"
    with tempfile.TemporaryDirectory(prefix="tc-dask-speed-") as tmp:
        tmp = Path(tmp)
        gpu = ["--gpu"] if kind == "gpu" else []  # on a GPU machine: one worker per GPU (1, then 2)
        runs = [("local1", ["--jobs", "1"])] * (not args.no_local) + [
            ("dask1", ["--cluster", "local", "--jobs", "1", *gpu]), ("dask2", ["--cluster", "local", "--jobs", "2", *gpu])]
        for key, flags in runs:
            course, e = make_course(tmp, key, args.learners)
            r["runs"][key] = grade(course, e, flags)
            print(key, json.dumps(r["runs"][key]), flush=True)
        if not args.no_postgres:
            from postgres import Postgres, PostgresMissing

            try:
                server = Postgres.start()
            except PostgresMissing as err:
                print(f"dask2_postgres skipped: {err}")
            else:
                try:
                    course, e = make_course(tmp, "dask2_postgres", args.learners,
                                            server.create_database("speed"))
                    r["runs"]["dask2_postgres"] = grade(course, e, ["--cluster", "local", "--jobs", "2", *gpu])
                    print("dask2_postgres", json.dumps(r["runs"]["dask2_postgres"]), flush=True)
                finally:
                    server.stop()
    r["projection"] = project(r)
    out.write_text(json.dumps(r, indent=1) + "\n")
    text = markdown(r)
    print(text)
    if args.write_docs:
        write_docs(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How fast does `python -m tritoncourse grade` grade? Seconds per graded notebook for every phase, one
learner's notebooks of every phase, and how a class grows, serial (--jobs 1) against parallel (--jobs N).

    .venv/bin/python tools/grading_speed.py                 # measure, print, write results/grading-<device>.json
    .venv/bin/python tools/grading_speed.py --write-docs    # ... and the tables of docs/INSTRUCTORS.md

Every run grades the instructor's reference notebooks (a learner who passes everything runs every test to
the end) with the real command, in a throw-away copy of the course (its own gradebook). On a GPU machine it
measures the GPU; without one, Triton's interpreter on the CPU. Nothing is estimated: each figure is a wall
time this script measured, with the machine's load average beside it (other jobs slow it down).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ["01_vector_add", "02_softmax", "03_matmul_relu", "04_benchmarking", "05_autotuning", "06_fused_attention",
               "07_attention_backward"]
DOCS = ROOT / "docs" / "INSTRUCTORS.md"
BEGIN, END = "<!-- timing:begin -->", "<!-- timing:end -->"  # the CPU's record (results/grading-cpu.json)
GPU_BEGIN, GPU_END = "<!-- gpu-timing:begin -->", "<!-- gpu-timing:end -->"  # the GPU's (results/grading-gpu.json)


def env(sandboxed: bool = True) -> dict:
    e = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    e.pop("TRITONCOURSE_SEED", None)
    if not sandboxed:  # the overhead measurement's baseline: the instructor's explicit opt-out
        sys.path.insert(0, str(ROOT))
        from tritoncourse.grading.sandbox import OPT_OUT_ENV, OPT_OUT_VALUE

        e[OPT_OUT_ENV] = OPT_OUT_VALUE
    return e


def run(cmd: list[str], cwd: Path, timeout: float = 7200, sandboxed: bool = True
        ) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env(sandboxed), capture_output=True, text=True, timeout=timeout)
    return time.monotonic() - start, proc


def device() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"gpu: {torch.cuda.get_device_name(0)}"
    except Exception:
        pass
    return f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Triton interpreter"


def make_base(tmp: Path) -> tuple[Path, float]:
    base = tmp / "base"
    base.mkdir()
    shutil.copy2(ROOT / "nbgrader_config.py", base / "nbgrader_config.py")
    start = time.monotonic()
    for a in ASSIGNMENTS:
        shutil.copytree(ROOT / "source" / a, base / "source" / a)
        _, proc = run([sys.executable, "-m", "nbgrader", "generate_assignment", a, "--force", "--log-level=WARN"],
                      base)
        if proc.returncode:
            sys.exit(f"generate_assignment {a} failed:\n{proc.stderr[-3000:]}")
    return base, time.monotonic() - start


def course_with(base: Path, tmp: Path, name: str, learners: dict[str, list[str]]) -> Path:
    """A copy of the generated course where each learner submitted the reference notebooks of these phases."""
    course = tmp / name
    shutil.copytree(base, course)
    for student, phases in learners.items():
        for a in phases:
            dest = course / "submitted" / student / a
            dest.mkdir(parents=True)
            nb = nbformat.read(base / "source" / a / f"{a}.ipynb", as_version=4)
            nbformat.write(nb, dest / f"{a}.ipynb")
    return course


def grade(course: Path, jobs: int, extra: list[str], sandboxed: bool = True) -> dict:
    load = os.getloadavg()[0]
    wall, proc = run([sys.executable, "-m", "tritoncourse", "grade", "--course", str(course), "--jobs", str(jobs),
                      *extra], course, sandboxed=sandboxed)
    state = json.loads((course / "autograded" / ".classroom" / "state.json").read_text())["entries"]
    bad = {k: e.get("reason") for k, e in state.items() if e.get("status") != "graded"}
    lost = {k: e.get("failed_tests") for k, e in state.items() if e.get("failed_tests")}
    if proc.returncode or bad or lost:
        sys.exit(f"grading failed (exit {proc.returncode}): {bad or lost}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    per = {}
    for key, e in state.items():
        a, student = key.split("/", 1)
        verdicts = course / "autograded" / student / a / f"{a}.verdicts.json"
        tests = json.loads(verdicts.read_text()) if verdicts.exists() else {}
        per[key] = {"seconds": e["seconds"], "tests": len(tests),
                    "test_seconds": round(sum(v.get("seconds", 0) for v in tests.values()), 1)}
    return {"jobs": jobs, "wall": round(wall, 1), "notebooks": len(state), "per_notebook": per,
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def plain_serial(course: Path, assignment: str, extra: list[str]) -> dict:
    load = os.getloadavg()[0]
    wall, proc = run([sys.executable, "-m", "nbgrader", "autograde", assignment, "--force", *extra], course)
    if proc.returncode:
        sys.exit(f"nbgrader autograde failed:\n{proc.stderr[-3000:]}")
    n = len(list((course / "autograded").glob(f"*/{assignment}/{assignment}.ipynb")))
    return {"wall": round(wall, 1), "notebooks": n, "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2)}


WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def measured(r: dict) -> tuple[list[str], str, list[str]]:
    """(the phases a record graded, "five notebooks (phases 1–5)", today's ASSIGNMENTS it lacks)."""
    phases = [k.split("/")[0] for k in r["one_learner"]["jobs1"]["per_notebook"]]
    numbers = sorted(int(a[:2]) for a in phases)
    span = (f"phases {numbers[0]}–{numbers[-1]}" if numbers == list(range(numbers[0], numbers[-1] + 1))
            else "phases " + ", ".join(map(str, numbers)))
    missing = [a for a in ASSIGNMENTS if a not in phases]
    return phases, f"{WORDS.get(len(phases), len(phases))} notebooks ({span})", missing


def markdown(r: dict) -> str:
    solo1, solo2 = r["one_learner"]["jobs1"], r["one_learner"]["jobsN"]
    jobs = solo2["jobs"]
    phases, notebooks, missing = measured(r)
    rows = ["| phase | tests | seconds per graded notebook (`--jobs 1`) | of which the isolated tests (sum) |",
            "|---|---|---|---|"]
    for a in phases:
        p = solo1["per_notebook"][f"{a}/solo"]
        rows.append(f"| {a} | {p['tests']} | {p['seconds']:.0f} s | {p['test_seconds']:.0f} s |")
    lines = [f"Measured by `tools/grading_speed.py` on {r['date']}: {r['device']}, Python {r['python']}; "
             "every figure is one wall-clock measurement of `python -m tritoncourse grade` on the reference "
             "notebooks (each test run to the end); load average "
             f"{r['load_min']:.1f}–{r['load_max']:.1f} during the runs, their own load included.", "", f"**One learner's {notebooks}**", "",
             *rows, "",
             f"All {WORDS.get(len(phases), len(phases))}: **{solo1['wall']:.0f} s** with `--jobs 1`, **{solo2['wall']:.0f} s** with `--jobs {jobs}` "
             f"(goal: at most 180 s: {'met' if min(solo1['wall'], solo2['wall']) <= 180 else 'NOT met'})."]
    if missing:
        lines += ["", f"The record predates {', '.join(missing)}, which is not in these figures; the tests column "
                  "counts each phase's kernel tests as they were then (measure again: `tools/grading_speed.py "
                  "--class-size 2 --write-docs`, on a quiet machine)."]
    if r.get("class"):
        c = r["class"]
        lines += ["", f"**A class of {c['learners']} learners, {notebooks} each, `--jobs {c['jobs']}`:** "
                  f"{c['wall']:.0f} s for {c['notebooks']} notebooks, so **{c['learners_per_hour']:.0f} learners "
                  "per hour** on this machine."]
    g = r.get("growth") or {"rows": []}
    if not g["rows"]:
        return "\n".join(lines)
    lines += ["", f"**How a class grows** (phase {g['assignment']}, N learners):", "",
              f"| N | `--jobs 1` | `--jobs {jobs}` | speed-up | per notebook (`--jobs {jobs}`) |", "|---|---|---|---|---|"]
    for row in g["rows"]:
        lines.append(f"| {row['learners']} | {row['jobs1']:.0f} s | {row['jobsN']:.0f} s | "
                     f"{row['jobs1'] / row['jobsN']:.2f}× | {row['jobsN'] / row['learners']:.1f} s |")
    if g.get("plain"):
        p = g["plain"]
        same = next((row for row in g["rows"] if row["learners"] == p["notebooks"]), None)
        cost = (f" ({(same['jobs1'] - p['wall']) / p['notebooks']:+.1f} s a notebook at `--jobs 1` here)"
                if same else "")
        lines += ["", f"Plain `nbgrader autograde {g['assignment']}` (one process, serial, no retries and no "
                  f"resumption) graded the same {p['notebooks']} notebooks in {p['wall']:.0f} s "
                  f"({p['wall'] / p['notebooks']:.1f} s each): `grade` starts one nbgrader per notebook{cost}, "
                  "which buys isolation, retries and restarts."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="the parallel runs' --jobs")
    ap.add_argument("--growth", default="1,2,4,8", help="class sizes of the growth table (phase 1)")
    ap.add_argument("--class-size", type=int, default=0,
                    help="also grade N learners x every phase's notebook at --jobs (learners per hour); 0: skip")
    ap.add_argument("--grade-flag", action="append", default=[], help="extra flag for `tritoncourse grade`")
    ap.add_argument("--sandbox-overhead", type=int, default=0, metavar="ROUNDS",
                    help="measure only the grading sandbox's cost: one learner's notebooks of every phase (--jobs 1), "
                    "sandboxed and unsandboxed in turn, ROUNDS times each; writes results/grading-sandbox-<device>.json")
    ap.add_argument("--write-docs", action="store_true", help="rewrite the timing section of docs/INSTRUCTORS.md")
    ap.add_argument("--out", type=Path, help="JSON results (default: results/grading-cpu.json or -gpu.json)")
    ap.add_argument("--from-json", type=Path, help="measure nothing: print (and --write-docs) an earlier result")
    ap.add_argument("--resume", action="store_true",
                    help="keep what the record at --out already holds from this device and measure only the rest "
                    "(a run cut short by a time limit, e.g. the device machine's 10-minute call, completed by another)")
    args = ap.parse_args()
    if args.from_json:
        r = json.loads(args.from_json.read_text())
        return write(r, args.write_docs)
    dev = device()
    if args.sandbox_overhead:
        return sandbox_overhead(args.sandbox_overhead, dev, args.grade_flag, args.out)
    out = args.out or ROOT / "results" / f"grading-{dev.split(':')[0]}.json"
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="grading-speed-") as t:
        tmp = Path(t)
        base, gen = make_base(tmp)
        print(f"generated the {len(ASSIGNMENTS)} assignments in {gen:.0f} s", flush=True)
        r = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "device": dev,
             "python": platform.python_version(), "generate_seconds": round(gen, 1), "one_learner": {}}
        if args.resume and out.exists():
            r = kept(json.loads(out.read_text()), r, args)
            loads += [r.get("load_min", loads[0]), r.get("load_max", loads[0])]  # the kept stages' loads

        def save() -> None:  # after every stage, so a run stopped at a time limit keeps what it measured
            r["load_min"], r["load_max"] = min(loads), max(loads)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(r, indent=1) + "\n")
        for label, jobs in (("jobs1", 1), ("jobsN", args.jobs)):
            if label in r["one_learner"]:
                continue
            course = course_with(base, tmp, f"solo-{jobs}", {"solo": ASSIGNMENTS})
            r["one_learner"][label] = res = grade(course, jobs, args.grade_flag)
            loads += [res["load_before"], res["load_after"]]
            print(f"one learner, {len(ASSIGNMENTS)} notebooks, --jobs {jobs}: {res['wall']:.0f} s "
                  + ", ".join(f"{k.split('/')[0]} {v['seconds']:.0f} s" for k, v in res["per_notebook"].items()),
                  flush=True)
            shutil.rmtree(course)
            save()
        if args.class_size and r.get("class", {}).get("learners") != args.class_size:
            course = course_with(base, tmp, "class", {f"s{i:03d}": ASSIGNMENTS for i in range(args.class_size)})
            res = grade(course, args.jobs, args.grade_flag)
            loads += [res["load_before"], res["load_after"]]
            r["class"] = {"learners": args.class_size, "jobs": args.jobs, "wall": res["wall"],
                          "notebooks": res["notebooks"],
                          "learners_per_hour": round(args.class_size * 3600 / res["wall"], 1)}
            print(f"class of {args.class_size}: {res['wall']:.0f} s", flush=True)
            shutil.rmtree(course)
            save()
        a = ASSIGNMENTS[0]
        rows = []
        sizes = [int(n) for n in args.growth.split(",") if n]
        for n in sizes:
            row = {"learners": n}
            for label, jobs in (("jobs1", 1), ("jobsN", args.jobs)):
                course = course_with(base, tmp, f"growth-{n}-{jobs}", {f"s{i:03d}": [a] for i in range(n)})
                res = grade(course, jobs, args.grade_flag)
                loads += [res["load_before"], res["load_after"]]
                row[label] = res["wall"]
                shutil.rmtree(course)
            rows.append(row)
            print(f"{n} learner(s) of {a}: --jobs 1 {row['jobs1']:.0f} s, --jobs {args.jobs} {row['jobsN']:.0f} s",
                  flush=True)
        r["growth"] = {"assignment": a, "rows": rows}
        if sizes:
            course = course_with(base, tmp, "plain", {f"s{i:03d}": [a] for i in range(max(sizes))})
            r["growth"]["plain"] = res = plain_serial(course, a, [])
            loads += [res["load_before"], res["load_after"]]
            print(f"plain nbgrader autograde, {res['notebooks']} notebooks: {res['wall']:.0f} s", flush=True)
        save()
    return write(r, args.write_docs)


def kept(old: dict, new: dict, args: argparse.Namespace) -> dict:
    """The earlier record's stages that this run would measure alike (same device, Python and phases, same --jobs),
    under this run's header; the date says when the record began."""
    same = (old.get("device") == new["device"] and old.get("python") == new["python"]
            and all(set(k.split("/")[0] for k in s["per_notebook"]) == set(ASSIGNMENTS)
                    for s in old.get("one_learner", {}).values()))
    if not same:
        print("--resume: the record at --out is of another device, Python or set of phases: measuring it all", flush=True)
        return new
    stages = {k: v for k, v in old.get("one_learner", {}).items() if k == "jobs1" or v["jobs"] == args.jobs}
    r = dict(new, date=old["date"], load_min=old["load_min"], load_max=old["load_max"], one_learner=stages)
    if old.get("class", {}).get("jobs") == args.jobs:
        r["class"] = old["class"]
    print(f"--resume: kept {', '.join([*r['one_learner'], *(['class'] if 'class' in r else [])]) or 'nothing'}",
          flush=True)
    return r


def sandbox_overhead(rounds: int, dev: str, extra: list[str], out: Path | None) -> int:
    """One learner's notebooks of every phase graded with and without the sandbox, interleaved; medians and their ratio."""
    import statistics

    out = out or ROOT / "results" / f"grading-sandbox-{dev.split(':')[0]}.json"
    walls: dict[str, list[float]] = {"sandboxed": [], "unsandboxed": []}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="grading-speed-") as t:
        tmp = Path(t)
        base, _ = make_base(tmp)
        for i in range(rounds):
            order = ("sandboxed", "unsandboxed") if i % 2 == 0 else ("unsandboxed", "sandboxed")
            for label in order:
                course = course_with(base, tmp, f"{label}-{i}", {"solo": ASSIGNMENTS})
                res = grade(course, 1, extra, sandboxed=label == "sandboxed")
                walls[label].append(res["wall"])
                loads += [res["load_before"], res["load_after"]]
                print(f"round {i + 1}, {label}: {res['wall']:.1f} s", flush=True)
                shutil.rmtree(course)
    med = {k: statistics.median(v) for k, v in walls.items()}
    r = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "device": dev,
         "python": platform.python_version(), "what": f"one learner's reference notebooks of {', '.join(ASSIGNMENTS)}, "
         "`python -m tritoncourse grade --jobs 1`, sandboxed and unsandboxed in turn (order alternating)",
         "rounds": rounds, "walls": walls, "median": med, "overhead": round(med["sandboxed"] / med["unsandboxed"] - 1, 3),
         "load_min": round(min(loads), 2), "load_max": round(max(loads), 2)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=1) + "\n")
    print(f"median sandboxed {med['sandboxed']:.1f} s, unsandboxed {med['unsandboxed']:.1f} s: "
          f"overhead {r['overhead'] * 100:+.1f}% (goal: at most +20%) -> {out.relative_to(ROOT)}")
    return 0


def readme_sentence(r: dict) -> str:
    """The README's summary: learners per hour and one learner's notebooks, as measured."""
    solo = r["one_learner"]
    best = min(solo["jobs1"]["wall"], solo["jobsN"]["wall"])
    where = "a GPU" if r["device"].startswith("gpu") else "this CPU"
    _, notebooks, missing = measured(r)
    text = (f"Measured on {r['device'].split(': ', 1)[1]} ({r['date'][:10]}, `tools/grading_speed.py`): one "
            f"learner's {notebooks} grade in {best:.0f} s (goal: at most 180 s)")
    if r.get("class"):
        c = r["class"]
        text += (f"; a class of {c['learners']} learners graded in {c['wall']:.0f} s with `--jobs {c['jobs']}`, "
                 f"so one such machine grades about **{c['learners_per_hour']:.0f} learners per hour** "
                 f"(reference notebooks; learners whose kernels hang take longer, up to their tests' time limits)")
    text += f". Per-phase times and how a class grows on {where}: docs/INSTRUCTORS.md, section 9."
    return text + (f" Not in this record yet: {', '.join(missing)}." if missing else "")


README = ROOT / "README.md"
README_BEGIN, README_END = "<!-- grading-speed:begin -->", "<!-- grading-speed:end -->"


def write(r: dict, docs: bool) -> int:
    text = markdown(r)
    print(text)
    if docs:
        gpu = r["device"].startswith("gpu")
        begin, end = (GPU_BEGIN, GPU_END) if gpu else (BEGIN, END)
        doc = DOCS.read_text()
        i, j = doc.index(begin) + len(begin), doc.index(end)
        DOCS.write_text(doc[:i] + "\n" + text + "\n" + doc[j:])
        print(f"wrote {DOCS.relative_to(ROOT)}")
        if not gpu:  # the README quotes the CPU's record; the GPU's is in docs/INSTRUCTORS.md section 9 only
            readme = README.read_text()
            i, j = readme.index(README_BEGIN) + len(README_BEGIN), readme.index(README_END)
            README.write_text(readme[:i] + readme_sentence(r) + readme[j:])
            print(f"wrote {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

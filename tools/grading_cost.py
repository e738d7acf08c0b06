"""The cost of judging one learner's kernel tests, for two versions of the course side by side.

    python tools/grading_cost.py OLD_TREE NEW_TREE [--rounds 3] [--phases 01_vector_add,...] [--out FILE]

Each tree is a checkout of the course (e.g. `git worktree add /tmp/old <commit>`). For each round, for each tree in
turn (interleaved, so both see the same machine), a fresh process grades the kernel tests of every phase's
reference notebook (source/, hidden cases included) as IsolatedKernelTests does: one grading sandbox and one
in-sandbox zygote per notebook, every %%kernel_test cell through isolated.run_cell, one thread per core. Prints
and records the wall time of each, the medians and their ratio. Notebook execution (the other part of autograde)
is the same code in both trees and is not timed here.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = r'''
import json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, os.getcwd())
import nbformat
from tritoncourse.device import setup_device
setup_device()
from tritoncourse.grading import sandbox
from tritoncourse.grading.processes.isolated import is_kernel_test, run_cell
from tritoncourse.grading.processes.zygote_client import _Zygote
from tritoncourse.grading.lint.source import kernels_from_notebook
out = {}
for phase in sys.argv[1].split(","):
    nb = nbformat.read(f"source/{phase}/{phase}.ipynb", as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and is_kernel_test(c.source)]
    start = time.monotonic()
    box = sandbox.Sandbox("cost")
    zygote = _Zygote(box)
    kernels, plain = kernels_from_notebook(nb)
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda src: run_cell(src, kernels, plain, sandbox=box, zygote=zygote), cells))
    zygote.close()
    box.close()
    out[phase] = {"seconds": time.monotonic() - start, "passed": sum(r.ok for r in results), "tests": len(results)}
print(json.dumps(out))
'''


def grade_once(tree: Path, phases: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITONCOURSE_SEED")}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", CHILD, phases], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: exited {proc.returncode}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["total"] = time.monotonic() - start
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phases", default="01_vector_add,02_softmax,03_matmul_relu,04_benchmarking,05_autotuning,"
                                        "06_fused_attention,07_attention_backward")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    runs: dict[str, list] = {"old": [], "new": []}
    for r in range(args.rounds):
        for name, tree in (("old", args.old), ("new", args.new)) if r % 2 == 0 else (("new", args.new),
                                                                                   ("old", args.old)):
            load = os.getloadavg()[0]
            res = grade_once(tree.resolve(), args.phases)
            res["load_before"] = load
            runs[name].append(res)
            print(f"round {r + 1} {name}: {res['total']:.1f} s (load {load:.2f}) "
                  + ", ".join(f"{p} {v['passed']}/{v['tests']} {v['seconds']:.1f}s" for p, v in res.items()
                              if isinstance(v, dict)), flush=True)
    med = {k: statistics.median(r["total"] for r in v) for k, v in runs.items()}
    ratio = med["new"] / med["old"]
    print(f"median old {med['old']:.1f} s, new {med['new']:.1f} s: new/old = {ratio:.3f}")
    if args.out:
        args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                        "machine": f"{os.cpu_count()} cores", "phases": args.phases,
                                        "rounds": args.rounds, "median_seconds": med, "ratio_new_over_old": ratio,
                                        "runs": runs}, indent=1))


if __name__ == "__main__":
    main()

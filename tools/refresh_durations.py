"""Fill tests/durations.json (the seconds per test that tests/support/scheduling.py orders `make test`'s groups by) from
a profiled run: `TRITONCOURSE_CPU_PROFILE=/tmp/p.jsonl make test`, then `python tools/refresh_durations.py /tmp/p.jsonl`.

A test the file does not know counts 1 s, so a new module (or a new phase's tests) would be scheduled last and end the
run alone. Each test's profiled phases (setup, call, teardown; tests/support/cpu_profile.py records those of 0.5 s or
more) are summed and scaled to the file's own scale, the median ratio over the tests both know (a run with two workers,
or on a slower machine, is slower throughout). By default only tests the file lacks, or that are no longer collected, change;
``--all`` rewrites every profiled test's figure.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def profiled(paths: list[Path]) -> dict[str, float]:
    """Each test's seconds (its phases summed); a test in several profiles takes the last one's."""
    seconds: dict[str, float] = {}
    for path in paths:
        run: dict[str, float] = defaultdict(float)
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                run[row["test"]] += float(row["wall"])
        seconds.update(run)
    return seconds


def merged(known: dict[str, float], measured: dict[str, float], every: bool = False,
           collected: set[str] | None = None) -> tuple[dict[str, float], float]:
    """``known`` with ``measured``'s tests added (all of them with ``every``), scaled by the median ratio of the tests
    both hold; tests not in ``collected`` (when given) dropped. Returns the new table and the scale."""
    common = [known[t] / measured[t] for t in known.keys() & measured.keys() if measured[t] > 0]
    scale = statistics.median(common) if common else 1.0
    out = dict(known)
    for test, s in measured.items():
        if every or test not in known:
            out[test] = round(s * scale, 1)
    if collected is not None:
        out = {t: s for t, s in out.items() if t in collected}
    return dict(sorted(out.items())), scale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="+", type=Path, help="TRITONCOURSE_CPU_PROFILE files of one run")
    ap.add_argument("--all", action="store_true", help="rewrite every profiled test's figure, not only new ones")
    ap.add_argument("--collected", type=Path, help="`pytest --collect-only -q` output: drop tests no longer there")
    args = ap.parse_args()
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    collected = None
    if args.collected:
        collected = {line.strip() for line in args.collected.read_text().splitlines() if "::" in line}
    table, scale = merged(known, profiled(args.profiles), args.all, collected)
    added = sorted(table.keys() - known.keys())
    DURATIONS.write_text(json.dumps(table, indent=0) + "\n")
    print(f"scale {scale:.3f}; {len(table)} tests ({len(added)} added, "
          f"{len(known.keys() - table.keys())} dropped); the added ones: {sum(table[t] for t in added):.0f} s")


if __name__ == "__main__":
    main()

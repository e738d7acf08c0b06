"""Grades as CSV: ``python -m tritoncourse export [ASSIGNMENT ...] [-o grades.csv]``: one row per learner and
assignment, a column per test, failed tests with the seeds that reproduce them, and (``not_collected``) each hand-in
the hub's exchange refused, why, and what was graded instead (refusals.py)."""
from __future__ import annotations

import csv
from pathlib import Path

from .course import Course
from .grader import Grader
from .refusals import csv_cells


def export_csv(course: Course, out: Path, assignments: list[str] | None = None) -> int:
    """One row per learner and assignment: status, score, every test's score, failed tests with seeds."""
    from nbgrader.api import Gradebook, MissingEntry

    released = course.released_assignments()
    for a in assignments or []:
        course.check_assignment(a)
    assignments = assignments or list(released)
    state = Grader(course).load_state()["entries"]
    refused = csv_cells(course, assignments, state)
    rows, columns = [], []
    with Gradebook(course.db_url, course.course_id) as gb:
        students = sorted({s.id for s in gb.students} | {s for _, s in refused}
                          | {k.split("/", 1)[1] for k in state if k.split("/", 1)[0] in assignments})
        for a in assignments:
            assignment = gb.find_assignment(a)
            cells = [(nb.name, gc.name, gc.max_score) for nb in assignment.notebooks for gc in nb.grade_cells]
            prefix = len(assignments) > 1
            col = {(nb, g): (f"{a}:{g}" if prefix else g) for nb, g, _ in cells}
            columns += [col[(nb, g)] for nb, g, _ in cells]
            for s in students:
                entry = state.get(f"{a}/{s}", {})
                row = {"student": s, "assignment": a, "max_score": assignment.max_score}
                try:
                    sub = gb.find_submission(a, s)
                except MissingEntry:
                    sub = None
                if sub is None:
                    row.update(status="failed" if entry.get("status") == "failed" else
                               "not collected" if (a, s) in refused else "no submission", score=0)
                else:
                    row.update(status="failed" if entry.get("status") == "failed" else "graded",
                               score=sub.score, needs_manual_grade=sub.needs_manual_grade,
                               late_penalty=sub.late_submission_penalty)
                    for nb in sub.notebooks:
                        for g in nb.grades:
                            row[col[(nb.name, g.name)]] = g.score
                row["failed_tests"] = " ".join(f"{gid}(seed={v.get('seed')})"
                                               for gid, v in sorted(entry.get("failed_tests", {}).items()))
                row["reason"] = entry.get("reason", "")
                row["notes"] = "; ".join(entry.get("notes", []))
                row["not_collected"] = refused.get((a, s), "")
                rows.append(row)
    fields = ["student", "assignment", "status", "score", "max_score", "needs_manual_grade", "late_penalty",
              *columns, "failed_tests", "reason", "notes", "not_collected"]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{out}: {len(rows)} row(s), {len(assignments)} assignment(s)")
    return 0

"""Reading what a private grading left: why it failed (its log), each test's verdict and seed (the autograded
notebook and its ``verdicts.json``), and :func:`merge`, which copies one learner's results into the real gradebook.
Only the grading process merges, one learner at a time."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path

import nbformat

from .course import Course
from .tasks import Task

SEED_RE = re.compile(r"seed (\d+)")


def _error_reason(log: str) -> str:
    """The line of an nbgrader log that says why a learner's grading failed."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback"):
            tail = [line for line in lines[i + 1:] if not line.startswith(("File ", "[", "^", "~"))]
            for line in tail:
                if re.match(r"^[A-Za-z_.]+(Error|Exception|Exit|Interrupt)\b", line):
                    return line[:300]
    for line in reversed(lines):
        if "ERROR" in line or "error" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else "no output"


# IsolatedKernelTests logs one line per test: "<grade_id>: <kind> (<seconds> s, seed <seed>)".
LOG_SEED_RE = re.compile(r"\] (?P<gid>[A-Za-z0-9_.-]+): (?P<kind>[a-z-]+) \([0-9.]+ s, seed (?P<seed>\d+)\)")


def seeds_in_log(log: Path | None) -> dict[str, int]:
    """grade_id -> seed of every kernel test that an nbgrader log says was run (the last run of each)."""
    try:
        text = log.read_text(errors="replace") if log else ""
    except OSError:
        return {}
    return {m["gid"]: int(m["seed"]) for m in LOG_SEED_RE.finditer(text)}


def _failure_message(errors: list) -> str:
    """What a failed test said (its cause and likely fix), without the title and the seed line."""
    if not errors:
        return ""
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0].get("traceback", [])) or errors[0].get("evalue", ""))
    text = re.sub(r"^\w+: ", "", text.strip())
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("[seed ")]
    if len(lines) > 1 and lines[0].startswith("FAILED"):
        lines = lines[1:]
    return "\n".join(lines)[:600]


def verdicts_of(nb_path: Path) -> dict[str, dict]:
    """Each test cell's verdict (ok, kind, seed, message) from an autograded notebook and its verdicts.json."""
    out: dict[str, dict] = {}
    stored = nb_path.with_name(nb_path.stem + ".verdicts.json")
    if stored.exists():
        with contextlib.suppress(ValueError):
            out = {k: dict(v) for k, v in json.loads(stored.read_text()).items()}
    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception:
        return out
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        died = [o for o in cell.get("outputs", []) if o.get("ename") == "DeadKernelError"]
        if died:
            out.setdefault("_notebook", {})["kernel_died_at_cell"] = index
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        gid = meta.get("grade_id", f"cell-{index}")
        text = "\n".join(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
                         for o in cell.get("outputs", []))
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        text += "\n".join("\n".join(o.get("traceback", [])) for o in errors)
        entry = out.setdefault(gid, {})
        entry.setdefault("ok", not errors)
        if "seed" not in entry and (m := SEED_RE.search(text)):
            entry["seed"] = int(m.group(1))
        if not entry["ok"] and not entry.get("message"):
            entry["message"] = _failure_message(errors)
        entry.setdefault("kind", "pass" if entry["ok"] else (errors[0].get("ename", "error") if errors else "fail"))
    return out


def merge(course: Course, task: Task, work: Path) -> dict:
    """Copy one learner's autograde results into the real gradebook and autograded/; return a summary."""
    import warnings

    from nbgrader.api import Gradebook

    warnings.filterwarnings("ignore", module="nbgrader.api")  # SQLAlchemy's chatter about nbgrader's API
    src = work / "autograded" / task.student / task.assignment
    dest = course.autograded / task.student / task.assignment
    dest.parent.mkdir(parents=True, exist_ok=True)
    incoming = dest.parent / f".{task.assignment}.incoming"
    old = dest.parent / f".{task.assignment}.old"
    for p in (incoming, old):
        if p.exists():
            shutil.rmtree(p)
    shutil.copytree(src, incoming)
    if dest.exists():
        os.replace(dest, old)
    os.replace(incoming, dest)
    if old.exists():
        shutil.rmtree(old)

    tests: dict[str, dict] = {}
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}", course.course_id) as private, \
            Gradebook(course.db_url, course.course_id) as real:
        p_sub = private.find_submission(task.assignment, task.student)
        p_student = private.find_student(task.student)
        try:
            real.find_student(task.student)
        except Exception:
            real.add_student(task.student, first_name=p_student.first_name, last_name=p_student.last_name,
                             email=p_student.email, lms_user_id=p_student.lms_user_id)
        r_sub = real.update_or_create_submission(task.assignment, task.student)
        r_sub.timestamp = p_sub.timestamp
        for p_nb in p_sub.notebooks:
            r_nb = real.find_submission_notebook(p_nb.name, task.assignment, task.student)
            r_nb.late_submission_penalty = p_nb.late_submission_penalty
            r_grades = {g.name: g for g in r_nb.grades}
            for g in p_nb.grades:
                r_grades[g.name].auto_score = g.auto_score
                r_grades[g.name].needs_manual_grade = g.needs_manual_grade
                tests[g.name] = {"score": g.score, "max_score": g.max_score, "notebook": p_nb.name,
                                 "auto": g.auto_score is not None and g.cell_type == "code"}
            r_comments = {c.name: c for c in r_nb.comments}
            for cm in p_nb.comments:
                r_comments[cm.name].auto_comment = cm.auto_comment
        real.db.commit()
        score, max_score = r_sub.score, r_sub.max_score
    verdicts = {}
    for nb_file in sorted(dest.glob("*.ipynb")):
        verdicts.update(verdicts_of(nb_file))
    for gid, v in verdicts.items():
        if gid in tests:
            tests[gid].update({k: v[k] for k in ("ok", "kind", "seed", "message") if k in v})
    failures = {gid: t for gid, t in tests.items() if t["auto"] and t["score"] < t["max_score"]}
    return {"score": score, "max_score": max_score, "tests": tests,
            "failed_tests": {gid: {"seed": t.get("seed"), "kind": t.get("kind", ""),
                                   "message": t.get("message") or ""}
                             for gid, t in failures.items()},
            "kernel_died_at_cell": verdicts.get("_notebook", {}).get("kernel_died_at_cell"),
            # Tests the grader itself could not judge (nbgrader_plugin's "grader-error" verdicts): not the
            # learner's fault, so retried once and reported to the instructor, never silently a 0.
            "grader_errors": sorted(gid for gid, t in tests.items() if t.get("kind") == "grader-error")}


def clock(seconds: float) -> str:
    """A duration as the progress line shows it: m:ss, or h:mm:ss from an hour."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"

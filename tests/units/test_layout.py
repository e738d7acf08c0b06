"""The package's three concerns stay apart (issue 18): the trust boundary (tritoncourse.grading), the instructor's
workflow (tritoncourse.classroom) and the learner's own path (tritoncourse.learner), with no import cycles. The checks
are one package per phase, what the phases share in one place; the grader is one package per trust role, each
importing only what its role allows (issue 44)."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tritoncourse"


def _imports(path: Path) -> set[str]:
    """The tritoncourse modules ``path`` imports (at any depth of the file, lazily or not)."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names]
            out |= {n for n in names if (PACKAGE / Path(*n.split(".")[1:])).with_suffix(".py").exists()
                    or (PACKAGE / Path(*n.split(".")[1:]) / "__init__.py").exists()} or {target}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("tritoncourse")}


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        graph[name] = _imports(path)
    return graph


def test_no_import_cycles_between_modules():
    graph = _graph()
    cycles = []

    def visit(node, stack):
        for dep in sorted(graph.get(node, ())):
            if dep in stack:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep in graph and dep not in done:
                visit(dep, stack + [dep])
        done.add(node)

    done: set[str] = set()
    for node in sorted(graph):
        if node not in done:
            visit(node, [node])
    assert not cycles, f"import cycles: {cycles}"


def test_layers_import_only_downwards():
    """grading (trust boundary) imports neither classroom nor learner; learner never imports classroom."""
    graph = _graph()
    for module, deps in graph.items():
        if module.startswith("tritoncourse.grading"):
            bad = {d for d in deps if d.startswith(("tritoncourse.classroom", "tritoncourse.learner"))}
            assert not bad, f"{module} (trust boundary) imports {bad}"
        if module.startswith("tritoncourse.learner"):
            bad = {d for d in deps if d.startswith("tritoncourse.classroom")}
            assert not bad, f"{module} (the learner's path) imports the instructor's workflow: {bad}"


def test_learner_commands_load_nothing_of_the_instructors_workflow():
    code = ("import sys, tritoncourse.cli as c\n"
            "sys.argv = ['x', 'check', '/nonexistent.ipynb']\n"
            "rc = c.main(['check', '/nonexistent.ipynb'])\n"
            "import tritoncourse.learner.submit, tritoncourse.learner.magic\n"
            "print(sorted(m for m in sys.modules if m.startswith('tritoncourse.classroom')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


CHECKS = PACKAGE / "checks"
PHASES = re.search(r"^ASSIGNMENTS := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()


def test_checks_are_one_package_per_phase():
    """checks/ holds a package per phase, named as its notebook imports it (01_vector_add: checks.vector_add), and
    common/ for what several phases share; no flat module beside them, and no module named with a prefix of its
    phase (softmax_inputs.py) inside: a phase's parts are its package's modules (softmax/inputs.py)."""
    flat = sorted(p.name for p in CHECKS.glob("*.py"))
    assert flat == ["__init__.py"], f"flat modules in checks/: {flat}; each belongs in its phase's package or common/"
    packages = {p.name for p in CHECKS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert packages == {a.split("_", 1)[1] for a in PHASES} | {"common"}, packages
    for folder in [CHECKS, *CHECKS.rglob("*")]:
        if folder.is_dir() and folder.name != "__pycache__":
            assert (folder / "__init__.py").exists(), f"{folder.relative_to(ROOT)} is not a package"
    names = {p.stem for p in CHECKS.rglob("*.py")} | {p.name for p in CHECKS.rglob("*") if p.is_dir()}
    prefixed = [str(p.relative_to(ROOT)) for p in CHECKS.rglob("*.py")
                if any(p.stem.startswith(f"{n}_") for n in names | packages)]
    assert not prefixed, f"modules named by a prefix, not placed in their package: {prefixed}"
    for assignment in PHASES:
        text = (ROOT / "source" / assignment / f"{assignment}.ipynb").read_text()
        imported = set(re.findall(r"tritoncourse\.checks\.(\w+)", text))
        assert imported == {assignment.split("_", 1)[1]}, (assignment, imported)


def test_a_phases_checks_import_no_other_phases():
    """A phase package imports, of the checks, only itself and common/; common/ imports no phase."""
    for module, deps in _graph().items():
        if not module.startswith("tritoncourse.checks."):
            continue
        own = module.split(".")[2]
        others = {d for d in deps
                  if d.startswith("tritoncourse.checks") and d.split(".")[2:3] not in ([own], ["common"])}
        assert not others, f"{module} imports another phase's checks: {others}"


TESTS = ROOT / "tests"
# Learners' submissions that the suite hands in (not the suite's code): their length is the learner's.
SUBMISSIONS = {"hostile", "submissions", "artifacts"}
MAX_LINES = 400


def test_no_test_module_over_400_lines():
    """Every module of tests/ (test modules, support modules, conftest.py) has at most 400 lines, one concern each
    (issue 44)."""
    long = {}
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS)
        if SUBMISSIONS & set(rel.parts[:-1]) or "__pycache__" in rel.parts:
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            long[str(rel)] = lines
    assert not long, f"test modules over {MAX_LINES} lines, split them by concern: {long}"


def test_no_course_hub_or_tool_module_over_400_lines():
    """Every module of the course package, the hub and the developers' tools has at most 400 lines (issue 44: "no
    module exceeds 400 lines")."""
    long = {str(path.relative_to(ROOT)): n for folder in ("tritoncourse", "hub", "tools")
            for path in sorted((ROOT / folder).rglob("*.py")) if "__pycache__" not in path.parts
            and (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines, split them by concern: {long}"


GRADING = PACKAGE / "grading"
# What each of grading's packages may import of the course besides itself (tritoncourse.<name>; grading.<name> for
# grading's own packages), and what each is: the trust boundary drawn in the tree (issue 44). The judge's side never
# imports the runner's; the runner (inside the sandbox) imports only the channel, never the judge, its verdicts or
# the checks; the sandbox, and the lint, import nothing of the course; no one imports the runner.
MAY_IMPORT = {
    "grading.sandbox": set(),
    "grading.lint": set(),
    "grading.channel": {"grading.sandbox", "checking"},
    "grading.runner": {"grading.channel", "device"},
    "grading.judge": {"grading.channel", "grading.sandbox", "checking", "device"},
    "grading.processes": {"grading.judge", "grading.lint", "device", "seeds"},
    "grading.autograde": {"grading.processes", "grading.lint", "grading.sandbox", "device", "seeds"},
}
# Of grading, what the rest of the course may import: the checks only the channel (a kernel's proxy), the checking
# library only which cases are hidden, the learner only the test runner and the lint, never the runner's side.
OUTSIDE_MAY_IMPORT = {
    "checks": {"grading.channel"},
    "checking": {"grading.judge.hidden_cases"},
    "learner": {"grading.processes.isolated", "grading.lint"},
    "classroom": {"grading.sandbox", "grading.processes.zygote_server", "grading.autograde.links"},
}


def _part(module: str) -> str:
    """tritoncourse.grading.judge.verdict -> grading.judge; tritoncourse.checks.softmax.inputs -> checks."""
    parts = module.split(".")[1:]
    return ".".join(parts[:2]) if parts[:1] == ["grading"] else ".".join(parts[:1])


def _package_edges(graph: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """{package: {package it imports: the module edges behind it}} for grading's packages and the course's parts."""
    edges: dict[str, dict[str, set[str]]] = {}
    for module, deps in graph.items():
        for dep in deps:
            if _part(module) != _part(dep):
                edges.setdefault(_part(module), {}).setdefault(_part(dep), set()).add(f"{module} -> {dep}")
    return edges


def test_grading_is_one_package_per_trust_role():
    """grading/ holds only its role packages, each an __init__ whose docstring's second line says its trust role."""
    flat = sorted(p.name for p in GRADING.glob("*.py"))
    assert flat == ["__init__.py"], f"flat modules in grading/: {flat}; each belongs in its role's package"
    packages = {f"grading.{p.name}" for p in GRADING.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert packages == set(MAY_IMPORT), f"grading's packages {sorted(packages)}, the rules name {sorted(MAY_IMPORT)}"
    for name in packages:
        doc = ast.get_docstring(ast.parse((PACKAGE / name.replace(".", "/") / "__init__.py").read_text()))
        assert doc and doc.splitlines()[1].startswith("Trust role: "), f"{name}'s docstring states no trust role"


def test_grading_packages_import_only_what_their_role_allows():
    """Fails naming the module edge: e.g. a judge module importing the runner's, or the runner importing a check."""
    edges = _package_edges(_graph())
    for package, allowed in MAY_IMPORT.items():
        bad = {dep: sorted(why) for dep, why in edges.get(package, {}).items() if dep not in allowed}
        assert not bad, f"{package} imports what its trust role does not allow: {bad}"


def test_the_runner_side_loads_nothing_of_the_judges():
    """Transitively too: what the runner's process imports holds no check, no judge, no verdict, no grader step."""
    graph, seen, todo = _graph(), set(), ["tritoncourse.grading.runner.runner"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += [d for d in graph.get(module, ()) if d in graph]
    forbidden = ("tritoncourse.checks", "tritoncourse.grading.judge.judge", "tritoncourse.grading.judge.verdict",
                 "tritoncourse.grading.lint", "tritoncourse.grading.processes", "tritoncourse.grading.autograde",
                 "tritoncourse.classroom", "tritoncourse.learner")
    bad = sorted(m for m in seen if m.startswith(forbidden))
    assert not bad, f"the runner (inside the sandbox) loads {bad}"


def test_the_rest_of_the_course_imports_of_grading_only_its_entries():
    for module, deps in _graph().items():
        part = _part(module)
        if part.startswith("grading"):
            continue
        allowed = OUTSIDE_MAY_IMPORT.get(part, set())
        bad = {d for d in deps if d.startswith("tritoncourse.grading")
               and not any(f"tritoncourse.{a}" == d or d.startswith(f"tritoncourse.{a}.") for a in allowed)}
        assert not bad, f"{module} imports {bad} of the grader; {part} may import only {sorted(allowed)}"


def test_the_zygote_loads_by_name_only_the_judges_and_the_runners_entries():
    """zygote.py imports the judge and the runner by name (PRELOAD, ENTRIES), outside the import graph above."""
    from tritoncourse.grading.processes import zygote

    grading = {m for m in zygote.PRELOAD if m.startswith("tritoncourse.grading")}
    assert grading == {"tritoncourse.grading.channel.rpc", "tritoncourse.grading.runner.runner",
                       "tritoncourse.grading.judge.judge"}, grading
    for entry in zygote.ENTRIES:
        assert (GRADING / entry / f"{entry}.py").exists(), entry


def test_the_import_picture_in_gradings_docstring_is_the_graph():
    """grading/__init__.py draws the packages' imports, one ``X -> a, b`` line each: it must be the real graph."""
    doc = ast.get_docstring(ast.parse((GRADING / "__init__.py").read_text()))
    drawn = {}
    for line in doc.splitlines():
        m = re.match(r"\s*(\w+)\s+->\s+([^#]*?)\s{2,}", line + "  ")
        if m and f"grading.{m.group(1)}" in MAY_IMPORT:
            drawn[f"grading.{m.group(1)}"] = {f"grading.{d.split()[0]}" for d in m.group(2).split(",") if d.strip()
                                              and d.split()[0] != "(nothing)"}
    edges = _package_edges(_graph())
    real = {p: {d for d in edges.get(p, {}) if d.startswith("grading.")} for p in MAY_IMPORT}
    assert drawn == real, f"grading/__init__.py's picture {drawn} is not the import graph {real}"


# The pyramid's tiers (tests/README.md), each a folder of tests/; conftest.py marks every tier but units/ slow.
TIERS = ["units", "judged", "grader", "workflows", "system"]


def _suite_modules() -> list[Path]:
    return [p for p in sorted(TESTS.rglob("*.py")) if not SUBMISSIONS & set(p.relative_to(TESTS).parts[:-1])
            and "__pycache__" not in p.parts]


def test_test_modules_are_in_their_tiers_folder_and_support_modules_in_support():
    """tests/ holds conftest.py alone; each test module sits in one tier's folder, every other module in support/
    (imported by its bare name: conftest.py puts support/ on sys.path, so two modules may not share a name)."""
    misplaced = []
    for path in _suite_modules():
        rel = path.relative_to(TESTS)
        home = TIERS if path.name.startswith("test_") else ["support"] if rel.parts != ("conftest.py",) else []
        if (home and (len(rel.parts) != 2 or rel.parts[0] not in home)) or (not home and len(rel.parts) != 1):
            misplaced.append(str(rel))
    assert not misplaced, f"modules outside their folder (test modules in {TIERS}, helpers in support/): {misplaced}"
    stems = [p.stem for p in _suite_modules()]
    assert len(stems) == len(set(stems)), sorted({s for s in stems if stems.count(s) > 1})


def test_only_support_modules_are_shared():
    """A module imports no test module of another folder (a shared helper belongs in support/), support/ imports no
    test module at all, and nothing imports support/ by a dotted name (one name per module: `from course import`)."""
    bad = []
    for path in _suite_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.startswith("support.") or name == "support":
                    bad.append(f"{path.relative_to(TESTS)} imports {name}")
                elif name.startswith("test_") and (path.parent.name == "support"
                                                   or not (path.parent / f"{name}.py").exists()):
                    bad.append(f"{path.relative_to(TESTS)} imports {name}")
    assert not bad, bad


def test_the_pyramids_table_names_each_tiers_folder_and_every_module_in_it():
    """tests/README.md's table: tier N's row names tests/<its folder>/ and exactly the test modules in that folder
    (`test_checks_*` for the phases' checks); conftest.py marks slow every tier but the first (make test-fast)."""
    rows = re.findall(r"^\| (\d)\. [^|]*\|[^|]*\| (.*) \|$", (TESTS / "README.md").read_text(), re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(TIERS) + 1)), "the table has a row per tier, in order"
    for (n, where), tier in zip(rows, TIERS):
        assert where.startswith(f"`tests/{tier}/`"), f"tier {n}'s row names its folder first: `tests/{tier}/`"
        named = set(re.findall(r"`(test_\w+\*?)`", where))
        there = {p.stem for p in (TESTS / tier).glob("test_*.py")}
        covered = {m for m in there if m in named or any(g.endswith("*") and m.startswith(g[:-1]) for g in named)}
        exact = {g for g in named if not g.endswith("*")}
        assert exact <= there, f"tier {n}'s row names {sorted(exact - there)}, not in tests/{tier}/"
        assert covered == there, f"tests/{tier}/ holds {sorted(there - covered)}, which its row of the table does not name"
    slow = next(ast.literal_eval(n.value) for n in ast.parse((TESTS / "conftest.py").read_text()).body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SLOW_TIERS")
    assert slow == set(TIERS[1:]), f"conftest.py's SLOW_TIERS {slow}: every tier but units/ is slow"

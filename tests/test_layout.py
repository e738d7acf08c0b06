"""The package's three concerns stay apart (issue 18): the trust boundary (tritoncourse.grading), the instructor's
workflow (tritoncourse.classroom) and the learner's own path (tritoncourse.learner), with no import cycles."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
            out |= {n for n in names if (PACKAGE / Path(*n.split(".")[1:])).with_suffix(".py").exists()} or {target}
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

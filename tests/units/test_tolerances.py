"""One tolerance table (tritoncourse/tolerances.py), each entry with its reason, and no tolerance anywhere else.

Fast (no kernel runs): reads the table, and the checks' source with ``ast``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import torch

from tritoncourse import tolerances
from tritoncourse.tolerances import Tolerance

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tritoncourse"
TABLE = PACKAGE / "tolerances.py"
# Where the checks judge and diagnose: literal atol/rtol arguments are not allowed here.
CHECKING = [PACKAGE / "checking.py", *sorted((PACKAGE / "checks").rglob("*.py"))]


def entries():
    for name, value in vars(tolerances).items():
        if isinstance(value, Tolerance):
            yield name, value
        elif isinstance(value, dict) and value and all(isinstance(v, Tolerance) for v in value.values()):
            yield from ((f"{name}[{key}]", v) for key, v in value.items())


def test_every_entry_has_numbers_and_a_reason():
    found = dict(entries())
    assert len(found) >= 15, sorted(found)
    for name, (atol, rtol, why) in found.items():
        assert atol >= 0 and rtol >= 0 and atol + rtol > 0, f"{name}: atol {atol}, rtol {rtol}"
        assert atol < 1 and rtol < 0.1, f"{name}: ({atol}, {rtol}) would pass almost anything"
        assert len(why.split()) >= 6, f"{name}: the reason {why!r} says too little"
    for dtype, (u, why) in tolerances.ROUNDOFF.items():
        assert u == torch.finfo(dtype).eps / 2, f"ROUNDOFF[{dtype}] is not half an ulp"
        assert len(why.split()) >= 4


def test_the_checks_use_the_tables_entries():
    """The checks' old names are the table's entries, not copies."""
    from tritoncourse import checking
    from tritoncourse.checks import autotuning, matmul_relu, softmax
    from tritoncourse.checks.fused_attention import attention, layer_norm

    assert checking.TOLERANCES is tolerances.DEFAULT
    assert softmax.TOLERANCES is tolerances.SOFTMAX
    assert matmul_relu.TOLERANCE is tolerances.MATMUL_RELU is autotuning.MATMUL_TOLERANCE
    assert autotuning.SOFTMAX_TOLERANCE is tolerances.SOFTMAX[torch.float32]
    assert layer_norm.LN_TOLERANCES is tolerances.LAYER_NORM
    assert layer_norm.LN_BACKWARD_TOLERANCES is tolerances.LAYER_NORM_BACKWARD
    assert layer_norm.LN_STATS_TOLERANCE is tolerances.LAYER_NORM_STATS
    assert attention.LSE_TOLERANCE is tolerances.ATTENTION_LSE and attention.ROUNDOFF is tolerances.ROUNDOFF


def _floats(node: ast.AST) -> list[float]:
    """The non-zero float literals in ``node``, but for exponents (``n_rows ** 0.5`` scales an entry)."""
    exponents = {id(n.right) for n in ast.walk(node) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow)}
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, float) and n.value
            and id(n) not in exponents]


def test_no_tolerance_is_defined_outside_the_table():
    """No module-level TOLERANCE/ROUNDOFF constant outside tolerances.py, and no literal atol=/rtol= in the checks
    (a factor such as ``10 * atol`` is fine: it scales a table entry)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == TABLE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and any(w in t.id for w in ("TOLERANCE", "ROUNDOFF")) \
                        and _floats(node.value):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} defines {t.id}")
        if path in CHECKING:
            for node in ast.walk(tree):
                if isinstance(node, ast.keyword) and node.arg in ("atol", "rtol") and _floats(node.value):
                    found.append(f"{path.relative_to(ROOT)}:{node.value.lineno} {node.arg}={ast.unparse(node.value)}")
    assert not found, "tolerances outside tritoncourse/tolerances.py:\n" + "\n".join(found)

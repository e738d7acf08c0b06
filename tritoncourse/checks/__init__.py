"""Per-phase checks: each launches the learner's kernel itself on guarded, fresh random inputs.

The checks say *how* a kernel is tested (guards, fences, diagnosis); the notebooks' hidden test
cells say *which* cases are tested.

One package per phase, named as the notebook imports it (``from tritoncourse.checks.softmax import ...``):
``vector_add``, ``softmax``, ``matmul_relu``, ``benchmarking``, ``autotuning``, ``fused_attention`` (its
``layer_norm`` and ``attention``). A package's ``__init__`` holds its checks (or gathers them), ``inputs`` the inputs
and references, ``diagnosis`` the replayed mistakes that name a failure's likely cause. What several phases share is
in ``common``: launching a learner's kernel (``launch``), the element-wise harness (``elementwise``) and calling a
learner's Python function (``functions``).
"""

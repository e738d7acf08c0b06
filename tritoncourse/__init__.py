"""The Triton kernels course's helper package.

Modules by concern: ``device`` (GPU or interpreter), ``checking`` (comparisons, guards, fences),
``checks`` (per-phase kernel checks), ``benchmarking`` (timing and recorded GPU results), ``compiled``
(what the compiler made, on any machine), ``bounds`` (the notebook's stray accesses named on the interpreter),
``widgets`` (interactive pictures), ``learner`` (the learner's checks and hand-in), ``grading`` (the
trust boundary, one package per trust role: runner, judge, channel, processes, lint, autograde, sandbox), ``classroom`` (the instructor's workflow).
"""
from __future__ import annotations

from .device import describe_device, infer_device, setup_device

__all__ = ["setup_notebook", "setup_device", "infer_device", "describe_device"]


def setup_notebook() -> str:
    """First call of every notebook: choose GPU or interpreter, register ``%%kernel_test``, say where.

    On the interpreter the notebook's own launches also check their loads and stores against the launch's tensors
    (``bounds``): a stray store names itself instead of corrupting the notebook's memory.

    Returns the device tensors should live on ('cuda' or 'cpu').
    """
    device = setup_device()
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except ImportError:  # pragma: no cover
        ip = None
    if ip is not None:  # a notebook's kernel (not a tool importing the notebook as a module: tools/gpu_bench.py)
        from .learner.magic import register

        register(ip)
        if device == "cpu":
            from .bounds import check_accesses

            check_accesses()
    print(describe_device())
    return device

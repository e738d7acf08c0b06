"""matplotlib for the widget modules, imported when a picture is first drawn rather than when a module is imported.

nbgrader imports these modules (a notebook's widget cell runs while grading) but draws nothing
(:func:`~tritoncourse.benchmarking.picture_left_out`); importing pyplot, with its notebook backend, was about a
third of a second of every such grading. ``plt.show`` and the rest resolve to the real ``matplotlib.pyplot`` at
each use, so a test that patches ``matplotlib.pyplot.show`` patches what the widgets call.
"""
from __future__ import annotations

import importlib


class _Module:
    """A module imported at its first attribute lookup."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


plt = _Module("matplotlib.pyplot")


def Rectangle(*args, **kwargs):  # noqa: N802 (matplotlib's name)
    """``matplotlib.patches.Rectangle``, imported at the first call."""
    from matplotlib.patches import Rectangle as _Rectangle

    return _Rectangle(*args, **kwargs)

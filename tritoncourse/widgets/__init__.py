"""Interactive pictures, one module per phase; all drawn with matplotlib and ipywidgets, CPU included.

Every widget factory goes through :func:`interactive`: for a person it returns an ``ipywidgets.interactive``; under
nbgrader it draws nothing and says so (:func:`~tritoncourse.benchmarking.picture_left_out`: no picture is graded);
when another machine runs the notebook (``TRITONCOURSE_HEADLESS=1``, gpu_check's notebook run) it draws the picture
once with the widget's default values and returns None, so the drawing code (and a GPU timer, where the widget has
one) still runs, and can fail, but no widget is created for a front end that nobody watches. matplotlib itself is
imported at the first drawing (:mod:`._matplotlib`), so that grading never imports it for these modules.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from ..benchmarking import grading, picture_left_out

HEADLESS_VARIABLE = "TRITONCOURSE_HEADLESS"


def headless() -> bool:
    """True when a machine runs the notebook: nbgrader (``NBGRADER_EXECUTION``) or ``TRITONCOURSE_HEADLESS=1``
    (set by ``tools/gpu_check.py --notebooks``)."""
    return grading() or os.environ.get(HEADLESS_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def interactive(show: Callable[..., Any], defaults: dict, controls: Callable[[Any], dict]):
    """``ipywidgets.interactive(show, **controls(ipywidgets))``; under nbgrader nothing and None; when another
    machine runs the notebook (:func:`headless`), ``show(**defaults)`` once and None.

    ``controls`` receives the ipywidgets module and returns one control per argument of ``show``; it is called
    only for a person, so that no widget object exists in a headless run (widgets there have made nbclient
    wait for messages that never come, jupyter/nbclient#312).
    """
    if picture_left_out():
        return None
    if headless():
        show(**defaults)
        return None
    import ipywidgets

    return ipywidgets.interactive(show, **controls(ipywidgets))

"""Hand-ins planted straight into an exchange's inbound/, as a learner of the old shared-folder exchange could make them
(tests/units/test_hub_exchange_rules.py and tests/units/test_exchange_report.py drive the hub's collect over them)."""
from __future__ import annotations

import os
from pathlib import Path

import nbformat


def plant_hand_in(inbound: Path, student: str, assignment: str, when: str, extra: str | None = None) -> Path:
    """``inbound/<student>+<assignment>+<when>+r`` with its timestamp and a blank notebook; ``extra``: "sparse" adds
    a 10 GB sparse file, "link" makes the notebook a link to /etc/hostname."""
    sub = inbound / f"{student}+{assignment}+{when}+r"
    sub.mkdir()
    (sub / "timestamp.txt").write_text(when)
    (sub / f"{assignment}.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    if extra == "sparse":
        with open(sub / "data.bin", "wb") as f:
            f.truncate(10 << 30)
    elif extra == "link":
        (sub / f"{assignment}.ipynb").unlink()
        os.symlink("/etc/hostname", sub / f"{assignment}.ipynb")
    return sub

"""The instructor's commands as a learner's course runs them: `python -m tritoncourse ...` in the course (or in a
frozen copy of it), with the environment of tests/support/baseline.py. Used by tests/workflows/test_classroom.py (the
class) and tests/workflows/test_classroom_commands.py."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from baseline import env
from course import ROOT

_env = env


def tc(*args: str, cwd: Path = ROOT, timeout: float = 600, frozen: Path | None = None,
       **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritoncourse", *args], cwd=frozen or cwd, env=_env(frozen),
                          capture_output=True, text=True, timeout=timeout, **kw)

import os
import sys
from pathlib import Path

# Tests run on the CPU interpreter unless a GPU is present; the course's helpers are imported from the repo.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tritoncourse.device import setup_device  # noqa: E402

DEVICE = setup_device()
os.environ.pop("TRITONCOURSE_SEED", None)

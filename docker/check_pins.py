"""Check that this Python environment has exactly the course's pins: every line of lock.txt, and torch
from torch-gpu.txt (a CUDA build) or torch-cpu.txt (a CPU build).

    python docker/check_pins.py requirements        # the folder holding lock.txt and torch-*.txt

The image build runs it after installing, so an image whose packages drifted from the lock is never
built; tests/system/test_environment.py runs it on .venv. Exit code 0 when everything matches.
"""
from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def read_pins(path: Path) -> dict[str, str]:
    """{normalized name: version} of a requirements file's ``name==version`` lines."""
    pins = {}
    for line in path.read_text().splitlines():
        m = PIN.match(line.strip())
        if m:
            pins[normalize(m.group(1))] = m.group(2)
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def problems(folder: Path) -> list[str]:
    found = []
    for name, version in read_pins(folder / "lock.txt").items():
        have = installed(name)
        if have != version:
            found.append(f"{name}: lock.txt pins {version}, installed {have or 'nothing'}")
    torch = installed("torch")
    if torch is None:
        return found + ["torch is not installed"]
    for package in ("torch", "triton"):
        found += [f"{package} requires {req}" for req in unmet_requirements(package)]
    build = "gpu" if "+cpu" not in torch and _torch_has_cuda() else "cpu"
    want = read_pins(folder / f"torch-{build}.txt").get("torch")
    if torch.split("+")[0] != want:
        found.append(f"torch: torch-{build}.txt pins {want}, installed {torch}")
    return found


def unmet_requirements(package: str) -> list[str]:
    """The requirements of an installed package (extras left out) that what is installed does not meet."""
    from packaging.requirements import Requirement

    unmet = []
    for text in metadata.requires(package) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        have = installed(req.name)
        if have is None or not req.specifier.contains(have, prereleases=True):
            unmet.append(f"{req} (installed: {have or 'nothing'})")
    return unmet


def _torch_has_cuda() -> bool:
    import torch

    return torch.version.cuda is not None


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else Path("requirements")
    found = problems(folder)
    for line in found:
        print("pin mismatch:", line, file=sys.stderr)
    if not found:
        import torch
        import triton

        print(f"pins OK: {len(read_pins(folder / 'lock.txt'))} packages of lock.txt, "
              f"torch {torch.__version__}, triton {triton.__version__}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

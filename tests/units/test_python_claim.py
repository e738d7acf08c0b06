"""Is the Python the course claims the one its pins install on? (issue 29)

The pins (requirements/lock.txt, torch-cpu.txt, test.txt) decide which Pythons work: each pinned package
declares the Pythons it supports (its Requires-Python, read here from the installed copy). The README, the
Makefile's check, pyproject.toml's requires-python and environment.yml must claim exactly those (environment.yml
may pick fewer), and the Makefile's check must refuse any other with the ways to one that fits.
"""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PIN_FILES = ["requirements/lock.txt", "requirements/torch-cpu.txt", "requirements/test.txt"]
# Every CPython release a learner might have: 3.8.0 ... 3.16.30.
CANDIDATES = [Version(f"3.{minor}.{patch}") for minor in range(8, 17) for patch in range(31)]


def _pins() -> dict[str, str]:
    pins = {}
    for name in PIN_FILES:
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                req = Requirement(line)
                (spec,) = req.specifier
                assert spec.operator == "==", f"{name}: {line} is not an exact pin"
                pins[canonicalize_name(req.name)] = spec.version
    return pins


def supported() -> set[Version]:
    """The Pythons every pinned package declares it supports."""
    ok = set(CANDIDATES)
    for name, version in _pins().items():
        dist = importlib.metadata.distribution(name)
        assert Version(dist.version).public.split("+")[0] == Version(version).public, \
            f"{name} {dist.version} is installed, the pins say {version}: rebuild .venv (make venv)"
        requires = dist.metadata.get("Requires-Python")
        if requires:
            ok &= set(SpecifierSet(requires).filter(CANDIDATES))
    return ok


def makefile_claim() -> set[Version]:
    """The Pythons the Makefile's check lets through: PYTHON_MIN <= v < PYTHON_BELOW, v != PYTHON_NOT."""
    text = (ROOT / "Makefile").read_text()
    found = {k: re.search(rf"^PYTHON_{k} := (\S+)$", text, re.M) for k in ("MIN", "BELOW", "NOT")}
    assert all(found.values()), f"the Makefile names no {[k for k, m in found.items() if not m]}"
    low, below, hole = (Version(m.group(1)) for m in found.values())
    return {v for v in CANDIDATES if low <= v < below and v != hole}


def test_the_lock_decides_the_pythons():
    """Sanity: some Pythons install every pin, this test's own among them."""
    ok = supported()
    assert ok, "no Python installs every pin"
    assert Version(".".join(map(str, sys.version_info[:3]))) in ok


def test_pyproject_claims_what_the_pins_install_on():
    spec = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    claimed, ok = set(spec.filter(CANDIDATES)), supported()
    assert claimed == ok, (f"pyproject.toml's requires-python {spec} allows {sorted(claimed - ok)[:3]}... that the pins "
                           f"refuse, or refuses {sorted(ok - claimed)[:3]}... that they allow")


def test_makefile_check_claims_what_the_pins_install_on():
    claimed, ok = makefile_claim(), supported()
    assert claimed == ok, (f"the Makefile's check lets through {sorted(claimed - ok)[:3]}... that the pins refuse, "
                           f"or refuses {sorted(ok - claimed)[:3]}... that they allow")


def test_readme_claims_what_the_pins_install_on():
    """'Python X.Y.Z to X.Y (... but for X.Y.Z; ...' in the Quick start, and no older claim left."""
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"Python (3\.\d+\.\d+) to (3\.\d+) \([^)]*?(?:but for (3\.\d+\.\d+))?;", readme)
    assert m, "the README's Quick start names no 'Python X.Y.Z to X.Y (...;'"
    low, high, hole = Version(m.group(1)), Version(m.group(2)), m.group(3) and Version(m.group(3))
    claimed = {v for v in CANDIDATES if low <= v and (v.major, v.minor) <= (high.major, high.minor) and v != hole}
    assert claimed == supported(), f"the README says {m.group(0)!r}; the pins: {sorted(supported() ^ claimed)[:3]} differ"
    assert not re.search(r"Python 3\.\d+ or newer", readme), "an older claim is left"


def test_environment_yml_picks_a_python_that_fits():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    (python,) = [d for d in env["dependencies"] if isinstance(d, str) and re.match(r"python\b", d)]
    spec = python.removeprefix("python").strip()
    spec = re.sub(r"^=(\d+(\.\d+)*)$", r"==\1.*", spec)  # conda's "=3.11" is 3.11.*
    picked = set(SpecifierSet(spec).filter(CANDIDATES))
    assert picked and picked <= supported(), f"environment.yml's {python!r} allows {sorted(picked - supported())[:3]}"


# ---- the check itself, run by make with interpreters that say they are other versions

FAKE = """#!{python}
import sys
version = {version!r}
if sys.argv[1:] == ["--version"]:
    print("Python " + version)
elif sys.argv[1:2] == ["-c"]:
    sys.version_info = tuple(int(x) for x in version.split("."))
    exec(sys.argv[2])
else:
    sys.exit("fake python: " + repr(sys.argv))
"""


def fake_python(folder: Path, version: str) -> Path:
    path = folder / f"python-{version}"
    path.write_text(FAKE.format(python=sys.executable, version=version))
    path.chmod(0o755)
    return path


def python_check(python: Path, venv: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", "python-check", f"PYTHON={python}", f"VENV={venv}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("version,fits", [("3.10.12", False), ("3.11.2", False), ("3.11.4", False), ("3.11.5", True),
                                          ("3.12.3", True), ("3.14.0", True), ("3.14.1", False), ("3.15.0", False)])
def test_make_refuses_a_python_the_pins_do_not_install_on(tmp_path, version, fits):
    """Ubuntu 22.04's 3.10 and Debian 12's 3.11.2 are refused before pip starts, with the ways out named."""
    proc = python_check(fake_python(tmp_path, version), tmp_path / "no-venv")
    out = proc.stdout + proc.stderr
    if fits:
        assert proc.returncode == 0, out
        return
    assert proc.returncode != 0, f"make python-check let Python {version} through"
    for way in (version, "environment.yml", "uv python install", "deadsnakes", "pyenv install", "container"):
        assert way in out, f"the refusal does not name {way!r}:\n{out}"


def test_make_refuses_a_venv_made_by_a_python_that_does_not_fit(tmp_path):
    """A .venv left by an earlier try with 3.10 is named, with the command that removes it."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake_python(venv / "bin", "3.10.12").rename(venv / "bin" / "python")
    proc = python_check(fake_python(tmp_path, "3.11.7"), venv)
    assert proc.returncode != 0 and "3.10.12" in proc.stdout and f"rm -rf {venv}" in proc.stdout, proc.stdout

"""docker/'s files as the tests read them without a Docker engine (tests/system/test_environment.py,
tests/system/test_container_files.py): the Dockerfile's instructions by stage, continuation lines joined; a stage's base
image; its COPYs, its `pip install`s and its build arguments' defaults; which repository file a COPY put where.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"


# ---- the Dockerfile, read as instructions ----

def _instructions(path: Path = DOCKERFILE) -> list[tuple[str, str, str]]:
    """(stage, INSTRUCTION, arguments) for every instruction, continuation lines joined."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        if not current and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        lines.append(current + raw)
        current = ""
    out, stage = [], ""
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        word = word.upper()
        if word == "FROM":
            m = re.search(r"\bAS\s+(\S+)", rest, re.I)
            stage = m.group(1) if m else rest.split()[0]
        out.append((stage, word, rest.strip()))
    return out


def _from(stage: str) -> str:
    """A stage's base image, a build argument (``FROM ${BASE_CPU}``) read as its default."""
    image = next(rest.split()[0] for s, word, rest in _instructions() if word == "FROM" and s == stage)
    return _expand_args(image)


def _expand_args(text: str) -> str:
    """``text`` with each ``${ARG}`` or ``"${ARG}"`` replaced by that build argument's default."""
    return re.sub(r'"?\$\{(\w+)\}"?', lambda m: _arg_default(m.group(1)), text)


def _copies() -> list[tuple[str, list[str], str]]:
    """(stage, sources, destination) of every COPY."""
    out = []
    for stage, word, rest in _instructions():
        if word in ("COPY", "ADD"):
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            out.append((stage, parts[:-1], parts[-1]))
    return out


def _pip_installs() -> list[tuple[str, list[str]]]:
    """(stage, arguments) of every `pip install` in a RUN."""
    out = []
    for stage, word, rest in _instructions():
        if word != "RUN":
            continue
        lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        commands, current = [], []
        for token in lexer:
            if token in ("&&", ";", "||", "|", "&"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
        for args in commands:
            for i in range(len(args) - 1):
                if args[i].endswith("pip") and args[i + 1] == "install":
                    out.append((stage, args[i + 2:]))
    return out


def _arg_default(name: str) -> str:
    for _, word, rest in _instructions():
        if word == "ARG" and rest.startswith(name + "="):
            return shlex.split(rest.partition("=")[2])[0]
    raise AssertionError(f"no ARG {name}= in docker/Dockerfile")


def _repo_source_of(container_path: str, stage: str) -> str:
    """The repository file a COPY put at ``container_path`` (in ``stage`` or a stage it builds on)."""
    for s, sources, dest in _copies():
        for src in sources:
            if container_path == dest or (dest.endswith("/") and container_path == dest + Path(src).name):
                return src
    raise AssertionError(f"{container_path} (stage {stage}) was not copied from the repository")

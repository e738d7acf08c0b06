"""The hand-out's own README.md and Makefile (``handout.make_handout``): the course's, cut down to what the hand-out
holds, so that neither names a command, a make target or a file that learners do not get.

Both are made from the course's own files when the hand-out is written, so that they stay as true as those: the
Makefile keeps the course Makefile's rules for the learner's targets (and a ``help`` and ``.PHONY`` that name only
them); the README is ``templates/handout/README.md`` filled with sections of the course README that speak to
learners. :func:`problems` then checks the result: every ``make TARGET`` it names has a rule, every file it names is
there.
"""
from __future__ import annotations

import re
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "templates" / "handout" / "README.md"
# The learner's make targets; the hand-out's Makefile has their rules and the rules they need, nothing else.
LEARNER_TARGETS = ("help", "lab", "notebooks", "venv", "check", "reset", "submit")
RULE_RE = re.compile(r"^([^\s#=:][^=:]*):(?!=)(.*)$")
SUBMAKE_RE = re.compile(r"\$\(MAKE\)(?:\s+-[-\w=]*)*\s+([^\s;|&]+)")
# A make command as a text gives it: in backticks or at the start of a code line, perhaps after variables.
MAKE_RE = re.compile(r"(?:^|`)[ \t]*(?:[A-Z_]+=\S*[ \t]+)*make ([a-z][a-z0-9-]*)", re.M)
# Paths that a text names (in backticks or as a link) under the folders a hand-out may lack.
PATH_RE = re.compile(r"(?<![\w/.])((?:docs|tools|tests|source|\.ci)/[\w./-]*[\w/])")
# A course README section that speaks of the instructor's or the developer's side, not the learner's.
NOT_FOR_LEARNERS = re.compile(r"make test|tests/|tools/|\bthe tests\b|pytest|INSTRUCTORS|[Ii]nstructors'", re.I)


def _blocks(text: str) -> list[list[str]]:
    """A Makefile's blank-line separated blocks."""
    out: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip():
            out[-1].append(line)
        elif out[-1]:
            out.append([])
    return [b for b in out if b]


def _rule(block: list[str]) -> str | None:
    m = next((RULE_RE.match(line) for line in block if RULE_RE.match(line)), None)
    return m.group(1).strip() if m else None


def _needs(block: list[str]) -> set[str]:
    """What a rule's block names as its prerequisites or runs as ``$(MAKE) TARGET``."""
    out: set[str] = set()
    for line in block:
        m = RULE_RE.match(line)
        if m:
            out |= set(m.group(2).split("#")[0].split())
        out |= set(SUBMAKE_RE.findall(line))
    return out


def makefile(course_makefile: str) -> str:
    """The course Makefile with only the learner's rules and those they need (prerequisites, ``$(MAKE)`` calls),
    its variables, a ``help`` that names only the learner's targets and a ``.PHONY`` that names only kept rules.
    A comment that speaks of the instructor's or the developer's side goes with them."""
    blocks = _blocks(course_makefile)
    rules = {t: b for b in blocks for t in [_rule(b)] if t and t != ".PHONY"}
    keep, todo = set(), [t for t in LEARNER_TARGETS if t in rules]
    while todo:
        target = todo.pop()
        if target not in keep:
            keep.add(target)
            todo += [n for n in _needs(rules[target]) if n in rules]
    kept = []
    title = "# The Triton kernels course, as handed out to learners: `make help` lists its commands."
    for i, block in enumerate(blocks):
        target = _rule(block)
        if i == 0 and block[0].startswith("# "):  # the course's title line names the instructor's targets
            block = [title, *block[1:]]
        if target == ".PHONY" or (target is not None and target not in keep):
            continue
        if target == "help":  # its lines for the learner's targets only
            block = [line for line in block if not line.startswith("\t") or re.search(
                r"make (%s)\b" % "|".join(map(re.escape, LEARNER_TARGETS)), line)]
        kept.append(_without_other_comments(block))
    phony = [t for t in rules if t in keep and "/" not in t and "$" not in t]
    kept.insert(1, [".PHONY: " + " ".join(phony)])
    return "\n\n".join("\n".join(b) for b in kept if b) + "\n"


def _without_other_comments(block: list[str]) -> list[str]:
    """A block without its runs of comment lines that speak of the instructor's or the developer's side."""
    out, run = [], []
    for line in block + [""]:
        if line.startswith("#"):
            run.append(line)
            continue
        if not any(NOT_FOR_LEARNERS.search(c) or "----" in c for c in run):
            out += run
        run = []
        if line:
            out.append(line)
    return out


def _sections(readme: str) -> tuple[str, dict[str, str]]:
    """(the text before the first ``## ``, heading -> its section with its ``###`` subsections)."""
    parts = re.split(r"^(?=## )", readme, flags=re.M)
    intro = parts[0].split("\n", 1)[1] if "\n" in parts[0] else ""
    return intro.strip(), {p.split("\n", 1)[0][3:].strip(): p.strip() for p in parts[1:]}


def _for_learners(section: str) -> str:
    """A section without what speaks to the instructor or the developer: its heading, paragraphs, list items and
    table rows that do not, and, in a paragraph that does, its other sentences; code blocks without such lines."""
    head, _, body = section.partition("\n")
    out = [head]
    for para in re.split(r"\n\s*\n", body.strip("\n")):
        lines = para.splitlines()
        if para.lstrip().startswith("```") or para.lstrip().startswith(("- ", "| ")):
            # (a list item's lines after its first are indented: an item goes with its continuation lines)
            items = re.split(r"\n(?=- |\| )", para) if not para.lstrip().startswith("```") else lines
            out.append("\n".join(i for i in items if not NOT_FOR_LEARNERS.search(i)))
        elif NOT_FOR_LEARNERS.search(para):
            kept = [s for s in re.split(r"(?<=[.:])\s+(?=[`A-Z])", " ".join(lines)) if not NOT_FOR_LEARNERS.search(s)]
            if kept and not kept[-1].rstrip().endswith(":"):
                out.append(" ".join(kept))
        else:
            out.append(para)
    return "\n\n".join(p for p in out if p.strip())


def readme(course_readme: str, template: str | None = None) -> str:
    """The hand-out's README: the template filled with the course README's learner sections."""
    intro, sections = _sections(course_readme)

    def section(prefix: str) -> str:
        name = next((n for n in sections if n.startswith(prefix)), None)
        return _for_learners(sections[name]) if name else ""

    text = template if template is not None else TEMPLATE.read_text()
    text = text.format(intro=intro, quick_start=section("Quick start").partition("\n")[2].strip(),
                       practice_card=section("The practice card"), container=section("The course in a container"))
    for course_words, folder_words in FOLDER_WORDS:
        text = text.replace(course_words, folder_words)
    return text


# The course README says "clone"; a hand-out is a folder.
FOLDER_WORDS = (("from a clone of the course", "from this folder"), ("your clone of the course", "this folder"),
                ("from a clone", "from this folder"))


def written(root: Path, names: list[str]) -> dict[str, str]:
    """The hand-out's own README.md and Makefile, made from the course's in ``root`` (those of ``names`` that exist)."""
    out = {}
    if "README.md" in names:
        out["README.md"] = readme((root / "README.md").read_text())
    if "Makefile" in names:
        out["Makefile"] = makefile((root / "Makefile").read_text())
    return out


def problems(files: dict[str, str], present: set[str]) -> list[str]:
    """What the hand-out's texts (name -> text; ``Makefile`` among them) name that it lacks: make targets without a
    rule, files not in ``present`` (the hand-out's paths)."""
    targets = {t for b in _blocks(files.get("Makefile", "")) for t in [_rule(b)] if t}
    folders = {str(Path(p).parent) for p in present} | {str(p) for path in present for p in Path(path).parents}
    out = []
    for name, text in sorted(files.items()):
        for t in sorted(set(MAKE_RE.findall(text))):
            if t not in targets:
                out.append(f"{name} names `make {t}`, which the hand-out's Makefile has no rule for")
        for p in sorted(set(PATH_RE.findall(text))):
            if p.rstrip("/") not in present and p.rstrip("/") not in folders:
                out.append(f"{name} names {p}, which the hand-out does not hold")
    return out

"""Counts and sizes in the notebooks' prose (issue 29): every number with a unit or a count (minutes, hours, points,
tests, MiB/GB, warps, programs per SM, registers) is computed below from the notebook, the record, the code or the
README's practice card, or listed in COUNTS_ALLOWED with the reason it is not a measurement. The rates (GB/s,
TFLOP/s) and ratios are tests/units/test_prose_figures.py's, whose record readers and claims this file reuses.
"""
from __future__ import annotations

import re

import pytest

from course import ROOT
from test_prose_figures import ASSIGNMENTS, BENCH, TILE, _markdown, _nb, claims
from tritoncourse.gpus import DATASHEET, GPUS, matmul_shared_memory, occupancy, waves

UNIT = re.compile(r"(?<![\w.·×^])(\d[\d,]*(?:\.\d+)?)(?:\s*(?:–|to|and)\s*(\d[\d,]*(?:\.\d+)?))?\s*"
                  r"(minutes|hours|points?\b|(?:kernel )?tests?\b|MiB|GiB|MB\b|GB\b(?!/)|KB\b|warps\b|"
                  r"programs? per SM|registers\b)")  # rates (GB/s, TFLOP/s): test_every_figure_in_the_prose_is_checked
H100 = GPUS["H100 SXM / H200"]


def _flat(text: str) -> str:
    return " ".join(text.split())


def card() -> dict[str, tuple[int, int]]:
    """The README practice card's time per phase, in minutes: {assignment: (least, most)}."""
    rows = re.findall(r"^\| \d \| `(\w+)` \|.*?\| (\d+)–(\d+) min \|", (ROOT / "README.md").read_text(), re.M)
    return {a: (int(lo), int(hi)) for a, lo, hi in rows}


def points(nb, kind: str | None = None) -> int:
    """Points of the graded cells (kind 'code': tests, 'markdown': key questions)."""
    return sum(c.metadata["nbgrader"].get("points", 0) for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade") and kind in (None, c.cell_type))


def _level(cell) -> int:
    """The level of the heading a markdown cell starts with (0: none)."""
    m = re.match(r"(#+) (?!BEGIN SOLUTION)", cell.source) if cell.cell_type == "markdown" else None
    return len(m.group(1)) if m else 0


def _section_points(cells, start: int, level: int) -> int:
    """Points of the graded cells after cells[start] until the next heading of this level or higher."""
    total = 0
    for c in cells[start + 1:]:
        if 0 < _level(c) <= level:
            break
        total += c.metadata.get("nbgrader", {}).get("points", 0) if c.metadata.get("nbgrader", {}).get("grade") else 0
    return total


def point_claims(assignment: str) -> list[str]:
    """The phrases about points each notebook must hold, computed from its cells' nbgrader metadata."""
    nb = _nb(assignment)
    cells, found = nb.cells, []
    for i, c in enumerate(cells):
        if c.cell_type != "markdown":
            continue
        text = _flat(c.source)
        level = _level(c) or 9
        for m in re.finditer(r"\((?:manually )?graded, (\d+) points( each)?\)", text):
            if m.group(2):  # "3 points each": every graded question below
                each = {q.metadata["nbgrader"]["points"] for q in cells[i + 1:] if q.cell_type == "markdown"
                        and q.metadata.get("nbgrader", {}).get("grade")}
                found.append(m.group(0).replace(m.group(1), str(each.pop()) if len(each) == 1 else "?", 1))
            else:
                found.append(m.group(0).replace(m.group(1), str(_section_points(cells, i, level)), 1))
        for m in re.finditer(r"Question \d+ \((\d+) points\)", text):  # the next graded cell: its answer
            answer = next(q for q in cells[i + 1:] if q.metadata.get("nbgrader", {}).get("grade"))
            found.append(m.group(0).replace(m.group(1), str(answer.metadata["nbgrader"]["points"]), 1))
        for m in re.finditer(r"Exercise \((\d+) points\)", text):  # the tests that follow it
            found.append(m.group(0).replace(m.group(1), str(_section_points(cells, i, 9)), 1))
        grade = c.metadata.get("nbgrader", {})
        for m in re.finditer(r"Rubric \((\d+) points\)\.\*\*(.*?)(?:### END SOLUTION|$)", text):
            found.append(f"Rubric ({grade.get('points')} points)")
            items = sum(int(n) for n in re.findall(r"(\d+) points?:", m.group(2)))
            assert items in (0, grade.get("points")), f"{assignment}: a rubric's items add up to {items} points"
            found += [p for p in re.findall(r"\d+ points?:", m.group(2))]
        header = re.search(r"Points: ([^.]*)\.", text)
        if header:
            found.append(header.group(0))
            plain = re.sub(r"\([^)]*\)", "", header.group(1))
            numbers = [int(n) for n in re.findall(r"\d+", plain)]
            assert sum(numbers) == points(nb), f"{assignment}: 'Points: ...' adds up to {sum(numbers)}, cells {points(nb)}"
            questions = re.search(r"key questions? (\d+)", plain)
            assert questions and int(questions.group(1)) == points(nb, "markdown"), (header.group(0), points(nb, "markdown"))
            for part in re.finditer(r"(\d+) \(([^)]*)\)", header.group(1)):  # "21 (LayerNorm 5, ...)" adds up
                assert sum(int(n) for n in re.findall(r"\d+", part.group(2))) == int(part.group(1)), part.group(0)
    return found


def time_claims(assignment: str) -> list[str]:
    """Each notebook's expected time is the README card's; phase 1 gives the course's, added up from the card."""
    lo, hi = card()[assignment]
    found = [f"Expected time: {lo} to {hi} minutes"]
    if assignment == "01_vector_add":
        five = [v for a, v in card().items() if a < "06"]
        six = card()["06_fused_attention"]
        found.append(f"phases 1 to 5 take {round(sum(v[0] for v in five) / 60)} to "
                     f"{round(sum(v[1] for v in five) / 60)} hours, and phase 6, the capstone, "
                     f"{six[0] / 60:g} to {six[1] / 60:g} hours more")
    return found


def _recorded(config: str) -> dict:
    table = BENCH["autotuning"]["resources"]
    return dict(zip(table["columns"], next(r for r in table["rows"] if r[0] == config)))


class _Config:  # what gpus.py's helpers read of a triton.Config
    def __init__(self, m, n, k, warps, stages):
        self.kwargs, self.num_warps, self.num_stages = dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k), warps, stages


def _kb(m, n, k, stages) -> str:
    return f"{matmul_shared_memory(_Config(m, n, k, 4, stages)) // 1024:.0f} KB"


def size_claims(assignment: str) -> list[str]:
    """Sizes, registers, programs per SM and waves, computed from the code (gpus.py) and the record."""
    mib = lambda n: f"{n / 2**20:.0f} MiB"  # noqa: E731
    if assignment == "03_matmul_relu":
        s = 4096
        ab, c = 2 * (s * s + s * s), 2 * s * s
        peak = DATASHEET["H200"]["fp16_tflops"]
        return [f"| {mib(ab + c)} |", f"| {mib(2 * c)} |", f"**{mib(ab + c)}** (instead of {(ab + 3 * c) // 2**20})",
                f"they are {mib((128 + 128) * s * 2)}", f"{mib((128 + 128) * s * 2)} for 128×128", f"{_kb(128, 128, 32, 4)} and 128×256×32",
                f"is **{_kb(128, 256, 32, 4)}**", f"({_kb(128, 128, 64, 4)}) is not",
                f"need {_kb(128, 256, 32, 4)} of shared memory", f"wrapper's 128×256×32 ({_kb(128, 256, 32, 4)})",
                f"where A ({mib(2 * 8192 * 8192)})", f"the extra pass is {mib(2 * c)}",
                f"about {peak} TFLOP/s of fp16", f"at {peak} TFLOP/s:",
                f"is {128 * 256 // 256} registers per thread",
                f"{H100.shared_per_program // 1024} KB", f"{GPUS['L4'].shared_per_sm // 1024} to {H100.shared_per_sm // 1024} KB"]
    if assignment == "06_fused_attention":  # batch·heads = 32, head_dim 128, fp16
        qkvo = lambda seq: 4 * 32 * seq * 128 * 2  # noqa: E731
        return [f"that is {32 * 16384**2 * 2 / 2**30:.0f} GiB for `S` alone", f"{32 * 16384**2 * 2 / 2**30:.0f} GiB per pass",
                f"together are {mib(qkvo(16384))} at head_dim 128", f"for {mib(qkvo(1024))} (about",
                f"for {mib(qkvo(16384))} (about"]
    if assignment == "07_attention_backward":  # the naive backward's P, dP, dS at batch·heads 32, seq_len 16384, fp16
        naive = 3 * 32 * 16384**2 * 2
        return [f"3 · 32 · 16384² · 2 bytes = {naive / 2**30:.0f} GiB in fp16"]
    if assignment != "05_autotuning":
        return []
    small, big = (_recorded(TILE.format(128, 128, 32, 8, 4, 4)), _recorded(TILE.format(128, 256, 32, 8, 8, 4)))
    per_sm = occupancy(4, small["registers"], int(small["shared KB"] * 1024), H100)["programs"]
    assert per_sm == small["programs/SM"]
    w4096, w2176 = waves((4096 // 128) ** 2, per_sm, H100), waves(17 ** 2, per_sm, H100)
    tiles = [({k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", r[0])}, r[1])
             for r in BENCH["autotuning"]["resources"]["rows"]]  # (config, registers)
    extra = [regs - t["BLOCK_M"] * t["BLOCK_N"] / (32 * t["num_warps"]) for t, regs in tiles]  # beyond the accumulator
    one = waves((4096 // 128) * (4096 // 256), 1, H100)
    return [f"1024 programs, {per_sm} per SM at a time (section 2: their registers allow {per_sm}), so "
            f"{w4096['slots']} slots → {w4096['waves'] - 1 + w4096['last_wave'] / w4096['slots']:.1f} waves; the last "
            f"one is {100 * w4096['last_wave'] / w4096['slots']:.0f}% full and {100 * (1 - w4096['utilisation']):.0f}% "
            "of the time is lost",
            f"289 programs → one full wave of {w2176['slots']} and a second of {w2176['last_wave']} programs",
            f"({100 * w2176['utilisation']:.0f}% of the slots busy)", f"two waves' time for {289 / w2176['slots']:.2f} waves",
            f"two waves for {289 / w2176['slots']:.2f} waves of work",
            f"289 programs in {per_sm} × {H100.sms} = {w2176['slots']} slots",
            f"{small['registers']} × 128 = {small['registers'] * 128:,}", f"{big['registers']} × 256 = {big['registers'] * 256:,}",
            f"{per_sm} such programs fit", f"room for only {occupancy(8, big['registers'], 0, H100)['programs']}",
            f"**{min(extra):.0f} to {max(extra):.0f} registers more**",
            f"{128 * 128 // 128} for 128×128 with 4 warps",
            f"{_kb(128, 256, 32, 4)} for 128×256×32 with 4 stages, {_kb(128, 256, 64, 3)} for 128×256×64 with 3",
            f"128×256×64 with 3 stages ({_kb(128, 256, 64, 3)} of shared memory)",
            f"{one['slots']} SMs, one program per SM at a time: {one['waves'] - 1 + one['last_wave'] / one['slots']:.1f} waves",
            f"{H100.shared_per_program // 1024} KB", f"{GPUS['L4'].shared_per_program // 1024} KB",
            f"{H100.registers_per_sm:,}", f"{H100.threads_per_sm}"]


# A tile's warps (a config's parameter, chosen, not measured): "128×128 with 4 warps", "(8 warps, 4 stages)".
CONFIG = re.compile(r"\d+×\d+(?:×\d+)?(?: tiles?)?(?:,| and| with| over)+ \d+ warps|\(\d+ warps, \d+ stages|"
                    r"with \d+ warps and \d+ stages|`num_warps=\d+`|\d+ warps \(\d+ threads\)")
# Numbers with a unit that are not measurements, by phrase, each with its reason.
COUNTS_ALLOWED = {
    "01_vector_add": {"(256 MB moved": "2²⁶ fp32 elements x 3 arrays x 4 bytes, arithmetic"},
    "02_softmax": {"about an hour for sections 1–6, then 20 to 30 minutes": "a split of the card's 60-90 minutes",
                   "32 registers per": "2^15 fp32 values over 1024 threads: arithmetic",
                   "255 registers": "the hardware's limit per thread (gpus.MAX_REGISTERS_PER_THREAD)",
                   "16 warps": "the wrapper's parameter", "8 warps": "a config's parameter"},
    "03_matmul_relu": {"3.35 TB/s": "the H100 SXM datasheet (gpus.DATASHEET)", "4.8 TB/s": "the H200 datasheet",
                       "(16 KB for": "2·(64+64)·64 bytes: arithmetic of the example",
                       "(50 to 60 MB on a": "the H100's and H200's L2 size (datasheets)",
                       "99 KB": "the smallest GPUs' limit (gpus.SHARED_MEMORY_SMALLEST)",
                       "the recorded compiled kernel on an H200: 96 KB": "the record (results/, shared KB)",
                       "4 warps reached": "a config's parameter"},
    "04_benchmarking": {"50 MB of L2": "the H100's L2 (datasheet)", "16 MB vector": "an example's size",
                        "256 MB buff": "triton.testing.do_bench's cache-flush buffer (its code)",
                        "1 GB = 10⁹": "a unit's definition", "3000 GB/s": "3·10⁹ bytes in 1 ms: a unit example",
                        "(384 KB)": "2¹⁵ x 3 x 4 bytes: arithmetic", "32 MB thro": "the roof's copy: 2²² x 4 bytes x 2",
                        "4240 GB/s": "the record's roof (claims above)", "649 TFLOP/s": "the record's roof (claims above)",
                        "(227 KB here": "232448 bytes, the limit torch's message quotes (gpus.SHARED_MEMORY_DATACENTER)"},
    "05_autotuning": {"99 KB": "the smallest GPUs' limit (gpus.SHARED_MEMORY_SMALLEST)", "(96 KB)": "128×256×32, 4 stages",
                      "228 KB": "gpus.GPUS", "164 KB (163)": "gpus.GPUS (A100)", "100 KB (99)": "gpus.GPUS (L4)",
                      "255 registers": "the hardware's limit per thread", "2 or 3 programs per SM": "a rule of thumb",
                      "32 to 70. A program": "the rule rounded from 32 to 68 above",
                      "0 programs per SM": "a config over the shared memory fits none (section 9's table)",
                      "1 KB per": "the driver's reservation (gpus.occupancy)", "1 KB: a": "the same 1 KB",
                      "1.7 KB": "the compiled 256×256 kernel's spill (docs/GPU-RUNS.md)",
                      "192 KB": "128×256×64 with 4 stages (the record's shared KB)",
                      "32 to 70 registers": "the rule of section 2", "(256×256 with 8 warps is 256)": "arithmetic",
                      "643 against 636 TFLOP/s": "the record's sweep (claims above)",
                      "622 and 631 TFLOP/s": "the record (claims above)", "706 TFLOP/s": "EXPLORATION above",
                      "GROUP_M = 8 by about 1%": "the record's sweep"},
    "06_fused_attention": {"about 25 minutes": "a split of the card's 90-120 minutes",
                           "graded: 3 points": "the stretch's points ('(graded, 3 points)', computed above)",
                           "more than 32 KB": "the wrapper's rule (its code)", "at 8 warps": "a config's parameter",
                           "160 registers": "docs/GPU-RUNS.md: the compiled LayerNorm at 8 warps",
                           "40960 of an SM's 65536 registers": "160 x 256 threads, of gpus.GPUS's 65536",
                           "8 warps per SM": "one program of 8 warps", "At 16 warps, 92 registers":
                           "docs/GPU-RUNS.md: the compiled LayerNorm at 16 warps",
                           "8 GiB of scratch": "docs/GPU-RUNS.md: 8256 MiB, the naive version at seq_len 8192",
                           "needed 65 MiB": "docs/GPU-RUNS.md: the fused kernel's memory (O and LSE)",
                           "(12 warps in all": "tests/units/test_hopper.py: the warp-specialized kernel compiled "
                                               "for sm_90a here (its PTX's .reqntid 384)",
                           "232 registers a thread and the producer 40": "tests/units/test_hopper.py: the same "
                                                                         "kernel's setmaxnreg counts",
                           "(two groups of 4 warps": "tests/units/test_hopper.py: the Gluon kernel compiled for "
                                                     "sm_90a here (its partitions' num_warps 4 and 1)"},
    "07_attention_backward": {"15 to 20 minutes for the derivation": "a split of the card's 100-140 minutes: "
                              "15-20, 10-15, 40-55, 20-25 and 15-25 add up to it",
                              "2 × 128 × 128 fp32 values, need 256 registers a thread with 4 warps":
                                  "the dK and dV accumulators of a 128-key tile at head_dim 128 over 4 warps' 128 "
                                  "threads: arithmetic",
                              "chose 64 × 64 with 4 warps": "the configuration the sweep chose, as docs/GPU-RUNS.md "
                                                            "records it (tile shape and launch parameter)",
                              "two **consumer** groups of 4 warps": "tests/units/test_hopper.py: the Gluon backward "
                                                                    "compiled for sm_90a here (num_warps 4, 1 and 1)",
                              "its consumers hold 240 registers a thread": "tests/units/test_hopper.py: the Gluon "
                                                                           "backward's setmaxnreg counts (240, 24)"},
}


def _spans(text: str, phrases) -> list[tuple[int, int]]:
    spans = []
    for p in phrases:
        spans += [(m.start(), m.end()) for m in re.finditer(re.escape(_flat(p)), text)]
    return spans


def test_allowed_counts_from_the_run_log_are_in_it():
    """An allowed figure whose reason is the run log must be in docs/GPU-RUNS.md as written (or as its reason
    quotes it there)."""
    runs = (ROOT / "docs" / "GPU-RUNS.md").read_text()
    for assignment, allowed in COUNTS_ALLOWED.items():
        for phrase, reason in allowed.items():
            if reason.startswith("docs/GPU-RUNS.md"):
                quoted = re.search(r"\d+ (?:registers|GiB|MiB)", reason)
                figure = quoted.group(0) if quoted else re.search(r"\d+ (?:registers|GiB|MiB)", phrase).group(0)
                assert re.search(rf"\b{figure}", runs), (assignment, phrase, figure)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_counts_and_sizes_are_computed(assignment):
    """Do the notebook's points, times, sizes, registers, programs per SM and waves say what its cells, the README's
    card, the code and the record say?"""
    text = _markdown(assignment)
    missing = [p for p in point_claims(assignment) + time_claims(assignment) + size_claims(assignment)
               if _flat(p) not in text]
    assert not missing, f"source/{assignment} should say (computed from its cells, the card, gpus.py, the record):\n" \
                        + "\n".join(missing)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_count_in_the_prose_is_checked(assignment):
    """Every number with a unit or a count is in a computed phrase above or allowed with its reason."""
    text = _markdown(assignment)
    computed = point_claims(assignment) + time_claims(assignment) + size_claims(assignment)
    covered = _spans(text, computed + [p for a, p in claims() if a == assignment] + list(COUNTS_ALLOWED[assignment]))
    covered += [(m.start(), m.end()) for m in CONFIG.finditer(text)]
    unchecked = [f"...{text[max(0, m.start() - 60):m.end() + 10]}..." for m in UNIT.finditer(text)
                 if not any(a <= m.start() and m.end() <= b for a, b in covered)]
    assert not unchecked, (f"source/{assignment}: numbers no test checks; compute them in point_claims/time_claims/"
                           "size_claims or allow them in COUNTS_ALLOWED with the reason:\n" + "\n".join(unchecked))


def test_a_notebook_quotes_the_practice_card_as_the_readme_has_it():
    """A notebook that cites the README's practice card quotes its row ('you learn') word for word."""
    rows = dict(re.findall(r"^\| \d \| `(\w+)` \| (.*?) \|", (ROOT / "README.md").read_text(), re.M))
    cited = [a for a in ASSIGNMENTS if "practice card" in _markdown(a)]
    assert cited, "no notebook cites the practice card: drop this test"
    for assignment in cited:
        quoted = re.search(r"practice card[^*]*\*(.*?)\*", _markdown(assignment)).group(1)
        assert quoted == rows[assignment].replace("`", ""), (assignment, quoted, rows[assignment])

"""tritoncourse.compiled: kernels compiled for an H100 on this CPU, as phase 5's section 9 does.

The headline claim of that section, that a compile here gives the registers, spills and shared memory a GPU
reports, is checked against the record: the 12 configs of phase 5's reference matmul, compiled here, against
the `resources` table `make gpu-check` read from the compiled kernels on an H200 (`n_regs`, `n_spills`,
`metadata.shared`). The figures the section's prose quotes (the spilling 256x256 tile) are checked here too.
"""
from __future__ import annotations

import importlib.util
import json
import sys

import nbformat
import pytest
import torch
import triton
import triton.language as tl

from course import ROOT
from tritoncourse.gpus import describe
from tritoncourse.compiled import compile_configs, compile_for_gpu, ptxas_report, stage_lines

SOURCE = ROOT / "source" / "05_autotuning" / "05_autotuning.ipynb"
RECORD = json.loads((ROOT / "results" / "gpu-results.json").read_text())

SCALE = tl.constexpr(3)  # a kernel may read a module constant only as a constexpr


@triton.jit
def _scaled(x):
    return x * SCALE


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, _scaled(tl.load(x_ptr + offs, mask=mask)), mask=mask)


@pytest.fixture(scope="module")
def reference_matmul(tmp_path_factory):
    """Phase 5's reference matmul + ReLU (the source notebook's solution cell), as a module of its own."""
    nb = nbformat.read(SOURCE, as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "autotuned_matmul_relu_kernel"]
    path = tmp_path_factory.mktemp("reference") / "phase5_reference.py"
    path.write_text("import triton\nimport triton.language as tl\n\n" + cell.source)
    spec = importlib.util.spec_from_file_location("phase5_reference", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["phase5_reference"] = module
    spec.loader.exec_module(module)
    return module.triton_autotuned_matmul_relu_kernel


def _matmul_args(n: int = 1024):
    a = torch.empty(n, n, dtype=torch.float16)
    return (a, a, a, n, n, n, *a.stride(), *a.stride(), *a.stride())


def test_compiles_on_this_cpu_what_the_h200_reported(reference_matmul):
    """Registers, spills and shared memory of every reference config equal the record of an H200 run."""
    record = RECORD["benchmarks"]["autotuning"]
    rows = {r[0]: r for r in record["resources"]["rows"]}
    recorded_triton = RECORD["environment"]["triton"]  # every record so far: Triton 3.6.0
    if recorded_triton != triton.__version__:
        pytest.skip(f"the record was compiled by Triton {recorded_triton}, this is {triton.__version__}")
    configs = reference_matmul.configs
    compiled = compile_configs(reference_matmul, configs, *_matmul_args(), arch=90)
    assert len(compiled) == len(configs) == len(rows) == 12
    for config, k in zip(configs, compiled):
        assert not isinstance(k, str), k
        _, regs, spills, shared_kb, *_ = rows[describe(config)]
        assert (k.registers, k.n_spills, k.shared / 1024) == (regs, spills, shared_kb), describe(config)
        assert k.num_warps == config.num_warps and k.num_stages == config.num_stages


def test_the_spilling_tile_of_section_9(reference_matmul):
    """The prose: all 255 registers, over 1.7 KB stored per thread, 192 KB of shared memory, serialized wgmma."""
    big = triton.Config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3)
    (k,) = compile_configs(reference_matmul, [big], *_matmul_args(4096), arch=90)
    assert k.registers == 255 and 1700 <= k.spill_stores < 1800 and k.spill_loads > 0 and k.stack > 0
    assert k.shared == 192 * 1024
    assert any("wgmma" in note and "serialized" in note for note in k.ptxas_notes), k.ptxas_notes
    assert "SPILLS" in k.summary()


def test_divisible_sizes_get_16_byte_loads_and_ragged_ones_do_not():
    """Section 9's specialization example: 4 vector loads per thread at 2**20, 16 scalar ones at 2**20 + 1; the
    TTGIR layout has 4 elements per thread; a helper @triton.jit and a module constant are compiled along."""
    x = torch.empty(8, dtype=torch.float32)
    even = compile_for_gpu(_scale_kernel, x, x, 2**20, arch=90, BLOCK=1024, num_warps=4)
    ragged = compile_for_gpu(_scale_kernel, x, x, 2**20 + 1, arch=90, BLOCK=1024, num_warps=4)
    assert set(even.asm) == {"ttir", "ttgir", "llir", "ptx"}
    assert stage_lines(even, "ttgir", r"sizePerThread = \[4\]", limit=1)
    even_loads, ragged_loads = (stage_lines(k, "ptx", r"ld\.global", limit=100) for k in (even, ragged))
    assert len(even_loads) == 2 and all("ld.global.v4.b32" in line for line in even_loads), even_loads
    assert len(ragged_loads) == 8 and all("ld.global.b32" in line for line in ragged_loads), ragged_loads
    assert even.registers > 0 and even.spill_stores == 0 and even.shared == 0
    assert "mul.f32" in even.asm["ptx"]  # _scaled(x) = x * 3, the helper and the constant came along


def test_a_compile_error_is_a_message_and_a_non_kernel_is_refused():
    bad = triton.Config({"BLOCK": 1000}, num_warps=4)  # tl.arange needs a power of two
    (err,) = compile_configs(_scale_kernel, [bad], torch.empty(8), torch.empty(8), 100, arch=90)
    assert isinstance(err, str) and "power of 2" in err.lower().replace("two", "2"), err
    with pytest.raises(RuntimeError, match="power of"):
        compile_for_gpu(_scale_kernel, torch.empty(8), torch.empty(8), 100, arch=90, BLOCK=1000)
    with pytest.raises(TypeError, match="not a Triton kernel"):
        compile_for_gpu(lambda x: x, 1)


def test_ptxas_report_reads_registers_spills_and_remarks():
    text = """ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    704 bytes stack frame, 1764 bytes spill stores, 1252 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 704 bytes cumulative stack size"""
    r = ptxas_report(text)
    assert (r["registers"], r["stack"], r["spill_stores"], r["spill_loads"]) == (255, 704, 1764, 1252)
    assert len(r["ptxas_notes"]) == 1 and "serialized" in r["ptxas_notes"][0]
    with pytest.raises(ValueError, match="no register report"):
        ptxas_report("ptxas fatal: something else")

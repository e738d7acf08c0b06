"""What the compiler made: a kernel compiled for an NVIDIA GPU without running it, on any machine.

Triton ships its compiler (LLVM) and NVIDIA's assembler (``ptxas``), so a kernel can be compiled for an H100
on a laptop's CPU. :func:`compile_for_gpu` does what a launch does (it specializes the arguments the same
way: 16-byte aligned pointers, integers divisible by 16, integers equal to 1) and returns every stage
(``ttir``, ``ttgir``, ``llir``, ``ptx``) with what ``ptxas -v`` reports: registers per thread, spills and the
stack, next to the shared memory the compiler planned. On a GPU, ``kernel[grid](...)`` returns the same
compiled kernel (``.asm``, ``.n_regs``, ``.n_spills``, ``.metadata.shared``); this helper is the one code path
for both, so a CPU learner reads the same numbers a GPU learner does.

The compile runs in a child process without ``TRITON_INTERPRET`` (the interpreter replaces Triton's own
library functions, which the compiler then cannot use).
"""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

STAGES = ("ttir", "ttgir", "llir", "ptx")
TIMEOUT_S = 300


@dataclass
class CompiledKernel:
    """One kernel compiled for one GPU: its stages and the resources ``ptxas`` gave it."""

    name: str
    arch: int  # compute capability: 90 is an H100 or H200
    num_warps: int
    num_stages: int
    asm: dict[str, str]  # stage -> text: ttir, ttgir, llir, ptx
    registers: int  # per thread, as ptxas allocated them (what the GPU reports as n_regs)
    shared: int  # bytes of shared memory per program (metadata.shared)
    stack: int  # bytes of local memory per thread: spilled registers live there
    spill_stores: int  # bytes stored to local memory per thread
    spill_loads: int  # bytes loaded back from it
    ptxas_notes: list[str] = field(default_factory=list)  # ptxas' remarks, e.g. serialized wgmma

    @property
    def n_spills(self) -> int:
        """What the GPU reports as ``n_spills``: the local memory per thread in 32-bit words."""
        return self.stack // 4

    def summary(self) -> str:
        spills = ("no spills" if not self.spill_stores else
                  f"SPILLS: {self.spill_stores} bytes stored and {self.spill_loads} loaded per thread")
        return (f"{self.name} for sm_{self.arch} ({self.num_warps} warps, {self.num_stages} stages): "
                f"{self.registers} registers per thread, {self.shared / 1024:.1f} KB shared memory, {spills}")


def _python_function(kernel):
    """The Python function under a @triton.jit, @triton.autotune or @triton.heuristics object."""
    fn = getattr(kernel, "fn", None)  # a plain function is not a kernel: at least one wrapper
    for _ in range(8):
        if inspect.isfunction(fn):
            return fn
        fn = getattr(fn, "fn", None)
    raise TypeError(f"{kernel!r} is not a Triton kernel (@triton.jit, optionally under @triton.autotune)")


def _def_source(fn) -> str:
    """The kernel's source from its `def` on (its decorators dropped)."""
    src = textwrap.dedent(inspect.getsource(fn))
    start = re.search(r"^def\s+\w+\s*\(", src, re.MULTILINE)
    if start is None:
        raise ValueError(f"no `def` found in the source of {fn.__name__}")
    return src[start.start():]


def _dependencies(fn, seen: dict[str, str], constants: dict[str, str]) -> None:
    """The @triton.jit helpers and the number constants the kernel reads from its module, recursively."""
    for name in fn.__code__.co_names:
        if name in seen or name in constants or name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        if isinstance(value, (bool, int, float)):  # the compiler refuses it, as on a GPU: kept to say so
            constants[name] = repr(value)
        elif type(value).__name__ == "constexpr" and isinstance(getattr(value, "value", None), (bool, int, float)):
            constants[name] = f"tl.constexpr({value.value!r})"
        elif type(value).__name__ in ("JITFunction", "InterpretedFunction"):
            helper = _python_function(value)
            seen[name] = _def_source(helper)
            _dependencies(helper, seen, constants)


def _describe_arg(value):
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None and isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float)):
        return {"value": value}
    raise TypeError(f"compile_for_gpu takes tensors and numbers as arguments, not {type(value).__name__}")


def compile_for_gpu(kernel, *args, arch: int | None = None, num_warps: int = 4, num_stages: int = 3,
                    **constexprs) -> CompiledKernel:
    """Compile ``kernel`` as ``kernel[grid](*args, **constexprs, num_warps=..., num_stages=...)`` would, for
    compute capability ``arch`` (default: this machine's GPU, else 90, an H100), without running it.

    Tensors among ``args`` stand for their dtype and a 16-byte aligned address; numbers are specialized
    as a launch does (divisible by 16, equal to 1). Works on the CPU too, interpreter or not.
    """
    result = _compile(kernel, args, [{"constexprs": constexprs, "num_warps": num_warps,
                                      "num_stages": num_stages}], arch)[0]
    if isinstance(result, str):
        raise RuntimeError(result)
    return result


def compile_configs(kernel, configs, *args, arch: int | None = None) -> list[CompiledKernel | str]:
    """:func:`compile_for_gpu` for each ``triton.Config`` of ``configs`` (an autotuner's ``.configs``), in one
    child process: a compiled kernel per config, or the compiler's error as a string."""
    variants = [{"constexprs": dict(c.kwargs), "num_warps": c.num_warps, "num_stages": c.num_stages}
                for c in configs]
    return _compile(kernel, args, variants, arch)


def _compile(kernel, args, variants: list[dict], arch: int | None) -> list[CompiledKernel | str]:
    fn = _python_function(kernel)
    if arch is None:
        arch = _this_gpu_arch() or 90
    helpers: dict[str, str] = {}
    constants: dict[str, str] = {}  # name -> Python expression
    _dependencies(fn, helpers, constants)
    request = {"name": fn.__name__, "source": _def_source(fn), "helpers": helpers, "constants": constants,
               "args": [_describe_arg(a) for a in args], "variants": variants, "arch": arch}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", "from tritoncourse.compiled import _child; _child()"],
                          input=json.dumps(request), capture_output=True, text=True, env=env,
                          timeout=TIMEOUT_S * max(1, len(variants)))
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {fn.__name__} for sm_{arch} failed:\n{proc.stderr.strip()[-3000:]}")
    return [CompiledKernel(**r) if isinstance(r, dict) else r for r in json.loads(proc.stdout)]


def _this_gpu_arch() -> int | None:
    from .device import infer_device

    if infer_device() != "cuda":
        return None
    import torch

    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def ptxas_report(text: str) -> dict:
    """Registers, stack and spills from ``ptxas -v``'s report, and its other remarks."""
    regs = re.search(r"Used (\d+) registers", text)
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if regs is None or frame is None:
        raise ValueError(f"no register report in ptxas' output:\n{text[-2000:]}")
    notes = [line.split(":", 1)[1].strip() for line in text.splitlines()
             if line.startswith("ptxas") and "Potential Performance Loss" in line]
    return {"registers": int(regs.group(1)), "stack": int(frame.group(1)), "spill_stores": int(frame.group(2)),
            "spill_loads": int(frame.group(3)), "ptxas_notes": notes}


def _child() -> None:  # pragma: no cover - runs in the child process, tested through compile_for_gpu
    import tempfile
    import types

    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    req = json.load(sys.stdin)
    answer, sys.stdout = sys.stdout, sys.stderr  # whatever the compiler prints must not mix with the answer
    with tempfile.TemporaryDirectory(prefix="tritoncourse-compile-") as tmp:
        # A module file, so that @triton.jit can read the source back as it does in a notebook.
        module_path = os.path.join(tmp, "learner_kernel.py")
        lines = ["import triton", "import triton.language as tl", ""]
        lines += [f"{k} = {v}" for k, v in req["constants"].items()]
        for src in list(req["helpers"].values()) + [req["source"]]:
            lines += ["", "@triton.jit", src]
        text = "\n".join(lines) + "\n"
        with open(module_path, "w") as f:
            f.write(text)
        module = types.ModuleType("learner_kernel")
        module.__file__ = module_path
        sys.modules["learner_kernel"] = module
        exec(compile(text, module_path, "exec"), module.__dict__)
        jit = module.__dict__[req["name"]]

        target = GPUTarget("cuda", req["arch"], 32)
        backend = make_backend(target)
        binder = create_function_from_signature(jit.signature, jit.params, backend)
        args = [torch.empty(16, dtype=getattr(torch, a["tensor"])) if "tensor" in a else a["value"]
                for a in req["args"]]
        results = []
        for variant in req["variants"]:
            try:
                results.append(_compile_one(jit, args, variant, req, target, backend, binder, tmp))
            except Exception as err:  # noqa: BLE001 - the compiler's message is the answer
                results.append(_error_message(err))
    json.dump(results, answer)


def _error_message(err: BaseException) -> str:
    """The compiler's error with its causes (a CompilationError shows where; its cause says what)."""
    parts, seen = [], err
    while seen is not None and len(parts) < 4:
        parts.append(f"{type(seen).__name__}: {str(seen).strip()[-1500:]}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def _compile_one(jit, args, variant, req, target, backend, binder, tmp) -> dict:  # pragma: no cover - child
    import triton
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    kwargs = dict(variant["constexprs"], num_warps=variant["num_warps"], num_stages=variant["num_stages"])
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
    compiled = triton.compile(ASTSource(jit, signature, constexprs, attrs), target=target, options=options.__dict__)
    ptx = os.path.join(tmp, "kernel.ptx")
    with open(ptx, "w") as f:
        f.write(compiled.asm["ptx"])
    arch = f"sm_{req['arch']}" + ("a" if req["arch"] >= 90 else "")
    proc = subprocess.run([get_ptxas(req["arch"]).path, "-v", f"--gpu-name={arch}", ptx, "-o",
                           os.path.join(tmp, "kernel.cubin")], capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed:\n{proc.stderr}")
    return {"name": req["name"], "arch": req["arch"], "num_warps": compiled.metadata.num_warps,
            "num_stages": compiled.metadata.num_stages,
            "asm": {s: compiled.asm[s] for s in STAGES if isinstance(compiled.asm.get(s), str)},
            "shared": compiled.metadata.shared, **ptxas_report(proc.stderr + proc.stdout)}


def stage_lines(compiled: CompiledKernel, stage: str, pattern: str, limit: int = 8) -> list[str]:
    """The lines of one stage that match a regular expression (at most ``limit``), stripped."""
    found = [line.strip() for line in compiled.asm[stage].splitlines() if re.search(pattern, line)]
    return found[:limit]


def show_stages(compiled: CompiledKernel) -> None:
    """What each stage is, how long it is, and the lines worth reading first in it."""
    print(compiled.summary())
    if compiled.ptxas_notes:
        print("ptxas says: " + "; ".join(compiled.ptxas_notes))
    highlights = {
        "ttir": ("Triton IR: whole tiles (tensor<1024xf32>), no threads yet", r"tt\.(load|store|dot)\b"),
        "ttgir": ("Triton GPU IR: each tensor gets a layout, which thread holds which elements",
                  r"^#\w+ = #ttg\.(blocked|nvidia_mma|shared|nvmma_shared)"),
        "llir": ("LLVM IR: one thread's view, vectors of a few elements", r"call .*@llvm\.nvvm|load <|store <"),
        "ptx": ("PTX, NVIDIA's virtual assembly (ptxas turns it into the GPU's machine code)",
                r"\b(ld|st)\.global|wgmma\.mma_async|mma\.sync|cp\.async\.(cg|ca)"),
    }
    for stage in STAGES:
        text = compiled.asm.get(stage, "")
        what, pattern = highlights[stage]
        print(f"\n== {stage}: {len(text.splitlines())} lines. {what}")
        for line in stage_lines(compiled, stage, pattern, limit=6):
            print("   " + (line if len(line) <= 150 else line[:147] + "..."))

"""Taking kernels from a notebook: only @triton.jit functions, solution cells first, linted."""
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from course import ROOT, SUBMISSIONS, Fixture
from tritoncourse.grading.processes.isolated import PROVIDED, parse_cell
from tritoncourse.grading.lint.source import assemble, kernels_from_notebook

KERNEL = '''@triton.jit
def triton_k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, _helper(offs), mask=offs < n)
'''
HELPER = '''@triton.jit
def _helper(v):
    return v * 2
'''


def _nb(*cells):
    nb = new_notebook()
    for src, solution in cells:
        c = new_code_cell(src)
        if solution:
            c.metadata["nbgrader"] = {"solution": True, "grade_id": "k"}
        nb.cells.append(c)
    return nb


def test_kernel_and_its_helpers_are_taken_in_dependency_order():
    kernels, plain = kernels_from_notebook(_nb((HELPER, False), ("import os\nx = 1\n" + KERNEL, True)))
    asm = assemble("check(triton_k)", kernels, plain, PROVIDED | {"check"})
    assert asm.problems == []
    assert asm.kernels == ["_helper", "triton_k"]
    assert "import os" not in asm.source and "x = 1" not in asm.source


def test_solution_cell_wins_over_a_later_scratch_cell():
    scratch = KERNEL.replace("v * 2", "v").replace("offs < n", "offs <= n")
    kernels, _ = kernels_from_notebook(_nb((KERNEL, True), (scratch, False), (HELPER, False)))
    assert "offs < n" in kernels["triton_k"].source


def test_missing_or_plain_function_is_reported():
    """A `triton_<op>_kernel` must be a @triton.jit function; a missing name is named."""
    kernels, plain = kernels_from_notebook(_nb(("def triton_k_kernel(x):\n    return x\n", True)))
    asm = assemble("triton_k_kernel", kernels, plain, PROVIDED)
    assert "without @triton.jit" in asm.problems[0]
    asm = assemble("triton_other_kernel", kernels, plain, PROVIDED)
    assert "no @triton.jit function named `triton_other_kernel`" in asm.problems[0]


def test_plain_functions_and_configs_come_from_solution_cells_only():
    """Graded Python functions and autotune configs are taken from solution cells, linted, in order."""
    sol = ("CONFIGS = [triton.Config({'BLOCK': b}, num_warps=w) for b in (64, 128) for w in (1, 2)]\n"
           "@triton.autotune(configs=CONFIGS, key=['n'])\n" + KERNEL.replace("_helper(offs)", "offs") +
           "def gbps(n_bytes, ms):\n    return n_bytes / (ms * 1e-3) / 1e9\n")
    kernels, plain = kernels_from_notebook(_nb((sol, True), ("def scratch(x):\n    return x\n", False)))
    assert kernels["CONFIGS"].kind == "value" and kernels["gbps"].kind == "function"
    assert "scratch" not in kernels
    asm = assemble("check(triton_k, gbps)", kernels, plain, PROVIDED | {"check"})
    assert asm.problems == [] and asm.kernels.index("CONFIGS") < asm.kernels.index("triton_k")
    assert "scratch" in assemble("scratch", kernels, plain, PROVIDED).problems[0]


def test_lint_rejects_tampering_plain_functions_and_configs():
    bad = {
        "def f():\n    import os\n": "Import",
        "def f():\n    torch.allclose = None\n": "assigning to `torch.allclose`",
        "def f():\n    return open('x')\n": "builtin `open`",
        "def f():\n    return torch.__dict__\n": "__dict__",
    }
    for src, expected in bad.items():
        kernels, plain = kernels_from_notebook(_nb((src, True)))
        problems = assemble("f", kernels, plain, PROVIDED).problems
        assert problems and expected in problems[0], (src, problems)
    tampering = "CONFIGS = __import__('os').system('true')\n"
    kernels, plain = kernels_from_notebook(_nb((tampering, True)))
    assert "CONFIGS" not in kernels


def test_lint_rejects_escapes_from_the_kernel():
    """Imports, dunder attributes, Python globals and deep tl attributes are refused before running."""
    bad = {
        "import os": "Import",
        "y = __import__('os')": "__import__",
        "y = x_ptr.__class__": "__class__",
        "y = tl.core.builtins": "not part of triton.language",
        "y = some_global": "not defined for the kernel",
        "y = [i for i in range(3)]": "ListComp",
        "y = open('f')": "builtin `open`",
    }
    for line, expected in bad.items():
        src = f"@triton.jit\ndef triton_k(x_ptr):\n    {line}\n"
        kernels, plain = kernels_from_notebook(_nb((src, True)))
        problems = assemble("triton_k", kernels, plain, PROVIDED).problems
        assert problems and expected in problems[0], (line, problems)


def test_lint_accepts_ordinary_kernels():
    src = ("@triton.jit\ndef triton_k(x_ptr, n, B: tl.constexpr):\n"
           "    acc = tl.zeros((B,), dtype=tl.float32)\n"
           "    for i in range(0, n, B):\n"
           "        acc += tl.load(x_ptr + i + tl.arange(0, B), mask=i + tl.arange(0, B) < n, other=0.0)\n"
           "    y = tl.math.exp2(acc.to(tl.float32)) + math.pi\n"
           "    tl.store(x_ptr + tl.arange(0, B), tl.maximum(y, 0.0))\n")
    kernels, plain = kernels_from_notebook(_nb((src, True)))
    assert assemble("triton_k", kernels, plain, PROVIDED).problems == []


def test_untouched_stub_says_not_written():
    src = "@triton.jit\ndef triton_k(x_ptr):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
    kernels, plain = kernels_from_notebook(_nb((src, True)))
    assert "not written yet" in assemble("triton_k", kernels, plain, PROVIDED).problems[0]


def test_magic_lines_and_unparsable_cells_are_skipped():
    kernels, _ = kernels_from_notebook(_nb(("%matplotlib inline\n" + KERNEL, True), ("def broken(:", False)))
    assert "triton_k" in kernels


def test_parse_cell_reads_timeout():
    assert parse_cell("%%kernel_test --timeout 30\nx = 1\n") == ({"timeout": 30.0}, "x = 1\n")
    assert parse_cell("x = 1") is None
    restored = "# This cell was missing from the submission.\n\n%%kernel_test\nx = 1\n"
    assert parse_cell(restored) == ({"timeout": 120.0}, "x = 1\n")


# ---- issue 31: the lint is a whitelist over the whole definition ----

PHASES = sorted(p.name for p in (ROOT / "source").iterdir() if (p / f"{p.name}.ipynb").exists())
HOSTILE = ROOT / "tests" / "hostile" / "01_vector_add"


def _problems(src: str, name: str = "triton_k") -> list[str]:
    kernels, plain = kernels_from_notebook(_nb((src, True)))
    return assemble(name, kernels, plain, PROVIDED).problems


def _refused(src: str, expected: str, name: str = "triton_k") -> None:
    problems = _problems(src, name)
    assert any(expected in p for p in problems), (src, problems)


def _kernel(line: str) -> str:
    return f"@triton.jit\ndef triton_k(x_ptr, n, BLOCK: tl.constexpr):\n    {line}\n"


def _notebooks(phase: str):
    read = lambda folder: nbformat.read(ROOT / folder / phase / f"{phase}.ipynb", as_version=4)  # noqa: E731
    return read("release"), read("source")


def _kernel_test_bodies(source) -> list[str]:
    return [parsed[1] for c in source.cells if c.cell_type == "code" and (parsed := parse_cell(c.source))]


def test_every_phase_is_checked():
    assert len(PHASES) == 7, PHASES


@pytest.mark.parametrize("phase", PHASES)
def test_reference_solutions_pass_the_lint(phase):
    """Every definition the grader can take from a source notebook (its solutions, every kernel of any cell)
    passes the lint, and so does every kernel test cell's assembly."""
    _, source = _notebooks(phase)
    kernels, plain = kernels_from_notebook(source)
    asm = assemble("\n".join(sorted(kernels)), kernels, plain, PROVIDED)
    assert asm.problems == []
    assert set(asm.kernels) == set(kernels)
    for body in _kernel_test_bodies(source):
        assert assemble(body, kernels, plain, PROVIDED).problems == [], body[:200]


@pytest.mark.parametrize("phase", PHASES)
def test_correct_fixtures_pass_the_lint(phase):
    """Every correct_* submission (a correct kernel written differently) passes the lint in every kernel test."""
    release, source = _notebooks(phase)
    bodies = _kernel_test_bodies(source)
    paths = sorted((SUBMISSIONS / phase).glob("correct_*.py"))
    for path in paths:
        kernels, plain = kernels_from_notebook(Fixture.load(path).notebook(release, source))
        for body in bodies:
            assert assemble(body, kernels, plain, PROVIDED).problems == [], (path.name, body[:200])


def test_code_that_runs_when_the_kernel_is_loaded_is_refused():
    """Defaults, annotations and decorators run when the grader loads the learner's module: constants,
    members of triton.language and literal configurations only."""
    sig = "@triton.jit\ndef triton_k(x_ptr, {}):\n    pass\n"
    _refused(sig.format("B: tl.constexpr = __import__('os').system('true')"),
             "line 2: the default value of `B` must be a constant")
    _refused(sig.format("B=print"), "the default value of `B` must be a constant")
    member = "may only be a member of triton.language"
    _refused(sig.format("B: open('/tmp/x', 'w') = 1"), f"the annotation of `B` {member}")
    _refused(sig.format("B: tl.core = 1"), f"the annotation of `B` {member}")
    _refused("@triton.jit\ndef triton_k(x_ptr) -> print('x'):\n    pass\n", f"the return annotation {member}")
    assert _problems(sig.format("B: tl.constexpr = 64, C: 'tl.constexpr' = -1, "
                                "D: triton.language.constexpr = None")) == []

    tuned = ("@triton.autotune(configs={}, key=['n'])\n"
             "@triton.jit\ndef triton_k(x_ptr, n, B: tl.constexpr):\n    pass\n")
    _refused(tuned.format("__import__('os').system('true')"), "calling `__import__` is not allowed")
    _refused(tuned.format("[triton.Config({'B': b}) for b in SIZES]"), "`SIZES` is not a configuration value")
    _refused(tuned.format("[triton.Config({'B': 1}, pre_hook=print)]"),
             "`triton.Config(..., pre_hook=...)` is not allowed")
    _refused(tuned.format("[triton.Config({'B': 1})] * len('ab')"), "calling `len` is not allowed")
    _refused("def hook(args):\n    return args\n" + tuned.format("[triton.Config({'B': 1}, pre_hook=hook)]"),
             "`hook` is not a configuration value")
    _refused("@triton.jit(launch_metadata=print)\ndef triton_k(x_ptr):\n    pass\n",
             "`print` is not a configuration value")
    _refused("@triton.heuristics(values={'B': lambda a: 1})\n@triton.jit\n"
             "def triton_k(x_ptr, B: tl.constexpr):\n    pass\n", "`@triton.heuristics` is not supported by the grader")
    _refused("@functools.cache\n@triton.jit\ndef triton_k(x_ptr):\n    pass\n",
             "`@functools.cache` is not allowed on a kernel")
    _refused("@triton.jit\n@triton.autotune(configs=[], key=[])\ndef triton_k(x_ptr):\n    pass\n",
             "`@triton.jit` must be the last decorator")
    _refused("def jit(fn):\n    return fn\n@jit\ndef triton_k(x_ptr):\n    pass\n", "as `@triton.jit` (found `@jit`)")
    # literal configurations, configuration values of solution cells and literal jit options are fine
    ok = ("SIZES = [64, 128]\n"
          "CONFIGS = [triton.Config({'B': b}, num_warps=w, num_stages=2) for b in SIZES for w in (1, 2)]\n"
          "MORE = CONFIGS + [triton.Config({'B': 256}, num_warps=4)]\n"
          + tuned.format("MORE").replace("@triton.jit", "@triton.jit(do_not_specialize=['n'], debug=False)"))
    assert _problems(ok) == []


def test_paths_out_of_triton_language_are_refused():
    """Every `tl.`, `triton.` and `math.` path is resolved for real: only public members of triton.language,
    tl.math, libdevice and math that are not modules; `triton.` only as `triton.language.`."""
    cases = {
        "d = triton.runtime.driver.active": "`triton.runtime` is not part of triton.language",
        "y = triton.knobs.os.sys": "`triton.knobs` is not part of triton.language",
        "y = triton.compiler.compile": "`triton.compiler` is not part of triton.language",
        "y = triton.cdiv(n, BLOCK)": "`triton.cdiv` is not part of triton.language",
        "y = tl.core.builtins": "`tl.core` is not part of triton.language",
        "y = tl.standard.sum(x_ptr)": "`tl.standard` is not part of triton.language",
        "y = tl.extra.cuda.globaltimer()": "`tl.extra.cuda.globaltimer` is not part of triton.language",
        "y = tl.math.wraps": "`tl.math.wraps` is not part of triton.language",
        "y = tl.extra.cuda.libdevice.core": "`tl.extra.cuda.libdevice.core` is not part of triton.language",
        "y = math.pi.real": "`.real` is not an attribute of a Triton tensor",
    }
    for line, expected in cases.items():
        _refused(_kernel(line), expected)
    ok = ("y = triton.language.arange(0, BLOCK) + tl.math.exp2(x_ptr) + tl.extra.cuda.libdevice.exp(x_ptr)\n"
          "    z = tl.float32.primitive_bitwidth + math.pi + math.log2(BLOCK)")
    assert _problems(_kernel(ok)) == []


def test_no_variable_can_stand_for_a_module():
    cases = {
        "m = tl.core\n    m.builtins.exec('x')": "`tl.core` is not part of triton.language",
        "m = tl.math\n    y = m.exp(x_ptr)": "`tl.math` is a module",
        "m = tl\n    y = m.load(x_ptr)": "`tl` is a module",
        "y = tl.reduce(x_ptr, 0, tl)": "`tl` is a module",
        "y = math": "`math` is a module",
        "tl = x_ptr": "`tl` cannot be assigned",
    }
    for line, expected in cases.items():
        _refused(_kernel(line), expected)
    _refused("@triton.jit\ndef triton_k(tl):\n    pass\n", "an argument cannot be called `tl`")


def test_attributes_of_values_are_those_of_tensors_constexprs_and_dtypes():
    cases = {
        "y = x_ptr.__class__.__mro__": "attribute `__class__` is not allowed",
        "y = x_ptr._flatten_ir": "attribute `_flatten_ir` is not allowed",
        "y = tl._semantic": "attribute `_semantic` is not allowed",
        "y = x_ptr.handle.data": "`.handle` is not an attribute of a Triton tensor",
        "y = (x_ptr + 1).numpy()": "`.numpy` is not an attribute of a Triton tensor",
        "y = '{0.__class__}'.format(x_ptr)": "`.format` is not an attribute",
        "y = getattr(x_ptr, 'handle')": "the builtin `getattr` is not allowed",
        "x_ptr.dtype = 1": "assigning to `x_ptr.dtype` is not allowed",
        "tl.load = tl.store": "assigning to `tl.load` is not allowed",
        "x_ptr[0] = 1": "assigning to an element",
        "y = {1: 2}": "`Dict` is not allowed",
    }
    for line, expected in cases.items():
        _refused(_kernel(line), expected)
    _refused("KEYS = ['n']\n" + _kernel("KEYS.sort()"), "not use its attributes")
    _refused("def helper(v):\n    return v\n" + _kernel("y = helper(x_ptr)"), "`helper` is a plain Python function")
    ok = ("y = tl.load(x_ptr).to(tl.float16).T + x_ptr.dtype.element_ty.primitive_bitwidth\n"
          "    z = BLOCK.value if isinstance(BLOCK, tl.constexpr) else x_ptr.shape[0]")
    assert _problems(_kernel(ok)) == []


def test_graded_functions_reach_no_other_module_and_run_nothing_when_loaded():
    """A plain graded function: no decorator, constant defaults, inert annotations, and no path to a module
    other than math, statistics, torch (and its numeric submodules) and triton.language (`torch.os` was one)."""
    cases = {
        "def f(x):\n    return torch.os.system('true')\n": "`torch.os` is a module (os) that is not allowed",
        "def f(x):\n    torch.sys.exit(0)\n": "`torch.sys` is a module (sys) that is not allowed",
        "def f(x):\n    return statistics.sys.modules\n": "`statistics.sys` is a module (sys)",
        "def f(x):\n    return triton.runtime.driver\n": "`triton.runtime` is a module",
        "def f(x):\n    return triton.knobs.cache\n": "`triton.knobs` is a module",
        "def f(x):\n    return torch.utils.cpp_extension\n": "`torch.utils` is a module",
        "def f(x):\n    return torch.ops.load_library('x.so')\n": "`torch.ops` is a module",
        "def f(x):\n    return triton.compile\n": "`triton.compile` is not allowed",
        "def f(x):\n    m = torch\n    return m.os\n": "`torch` is a module",
        "def f(x):\n    return torch.load('x')\n": "`.load` is not allowed in a graded function",
        "def f(x):\n    x.numpy().tofile('result.json')\n": "`.tofile` is not allowed",
        "@functools.cache\ndef f(x):\n    return x\n": "a graded function cannot have a decorator (`@functools.cache`)",
        "def f(x, y=open('/etc/passwd').read()):\n    return x\n": "the default value of `y` must be a constant",
        "def f(x: print('hi')):\n    return x\n": "the annotation of `x` must be a type",
        "def f(x) -> exec('1'):\n    return x\n": "the return annotation must be a type",
        # a nested lambda's argument does not make the module's name a variable of the function
        "def f(x):\n    g = lambda torch: 0\n    return torch.os\n": "`torch.os` is a module (os) that is not allowed",
        "def f(x):\n    g = lambda open: 0\n    return open('x')\n": "the builtin `open` is not allowed",
        "def f(x):\n    return [open for open in (1,)]\n": "`open` cannot name a variable or an argument",
    }
    for src, expected in cases.items():
        _refused(src, expected, "f")
    ok = ("H = {'a': 1}\n"
          "def f(x: torch.Tensor, y: 'int', z: list[float] | None = None, gpu=H, r=5, t=-1.5, q=(1, 2)) -> float:\n"
          "    a = torch.full_like(x, float('nan')) + torch.nn.functional.relu(x)\n"
          "    b = triton.cdiv(3, 2) + math.ceil(1.5) + statistics.median([1]) + torch.finfo(x.dtype).bits\n"
          "    return x.double().allclose(a) + b + torch.cuda.is_available() + tl.float32.primitive_bitwidth\n")
    assert _problems(ok, "f") == []


def test_a_definition_is_taken_without_what_shares_its_line():
    """`X = [1]; import os` takes `X = [1]` only. (A learner's own `tl` or `torch` is refused: test_lint_decoys.)"""
    src = "CONF = [1]; import os\nimport sys; KEY = ['n']\n" + _kernel("y = CONF\n    z = KEY")
    kernels, plain = kernels_from_notebook(_nb((src, True)))
    asm = assemble("triton_k", kernels, plain, PROVIDED)
    assert asm.problems == [] and asm.kernels == ["CONF", "KEY", "triton_k"]
    assert "import" not in asm.source


@pytest.mark.parametrize("path", sorted(HOSTILE.glob("hostile_kernel_*.py")), ids=lambda p: p.stem)
def test_hostile_kernels_are_refused_naming_their_mechanism(path):
    """Each hostile learner whose kernel runs Python in the checking process (a default, an annotation, a
    decorator, a path through triton.knobs, a module kept in a local) is refused before anything runs."""
    fx = Fixture.load(path)
    release, source = _notebooks("01_vector_add")
    kernels, plain = kernels_from_notebook(fx.notebook(release, source))
    for body in _kernel_test_bodies(source):
        problems = assemble(body, kernels, plain, PROVIDED).problems
        assert fx.expect_message and any(fx.expect_message in p for p in problems), (body[:100], problems)

"""The fresh process that runs one test: ``python -I runner.py DIR``.

DIR holds ``learner_kernels.py`` (only the learner's @triton.jit functions, linted beforehand),
``kernel_names.json`` and ``test_cell.py`` (the instructor's test). The verdict goes to the JSON file
named by TRITONCOURSE_RESULT_FILE; a crash leaves no verdict, which the parent reports.
"""
import json
import os
import sys
import traceback

# -I keeps the working directory and PYTHONPATH off sys.path: only the course's own package is found.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _write(ok: bool, kind: str, message: str) -> None:
    with open(os.environ["TRITONCOURSE_RESULT_FILE"], "w") as f:
        json.dump({"ok": ok, "kind": kind, "message": message}, f)


def _learner_frames(tb, files) -> str:
    """The traceback lines that point into the learner's kernels or the test, not into torch/triton."""
    frames = [f for f in traceback.extract_tb(tb) if f.filename in files]
    return "".join(traceback.format_list(frames[-3:]))


def main(workdir: str) -> int:
    from tritoncourse.device import setup_device

    device = setup_device()
    import importlib.util
    import math

    import torch
    import triton
    import triton.language as tl

    from tritoncourse.checking import KernelCheckError

    kernels_path = os.path.join(workdir, "learner_kernels.py")
    test_path = os.path.join(workdir, "test_cell.py")
    names = json.load(open(os.path.join(workdir, "kernel_names.json")))
    ns = {"__name__": "__kernel_test__", "torch": torch, "triton": triton, "tl": tl, "math": math,
          "DEVICE": device}
    try:
        spec = importlib.util.spec_from_file_location("learner_kernels", kernels_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        ns.update({name: getattr(module, name) for name in names})
        with open(test_path) as f:
            code = compile(f.read(), test_path, "exec")
        exec(code, ns)
    except KernelCheckError as err:
        _write(False, "fail", str(err))
        return 1
    except BaseException as err:  # anything else the learner's kernel or the test raised
        where = _learner_frames(err.__traceback__, {kernels_path, test_path})
        text = f"{type(err).__name__}: {err}"
        hint = ""
        if "illegal memory access" in text or "misaligned address" in text:
            hint = ("\nLikely cause: a load or store outside a tensor on the GPU; check that every "
                    "tl.load and tl.store is masked.")
        _write(False, "error", (where + text)[-3000:] + hint)
        return 1
    _write(True, "pass", "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

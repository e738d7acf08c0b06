"""Calling the learner's plain Python functions (phases 4 and 5): making sure a graded name is an ordinary ``def``,
calling it with every failure turned into a message that names the call and the learner's line, requiring a
ValueError for bad input, and the comparisons and formats the function checks share.

On a hidden case (grading/judge/hidden_cases.py) :func:`_fmt` names a value's kind, never the value, and a call is
shown as ``name(...)``: the arguments are the hidden case's inputs, and what the learner's function returned could
encode them.
"""
from __future__ import annotations

import math
import statistics
import traceback
import types

import torch
import triton

from ...checking import KernelCheckError, hidden, stage

REL = 1e-6  # relative tolerance for the learner's arithmetic (it is exact up to rounding)


# ------------------------------------------------------------------------------- calling plain functions
def require_function(fn, name: str) -> None:
    """Fail unless ``fn`` is a plain Python function; give it the modules graded functions may use."""
    from ...grading.channel.rpc import RemoteFunction

    if isinstance(fn, RemoteFunction):  # the learner's function, in the runner process (which has the modules)
        return
    if not isinstance(fn, types.FunctionType):
        raise KernelCheckError(f"`{name}` is a {type(fn).__name__}, not a plain Python function.\n"
                               f"Likely cause: `{name}` must be an ordinary `def` (no decorator).")
    # Graded functions may use math, statistics, torch and triton without importing them (see the notebook).
    for module in (math, statistics, torch, triton):
        fn.__globals__.setdefault(module.__name__, module)


def _kind(v) -> str:
    """What kind of value ``v`` is, in words that quote nothing of it."""
    if v is None or isinstance(v, bool):
        return repr(v) if v is None else "a bool"
    if isinstance(v, torch.Tensor):
        return f"a {str(v.dtype).replace('torch.', '')} tensor"
    if isinstance(v, torch.dtype):
        return str(v)
    name = type(v).__name__ if type(v).__module__ == "builtins" else "object"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _fmt(v) -> str:
    """``v`` for a message: the value on a visible case, its kind on a hidden one (:func:`_kind`)."""
    if hidden():
        return _kind(v)
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, torch.Tensor):
        return f"<tensor of shape {tuple(v.shape)}, {str(v.dtype).replace('torch.', '')}>"
    if callable(v):
        return getattr(v, "__name__", "a function")
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_fmt(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        a, b = ("(", ")") if isinstance(v, tuple) else ("[", "]")
        more = ", ..." if len(v) > 6 else ""
        return a + ", ".join(_fmt(x) for x in v[:6]) + more + b
    return repr(v)


def _where_in_learner_code(err: BaseException) -> str:
    remote = getattr(err, "where", "")
    if remote:  # raised in the runner: its own lines of the learner's code
        line = [ln.strip() for ln in remote.strip().splitlines() if ln.strip()][-1:]
        return f"\n  in your code: {line[0]}" if line else ""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.endswith("learner_kernels.py")]
    if not frames:
        return ""
    f = frames[-1]
    return f"\n  in `{f.name}`: {f.line}" if f.line else f"\n  in `{f.name}`"


def _args(args: tuple, kwargs: dict | None = None) -> str:
    """The arguments of a call for a message; ``...`` on a hidden case (they are its inputs)."""
    if hidden():
        return "..."
    return ", ".join([_fmt(a) for a in args] + [f"{k}={_fmt(v)}" for k, v in (kwargs or {}).items()])


def call(fn, name: str, *args, hint: str | None = None, **kwargs):
    """Call the learner's ``fn``; an exception becomes a message that names the call and the line."""
    shown = _args(args, kwargs)
    stage(f"calling `{name}({shown})`")
    try:
        return fn(*args, **kwargs)
    except KernelCheckError:
        raise
    except NotImplementedError:
        raise KernelCheckError(f"`{name}` is not written yet: replace `raise NotImplementedError()` with your "
                               "code.") from None
    except Exception as err:
        raise KernelCheckError(f"`{name}({shown})` raised {type(err).__name__}: {err}"
                               f"{_where_in_learner_code(err)}\n"
                               f"Likely cause: {hint or 'read the error above; it comes from inside your function.'}"
                               ) from None


def expect_value_error(fn, name: str, args: tuple, why: str) -> None:
    """``fn(*args)`` must raise ValueError (a clear error for bad input), not return or fail otherwise."""
    shown = _args(args)
    stage(f"calling `{name}({shown})`, which must raise ValueError")
    try:
        result = fn(*args)
    except ValueError as err:
        if not str(err).strip():
            raise KernelCheckError(f"`{name}({shown})` raised a ValueError without a message.\n"
                                   f"Likely cause: say what is wrong, e.g. raise ValueError(f\"...\"): {why}") from None
        return
    except NotImplementedError:
        raise KernelCheckError(f"`{name}` is not written yet: replace `raise NotImplementedError()` with your "
                               "code.") from None
    except Exception as err:
        raise KernelCheckError(f"`{name}({shown})` raised {type(err).__name__}: {err}\n"
                               f"Likely cause: bad input should raise a ValueError that says why: {why}") from None
    raise KernelCheckError(f"`{name}({shown})` returned {_fmt(result)} instead of raising ValueError.\n"
                           f"Likely cause: check the arguments first: {why}")


def _close(a, b, rel: float = REL) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and math.isclose(a, b, rel_tol=rel,
                                                                                    abs_tol=1e-300)


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "" if hidden() else f" ({type(value).__name__})"  # a learner's class name could spell anything
        raise KernelCheckError(f"{what} is {_fmt(value)}{kind}, not a number.\n"
                               "Likely cause: return a plain int or float (use float(...) or .item() on a tensor).")
    return value

"""The objects that stay on their side of the judge-runner channel, as the other side sees them: a :class:`Remote`
proxy (a learner's @triton.jit kernel, autotuned kernel or plain function in the runner; a judge's timer in the
judge) forwards attribute reads, writes, calls and indexing over the channel. :func:`jit_types` is the one test of
what a Triton kernel is, shared by the channel (:func:`_kind_of`) and the checks (``checks.require_triton_kernel``).
:func:`_sync_in_place` gives a call through a proxy the in-place effects it would have had in one process.
"""
from __future__ import annotations

import torch


class Remote:
    """An object that lives on the other side of the channel."""

    __slots__ = ("_ch", "_ref", "_info")

    def __init__(self, ch, ref: int, info: dict):  # ch: the rpc.Channel it came through
        object.__setattr__(self, "_ch", ch)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_info", info)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") and name != "__globals__":
            raise AttributeError(name)
        return self._ch.request("getattr", self._ref, name)

    def __setattr__(self, name: str, value) -> None:
        self._ch.request("setattr", self._ref, name, value)

    def __getitem__(self, key):
        return self._ch.request("getitem", self._ref, key)

    def __call__(self, *args, **kwargs):
        return self._ch.request("call", self._ref, list(args), kwargs)

    def __repr__(self) -> str:
        return f"<{self._info.get('type', 'object')} {self._info.get('name', '')}>".replace(" >", ">")

    @property
    def __name__(self) -> str:
        return self._info.get("name") or self._info.get("type", "object")


class RemoteJit(Remote):
    """A learner's @triton.jit function, in the runner."""

    __slots__ = ()


class RemoteAutotuner(Remote):
    """A learner's @triton.autotune kernel, in the runner."""

    __slots__ = ()


class RemoteFunction(Remote):
    """A learner's plain Python function (phases 4 and 5), in the runner."""

    __slots__ = ()


def _proxy_class(kind: str) -> type:
    return {"jit": RemoteJit, "autotuner": RemoteAutotuner, "function": RemoteFunction}.get(kind, Remote)


def jit_types() -> tuple[type, ...]:
    """Triton's classes of a @triton.jit function: compiled, and interpreted where triton has an interpreter."""
    from triton.runtime.jit import JITFunction

    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - older triton
        return (JITFunction,)
    return (JITFunction, InterpretedFunction)


def _kind_of(obj) -> str:
    import types

    from triton.runtime.autotuner import Autotuner

    if isinstance(obj, Autotuner):
        return "autotuner"
    if isinstance(obj, jit_types()):
        return "jit"
    if isinstance(obj, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return "function"
    return "object"


def _sync_in_place(originals, after, depth: int = 0) -> None:
    """Make the judge's own lists and dicts (arguments of a call) what the runner's copies became: a learner's
    function that sorts its input in place has sorted the judge's, as it would have in one process."""
    if depth > 20:
        return
    if isinstance(originals, list) and isinstance(after, list):
        for i, (o, a) in enumerate(zip(originals, after)):
            if isinstance(o, (list, dict, tuple)):
                _sync_in_place(o, a, depth + 1)
                if isinstance(o, tuple) or type(o) is not type(a):
                    if not isinstance(o, tuple):
                        originals[i] = a
            elif not isinstance(o, torch.Tensor):
                originals[i] = a
        if depth and len(originals) != len(after):
            originals[:] = after
    elif isinstance(originals, tuple) and isinstance(after, tuple):
        for o, a in zip(originals, after):
            if isinstance(o, (list, dict, tuple)):
                _sync_in_place(o, a, depth + 1)
    elif isinstance(originals, dict) and isinstance(after, dict):
        for key in list(originals):
            if key not in after:
                del originals[key]
        for key, a in after.items():
            o = originals.get(key)
            if isinstance(o, (list, dict, tuple)) and type(o) is type(a):
                _sync_in_place(o, a, depth + 1)
            elif not isinstance(o, torch.Tensor):
                originals[key] = a

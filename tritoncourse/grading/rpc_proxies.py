"""The objects that stay on their side of the judge-runner channel, as the other side sees them: a :class:`Remote`
proxy (a learner's @triton.jit kernel, autotuned kernel or plain function in the runner; a judge's timer in the
judge) forwards attribute reads, writes, calls and indexing over the channel. :func:`jit_types` is the one test of
what a Triton kernel is, shared by the channel (:func:`_kind_of`) and the checks (``checks.require_triton_kernel``).
"""
from __future__ import annotations


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

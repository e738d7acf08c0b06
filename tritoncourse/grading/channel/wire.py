"""What crosses the judge-runner channel, at the level of bytes: one message is a length-prefixed JSON header and,
after it, the raw bytes of the tensor storages it carries (:func:`send_message`, :func:`recv_message`, bounded by
:data:`HEADER_LIMIT` and :data:`BLOB_LIMIT`, and where the judge receives by a :class:`Budget` of what it asked
for, checked before a byte is allocated: :class:`LimitExceeded`); storages as bytes and back, fenced where the
judge fenced them; and the exceptions of the protocol (:class:`ChannelClosed`, :class:`ProtocolError`,
:class:`OutOfMemory`, a peer's error as :class:`RemoteError`). rpc.py's :class:`rpc.Channel` builds on it.
"""
from __future__ import annotations

import builtins
import json
import socket
import struct
import traceback
from dataclasses import dataclass

import torch

from ...checking import Fenced

HEADER_LIMIT = 64 << 20  # bytes of JSON in one message
BLOB_LIMIT = 8 << 30  # bytes of storages in one message
CHUNK = 1 << 20  # a bounded receive allocates as the bytes arrive, this much at a time


@dataclass(frozen=True)
class Budget:
    """What one message may carry where the receiver knows what it asked for (the judge: rpc.Channel._budget):
    bytes of JSON header and bytes of storages. Checked before anything of the message is allocated."""

    header: int
    blobs: int


class ChannelClosed(BaseException):
    """The peer is gone (crashed, killed, or closed the channel). A BaseException: checks that turn every
    Exception of a launch into a learner's message must let it through to the judge's top level."""


class ProtocolError(BaseException):
    """The peer sent something that is not a message of this protocol (a runner that was tampered with)."""


class LimitExceeded(ProtocolError):
    """The peer announced more bytes than the receiver asked for (:class:`Budget`; nothing of them was allocated), or
    more of something else (``unit``) than the judge allows in one test."""

    def __init__(self, sent: int, allowed: int, what: str, unit: str = "bytes"):
        super().__init__(f"{what} of {sent} {unit} where at most {allowed} were expected")
        self.sent, self.allowed, self.what, self.unit = sent, allowed, what, unit


class OutOfMemory(BaseException):
    """The judge reached its memory limit (sandbox.limits.JudgeLimits) taking in what the runner sent. A
    BaseException, as ChannelClosed: the checks that turn a launch's every Exception into the learner's message (a
    MemoryError among them) let it through to the judge's top level, which says what happened."""


class RemoteError(Exception):
    """An exception raised on the other side; ``remote_type`` is its class name, ``where`` the learner's lines."""

    remote_type = "Exception"
    where = ""


_ERROR_CLASSES: dict[str, type] = {}


def _error_class(name: str) -> type:
    """An exception class named like the remote one, derived from the builtin of that name when there is one
    (so ``except TypeError`` and ``isinstance(err, NotImplementedError)`` still work), else from RemoteError."""
    if name not in _ERROR_CLASSES:
        base = getattr(builtins, name, None)
        # Not the judge's own MemoryError: the judge says "past the grader's memory" for that one alone.
        if not (isinstance(base, type) and issubclass(base, Exception)) or base is MemoryError:
            base = Exception
        safe = "".join(ch for ch in name if ch.isalnum() or ch == "_")[:60] or "RemoteError"
        _ERROR_CLASSES[name] = type(safe, (RemoteError, base) if base is not Exception else (RemoteError,), {})
    return _ERROR_CLASSES[name]


def make_error(info: dict, depth: int = 0) -> RemoteError:
    cls = _error_class(str(info.get("type", "Exception"))[:100])
    err = cls(str(info.get("message", ""))[:20000])
    err.remote_type = str(info.get("type", ""))[:100]
    err.where = str(info.get("where", ""))[:4000]
    if isinstance(info.get("cause"), dict) and depth < 3:  # describe_error sends three causes at most
        err.__cause__ = make_error(info["cause"], depth + 1)
    return err


def describe_error(err: BaseException, files: set[str] | None = None, depth: int = 0) -> dict:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if files and f.filename in files]
    out = {"type": type(err).__name__, "message": str(err)[:20000],
           "where": "".join(traceback.format_list(frames[-3:]))}
    cause = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    if cause is not None and depth < 3:
        out["cause"] = describe_error(cause, files, depth + 1)
    return out


# ------------------------------------------------------------------------------------------- framing
def _recv_exactly(sock: socket.socket, n: int, grow: bool = False) -> bytearray:
    """``n`` bytes. With ``grow``, the buffer grows as they arrive (a peer that announces more than it sends gets
    no more memory than it sent); else it is allocated at once (the peer is the judge, trusted)."""
    if grow and n > CHUNK:
        buf, scratch = bytearray(), bytearray(CHUNK)
        view = memoryview(scratch)
        while len(buf) < n:
            k = sock.recv_into(view, min(n - len(buf), CHUNK))
            if k == 0:
                raise ChannelClosed("the other process closed the channel")
            buf += view[:k]
        return buf
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 22))
        if k == 0:
            raise ChannelClosed("the other process closed the channel")
        got += k
    return buf


def send_message(sock: socket.socket, header: dict, blobs: list) -> int:
    """Send one message; the bytes of its JSON header."""
    header = dict(header, blobs=[len(b) for b in blobs])
    data = json.dumps(header).encode()
    try:
        sock.sendall(struct.pack(">I", len(data)) + data)
        for blob in blobs:
            sock.sendall(blob)
    except (BrokenPipeError, ConnectionResetError) as err:
        raise ChannelClosed(str(err)) from None
    return len(data)


def recv_message(sock: socket.socket, budget: Budget | None = None) -> tuple[dict, list[bytearray]]:
    """One message. With a ``budget`` (the judge's receive), a header or storages larger than it raise
    :class:`LimitExceeded` before they are read, and what is read is allocated as it arrives."""
    grow = budget is not None
    try:
        (size,) = struct.unpack(">I", bytes(_recv_exactly(sock, 4)))
        if budget is not None and size > budget.header:
            raise LimitExceeded(size, budget.header, "a message header")
        if size > HEADER_LIMIT:
            raise ProtocolError(f"a message header of {size} bytes")
        header = json.loads(bytes(_recv_exactly(sock, size, grow)))
        sizes = header.get("blobs", []) if isinstance(header, dict) else None
        if not isinstance(sizes, list) or not all(type(s) is int and s >= 0 for s in sizes) \
                or sum(sizes) > BLOB_LIMIT:
            raise ProtocolError("a malformed message")
        if budget is not None and sum(sizes) > budget.blobs:
            raise LimitExceeded(sum(sizes), budget.blobs, "tensor storages")
        return header, [_recv_exactly(sock, s, grow) for s in sizes]
    except (ConnectionResetError, OSError) as err:
        if isinstance(err, (ProtocolError, ChannelClosed)):
            raise
        raise ChannelClosed(str(err)) from None
    except ValueError as err:
        raise ProtocolError(f"a message that is not JSON ({str(err)[:200]})") from None
    except RecursionError:
        raise ProtocolError("a message nested too deeply") from None


# ------------------------------------------------------------------------------------------- storages
def _as_bytes(storage) -> torch.Tensor:
    """A storage as a flat uint8 tensor over the same memory (on its own device)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _storage_bytes(storage):
    """A storage's bytes, on the host, as something a socket can send."""
    data = _as_bytes(storage).detach()
    return memoryview(data.cpu().numpy()).cast("B") if data.numel() else b""


# ------------------------------------------------------------------------------------------- fences
def _fenced_storage(nbytes: int, side: str):
    f = Fenced(max(nbytes, 1), torch.uint8, side)
    return f.tensor[:nbytes].untyped_storage() if nbytes else f.tensor.untyped_storage(), f

"""What crosses the judge-runner channel, at the level of bytes: one message is a length-prefixed JSON header and,
after it, the raw bytes of the tensor storages it carries (:func:`send_message`, :func:`recv_message`, bounded by
:data:`HEADER_LIMIT` and :data:`BLOB_LIMIT`); storages as bytes and back, fenced where the judge fenced them; and
the exceptions of the protocol (:class:`ChannelClosed`, :class:`ProtocolError`, a peer's error as
:class:`RemoteError`). rpc.py's :class:`rpc.Channel` builds on it.
"""
from __future__ import annotations

import builtins
import json
import socket
import struct
import traceback

import torch

from ..checking import Fenced

HEADER_LIMIT = 64 << 20  # bytes of JSON in one message
BLOB_LIMIT = 8 << 30  # bytes of storages in one message


class ChannelClosed(BaseException):
    """The peer is gone (crashed, killed, or closed the channel). A BaseException: checks that turn every
    Exception of a launch into a learner's message must let it through to the judge's top level."""


class ProtocolError(BaseException):
    """The peer sent something that is not a message of this protocol (a runner that was tampered with)."""


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
        if not (isinstance(base, type) and issubclass(base, Exception)):
            base = Exception
        safe = "".join(ch for ch in name if ch.isalnum() or ch == "_")[:60] or "RemoteError"
        _ERROR_CLASSES[name] = type(safe, (RemoteError, base) if base is not Exception else (RemoteError,), {})
    return _ERROR_CLASSES[name]


def make_error(info: dict) -> RemoteError:
    cls = _error_class(str(info.get("type", "Exception")))
    err = cls(str(info.get("message", ""))[:20000])
    err.remote_type = str(info.get("type", ""))
    err.where = str(info.get("where", ""))[:4000]
    if info.get("cause"):
        err.__cause__ = make_error(info["cause"])
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
def _recv_exactly(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 22))
        if k == 0:
            raise ChannelClosed("the other process closed the channel")
        got += k
    return buf


def send_message(sock: socket.socket, header: dict, blobs: list) -> None:
    header = dict(header, blobs=[len(b) for b in blobs])
    data = json.dumps(header).encode()
    try:
        sock.sendall(struct.pack(">I", len(data)) + data)
        for blob in blobs:
            sock.sendall(blob)
    except (BrokenPipeError, ConnectionResetError) as err:
        raise ChannelClosed(str(err)) from None


def recv_message(sock: socket.socket) -> tuple[dict, list[bytearray]]:
    try:
        (size,) = struct.unpack(">I", bytes(_recv_exactly(sock, 4)))
        if size > HEADER_LIMIT:
            raise ProtocolError(f"a message header of {size} bytes")
        header = json.loads(bytes(_recv_exactly(sock, size)))
        sizes = header.get("blobs", []) if isinstance(header, dict) else None
        if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes) \
                or sum(sizes) > BLOB_LIMIT:
            raise ProtocolError("a malformed message")
        return header, [_recv_exactly(sock, s) for s in sizes]
    except (ConnectionResetError, OSError) as err:
        if isinstance(err, (ProtocolError, ChannelClosed)):
            raise
        raise ChannelClosed(str(err)) from None
    except ValueError as err:
        raise ProtocolError(f"a message that is not JSON ({err})") from None


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

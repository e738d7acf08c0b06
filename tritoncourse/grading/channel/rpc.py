"""The channel between the judge (instructor's checks, no learner code) and the runner (learner's kernels only).

One Unix stream socket; each message is a JSON header and, after it, the raw bytes of the tensor storages it
carries. Either side may call the other while a call of its own is waiting (the runner's autotuner calls the
judge's timer, which calls back the runner's benchmark thunk), so every wait also serves the peer's requests.

What crosses is data only, never code and never a pickle: numbers, strings, lists, tuples, dicts, dtypes,
``triton.Config`` fields, tensors (by storage: bytes, offset, shape, strides, so views inside guard buffers and
tensors sharing one storage arrive as they were; a storage the judge fenced with :class:`checking.Fenced` is
re-created fenced), and references to objects that stay on their side (a learner's kernel, a judge's timer):
the other side gets a :class:`Remote` proxy that forwards attribute reads, writes, calls and indexing.

After a call from the judge that carried tensors, the runner sends back the bytes of their storages, which the
judge copies in place: a kernel launch writes the judge's own buffers, exactly where the kernel stored.

This module holds :class:`Channel`; the bytes, framing and errors are channel/wire.py's, the proxies channel/proxies.py's
(both re-exported here: the judge, the runner and the checks import them from rpc).
"""
from __future__ import annotations

import socket
import types

import torch

from ...checking import FENCED
from .proxies import (Remote, RemoteAutotuner, RemoteFunction, RemoteJit, _kind_of, _proxy_class,
                      _sync_in_place, jit_types)
from .wire import (BLOB_LIMIT, HEADER_LIMIT, Budget, ChannelClosed, LimitExceeded, OutOfMemory, ProtocolError,
                   RemoteError, _as_bytes, _fenced_storage, _storage_bytes, describe_error, make_error,
                   recv_message, send_message)

# What the judge, the runner, the checks and the tests import from here.
__all__ = ["Channel", "ChannelClosed", "ProtocolError", "LimitExceeded", "OutOfMemory", "RemoteError", "Remote",
           "RemoteJit", "RemoteAutotuner", "RemoteFunction", "jit_types", "make_error", "describe_error",
           "send_message", "recv_message", "HEADER_LIMIT", "BLOB_LIMIT"]


class Channel:
    """One side of the channel. ``serve`` handles the peer's requests; ``request`` makes one and waits."""

    def __init__(self, sock: socket.socket, *, role: str, learner_files: set[str] | None = None, limits=None):
        self.sock = sock
        self.role = role  # "judge" | "runner"
        if role == "judge" and limits is None:
            from ..sandbox.limits import JudgeLimits

            limits = JudgeLimits.from_env()
        self.limits = limits  # the judge's: what a message from the runner may carry (None: the runner's, unbounded)
        self.waiting: list[tuple[int, int]] = []  # (header, storage) bytes of each request awaiting its reply
        self.sent_header = 0  # the bytes of the last request's header
        self.taken = 0  # the judge's: bytes of the storages the runner made, decoded so far (all kept: ``received``)
        self.served = 0  # the judge's: the runner's requests served so far
        self.learner_files = learner_files or set()
        self.objects: dict[int, object] = {}  # ref -> object exposed to the peer
        self.ids: dict[int, int] = {}  # id(object) -> ref
        self.received: dict[int, tuple[int, object]] = {}  # id(tensor from the peer) -> (peer ref, tensor)
        self.next_ref = 1
        self.pending: BaseException | None = None  # a judge-side failure raised inside a callback
        self.keep: list = []  # fences and storages that must outlive the call that made them

    # ---- encoding
    def _export(self, obj) -> int:
        ref = self.ids.get(id(obj))
        if ref is None:
            ref = self.next_ref
            self.next_ref += 1
            self.objects[ref] = obj
            self.ids[id(obj)] = ref
        return ref

    def encode(self, value, blobs: list, storages: dict, depth: int = 0):
        if depth > 50:
            raise ValueError("a value nested too deeply to send")
        if value is None or isinstance(value, (bool, int, float, str)):
            return value if not isinstance(value, float) else {"$f": repr(value)}
        if isinstance(value, Remote) and value._ch is self:
            return {"$peer": value._ref}
        if isinstance(value, (list, tuple, set, frozenset)):
            tag = {list: "$l", tuple: "$t"}.get(type(value), "$t")
            return {tag: [self.encode(v, blobs, storages, depth + 1) for v in value]}
        if isinstance(value, dict):
            return {"$d": [[self.encode(k, blobs, storages, depth + 1), self.encode(v, blobs, storages, depth + 1)]
                           for k, v in value.items()]}
        if isinstance(value, torch.dtype):
            return {"$dtype": str(value).replace("torch.", "")}
        if isinstance(value, torch.device):
            return {"$device": str(value)}
        if isinstance(value, torch.Tensor):
            return self._encode_tensor(value, blobs, storages)
        try:
            import numpy as np

            if isinstance(value, np.generic):
                return self.encode(value.item(), blobs, storages, depth + 1)
        except ImportError:  # pragma: no cover
            pass
        from triton import Config

        if isinstance(value, Config) and value.pre_hook is None:
            return {"$config": {"kwargs": self.encode(dict(value.kwargs), blobs, storages, depth + 1),
                                "num_warps": value.num_warps, "num_stages": value.num_stages,
                                "num_ctas": value.num_ctas, "maxnreg": value.maxnreg}}
        if self.role == "judge" and not _sendable_callback(value):
            raise TypeError(f"the judge sends no {type(value).__name__} to the runner")
        return {"$ref": self._export(value), "kind": _kind_of(value), "type": type(value).__name__,
                "name": str(getattr(value, "__name__", ""))[:100]}

    def _encode_tensor(self, t: torch.Tensor, blobs: list, storages: dict):
        back = self.received.get(id(t))
        if back is not None and back[1] is t:
            return {"$peer_tensor": back[0]}
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in storages:
            blobs.append(_storage_bytes(storage))
            storages[key] = {"index": len(blobs) - 1, "nbytes": storage.nbytes(), "device": t.device.type,
                             "fence": FENCED.get(key), "storage": storage}
        return {"$tensor": {"storage": storages[key]["index"], "offset": t.storage_offset(), "shape": list(t.shape),
                            "stride": list(t.stride()), "dtype": str(t.dtype).replace("torch.", ""),
                            "ref": self._export(t)}}

    # ---- decoding
    def decode(self, value, blobs: list, made: dict, depth: int = 0):
        if depth > 50:
            raise ProtocolError("a value nested too deeply")
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value
        if not isinstance(value, dict) or len(value) < 1:
            raise ProtocolError(f"an unknown value {str(value)[:80]}")
        if "$f" in value:
            return float(value["$f"])
        if "$l" in value:
            return [self.decode(v, blobs, made, depth + 1) for v in value["$l"]]
        if "$t" in value:
            return tuple(self.decode(v, blobs, made, depth + 1) for v in value["$t"])
        if "$d" in value:
            out = {}
            for k, v in value["$d"]:
                key = self.decode(k, blobs, made, depth + 1)
                out[key if not isinstance(key, list) else tuple(key)] = self.decode(v, blobs, made, depth + 1)
            return out
        if "$dtype" in value:
            dtype = getattr(torch, str(value["$dtype"]), None)
            if not isinstance(dtype, torch.dtype):
                raise ProtocolError(f"an unknown dtype {value['$dtype']!r}")
            return dtype
        if "$device" in value:
            return torch.device(str(value["$device"]))
        if "$peer" in value:
            ref = value["$peer"]
            if ref not in self.objects:
                raise ProtocolError("a reference to an object that was never sent")
            return self.objects[ref]
        if "$peer_tensor" in value:
            obj = self.objects.get(value["$peer_tensor"])
            if not isinstance(obj, torch.Tensor):
                raise ProtocolError("a reference to a tensor that was never sent")
            return obj
        if "$tensor" in value:
            return self._decode_tensor(value["$tensor"], blobs, made)
        if "$config" in value:
            from triton import Config

            c = value["$config"]
            kwargs = self.decode(c["kwargs"], blobs, made, depth + 1)
            if not isinstance(kwargs, dict):
                raise ProtocolError("a config without a dict of meta-parameters")
            return Config(kwargs, num_warps=c.get("num_warps"), num_stages=c.get("num_stages"),
                          num_ctas=c.get("num_ctas"), maxnreg=c.get("maxnreg"))
        if "$ref" in value:
            return _proxy_class(str(value.get("kind")))(self, int(value["$ref"]), {
                "kind": str(value.get("kind")), "type": str(value.get("type"))[:100],
                "name": str(value.get("name", ""))[:100]})
        raise ProtocolError(f"an unknown value {str(value)[:80]}")

    def _decode_tensor(self, spec: dict, blobs: list, made: dict) -> torch.Tensor:
        index = spec["storage"]
        if index not in made:
            meta = self._storage_meta.get(index, {}) if hasattr(self, "_storage_meta") else {}
            data = blobs[index]
            if self.limits is not None:  # each stays in ``received``: bounded over the whole test, not per message
                self.taken += len(data)
                if self.taken > self.limits.reply_extra_mb << 20:
                    raise LimitExceeded(self.taken, self.limits.reply_extra_mb << 20, "tensors it made, in all")
            device = meta.get("device", "cpu")
            if device not in ("cpu", "cuda"):
                raise ProtocolError(f"an unknown device {device!r}")
            if meta.get("fence") in ("end", "start") and device == "cpu":
                storage, keep = _fenced_storage(len(data), meta["fence"])
                self.keep.append(keep)
                FENCED[storage.data_ptr()] = meta["fence"]
            else:
                storage = torch.empty(len(data), dtype=torch.uint8, device=device).untyped_storage()
            if len(data):
                host = torch.frombuffer(data, dtype=torch.uint8)
                _as_bytes(storage).copy_(host)
            made[index] = storage
        dtype = getattr(torch, str(spec["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ProtocolError("a tensor of an unknown dtype")
        storage = made[index]
        shape, stride, offset = spec["shape"], spec["stride"], spec["offset"]
        if not (isinstance(shape, list) and isinstance(stride, list) and len(shape) == len(stride) <= 64
                and all(type(v) is int and v >= 0 for v in [*shape, *stride, offset])):
            raise ProtocolError("a tensor whose shape, strides or offset are not sizes")
        numel = 1
        for n in shape:
            numel *= n
        if self.limits is not None and numel * dtype.itemsize > storage.nbytes() + (self.limits.reply_extra_mb << 20):
            # a view far larger than its bytes (strides of 0): whatever the checks did with it would allocate that
            raise LimitExceeded(numel * dtype.itemsize, storage.nbytes() + (self.limits.reply_extra_mb << 20),
                                "a tensor")
        try:
            t = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, tuple(shape), tuple(stride))
        except RuntimeError as err:  # a view past the end of its storage
            raise ProtocolError(f"a tensor outside its storage ({str(err)[:200]})") from None
        self.received[id(t)] = (int(spec["ref"]), t)
        return t

    # ---- messages
    def _send(self, header: dict, values: dict) -> dict:
        """Send ``header`` with ``values`` encoded; returns the storages sent (data_ptr -> info)."""
        blobs: list = []
        storages: dict = {}
        body = {k: self.encode(v, blobs, storages) for k, v in values.items()}
        header = dict(header, body=body,
                      storages={str(s["index"]): {"nbytes": s["nbytes"], "device": s["device"], "fence": s["fence"]}
                                for s in storages.values()})
        self.sent_header = send_message(self.sock, header, blobs)
        return storages

    def _budget(self) -> Budget | None:
        """What the next message from the runner may carry (the judge's side; None on the runner's): a header of
        ``header_kb`` plus twice the headers of the requests awaiting replies (a call's reply repeats its arguments
        as the call left them), and no more storages than those requests sent (each comes back once) plus
        ``reply_extra_mb`` (a value the runner made)."""
        if self.limits is None:
            return None
        return Budget(header=(self.limits.header_kb << 10) + 2 * sum(h for h, _ in self.waiting),
                      blobs=(self.limits.reply_extra_mb << 20) + sum(b for _, b in self.waiting))

    def _recv(self) -> tuple[dict, dict, dict]:
        try:
            header, blobs = recv_message(self.sock, self._budget())
            return self._decode_message(header, blobs)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:  # a field missing or mistyped
            raise ProtocolError(f"a malformed value ({type(err).__name__}: {str(err)[:200]})") from None
        except MemoryError:
            raise OutOfMemory() from None

    def _decode_message(self, header: dict, blobs: list) -> tuple[dict, dict, dict]:
        meta = header.get("storages", {})
        if not isinstance(meta, dict):
            raise ProtocolError("a malformed message")
        self._storage_meta = {int(k): v for k, v in meta.items() if isinstance(v, dict)}
        for index, info in self._storage_meta.items():
            if index >= len(blobs) or info.get("nbytes") != len(blobs[index]):
                raise ProtocolError("a storage whose size does not match its bytes")
        made: dict = {}
        body = header.get("body", {})
        if not isinstance(body, dict):
            raise ProtocolError("a malformed message")
        values = {k: self.decode(v, blobs, made) for k, v in body.items()}
        return header, values, {"blobs": blobs, "made": made}

    def request(self, op: str, ref: int, *args):
        """Ask the peer to do ``op`` on its object ``ref``; serve the peer's requests until the answer comes."""
        values = {str(i): a for i, a in enumerate(args)}
        sent = self._send({"op": op, "ref": ref}, values)
        self.waiting.append((self.sent_header, sum(s["nbytes"] for s in sent.values())))
        try:
            while True:
                header, reply, raw = self._recv()
                if "op" not in header:
                    break
                self._serve_one(header, reply, raw)
        finally:
            self.waiting.pop()
        self._write_back(sent, header, raw["blobs"])
        if op == "call" and "after" in reply:  # lists and dicts the call changed in place change here too
            _sync_in_place([args[0], args[1]], reply["after"])
        if self.pending is not None:
            pending, self.pending = self.pending, None
            raise pending
        if "error" in header:
            raise make_error(header["error"] if isinstance(header["error"], dict) else {})
        return reply.get("value")

    def _write_back(self, sent: dict, header: dict, blobs: list) -> None:
        """Copy the storages the peer sent back (after a call that carried tensors) into ours, in place."""
        back = header.get("back", {})
        if not isinstance(back, dict):
            raise ProtocolError("a malformed reply")
        by_index = {s["index"]: s for s in sent.values()}
        for index_text, blob_index in back.items():
            info = by_index.get(int(index_text))
            if info is None or not isinstance(blob_index, int) or blob_index >= len(blobs) \
                    or len(blobs[blob_index]) != info["nbytes"]:
                raise ProtocolError("storages sent back that do not match those sent")
            if info["nbytes"]:
                storage = info["storage"]
                _as_bytes(storage).copy_(torch.frombuffer(blobs[blob_index], dtype=torch.uint8))

    def serve(self) -> None:
        """Handle the peer's requests until it closes the channel."""
        while True:
            try:
                header, values, raw = self._recv()
            except ChannelClosed:
                return
            if "op" not in header:
                raise ProtocolError("an answer to a question that was not asked")
            self._serve_one(header, values, raw)

    def _serve_one(self, header: dict, values: dict, raw: dict) -> None:
        if self.limits is not None:  # each costs the judge work and keeps what it returned (``objects``): bounded
            self.served += 1
            if self.served > self.limits.requests:
                raise LimitExceeded(self.served, self.limits.requests, "calls of the grader's functions", "requests")
        try:
            obj = self.objects[header["ref"]] if header.get("ref") else None
            if header.get("ref") and obj is None:
                raise KeyError("an unknown object")
            args = [values.get(str(i)) for i in range(len(values))]
            value = self._do(header.get("op"), obj, args)
            reply, error = {"value": value}, None
            if header.get("op") == "call" and self.role == "runner":  # the arguments as the call left them
                reply["after"] = [args[0], args[1] or {}]
        except ChannelClosed:
            raise
        except BaseException as err:  # anything the object raised is the caller's to see
            if self.role == "judge" and not isinstance(err, Exception):
                raise
            if self.role == "judge" and type(err).__name__ == "KernelCheckError":
                self.pending = err  # a verdict raised inside a callback: re-raised when the outer call returns
            reply, error = {}, describe_error(err, self.learner_files)
        # The storages of every tensor that came with the request go back, as the call left them.
        made = raw["made"]
        blobs_back: list = []
        back = {}
        for index, storage in made.items():
            blobs_back.append(_storage_bytes(storage))
            back[str(index)] = len(blobs_back) - 1
        blobs: list = list(blobs_back)
        storages: dict = {}
        try:
            body = {k: self.encode(v, blobs, storages) for k, v in reply.items()}
        except Exception as err:
            body, error = {}, {"type": "TypeError", "message": f"a value the grader cannot read back: {err}"}
        header_out = {"back": back, "body": body,
                      "storages": {str(s["index"]): {"nbytes": s["nbytes"], "device": s["device"], "fence": None}
                                   for s in storages.values()}}
        if error is not None:
            header_out["error"] = error
        send_message(self.sock, header_out, blobs)

    def _do(self, op, obj, args):
        if self.role == "judge" and op != "call":  # the runner may call the judge's callbacks, nothing more
            raise PermissionError(f"the runner may not {op} the judge's objects")
        if op == "getattr":
            name = str(args[0])
            if name == "__globals__" and callable(obj):  # the learner's module-level values (configs, lists)
                return {k: v for k, v in getattr(obj, "__globals__", {}).items()
                        if not k.startswith("_") and not callable(v) and not isinstance(v, types.ModuleType)}
            return getattr(obj, name)
        if op == "setattr":
            setattr(obj, str(args[0]), args[1])
            return None
        if op == "getitem":
            return obj[args[0]]
        if op == "call":
            result = obj(*args[0], **(args[1] or {}))
            if self.role == "runner":
                _synchronize()
            return result
        raise ProtocolError(f"an unknown operation {op!r}")


def _sendable_callback(value) -> bool:
    """What the judge may lend the runner: functions and bound methods (a timer, a grid, a provider), which the
    runner can only call; never a module, a class or any other object it could explore."""
    import functools

    return isinstance(value, (types.FunctionType, types.MethodType, functools.partial))


def _synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()

"""On Triton's interpreter, refuse a load or store outside the launch's tensors before it touches memory.

On the CPU the interpreter reads and writes through raw addresses: a kernel whose last program stores past the end
of ``output`` writes into whatever the allocator placed there, and the notebook's own process dies later
("double free or corruption", a segfault) or hangs, with no word about the kernel. On a GPU the same kernel is an
illegal memory access or a silent corruption. :func:`check_accesses` (called by ``setup_notebook`` on the CPU only)
makes every load, store and atomic of a launch check its unmasked addresses against the tensors passed to that
launch, and raise :class:`OutOfBoundsAccess` naming the kernel, the operation and the nearest tensor instead.

Only the learner's own notebook process does this. The checks that grade a kernel run in a fresh process on
fenced tensors (``tritoncourse.checking``), which see a stray access as writes into the fences and name it; their
verdicts do not depend on this module. An address inside some other tensor of the same launch passes here (it is
the fences' job to tell which tensor an access belongs to).
"""
from __future__ import annotations

import threading

import numpy as np

_LAUNCH = threading.local()  # .kernel (name), .extents: [(argument name, first byte, end byte, element size)]


class OutOfBoundsAccess(IndexError):
    """A kernel on the interpreter reached memory outside every tensor passed to its launch."""

    def __repr__(self) -> str:  # the interpreter re-raises repr(error): keep the message readable there
        return f"OutOfBoundsAccess: {self}"


def _extents(name: str, arg) -> list[tuple[str, int, int, int]]:
    """The byte ranges an argument's tensors span: (name, first byte, end byte, element size) for each."""
    if isinstance(arg, (tuple, list)):
        return [e for i, a in enumerate(arg) for e in _extents(f"{name}[{i}]", a)]
    base = getattr(arg, "base", None)
    if base is not None and hasattr(base, "data_ptr") and not hasattr(arg, "data_ptr"):  # a TensorDescriptor
        return _extents(name, base)
    if not hasattr(arg, "data_ptr") or not hasattr(arg, "stride"):
        return []
    size = arg.element_size()
    start = end = arg.data_ptr()
    if arg.numel() == 0:
        return [(name, start, start, size)]
    for n, stride in zip(arg.shape, arg.stride()):
        reach = (n - 1) * stride * size
        if reach < 0:
            start += reach
        else:
            end += reach
    return [(name, start, end + size, size)]


def _describe(address: int, extents) -> str:
    """Where an address lies relative to the nearest tensor of the launch, in that tensor's elements."""
    def distance(e):
        _, first, end, _ = e
        return first - address if address < first else address - end + 1

    name, first, end, size = min(extents, key=distance)
    if address >= first:
        past = max(0, (address - end) // size)
        return (f"{past + 1} element{'s' if past else ''} past the end of `{name}` "
                f"(which spans {(end - first) // size} elements)")
    before = -(-(first - address) // size)
    return f"{before} element{'s' if before != 1 else ''} before the start of `{name}`"


def _check(operation: str, writes: bool, ptrs, mask) -> None:
    extents = getattr(_LAUNCH, "extents", None)
    if not extents:
        return  # no tensor passed to this launch: nothing to check against
    addresses = ptrs.data
    if mask is not None:
        on = np.asarray(mask.data, dtype=bool)
        if not on.all():
            addresses = addresses[np.broadcast_to(on, addresses.shape)]
    if addresses.size == 0:
        return
    width = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
    low, high = int(addresses.min()), int(addresses.max()) + width
    if any(first <= low and high <= end for _, first, end, _ in extents):
        return  # the common case: every lane inside one tensor
    addresses = addresses.astype(np.int64).ravel()
    inside = np.zeros(addresses.shape, dtype=bool)
    for _, first, end, _ in extents:
        inside |= (addresses >= first) & (addresses + width <= end)
    if inside.all():
        return
    outside = addresses[~inside]
    raise OutOfBoundsAccess(
        f"{operation} in kernel `{_LAUNCH.kernel}` reaches memory outside every tensor passed to the launch: "
        f"the first such address lies {_describe(int(outside[0]), extents)}. "
        f"On Triton's CPU interpreter it would {'write' if writes else 'read'} "
        f"there and could crash this notebook; on a GPU it is an illegal memory access or a silent corruption. "
        f"Likely cause: a missing or wrong mask (the last program's lanes past n), or offsets built from the wrong "
        f"program id or stride.")


def check_accesses() -> None:
    """Make the interpreter check every load, store and atomic of every launch (CPU only; once per process)."""
    try:
        from triton.runtime import interpreter
    except Exception:  # another Triton: leave it as it is
        return
    executor, builder = getattr(interpreter, "GridExecutor", None), getattr(interpreter, "InterpreterBuilder", None)
    needed = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    if executor is None or builder is None or not hasattr(executor, "_init_args_hst") \
            or not all(hasattr(builder, n) for n in needed) or getattr(executor._init_args_hst, "_tritoncourse", False):
        return
    init_args = executor._init_args_hst

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        names = list(getattr(self, "arg_names", []))
        extents = []
        for i, arg in enumerate(args_hst):
            extents += _extents(names[i] if i < len(names) else f"argument {i}", arg)
        for key, arg in kwargs_hst.items():
            extents += _extents(key, arg)
        _LAUNCH.kernel = getattr(self.fn, "__name__", "?")
        _LAUNCH.extents = extents
        return args_hst, kwargs_hst

    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        _check("tl.load", False, ptrs, mask)
        return load(self, ptrs, mask, other, *args, **kwargs)

    def create_masked_store(self, ptrs, value, mask, *args, **kwargs):
        _check("tl.store", True, ptrs, mask)
        return store(self, ptrs, value, mask, *args, **kwargs)

    def create_atomic_rmw(self, rmw_op, ptr, val, mask, *args, **kwargs):
        _check("an atomic (tl.atomic_add, _max, ...)", True, ptr, mask)
        return rmw(self, rmw_op, ptr, val, mask, *args, **kwargs)

    def create_atomic_cas(self, ptr, cmp, val, *args, **kwargs):
        _check("tl.atomic_cas", True, ptr, None)
        return cas(self, ptr, cmp, val, *args, **kwargs)

    _init_args_hst._tritoncourse = True
    executor._init_args_hst = _init_args_hst
    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = create_atomic_rmw, create_atomic_cas

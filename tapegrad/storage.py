"""Where array memory comes from, and layout helpers: aligned host buffers (calloc), CUDA
allocations through the allocator setting, pinned memory, contiguous strides, shape checks and
the folding of trailing component dimensions into vector/matrix dtypes."""
from __future__ import annotations

import ctypes

import numpy as np

from . import types
from .cuda import memory as cuda_memory  # imports CuPy only when CUDA memory is asked for
from .device import is_cuda_available

__all__ = ["MAX_BYTES", "contiguous_strides", "check_extent", "normalize_shape", "fold_inner_dims", "HostBuffer",
           "HostView", "host_alloc", "alloc", "StorageCheck", "CheckedDesc"]

_ALIGN = 64
# Byte counts, strides and offsets are int64 in the kernel ABI (ArrayDesc) and size_t in the
# allocators: a larger one would wrap (2^61 float64 = 2^64 bytes -> a 0-byte allocation), so
# every size computation refuses it (Python ints never overflow: the products are exact)
MAX_BYTES = 2 ** 63 - 1 - _ALIGN


def _too_large(shape, itemsize, nbytes):
    return ValueError(f"array: shape {tuple(shape)} of {itemsize}-byte elements spans {nbytes} bytes; at most "
                      f"{MAX_BYTES} (2^63 - 1 - {_ALIGN}: byte sizes and strides are int64) are supported")


def contiguous_strides(shape, itemsize):
    """Row-major byte strides of ``shape`` for elements of ``itemsize`` bytes.

    Raises:
        ValueError: the layout spans more than ``MAX_BYTES`` (a stride or the byte size would
            not fit the kernel ABI's int64, nor an allocator's size_t).
    """
    if len(shape) == 1:
        if shape[0] * itemsize > MAX_BYTES:
            raise _too_large(shape, itemsize, shape[0] * itemsize)
        return (itemsize,)
    strides, s = [], itemsize
    for d in reversed(shape):
        strides.append(s)
        s *= max(d, 1)
    if s > MAX_BYTES:
        raise _too_large(shape, itemsize, s)
    return tuple(reversed(strides))


def check_extent(shape, strides, itemsize, arg="strides"):
    """Raise ValueError when a strided layout reaches past ``MAX_BYTES`` bytes from its start
    (its last element's offset plus ``itemsize``) or a stride does not fit an int64, so that no
    offset a kernel computes wraps."""
    if any(st > MAX_BYTES for st in strides) or any(n > MAX_BYTES for n in shape):
        raise ValueError(f"{arg}: shape {tuple(shape)} and byte strides {tuple(strides)} must fit an int64 (at most "
                         f"{MAX_BYTES})")
    if all(n > 0 for n in shape):
        end = itemsize + sum((n - 1) * st for n, st in zip(shape, strides))
        if end > MAX_BYTES:
            raise ValueError(f"{arg}: shape {tuple(shape)} with byte strides {tuple(strides)} spans {end} bytes; "
                             f"at most {MAX_BYTES} (2^63 - 1 - {_ALIGN}: byte offsets are int64) are supported")


def normalize_shape(shape, arg="shape"):
    """``shape`` as a tuple of 1..MAX_DIMS non-negative ints.

    Raises:
        TypeError: not an int or a sequence of ints.
        ValueError: too many or too few dimensions, or a negative one.
    """
    if type(shape) is int and 0 <= shape <= MAX_BYTES:
        return (shape,)
    if type(shape) is tuple and 0 < len(shape) <= types.MAX_DIMS and \
            all(type(d) is int and 0 <= d <= MAX_BYTES for d in shape):
        return shape
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (int(shape),)
    try:
        if isinstance(shape, (str, bytes)) or not all(isinstance(d, (int, np.integer)) for d in shape):
            raise TypeError   # int() would truncate 1.5 and parse "3"
        shape = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"{arg}: expected an int or a tuple of ints, got {shape!r}") from None
    if len(shape) > types.MAX_DIMS:
        raise ValueError(f"{arg}: at most {types.MAX_DIMS} dimensions are supported, got {len(shape)} ({shape})")
    if len(shape) == 0:
        raise ValueError(f"{arg}: at least one dimension is required, got ()")
    if any(d < 0 for d in shape):
        raise ValueError(f"{arg}: dimensions must be >= 0 (Array shapes must be non-negative), got {shape}")
    if any(d > MAX_BYTES for d in shape):
        raise ValueError(f"{arg}: dimensions must be at most {MAX_BYTES} (int64 sizes), got {shape}")
    return shape


class HostBuffer:
    """Zeroed host memory from ``calloc``, freed when the last array using it dies.

    Cheaper than a numpy buffer (whose address costs microseconds to read) on the hot path of
    small allocations; numpy views of it hold it through their base.
    """

    __slots__ = ("ptr", "raw", "nbytes", "__weakref__")

    def __init__(self, nbytes):
        if not 0 <= nbytes <= MAX_BYTES:   # size_t would wrap it to a tiny allocation
            raise ValueError(f"array: cannot allocate {nbytes} bytes (0..{MAX_BYTES})")
        # 64-byte aligned: SIMD-friendly, and JAX imports only aligned host memory zero-copy
        raw = _calloc(1, nbytes + _ALIGN)
        if not raw:
            raise MemoryError(f"array: cannot allocate {nbytes} bytes of host memory")
        self.raw = raw
        self.ptr = (raw + _ALIGN - 1) & ~(_ALIGN - 1)
        self.nbytes = nbytes

    def __del__(self):
        raw = getattr(self, "raw", None)   # unset when __init__ refused the size
        if _free is not None and raw:
            _free(raw)


try:
    _libc = ctypes.CDLL(None)
    _calloc, _free = _libc.calloc, _libc.free
    _calloc.restype, _calloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]
    _free.restype, _free.argtypes = None, [ctypes.c_void_p]
except (OSError, AttributeError):  # no C runtime reachable this way: numpy buffers instead
    _calloc = _free = None


def host_alloc(nbytes):
    """Zeroed host memory; returns (owner, ptr)."""
    if _calloc is not None:
        buf = HostBuffer(nbytes)
        return buf, buf.ptr
    raw = np.zeros(max(nbytes, 1) + _ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % _ALIGN
    buf = raw[off:off + max(nbytes, 1)]
    return buf, buf.ctypes.data


class HostView:
    """What ``numpy()`` wraps: the interface dict plus the memory's owner (never the array
    itself, so the cached view creates no reference cycle)."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, iface, owner):
        self.__array_interface__ = iface
        self.owner = owner


def alloc(dev, nbytes, pinned=False):
    """Zeroed memory of ``nbytes`` on ``dev`` (host memory is pinned when asked and CUDA exists);
    returns (owner, ptr). CUDA memory is zeroed by the caller, on its stream.

    Raises:
        ValueError: ``nbytes`` negative or over ``MAX_BYTES`` (it would wrap in size_t).
        MemoryError: the allocator has not that much memory.
    """
    if not 0 <= nbytes <= MAX_BYTES:
        raise ValueError(f"array: cannot allocate {nbytes} bytes (0..{MAX_BYTES})")
    if dev.is_cuda:
        owner = cuda_memory.alloc(dev, nbytes)
        return owner, int(owner.ptr)
    if pinned:
        if is_cuda_available():
            owner = cuda_memory.alloc_pinned(nbytes)
            ctypes.memset(owner.ptr, 0, max(nbytes, 1))
            return owner, int(owner.ptr)
    return host_alloc(nbytes)


def fold_inner_dims(base, dt, shape, strides, arg):
    """Fold trailing component dims of a scalar layout into a vector/matrix dtype.

    Args:
        base: the scalar type of the memory. dt: the wanted dtype (None: ``base``).
        shape, strides: the scalar layout (byte strides). arg: names the value in errors.
    Returns:
        (dtype, shape, strides) with the component dims removed.
    Raises:
        RuntimeError: the trailing dims do not match or are not contiguous; too many dims.
    """
    shape, strides = tuple(shape), tuple(strides)
    if dt is None or isinstance(dt, types.StructType) or not dt.inner_shape:
        out = dt or base
        if len(shape) > types.MAX_DIMS:
            raise RuntimeError(f"{arg}: at most {types.MAX_DIMS} dimensions are supported, got shape {shape}")
        return out, shape, strides
    inner = dt.inner_shape
    k = len(inner)
    if shape[-k:] != inner or len(shape) <= k:
        raise RuntimeError(f"{arg}: dtype {dt!r} needs trailing dimensions {inner}, got shape {shape}")
    want = contiguous_strides(inner, dt.scalar.size)
    if strides[-k:] != want:
        raise RuntimeError(f"{arg}: the trailing component dimensions of {dt!r} must be contiguous "
                           f"(strides {want}), got strides {strides[-k:]}")
    if len(shape) - k > types.MAX_DIMS:
        raise RuntimeError(f"{arg}: at most {types.MAX_DIMS} dimensions are supported, got shape {shape[:-k]}")
    return dt, shape[:-k], strides[:-k]


class StorageCheck:
    """Where the foreign memory an array views must still be.

    A framework may reallocate or free a tensor's storage under a view of it (torch's
    ``resize_``, paddle's ``_clear_data``, JAX's ``delete``): the view's pointer then names freed
    memory, which a launch would overwrite. A bridge gives each view of such memory a check:
    ``current()`` is the framework's own cheap accessor of the memory's address now (a torch
    tensor's bound ``data_ptr``), ``ptr`` the address when the view was made. Every use of the
    array (a launch on either path, ``descriptor()``, ``numpy()``) compares them first.

    Args:
        current: ``() -> int``, the address now (0, or an exception: freed).
        ptr: the address the view was made at.
        what: what holds the memory, for messages (``"torch tensor"``).
    """

    __slots__ = ("current", "ptr", "what")

    def __init__(self, current, ptr: int, what: str):
        self.current, self.ptr, self.what = current, int(ptr), what

    def moved(self) -> bool:
        """Whether the memory is no longer at ``ptr`` (reallocated or freed)."""
        try:
            return self.current() != self.ptr
        except Exception:  # noqa: BLE001  a framework that raises for freed storage: freed
            return True

    def verify(self, label: str) -> None:
        """Raise RuntimeError (naming ``label``) when the memory moved.

        Raises:
            RuntimeError: the storage was reallocated or freed since the view was made.
        """
        if self.moved():
            try:
                now = self.current()
                now = f"{int(now):#x}" if now else "freed"
            except Exception:  # noqa: BLE001
                now = "freed"
            raise RuntimeError(f"{label}: the {self.what} this array views was reallocated or freed since the "
                               f"view was made (its data moved from {self.ptr:#x} to {now}): using the view would "
                               f"read or write freed memory; convert the {self.what} again")


class CheckedDesc(types.ArrayDesc):
    """The descriptor of an array with a ``StorageCheck``: the native launch helper recognizes
    its type, calls ``check_fn`` (read from the buffer, after the ABI fields) and compares the
    result with ``check_ptr`` before each launch (a moved storage takes the Python path, which
    raises)."""

    _fields_ = [("check_ptr", ctypes.c_uint64), ("check_fn", ctypes.py_object)]

    @classmethod
    def of(cls, check: StorageCheck) -> "CheckedDesc":
        d = cls()
        d.check_ptr = check.ptr
        d.check_fn = check.current
        return d

"""Where array memory comes from, and layout helpers: aligned host buffers (calloc), CUDA
allocations through the allocator setting, pinned memory, contiguous strides, shape checks and
the folding of trailing component dimensions into vector/matrix dtypes."""
from __future__ import annotations

import ctypes

import numpy as np

from . import types
from .cuda import memory as cuda_memory  # imports CuPy only when CUDA memory is asked for
from .device import is_cuda_available

__all__ = ["contiguous_strides", "normalize_shape", "fold_inner_dims", "HostBuffer", "HostView", "host_alloc",
           "alloc"]

_ALIGN = 64


def contiguous_strides(shape, itemsize):
    """Row-major byte strides of ``shape`` for elements of ``itemsize`` bytes."""
    if len(shape) == 1:
        return (itemsize,)
    strides, s = [], itemsize
    for d in reversed(shape):
        strides.append(s)
        s *= max(d, 1)
    return tuple(reversed(strides))


def normalize_shape(shape, arg="shape"):
    """``shape`` as a tuple of 1..MAX_DIMS non-negative ints.

    Raises:
        TypeError: not an int or a sequence of ints.
        ValueError: too many or too few dimensions, or a negative one.
    """
    if type(shape) is int and shape >= 0:
        return (shape,)
    if type(shape) is tuple and 0 < len(shape) <= types.MAX_DIMS and all(type(d) is int and d >= 0 for d in shape):
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
        raise ValueError(f"{arg}: dimensions must be >= 0, got {shape}")
    return shape


class HostBuffer:
    """Zeroed host memory from ``calloc``, freed when the last array using it dies.

    Cheaper than a numpy buffer (whose address costs microseconds to read) on the hot path of
    small allocations; numpy views of it hold it through their base.
    """

    __slots__ = ("ptr", "raw", "nbytes", "__weakref__")

    def __init__(self, nbytes):
        # 64-byte aligned: SIMD-friendly, and JAX imports only aligned host memory zero-copy
        raw = _calloc(1, nbytes + _ALIGN)
        if not raw:
            raise MemoryError(f"array: cannot allocate {nbytes} bytes of host memory")
        self.raw = raw
        self.ptr = (raw + _ALIGN - 1) & ~(_ALIGN - 1)
        self.nbytes = nbytes

    def __del__(self):
        if _free is not None:
            _free(self.raw)


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
    returns (owner, ptr). CUDA memory is zeroed by the caller, on its stream."""
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

"""Where array memory comes from, and layout helpers: aligned host buffers (calloc), CUDA
allocations through the allocator setting, pinned memory, contiguous strides, CuPy views."""
from __future__ import annotations

import ctypes

import numpy as np

from . import types as T

_ALIGN = 64


def _contiguous_strides(shape, itemsize):
    if len(shape) == 1:
        return (itemsize,)
    strides, s = [], itemsize
    for d in reversed(shape):
        strides.append(s)
        s *= max(d, 1)
    return tuple(reversed(strides))


def _normalize_shape(shape, arg="shape"):
    if type(shape) is int and shape >= 0:
        return (shape,)
    if type(shape) is tuple and 0 < len(shape) <= T.MAX_DIMS and all(type(d) is int and d >= 0 for d in shape):
        return shape
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"{arg}: expected an int or a tuple of ints, got {shape!r}") from None
    if len(shape) > T.MAX_DIMS:
        raise ValueError(f"{arg}: at most {T.MAX_DIMS} dimensions are supported, got {len(shape)} ({shape})")
    if len(shape) == 0:
        raise ValueError(f"{arg}: at least one dimension is required, got ()")
    if any(d < 0 for d in shape):
        raise ValueError(f"{arg}: dimensions must be >= 0, got {shape}")
    return shape


class _HostBuffer:
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


def _host_alloc(nbytes):
    """Zeroed host memory; returns (owner, ptr)."""
    if _calloc is not None:
        buf = _HostBuffer(nbytes)
        return buf, buf.ptr
    raw = np.zeros(max(nbytes, 1) + _ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % _ALIGN
    buf = raw[off:off + max(nbytes, 1)]
    return buf, buf.ctypes.data


class _HostView:
    """What ``numpy()`` wraps: the interface dict plus the memory's owner (never the array
    itself, so the cached view creates no reference cycle)."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, iface, owner):
        self.__array_interface__ = iface
        self.owner = owner


def _alloc(dev, nbytes, pinned=False):
    if dev.is_cuda:
        from .cuda.memory import alloc
        owner = alloc(dev, nbytes)
        return owner, int(owner.ptr)
    if pinned:
        from .device import is_cuda_available
        if is_cuda_available():
            from .cuda.memory import alloc_pinned
            owner = alloc_pinned(nbytes)
            ctypes.memset(owner.ptr, 0, max(nbytes, 1))
            return owner, int(owner.ptr)
    return _host_alloc(nbytes)


def _cupy_view(a):
    """A CuPy ndarray aliasing a CUDA array (scalar layout, component dims appended)."""
    import cupy
    shape, strides = a._flat_layout()
    extent = sum((n - 1) * s for n, s in zip(shape, strides)) + a.dtype.scalar.size if a.size else 0
    mem = cupy.cuda.UnownedMemory(a.ptr, max(extent, 1), a, a.device.ordinal)
    return cupy.ndarray(shape, dtype=a.dtype.scalar.np_dtype, memptr=cupy.cuda.MemoryPointer(mem, 0), strides=strides)

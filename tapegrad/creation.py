"""Array factories (zeros, ones, full, ..._like, from_numpy), clone and copy."""
from __future__ import annotations

import numpy as np

from . import types as T
from .array import array, _view
from .device import get_device
from .storage import _cupy_view

__all__ = ["zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
           "from_numpy", "clone", "copy"]

def empty(shape, dtype=float, device=None, requires_grad=False, pinned=False) -> array:
    """A new array (zeroed, as allocation is cheap and garbage is a footgun)."""
    return array(shape=shape, dtype=dtype, device=device, requires_grad=requires_grad, pinned=pinned)


def zeros(shape, dtype=float, device=None, requires_grad=False, pinned=False) -> array:
    """A new zero-filled array."""
    return array(shape=shape, dtype=dtype, device=device, requires_grad=requires_grad, pinned=pinned)


def full(shape, value, dtype=None, device=None, requires_grad=False, pinned=False) -> array:
    """A new array filled with ``value``; dtype inferred from the value when None."""
    if dtype is None:
        dtype = float if isinstance(value, float) else (int if isinstance(value, int) and not isinstance(value, bool)
                                                        else (bool if isinstance(value, bool) else float))
    a = array(shape=shape, dtype=dtype, device=device, pinned=pinned)
    a.fill_(value)
    if requires_grad:
        a.requires_grad = True
    return a


def ones(shape, dtype=float, device=None, requires_grad=False, pinned=False) -> array:
    """A new array of ones (every component, for vector/matrix dtypes)."""
    return full(shape, 1, dtype=dtype, device=device, requires_grad=requires_grad, pinned=pinned)


def _like(src, device, requires_grad):
    return (src.shape, src.dtype, src.device if device is None else device,
            src.requires_grad if requires_grad is None else requires_grad)


def zeros_like(src: array, device=None, requires_grad=None, pinned=False) -> array:
    shape, dt, dev, rg = _like(src, device, requires_grad)
    return zeros(shape, dt, dev, rg, pinned)


def empty_like(src: array, device=None, requires_grad=None, pinned=False) -> array:
    return zeros_like(src, device, requires_grad, pinned)


def ones_like(src: array, device=None, requires_grad=None, pinned=False) -> array:
    shape, dt, dev, rg = _like(src, device, requires_grad)
    return ones(shape, dt, dev, rg, pinned)


def full_like(src: array, value, device=None, requires_grad=None, pinned=False) -> array:
    shape, dt, dev, rg = _like(src, device, requires_grad)
    return full(shape, value, dt, dev, rg, pinned)


def from_numpy(arr, dtype=None, shape=None, device=None, requires_grad=False) -> array:
    """Copy a numpy array into a new tapegrad array.

    With ``dtype=None`` a float 2-D array of shape (n, k<=4) becomes ``vector(k)`` and a 3-D
    array of shape (n, r<=4, c<=4) becomes ``matrix((r, c))`` — Warp's rule, bounded so a wide
    2-D array stays a 2-D scalar array.

    Raises:
        TypeError: ``arr`` is not a numpy array or has an unsupported dtype.
    """
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(arr).__name__}")
    if dtype is None:
        base = T.dtype_from_numpy(arr.dtype)
        if arr.ndim == 2 and 2 <= arr.shape[1] <= 4 and base.is_float:
            dtype = T.vector(arr.shape[1], base)
        elif arr.ndim == 3 and 2 <= arr.shape[1] <= 4 and 2 <= arr.shape[2] <= 4 and base.is_float:
            dtype = T.matrix(arr.shape[1:], base)
        else:
            dtype = base
    return array(arr, dtype=dtype, shape=shape, device=device, requires_grad=requires_grad, copy=True)


def clone(src: array, device=None, requires_grad=None, pinned=False) -> array:
    """A contiguous copy of ``src`` (on ``device`` when given), with a copy of its grad."""
    if not isinstance(src, array):
        raise TypeError(f"clone: expected a tapegrad array, got {type(src).__name__}")
    dev = src.device if device is None else get_device(device)
    out = array(shape=src.shape, dtype=src.dtype, device=dev, pinned=pinned)
    copy(out, src)
    rg = src.requires_grad if requires_grad is None else requires_grad
    if rg:
        if src.grad is not None:
            out.grad = clone(src.grad, device=dev, requires_grad=False)
        else:
            out.requires_grad = True
    return out


def copy(dest: array, src: array, dest_offset: int = 0, src_offset: int = 0, count: int = 0) -> None:
    """Copy elements from ``src`` into ``dest`` (any devices; on the current stream).

    With offsets/count the arrays are treated as flat (both must be contiguous). Recorded on
    an active Tape with its adjoint.

    Raises:
        TypeError: arguments are not arrays of matching dtype.
        ValueError: shapes/sizes do not match.
    """
    for name, a in (("dest", dest), ("src", src)):
        if not isinstance(a, array):
            raise TypeError(f"copy: {name} must be a tapegrad array, got {type(a).__name__}")
    if dest.dtype.size != src.dtype.size or (dest.dtype.scalar is not src.dtype.scalar):
        raise TypeError(f"copy: dtypes differ (dest {dest.dtype!r}, src {src.dtype!r})")
    dest._check_writable("copy")
    if dest_offset or src_offset or count:
        if not (dest.is_contiguous and src.is_contiguous):
            raise ValueError("copy with offsets/count needs contiguous arrays")
        count = count or min(dest.size - dest_offset, src.size - src_offset)
        if dest_offset + count > dest.size or src_offset + count > src.size or count < 0:
            raise ValueError(f"copy: range out of bounds (count={count}, dest size {dest.size}, src size {src.size})")
        d = _view(dest, dest.ptr + dest_offset * dest.dtype.size, (count,), (dest.dtype.size,))
        s = _view(src, src.ptr + src_offset * src.dtype.size, (count,), (src.dtype.size,))
        _copy_raw(d, s)
    else:
        if dest.size != src.size:
            raise ValueError(f"copy: sizes differ (dest {dest.shape}, src {src.shape})")
        if dest.shape != src.shape:
            if not (dest.is_contiguous and src.is_contiguous):
                raise ValueError(f"copy: shapes differ (dest {dest.shape}, src {src.shape}) and arrays are not contiguous")
            _copy_raw(dest.reshape((dest.size,)), src.reshape((src.size,)))
        else:
            _copy_raw(dest, src)
    dest._bump()
    from .tape import _record_copy
    _record_copy(dest, src, dest_offset, src_offset, count)


def _copy_raw(dest: array, src: array) -> None:
    if dest.size == 0:
        return
    if dest.device.is_cpu and src.device.is_cpu:
        np.copyto(dest.numpy(), src.numpy(), casting="no")
        return
    from .cuda.memory import memcpy
    cuda_dev = dest.device if dest.device.is_cuda else src.device
    stream = cuda_dev.stream
    if dest.is_contiguous and src.is_contiguous:
        memcpy(dest.ptr, src.ptr, dest.nbytes, stream.cuda_stream)
        if dest.device.is_cpu or src.device.is_cpu:
            stream.synchronize()  # host memory is pageable: make the copy visible before returning
        return
    import cupy
    with cupy.cuda.Device(cuda_dev.ordinal), stream._cp:
        if dest.device.is_cuda and src.device.is_cuda:
            cupy.copyto(_cupy_view(dest), _cupy_view(src))
        elif dest.device.is_cuda:
            _cupy_view(dest)[...] = cupy.asarray(np.ascontiguousarray(src.numpy()))
        else:
            np.copyto(dest.numpy(), cupy.asnumpy(_cupy_view(src)))

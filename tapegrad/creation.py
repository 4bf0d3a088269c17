"""Array factories: zeros, ones, empty, full, their ``_like`` forms, from_numpy.

``clone`` and ``copy`` live with the array (``array.to``/``assign`` use them)."""
from __future__ import annotations

import numpy as np

from . import types
from .array import array

__all__ = ["zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
           "from_numpy"]

def _shape(shape, kwargs, who):
    """Warp's legacy ``n=`` length and its default of an empty array."""
    if "n" in kwargs:
        n = kwargs.pop("n")
        if shape is not None:
            raise TypeError(f"{who}: pass shape= or the legacy n=, not both")
        shape = (n,)
    if kwargs:
        raise TypeError(f"{who}: unexpected keyword argument(s) {sorted(kwargs)}")
    return 0 if shape is None else shape


def empty(shape=None, dtype=float, device=None, requires_grad=False, pinned=False, retain_grad=False,
          **kwargs) -> array:
    """A new array (zeroed, as allocation is cheap and garbage is a footgun). ``n=`` is Warp's
    legacy spelling of a 1-D ``shape``; ``retain_grad`` as for ``array``."""
    shape = _shape(shape, kwargs, "empty")
    return array(shape=shape, dtype=dtype, device=device, requires_grad=requires_grad, pinned=pinned,
                 retain_grad=retain_grad)


def zeros(shape=None, dtype=float, device=None, requires_grad=False, pinned=False, retain_grad=False,
          **kwargs) -> array:
    """A new zero-filled array (``n=``: Warp's legacy 1-D length)."""
    shape = _shape(shape, kwargs, "zeros")
    return array(shape=shape, dtype=dtype, device=device, requires_grad=requires_grad, pinned=pinned,
                 retain_grad=retain_grad)


def full(shape=None, value=0, dtype=None, device=None, requires_grad=False, pinned=False, retain_grad=False,
         **kwargs) -> array:
    """A new array filled with ``value``; dtype inferred from the value when None."""
    shape = _shape(shape, kwargs, "full")
    if dtype is None and hasattr(type(value), "_tg_struct"):     # a struct instance: its struct
        dtype = type(value)
    if dtype is None:
        dtype = float if isinstance(value, float) else (int if isinstance(value, int) and not isinstance(value, bool)
                                                        else (bool if isinstance(value, bool) else float))
    a = array(shape=shape, dtype=dtype, device=device, pinned=pinned)
    a.fill_(value)
    if requires_grad:
        a.requires_grad = True
    if retain_grad:
        a.retain_grad = True
    return a


def ones(shape=None, dtype=float, device=None, requires_grad=False, pinned=False, retain_grad=False,
         **kwargs) -> array:
    """A new array of ones (every component, for vector/matrix dtypes)."""
    shape = _shape(shape, kwargs, "ones")
    return full(shape, 1, dtype=dtype, device=device, requires_grad=requires_grad, pinned=pinned,
                retain_grad=retain_grad)


def _like(src, device, requires_grad):
    return (src.shape, src.dtype, src.device if device is None else device,
            src.requires_grad if requires_grad is None else requires_grad)


def zeros_like(src: array, device=None, requires_grad=None, pinned=False, retain_grad=False) -> array:
    shape, dt, dev, rg = _like(src, device, requires_grad)
    return zeros(shape, dt, dev, rg, pinned, retain_grad)


def empty_like(src: array, device=None, requires_grad=None, pinned=False, retain_grad=False) -> array:
    return zeros_like(src, device, requires_grad, pinned, retain_grad)


def ones_like(src: array, device=None, requires_grad=None, pinned=False, retain_grad=False) -> array:
    shape, dt, dev, rg = _like(src, device, requires_grad)
    return ones(shape, dt, dev, rg, pinned, retain_grad)


def full_like(src: array, value, device=None, requires_grad=None, pinned=False, retain_grad=False) -> array:
    shape, dt, dev, rg = _like(src, device, requires_grad)
    return full(shape, value, dt, dev, rg, pinned, retain_grad)


def from_numpy(arr, dtype=None, shape=None, device=None, requires_grad=False, retain_grad=False) -> array:
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
        base = types.dtype_from_numpy(arr.dtype)
        if arr.ndim == 2 and 2 <= arr.shape[1] <= 4 and base.is_float:
            dtype = types.vector(arr.shape[1], base)
        elif arr.ndim == 3 and 2 <= arr.shape[1] <= 4 and 2 <= arr.shape[2] <= 4 and base.is_float:
            dtype = types.matrix(arr.shape[1:], base)
        else:
            dtype = base
    return array(arr, dtype=dtype, shape=shape, device=device, requires_grad=requires_grad, copy=True,
                 retain_grad=retain_grad)

"""The gathers and scatters of indexed arrays (``tapegrad.indexedarray``) as kernel launches.

``dst[i, ...] = src[i, ...]`` over the indexed shape, one generic kernel per dimension count,
with an indexed array on either side: a launch like any other, so it runs on the arrays' device
(no host round trip on CUDA) and, on a recording ``Tape``, is recorded with its exact adjoint —
the written elements' gradient passes to the source and is consumed there (Warp's copy
semantics), the other elements of ``data`` keep theirs. ``tapegrad.indexedarray`` calls it
through the hook this module registers (it sits below the kernel language).
"""
from __future__ import annotations

from typing import Any

from .array import clone
from .indexedarray import indexedarray, register_copy_kernel
from .lang import kernel, tid
from .launch import launch

__all__ = ["copy_elements"]


@kernel(key="tapegrad.indexed_copy1")
def _copy1(src: Any, dst: Any):
    i = tid()
    dst[i] = src[i]


@kernel(key="tapegrad.indexed_copy2")
def _copy2(src: Any, dst: Any):
    i, j = tid()
    dst[i, j] = src[i, j]


@kernel(key="tapegrad.indexed_copy3")
def _copy3(src: Any, dst: Any):
    i, j, k = tid()
    dst[i, j, k] = src[i, j, k]


@kernel(key="tapegrad.indexed_copy4")
def _copy4(src: Any, dst: Any):
    i, j, k, m = tid()
    dst[i, j, k, m] = src[i, j, k, m]


_KERNELS = (_copy1, _copy2, _copy3, _copy4)


def copy_elements(dst, src) -> None:
    """``dst[...] = src[...]`` element by element (arrays or indexed arrays of one shape, dtype
    and device), as a launch (recorded on an active tape).

    Raises:
        ValueError: shapes differ. TypeError: dtypes differ. RuntimeError: devices differ.
    """
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(f"indexed copy: shapes differ: {tuple(dst.shape)} and {tuple(src.shape)}")
    if dst.dtype is not src.dtype:
        raise TypeError(f"indexed copy: dtypes differ: {dst.dtype!r} and {src.dtype!r}")
    if dst.device is not src.device:
        raise RuntimeError(f"indexed copy: devices differ: {dst.device} and {src.device}")
    if not all(dst.shape):
        return
    if _overlap(dst, src):
        # one launch reading and writing the same memory: an element could be overwritten
        # before it is read (data[1:4] = data[0:3] gave [0, 0, 0, 0] for [0, 0, 1, 2]); gather
        # the source first (recorded, so a tape passes the gradient through the copy)
        src = src.contiguous() if isinstance(src, indexedarray) else clone(src)
    launch(_KERNELS[len(dst.shape) - 1], dim=tuple(dst.shape), inputs=[src], outputs=[dst], device=dst.device)


def _byte_span(x):
    """``(lo, hi)``: the bytes an array (an indexed array: its data array) can touch."""
    a = x.data if isinstance(x, indexedarray) else x
    lo = hi = a.ptr
    for n, st in zip(a.shape, a.strides):
        lo += min(0, (n - 1) * st)
        hi += max(0, (n - 1) * st)
    return lo, hi + a.dtype.size


def _overlap(dst, src) -> bool:
    """Whether ``dst`` and ``src`` may share memory (their byte spans intersect)."""
    (a0, a1), (b0, b1) = _byte_span(dst), _byte_span(src)
    return a0 < b1 and b0 < a1


register_copy_kernel(copy_elements)

"""Parsing of the array protocols (``__array_interface__`` v3, ``__cuda_array_interface__`` v3).

Used by ``tg.array(obj)`` (wrap zero-copy) and by ``launch`` (objects passed directly).
"""
from __future__ import annotations

import numpy as np

from . import types
from .cuda.stream import external_stream
from .device import get_device

__all__ = ["parse_array_interface", "parse_cuda_array_interface", "interface_layout", "pointer_device",
           "wait_foreign_stream"]


def interface_layout(iface: dict, arg: str):
    """(ptr, scalar dtype, shape, byte strides, readonly) of a protocol dict.

    Raises:
        ValueError: a ``mask`` is present, or the layout is malformed.
        TypeError: the typestr has no tapegrad dtype.
    """
    if iface.get("mask") is not None:
        raise ValueError(f"{arg}: masked arrays (interface 'mask') are not supported")
    try:
        nd = np.dtype(iface["typestr"])
    except TypeError:
        raise TypeError(f"{arg}: unsupported typestr {iface.get('typestr')!r}") from None
    if nd.byteorder == ">":
        raise TypeError(f"{arg}: big-endian data ({iface['typestr']}) is not supported")
    dt = types.dtype_from_numpy(nd.newbyteorder("=") if nd.byteorder not in "=|" else nd)
    shape = tuple(int(d) for d in iface["shape"])
    ptr, readonly = iface["data"] if iface.get("data") is not None else (0, False)
    strides = iface.get("strides")
    if strides is None:
        strides, s = [], nd.itemsize
        for d in reversed(shape):
            strides.append(s)
            s *= max(d, 1)
        strides = tuple(reversed(strides))
    strides = tuple(int(s) for s in strides)
    if shape == ():
        shape, strides = (1,), (nd.itemsize,)
    ptr += int(iface.get("offset", 0) or 0) if "offset" in iface else 0
    return int(ptr or 0), dt, shape, strides, bool(readonly)


def parse_array_interface(iface: dict, arg: str = "data"):
    return interface_layout(iface, arg)


def parse_cuda_array_interface(iface: dict, device=None, arg: str = "data"):
    """Parse a CAI v3 dict and make tapegrad's current stream wait for its ``stream``.

    Returns:
        (device, ptr, dtype, shape, strides, readonly)
    Raises:
        ValueError: mask present / bad stream value.
        RuntimeError: the pointer lives on another device than ``device``.
    """
    ptr, dt, shape, strides, ro = interface_layout(iface, arg)
    dev = pointer_device(ptr) if device is None else get_device(device)
    if not dev.is_cuda:
        raise RuntimeError(f"{arg}: a __cuda_array_interface__ object cannot live on device {dev}")
    stream = iface.get("stream")
    if stream is not None and iface.get("version", 0) >= 3:
        if not isinstance(stream, int) or stream == 0:
            raise ValueError(f"{arg}: CAI 'stream' must be None or a non-zero int handle, got {stream!r}")
        wait_foreign_stream(dev, stream)
    return dev, ptr, dt, shape, strides, ro


def pointer_device(ptr: int):
    """The CUDA device holding the memory at ``ptr`` (the current CUDA device for NULL)."""
    import cupy
    if ptr == 0:
        return get_device("cuda")
    attrs = cupy.cuda.runtime.pointerGetAttributes(ptr)
    return get_device(f"cuda:{attrs.device}")


def wait_foreign_stream(dev, handle: int):
    """Order tapegrad's current stream after ``handle`` (an event, no host block)."""
    cur = dev.stream
    if handle == cur.cuda_stream:
        return
    import cupy
    h = 0 if handle == 1 else handle  # 1 = legacy default stream in CAI v3; 2 = per-thread default
    with dev.context_guard():
        ev = cupy.cuda.Event(block=False, disable_timing=True)
        ev.record(external_stream(h, dev.ordinal))
        cur.cupy_stream.wait_event(ev)

"""Parsing of the array protocols (``__array_interface__`` v3, ``__cuda_array_interface__`` v3).

Used by ``tg.array(obj)`` (wrap zero-copy) and by ``launch`` (objects passed directly).
"""
from __future__ import annotations

import numpy as np

from . import types
from .cuda.stream import external_stream
from .device import get_device

__all__ = ["parse_array_interface", "parse_cuda_array_interface", "interface_layout", "pointer_device",
           "cai_stream", "foreign_stream_ordered", "wait_foreign_stream"]


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

    Args:
        iface: the ``__cuda_array_interface__`` dict.
        device: the device the data is taken to live on (its pointer is not checked); None:
            the device holding the pointer (``pointer_device``).
        arg: how error messages name the object.
    Returns:
        (device, ptr, dtype, shape, strides, readonly)
    Raises:
        ValueError: mask present / bad stream value.
        RuntimeError: ``device`` is not a CUDA device.
    """
    ptr, dt, shape, strides, ro = interface_layout(iface, arg)
    dev = pointer_device(ptr) if device is None else get_device(device)
    if not dev.is_cuda:
        raise RuntimeError(f"{arg}: a __cuda_array_interface__ object cannot live on device {dev}")
    stream = cai_stream(iface, arg)
    if stream is not None:
        wait_foreign_stream(dev, stream)
    return dev, ptr, dt, shape, strides, ro


def cai_stream(iface: dict, arg: str = "data"):
    """The producer stream a CAI consumer must order after: the ``stream`` handle of a v3 dict,
    or None (no ``stream`` key, ``None``, or a version below 3).

    The native launch helper (``fastlaunch.c``, ``cai_stream_rule``) applies the same rule.

    Raises:
        ValueError: a v3 ``stream`` that is not a non-zero int (the protocol forbids 0).
    """
    stream = iface.get("stream")
    if stream is None or not iface.get("version", 0) >= 3:
        return None
    if not isinstance(stream, int) or stream == 0:
        raise ValueError(f"{arg}: CAI 'stream' must be None or a non-zero int handle, got {stream!r}")
    return stream


def foreign_stream_ordered(handle: int, stream) -> bool:
    """Whether CUDA already orders work submitted so far to stream ``handle`` before work
    submitted next to tapegrad stream ``stream`` (on the same device), with no event.

    True for the same handle, and for the legacy default stream (handle 0, or 1 as CAI v3 and
    DLPack spell it) when ``stream`` is blocking: the legacy stream synchronizes with every
    blocking stream of its device (tapegrad's default stream is one, CuPy's default stream is
    the legacy one). The per-thread default stream (2) is not implicitly ordered with other
    streams. A blocking flag that cannot be read (a stream wrapped during a capture) counts as
    not ordered.
    """
    if handle == stream.cuda_stream:
        return True
    if handle not in (0, 1):
        return False
    try:
        return bool(stream.is_blocking)
    except Exception:  # noqa: BLE001  e.g. cudaStreamGetFlags refused: order with an event
        return False


def pointer_device(ptr: int):
    """The CUDA device holding the memory at ``ptr`` (the current CUDA device for NULL)."""
    import cupy
    if ptr == 0:
        return get_device("cuda")
    attrs = cupy.cuda.runtime.pointerGetAttributes(ptr)
    return get_device(f"cuda:{attrs.device}")


def wait_foreign_stream(dev, handle: int):
    """Order tapegrad's current stream after ``handle`` (an event, no host block; nothing when
    ``foreign_stream_ordered`` says CUDA orders the two already)."""
    cur = dev.stream
    if foreign_stream_ordered(handle, cur):
        return
    import cupy
    h = 0 if handle == 1 else handle  # 1 = legacy default stream in CAI v3; 2 = per-thread default
    with dev.context_guard():
        ev = cupy.cuda.Event(block=False, disable_timing=True)
        ev.record(external_stream(h, dev.ordinal))
        cur.cupy_stream.wait_event(ev)

"""DLPack export: ``array.__dlpack__`` / ``__dlpack_device__`` (the producer side).

Sits below ``tapegrad.array``: it uses only the array's public attributes and methods, and
builds copies through the array's own class (``type(a)``), so ``array`` may call it. The
consumer side (``from_dlpack``) is the package face, ``tapegrad.dlpack``.
"""
from __future__ import annotations

import struct
import threading
from enum import IntEnum

from .. import types
from ..device import get_cuda_devices, get_device
from ..errors import DLPackDtypeError, DLPackStreamError
from . import capsules

__all__ = ["export_array", "array_device", "DLDeviceType", "FLAG_READ_ONLY", "FLAG_IS_COPIED", "DLPACK_VERSION",
           "DEVICE_CPU", "DEVICE_CUDA", "DEVICE_CUDA_HOST", "DEVICE_CUDA_MANAGED"]


class DLDeviceType(IntEnum):
    """dlpack.h ``DLDeviceType``."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18


FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
DLPACK_VERSION = (1, 2)   # newest version tapegrad stamps (strides always filled, no sub-byte types)

DEVICE_CPU, DEVICE_CUDA, DEVICE_CUDA_HOST, DEVICE_CUDA_MANAGED = 1, 2, 3, 13
_kDLCPU, _kDLCUDA, _kDLCUDAHost = DEVICE_CPU, DEVICE_CUDA, DEVICE_CUDA_HOST
_CPU = get_device("cpu")
_DEV_CPU = (DLDeviceType.kDLCPU, 0)
_DEV_PINNED = (DLDeviceType.kDLCUDAHost, 0)
_V10 = (1, 0)

# dtype -> (code, bits, scalar size, inner shape, inner strides in elements); struct dtypes raise
_EXPORT_DT: dict = {}
_DESC: dict = {}          # ndim -> struct.Struct of the export descriptor
_tls = threading.local()

# -------------------------------------------------------------------------------- export

def array_device(a) -> tuple:
    """``__dlpack_device__``: ``(kDLCPU, 0)``, ``(kDLCUDAHost, 0)`` for pinned memory, ``(kDLCUDA, ordinal)``.

    Raises:
        BufferError: an annotation-only array (no memory, no device).
    """
    dev = a.device
    if dev is None:
        raise BufferError("__dlpack_device__: this array has no memory (an annotation-only array)")
    if dev.is_cpu:
        return _DEV_PINNED if a.pinned else _DEV_CPU
    return (DLDeviceType.kDLCUDA, dev.ordinal)


def _export_dtype(dt):
    r = _EXPORT_DT.get(dt)
    if r is None:
        if isinstance(dt, types.StructType):
            raise DLPackDtypeError(f"DLPack export: struct dtype {dt.name} has no DLPack form "
                                   "(export each field as its own array)")
        code, bits, _ = types.dtype_to_dlpack(dt)
        inner = tuple(dt.inner_shape)
        inner_st, s = [], 1
        for d in reversed(inner):
            inner_st.append(s)
            s *= d
        r = _EXPORT_DT[dt] = (code, bits, dt.scalar.size, inner, tuple(reversed(inner_st)))
    return r


def _desc_struct(ndim):
    s = _DESC.get(ndim)
    if s is None:
        s = _DESC[ndim] = struct.Struct(f"<{10 + 2 * ndim}q")
    return s


def _check_stream(stream, what):
    if stream is None or stream == -1 and type(stream) is int:
        return
    if type(stream) is not int or stream < -1:
        raise DLPackStreamError(f"{what}: DLPack stream must be None or an integer >= -1, got {stream!r}")


def _sync_consumer(dev, stream):
    """Make the consumer's stream wait for tapegrad's current stream of ``dev`` (event, no host block)."""
    h = 1 if stream is None else stream       # None: the consumer uses the legacy default stream
    ch = dev.stream.cuda_stream
    if h == ch or (ch == 0 and h in (0, 1)):
        return
    import cupy
    rt = cupy.cuda.runtime
    evs = getattr(_tls, "events", None)
    if evs is None:
        evs = _tls.events = {}
    prev = rt.getDevice()
    if prev != dev.ordinal:
        rt.setDevice(dev.ordinal)
    try:
        ev = evs.get(dev.ordinal)
        if ev is None:
            ev = evs[dev.ordinal] = cupy.cuda.Event(block=False, disable_timing=True)
        rt.eventRecord(ev.ptr, ch)
        rt.streamWaitEvent(h, ev.ptr, 0)      # 0/1 = legacy default, 2 = per-thread default, else a handle
    finally:
        if prev != dev.ordinal:
            rt.setDevice(prev)


def _target_copy(a, req, copy):
    """Honour ``dl_device``: returns (array to export, its (type, id), copied)."""
    try:
        kind, ident = int(req[0]), int(req[1])
    except (TypeError, ValueError, IndexError):
        raise TypeError(f"__dlpack__: dl_device must be a (device_type, device_id) pair, got {req!r}") from None
    dev = a.device
    if kind == _kDLCPU and ident == 0 and a.pinned:
        return a, _DEV_CPU, False                    # pinned memory is host memory: no copy
    if kind == _kDLCPU and ident == 0:
        target = _CPU
    elif kind == _kDLCUDA and 0 <= ident < len(get_cuda_devices()):
        target = get_cuda_devices()[ident]
    else:
        raise BufferError(f"__dlpack__: cannot export an array on {dev} to dl_device {(kind, ident)}")
    if copy is False:
        raise BufferError(f"__dlpack__: exporting an array on {dev} to dl_device {(kind, ident)} needs a copy, "
                          "but copy=False")
    out = _copy_of(a, target)   # device->host copies synchronise before returning
    return out, array_device(out), True


def export_array(a, *, stream=None, max_version=None, dl_device=None, copy=None):
    """``array.__dlpack__``: a DLPack capsule viewing ``a`` (see the module doc).

    Raises:
        DLPackStreamError: ``stream`` invalid for the array's device (TypeError/BufferError).
        DLPackDtypeError: struct dtype (TypeError/RuntimeError).
        BufferError: ``dl_device``/``copy`` cannot be honoured; a read-only array asked for a legacy
            capsule (legacy capsules cannot carry the read-only flag).
        TypeError: malformed ``max_version`` or ``dl_device``.
    """
    dev = a.device
    if dev is None:
        raise BufferError("__dlpack__: this array has no memory (an annotation-only array)")
    if max_version is None:
        versioned, vmin = False, 0
    else:
        try:
            major, minor = int(max_version[0]), int(max_version[1])
        except (TypeError, ValueError, IndexError):
            raise TypeError(f"__dlpack__: max_version must be a (major, minor) pair, got {max_version!r}") from None
        versioned = major >= 1
        vmin = min(minor, DLPACK_VERSION[1]) if major == 1 else DLPACK_VERSION[1]
    pinned = a.pinned
    if dev.is_cpu and not pinned and stream is not None and stream != -1:
        raise DLPackStreamError(f"__dlpack__: DLPack stream must be None or -1 for CPU device, got {stream!r}")
    _check_stream(stream, "__dlpack__")
    code, bits, isz, inner, inner_st = _export_dtype(a.dtype)
    copied = False
    if dl_device is not None and tuple(dl_device) != array_device(a):
        a, (dl_type, dl_id), copied = _target_copy(a, dl_device, copy)
        dev = a.device
    elif dev.is_cpu:
        dl_type, dl_id = (_kDLCUDAHost if pinned else _kDLCPU), 0
    else:
        dl_type, dl_id = _kDLCUDA, dev.ordinal
    if copy and not copied:
        a = _copy_of(a)
        copied = True
    flags = FLAG_IS_COPIED if copied else 0
    if a.readonly and not copied:
        if not versioned:
            raise BufferError("__dlpack__: cannot export a read-only array as a legacy DLPack capsule (it cannot "
                              "signal read-only); ask for max_version=(1, 0) or pass copy=True")
        flags |= FLAG_READ_ONLY
    if stream != -1:
        if dev.is_cuda:
            _sync_consumer(dev, stream)
        elif dl_type == _kDLCUDAHost and stream is not None:
            _sync_consumer(get_device("cuda"), stream)
    shape, bstrides = a.shape, a.strides
    if inner:
        st = tuple(s // isz for s in bstrides) + inner_st
        shape = shape + inner
    else:
        st = tuple(s // isz for s in bstrides)
    n = len(shape)
    desc = _desc_struct(n).pack(a.ptr, dl_type, dl_id, code, bits, 1, n, flags, 1, vmin, *shape, *st)
    return (capsules.ENTRY_POINTS[0] or capsules.entry_points()[0])(a, desc, 1 if versioned else 0)



def _copy_of(a, device=None):
    """A contiguous copy of ``a`` without its gradient, on ``device`` (default: its own), as
    ``tg.clone(a, device, requires_grad=False)`` makes it (recorded on an active Tape alike)."""
    out = type(a)(shape=a.shape, dtype=a.dtype, device=a.device if device is None else device)
    out.assign(a)
    return out

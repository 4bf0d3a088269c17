"""DLPack: zero-copy exchange with every framework, DLPack 1.x (versioned) and legacy capsules.

Producer side (``array.__dlpack__`` / ``__dlpack_device__``, ``to_dlpack``) and consumer side
(``from_dlpack``), per the Python array API 2024.12:

* ``__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`` returns a
  ``dltensor_versioned`` capsule when the consumer passes ``max_version >= (1, 0)`` (flags
  READ_ONLY and IS_COPIED set as they apply), a legacy ``dltensor`` capsule otherwise.
* CUDA stream handshake: the consumer's ``stream`` (None = legacy default, 1 legacy, 2
  per-thread, else a ``cudaStream_t``) waits for tapegrad's current stream through an event,
  without blocking the host; ``-1`` means no synchronisation. CPU accepts ``None``/``-1`` only.
* ``from_dlpack`` asks producers for a versioned capsule first, passing tapegrad's current
  stream for CUDA memory, and wraps the memory without copying (READ_ONLY -> read-only array).

The capsule machinery (structs, deleters) lives in ``_native`` (a small C helper; see
docs/dlpack.md for why the deleter must not be a Python callback).
"""
from __future__ import annotations

import struct
import threading
from enum import IntEnum

from .. import types as T
from ..array import array, clone, _fold_inner_dims
from ..device import get_device, get_cuda_devices
from ._native import backend, use_backend, ConsumedCapsuleError, DLPackDtypeError  # noqa: F401

__all__ = ["from_dlpack", "to_dlpack", "export_array", "array_device", "DLDeviceType", "DLPackStreamError",
           "DLPackDtypeError", "ConsumedCapsuleError", "FLAG_READ_ONLY", "FLAG_IS_COPIED", "DLPACK_VERSION"]


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


class DLPackStreamError(TypeError, BufferError):
    """A ``stream`` argument the producer cannot honour (TypeError, as Warp; also BufferError)."""


FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
DLPACK_VERSION = (1, 2)   # newest version tapegrad stamps (strides always filled, no sub-byte types)

_kDLCPU, _kDLCUDA, _kDLCUDAHost, _kDLCUDAManaged = 1, 2, 3, 13
_CPU = get_device("cpu")
_DEV_CPU = (DLDeviceType.kDLCPU, 0)
_DEV_PINNED = (DLDeviceType.kDLCUDAHost, 0)
_V10 = (1, 0)

# dtype -> (code, bits, scalar size, inner shape, inner strides in elements); struct dtypes raise
_EXPORT_DT: dict = {}
_DESC: dict = {}          # ndim -> struct.Struct of the export descriptor
_BY_DL = {(s.dl_code, s.bits): s for s in T.SCALARS.values()}
_ACCEPT = bytes(b for key in _BY_DL for b in key)
_CAPSULE = type(__import__("datetime").datetime_CAPI)
_tls = threading.local()
_fns = [None, None]       # cached backend entry points (export, import_)


def _backend_fns():
    b = backend()
    _fns[0], _fns[1] = b.export, b.import_
    return _fns


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
        if isinstance(dt, T.StructType):
            raise DLPackDtypeError(f"DLPack export: struct dtype {dt.name} has no DLPack form "
                                   "(export each field as its own array)")
        code, bits, _ = T.dtype_to_dlpack(dt)
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
    out = clone(a, device=target, requires_grad=False)   # device->host copies synchronise before returning
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
        a = clone(a, requires_grad=False)
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
    return (_fns[0] or _backend_fns()[0])(a, desc, 1 if versioned else 0)


def to_dlpack(a):
    """A legacy ``dltensor`` capsule viewing ``a`` (consumable once), as Warp's ``to_dlpack``.

    The capsule path has no stream argument: for CUDA arrays the legacy default stream is made
    to wait for tapegrad's current stream before returning (pass the array itself to the
    consumer's ``from_dlpack`` for a handshake with the consumer's actual stream).

    Raises:
        TypeError: ``a`` is not a tapegrad array, or has a struct dtype.
        BufferError: ``a`` is read-only (use ``a.__dlpack__(max_version=(1, 0))``).
    """
    if not isinstance(a, array):
        raise TypeError(f"to_dlpack: expected a tapegrad array, got {type(a).__name__}")
    return export_array(a)


# -------------------------------------------------------------------------------- import

def _cuda_device(ident, what):
    devs = get_cuda_devices()
    if not 0 <= ident < len(devs):
        raise RuntimeError(f"{what}: the DLPack tensor lives on CUDA device {ident}, but this machine has "
                           f"{len(devs)} CUDA device(s)")
    return devs[ident]


def _capsule_from(x):
    """Call the producer's ``__dlpack__`` the array-API way (versioned first, fallback on TypeError)."""
    try:
        dev_fn = x.__dlpack_device__
        dl = x.__dlpack__
    except AttributeError:
        raise TypeError(f"from_dlpack: expected an object with __dlpack__ and __dlpack_device__, or a DLPack "
                        f"capsule, got {type(x).__name__}") from None
    kind, ident = dev_fn()
    ident = int(ident or 0)                       # paddle reports CPU as (kDLCPU, None)
    if kind == _kDLCPU:
        try:
            return dl(max_version=_V10)
        except TypeError:
            return dl()
    if kind in (_kDLCUDA, _kDLCUDAManaged):
        stream = _cuda_device(ident, "from_dlpack").stream.cuda_stream or 1
    elif kind == _kDLCUDAHost:
        devs = get_cuda_devices()
        stream = (get_device("cuda").stream.cuda_stream or 1) if devs else None
    else:
        raise DLPackDtypeError(f"Unsupported source device for DLPack: device_type={int(kind)}, device_id={ident} "
                               "(tapegrad imports CPU, CUDA, CUDA-host and CUDA-managed memory)")
    try:
        try:
            return dl(stream=stream, max_version=_V10)
        except TypeError:
            return dl(stream=stream)
    except (TypeError, BufferError, ValueError, RuntimeError, AssertionError):
        if kind != _kDLCUDAHost or stream is None:
            raise
        return dl()   # some producers route pinned memory through a CPU path that refuses any stream


# the hot-path array builder: no argument normalisation (from_dlpack has checked everything)
_wrap = array._wrap


def from_dlpack(x, dtype=None, device=None, copy=None):
    """Wrap a DLPack producer (``__dlpack__``/``__dlpack_device__``) or capsule as a tapegrad array.

    Zero-copy: the result keeps the producer's memory alive and calls its deleter exactly once,
    when the last tapegrad view dies. Strides, ``byte_offset`` and ``lanes`` (an extra trailing
    dimension) are honoured; a READ_ONLY tensor becomes a read-only array (kernel writes, ``fill_``
    and ``assign`` refuse).

    Args:
        x: a producer object or a ``dltensor``/``dltensor_versioned`` capsule (consumed).
        dtype: view the data as this dtype: an alias of the same size for integral/bool data
            (e.g. ``tg.bool`` over uint8), or a vector/matrix type consuming trailing dimensions.
        device: the device of the result; a different one than the data's means a copy.
        copy: True always copies; False never does (ValueError if needed); None copies only if needed.
    Raises:
        TypeError: unsupported object, dtype or device type (e.g. OpenCL).
        ConsumedCapsuleError: the capsule was consumed already (a RuntimeError).
        RuntimeError: trailing dims do not fit a vector/matrix ``dtype``; more than 4 dimensions.
        ValueError: a copy is needed but ``copy=False``.
    """
    cap = x if type(x) is _CAPSULE else _capsule_from(x)
    owner, ptr, kind, ident, code, bits, lanes, flags, shape, strides, _ = (_fns[1] or _backend_fns()[1])(cap, _ACCEPT)
    sc = _BY_DL[(code, bits)]
    isz = sc.size
    if kind == _kDLCPU or kind == _kDLCUDAHost:
        dev = _CPU
    else:
        dev = _cuda_device(ident, "from_dlpack")
    if lanes != 1:
        shape = shape + (lanes,)
        strides = None if strides is None else tuple(s * lanes for s in strides) + (1,)
    if not shape:
        shape, bstrides = (1,), (isz,)
    elif strides is None:
        acc, rs = isz, []
        for d in reversed(shape):
            rs.append(acc)
            acc *= d if d > 1 else 1
        bstrides = tuple(reversed(rs))
    else:
        bstrides = tuple(s * isz for s in strides)
    if min(shape) < 0:
        raise ValueError(f"from_dlpack: negative dimension in DLPack shape {shape}")
    if dtype is None:
        dt = sc
    else:
        dt = T.resolve_dtype(dtype, arg="from_dlpack(dtype=...)")
        if isinstance(dt, T.StructType) or not T.can_alias(dt.scalar, sc):
            raise DLPackDtypeError(f"Incompatible data types: DLPack {sc.name} and tapegrad {dt!r} "
                                   "(only same-size integer/bool aliases, or vector/matrix types of the same scalar)")
    if dt.inner_shape or len(shape) > T.MAX_DIMS:
        dt, shape, bstrides = _fold_inner_dims(sc, dt, shape, bstrides, "from_dlpack")
    if min(bstrides) < 0:
        a = _copy_negative(owner, ptr, dt, shape, bstrides, dev, copy)
    else:
        a = _wrap(ptr, dt, shape, bstrides, dev, owner, (flags & FLAG_READ_ONLY) != 0)
        if kind == _kDLCUDAHost:
            a.pinned = True
    if device is not None:
        target = get_device(device)
        if target is not a.device:
            if copy is False:
                raise ValueError(f"from_dlpack: the data is on {a.device}, device={target} needs a copy, but copy=False")
            return clone(a, device=target, requires_grad=False)
    if copy:
        return clone(a, requires_grad=False)
    return a


def _copy_negative(owner, ptr, dt, shape, bstrides, dev, copy):
    """Negative strides (e.g. a flipped numpy array): tapegrad views cannot express them; copy."""
    if copy is False:
        raise ValueError(f"from_dlpack: negative strides {bstrides} need a copy, but copy=False")
    import numpy as np
    sc = dt.scalar
    fshape = tuple(shape) + tuple(dt.inner_shape)
    inner = []
    acc = sc.size
    for d in reversed(dt.inner_shape):
        inner.append(acc)
        acc *= d
    fstrides = tuple(bstrides) + tuple(reversed(inner))
    iface = {"version": 3, "shape": fshape, "typestr": sc.np_dtype.str, "strides": fstrides, "data": (ptr, False)}
    if dev.is_cpu:
        holder = type("_View", (), {"__array_interface__": iface, "_owner": owner})()
        return array(np.ascontiguousarray(np.asarray(holder)), dtype=dt, device=dev)
    import cupy
    holder = type("_View", (), {"__cuda_array_interface__": {**iface, "stream": None}, "_owner": owner})()
    with cupy.cuda.Device(dev.ordinal), dev.stream._cp:
        c = cupy.ascontiguousarray(cupy.asarray(holder))
    return array(c, dtype=dt, device=dev)

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

This package face holds the consumer side (``from_dlpack``) and ``to_dlpack``; the producer
side is ``export`` (below ``tapegrad.array``, which calls it), the capsule machinery
(structs, deleters) is ``capsules`` with its C helper ``capsule_helper.c`` (see
docs/dlpack.md for why the deleter must not be a Python callback).
"""
from __future__ import annotations

from .. import types
from ..array import array, clone
from ..device import get_cuda_devices, get_device
from ..errors import ConsumedCapsuleError, DLPackDtypeError, DLPackStreamError  # noqa: F401
from ..memory_ops import on_current_stream
from ..storage import fold_inner_dims
from . import capsules
from .capsules import backend, use_backend  # noqa: F401
from .export import (
    DEVICE_CPU as _kDLCPU,
)
from .export import (
    DEVICE_CUDA as _kDLCUDA,
)
from .export import (
    DEVICE_CUDA_HOST as _kDLCUDAHost,
)
from .export import (
    DEVICE_CUDA_MANAGED as _kDLCUDAManaged,
)
from .export import (  # noqa: F401
    DLPACK_VERSION,
    FLAG_IS_COPIED,
    FLAG_READ_ONLY,
    DLDeviceType,
    array_device,
    export_array,
)

__all__ = ["from_dlpack", "to_dlpack", "export_array", "array_device", "DLDeviceType", "DLPackStreamError",
           "DLPackDtypeError", "ConsumedCapsuleError", "FLAG_READ_ONLY", "FLAG_IS_COPIED", "DLPACK_VERSION"]


_CPU = get_device("cpu")
_V10 = (1, 0)
_BY_DL = {(s.dl_code, s.bits): s for s in types.SCALARS.values()}
_ACCEPT = bytes(b for key in _BY_DL for b in key)
_CAPSULE = type(__import__("datetime").datetime_CAPI)


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
_wrap = array.wrap_memory


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
    import_ = capsules.ENTRY_POINTS[1] or capsules.entry_points()[1]
    owner, ptr, kind, ident, code, bits, lanes, flags, shape, strides, _ = import_(cap, _ACCEPT)
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
        dt = types.resolve_dtype(dtype, arg="from_dlpack(dtype=...)")
        if isinstance(dt, types.StructType) or not types.can_alias(dt.scalar, sc):
            # Warp's words (DLPack's type as code name + bits: bool8, float32; Warp's type name)
            dl_name = ("bool" if sc.kind == "bool" else sc.name.rstrip("0123456789")) + str(sc.bits)
            raise DLPackDtypeError(f"Incompatible data types: DLPack {dl_name} and Warp "
                                   f"{getattr(dt, '__name__', dt)} (tapegrad {dt!r}: only same-size integer/bool "
                                   f"aliases, or vector/matrix types of the same scalar)")
    if dt.inner_shape or len(shape) > types.MAX_DIMS:
        dt, shape, bstrides = fold_inner_dims(sc, dt, shape, bstrides, "from_dlpack")
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
                raise ValueError(f"from_dlpack: the data is on {a.device}, device={target} needs a copy, but "
                                 f"copy=False")
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
    with on_current_stream(dev):
        c = cupy.ascontiguousarray(cupy.asarray(holder))
    return array(c, dtype=dt, device=dev)

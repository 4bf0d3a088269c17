"""JAX arrays <-> tapegrad arrays without copies, device and dtype maps.

Both directions go through DLPack, CPU included (tapegrad's host memory is 64-byte aligned,
so XLA aliases it instead of copying). On the CPU the capsule is exchanged directly with
jaxlib's DLPack entry points when this jaxlib has them (``jax.dlpack.from_dlpack`` spends
most of its time in Python argument handling); otherwise, and on CUDA (where the stream
handshake matters), the public protocol path runs.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tapegrad import types
from tapegrad.array import array, clone
from tapegrad.device import Device, get_device
from tapegrad.dlpack import from_dlpack as _tg_from_dlpack
from tapegrad.recording import active_tape, set_active_tape
from tapegrad.storage import StorageCheck
from tapegrad.tensortypes import TensorLayout, TensorType, register_tensor_type

from .._base import DtypeMap

__all__ = ["from_jax", "to_jax", "device_from_jax", "device_to_jax", "dtype_from_jax", "dtype_to_jax", "DTYPES",
           "jax_scalar", "Tracer", "ArrayImpl"]

try:
    Tracer = jax.core.Tracer          # what a traced value is (checked for static arguments)
except AttributeError:                # newer JAX moves it
    from jax._src.core import Tracer


def _normalize(x):
    try:
        return np.dtype(x)
    except TypeError:
        return None


DTYPES = DtypeMap("jax", jnp, normalize=_normalize)   # from the scalar table's jax_name column


def dtype_to_jax(dtype):
    """The JAX dtype of a tapegrad dtype (vector/matrix types: their component type).

    Raises:
        TypeError: not a tapegrad dtype, a struct, or a type JAX lacks.
    """
    return DTYPES.to_framework(dtype)


def dtype_from_jax(jax_dtype) -> types.ScalarType:
    """The tapegrad scalar type of a JAX dtype (``jnp.float32``, ``np.dtype``, ``"float32"``...).

    Raises:
        TypeError: the dtype has no tapegrad equivalent (complex, fp8...).
    """
    return DTYPES.from_framework(jax_dtype)


def jax_scalar(jax_dtype):
    """``dtype_from_jax`` that returns None instead of raising (for argument checks)."""
    return DTYPES.lookup(jax_dtype)


# --------------------------------------------------------------------------------- devices

def device_from_jax(jax_device) -> Device:
    """The tapegrad device of a JAX device (``x.device``, ``jax.devices()[i]``).

    Raises:
        TypeError: not a JAX device.
        RuntimeError: a platform tapegrad does not support (TPU...), or a GPU tapegrad
            cannot see.
    """
    platform = getattr(jax_device, "platform", None)
    if platform is None:
        raise TypeError(f"device_from_jax: expected a jax Device, got {type(jax_device).__name__}")
    if platform == "cpu":
        return get_device("cpu")
    if platform in ("gpu", "cuda"):
        ordinal = getattr(jax_device, "local_hardware_id", None)
        return get_device(f"cuda:{jax_device.id if ordinal is None else ordinal}")
    raise RuntimeError(f"device_from_jax: unsupported JAX platform {platform!r} (tapegrad supports cpu and cuda)")


def device_to_jax(device=None):
    """The JAX device of a tapegrad device (None: tapegrad's current device).

    Raises:
        RuntimeError: JAX has no such device (no CUDA-enabled jaxlib, or fewer GPUs).
    """
    d = get_device(device)
    try:
        if d.is_cuda:
            gpus = [g for g in jax.devices("gpu") if getattr(g, "local_hardware_id", g.id) == d.ordinal]
            if gpus:
                return gpus[0]
        else:
            return jax.devices("cpu")[0]
    except RuntimeError:
        pass
    raise RuntimeError(f"device_to_jax: JAX has no device corresponding to tapegrad device {d} "
                       f"(JAX devices: {jax.devices()})")


# -------------------------------------------------------------------------- conversions

try:  # jaxlib's own DLPack entry points (CPU fast path); any change here falls back to jax.dlpack
    from jax._src.lib import _jax as _xla_ext
    from jax._src.lib import jaxlib_extension_version as _EXT_VERSION
    _TO_CAPSULE = _xla_ext.buffer_to_dlpack_managed_tensor
    _FROM_CAPSULE = _xla_ext.dlpack_managed_tensor_to_buffer
except (ImportError, AttributeError):
    _TO_CAPSULE = _FROM_CAPSULE = None
    _EXT_VERSION = 0

ArrayImpl = type(jnp.zeros(1))   # the concrete jax.Array class (exact type checks on hot paths)
_CPU = get_device("cpu")
_jax_cpu = None


def from_jax(x, dtype=None) -> array:
    """A tapegrad array sharing ``x``'s memory (through DLPack; no copy).

    Args:
        x: a single-device ``jax.Array``.
        dtype: view the elements as this tapegrad dtype (a vector/matrix type consumes the
            trailing component dims: ``(n, 3)`` float32 -> ``(n,)`` vec3).

    Returns:
        An array that keeps ``x`` alive. JAX treats arrays as immutable: write to it only when
        nothing in JAX reads ``x`` afterwards (or ``tg.clone`` it first). Once ``x`` is deleted
        (``x.delete()``, a donation), using the array raises RuntimeError.

    Raises:
        TypeError: not a JAX array; dtype mismatch. BufferError: a sharded array.
    """
    if type(x) is ArrayImpl and _TO_CAPSULE is not None:
        try:
            devs = x.sharding.device_set
            cap = _TO_CAPSULE(x, stream=None) if len(devs) == 1 and next(iter(devs)).platform == "cpu" else None
        except (AttributeError, TypeError):   # jaxlib changed: the public path below still works
            cap = None
        if cap is not None:
            return _deletable_view(_tg_from_dlpack(cap, dtype=dtype), x)
    if not isinstance(x, jax.Array):
        raise TypeError(f"from_jax: expected a jax.Array, got {type(x).__name__}")
    if isinstance(x, Tracer):
        raise TypeError("from_jax: got a traced value (inside jax.jit/grad/vmap): a tracer has no memory; use "
                        "tg.jax_kernel or tg.jax_callable to run kernels inside JAX transformations")
    return _deletable_view(_tg_from_dlpack(x, dtype=dtype), x)


def stream_wait_for(x, device) -> None:
    """Make tapegrad's current stream of CUDA ``device`` wait until JAX array ``x`` is ready:
    the consumer side of a DLPack export without the import (no copy; the host waits only
    where this jaxlib's export does). ``x``: a concrete single-device JAX array on ``device``."""
    handle = device.stream.cuda_stream or 1       # 0 is ambiguous in DLPack: 1 is the legacy default stream
    if type(x) is ArrayImpl and _TO_CAPSULE is not None:
        try:    # the export orders ``handle`` after x's ready event; the capsule is dropped unconsumed
            _TO_CAPSULE(x, stream=handle)
            return
        except (TypeError, AttributeError):       # jaxlib changed: the public handshake below
            pass
    from_jax(x)


def _deletable_view(a, x):
    """``a`` (imported through DLPack) as a view held by ``x`` itself, with a storage check.

    A DLPack import holds an external reference on the buffer, and ``x.delete()`` under it
    aborts the process inside jaxlib; the view keeps ``x`` instead (the buffer lives as long as
    ``x`` does) and the DLPack reference goes with ``a``. A deleted (or donated) ``x`` is then
    refused where the view is used (``storage.StorageCheck``)."""
    v = array.wrap_memory(a.ptr, a.dtype, a.shape, a.strides, a.device, x, a.readonly)
    ptr, deleted = a.ptr, x.is_deleted
    v._storage_check = StorageCheck(lambda: 0 if deleted() else ptr, ptr, "JAX array")
    return v


def _jax_can_view(a) -> bool:
    """Whether JAX can import ``a``'s memory as it is: writable (a DLPack capsule JAX accepts
    cannot say read-only) and compact — every element once, in some order of the dims (XLA
    imports transpositions, not gaps or 0-strides)."""
    if a.readonly:
        return False
    shape, strides = a.flat_layout()
    expected = a.dtype.scalar.size
    for st, n in sorted((st, n) for n, st in zip(shape, strides) if n != 1):
        if n == 0:
            return True
        if st != expected:
            return False
        expected *= n
    return True


def _compact_copy(a):
    """A contiguous copy of ``a``, not recorded on an active tape (it is no gradient path)."""
    tape = active_tape()
    if tape is not None:
        set_active_tape(None)
    try:
        return clone(a, requires_grad=False)
    finally:
        if tape is not None:
            set_active_tape(tape)


def to_jax(a):
    """A ``jax.Array`` sharing tapegrad array ``a``'s memory (through DLPack; no copy).

    Vector/matrix elements appear as trailing dims (``(n,)`` vec3 -> ``(n, 3)``). The JAX
    array keeps ``a``'s memory alive. A layout XLA cannot import (a slice with gaps, a
    0-stride broadcast) or a read-only array is copied first (JAX arrays are immutable, so the
    copy holds the same values; it does not follow later writes to ``a``).

    Raises:
        TypeError: not a tapegrad array; a struct array.
    """
    global _jax_cpu
    if not isinstance(a, array):
        raise TypeError(f"to_jax: expected a tapegrad array, got {type(a).__name__}")
    if isinstance(a.dtype, types.StructType):
        raise TypeError(f"to_jax: struct arrays ({a.dtype.name}) have no JAX equivalent")
    if not (a.is_contiguous or _jax_can_view(a)) or a.readonly:
        a = _compact_copy(a)
    if a.device is _CPU and _FROM_CAPSULE is not None and (a.dtype.scalar.bits < 64 or jax.config.jax_enable_x64):
        if _jax_cpu is None:
            _jax_cpu = jax.devices("cpu")[0]
        try:
            if _EXT_VERSION >= 467:
                return _FROM_CAPSULE(a.__dlpack__(), _jax_cpu, None, None, 1)
            return _FROM_CAPSULE(a.__dlpack__(), _jax_cpu, None, None)
        except TypeError:   # jaxlib changed the entry point's signature: use the public path from now on
            _disable_fast_import()
    elif (a.device.is_cuda and _FROM_CAPSULE is not None and _EXT_VERSION >= 467
          and (a.dtype.scalar.bits < 64 or jax.config.jax_enable_x64)):
        jax_dev, stream = _cuda_import_target(a.device)
        if stream is not None:
            try:   # what jax.dlpack.from_dlpack does, less its Python argument handling
                return _FROM_CAPSULE(a.__dlpack__(stream=stream), jax_dev, stream, None, 2)
            except TypeError:
                _disable_fast_import()
    return jax.dlpack.from_dlpack(a)


_cuda_targets: dict = {}   # tapegrad CUDA device -> (JAX device, the stream JAX imports DLPack on)


def _cuda_import_target(device):
    """JAX's device for tapegrad CUDA ``device`` and the stream its DLPack imports are ordered
    on (tapegrad's stream is made to wait there by the export handshake); stream None when
    this jaxlib does not say (then the public path runs)."""
    t = _cuda_targets.get(device)
    if t is None:
        jax_dev = device_to_jax(device)
        try:
            stream = jax_dev.get_stream_for_external_ready_events()
        except Exception:   # noqa: BLE001  UNIMPLEMENTED on some backends: the public path decides
            stream = None
        t = _cuda_targets[device] = (jax_dev, stream if type(stream) is int else None)
    return t


def _disable_fast_import():
    global _FROM_CAPSULE
    _FROM_CAPSULE = None


# ------------------------------------------------------------------ launch(): JAX arrays directly

def _layout(t):
    if isinstance(t, Tracer):
        raise TypeError("launch: got a traced JAX value: use tg.jax_kernel inside jax.jit/grad/vmap")
    scalar = dtype_from_jax(t.dtype)
    shape = tuple(t.shape)
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return TensorLayout(scalar, shape, tuple(reversed(strides)), _array_device(t), str(t.dtype))


def _array_device(t):
    return device_from_jax(next(iter(t.devices())))


# a concrete JAX array's one row (registered at the end of this module): what launch needs to
# take it as a kernel argument (no gradient; from_jax/to_jax go through DLPack)
TENSOR_TYPE = TensorType(
    framework="jax", classes=(ArrayImpl,), layout=_layout, layout_key=lambda t: (t.dtype, t.shape, t.sharding),
    data_ptr=lambda t: t.unsafe_buffer_pointer(), device=_array_device)


# ---------------------------------------------------------------------------- registration
# JAX's one registration: launch reads this row
register_tensor_type(TENSOR_TYPE)

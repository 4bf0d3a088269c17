"""PaddlePaddle bridge: zero-copy tensors <-> arrays with gradients, devices, dtypes, streams.

Imported lazily (``tg.from_paddle`` or a paddle tensor met by ``launch``), so ``import
tapegrad`` never imports paddle. Everything framework-neutral (layouts, component dims, grad
wiring, descriptors, the dtype/device maps, stream handles) is ``_base``; this module holds
only what is paddle's:

- reading a tensor: ``t.dtype``, ``t.shape``, ``t.strides`` (elements), ``t.place``,
  ``t.data_ptr()`` (offset included), ``t.stop_gradient`` (the inverse of requires_grad);
- making a tensor over tapegrad memory: a DLPack capsule from ``tapegrad.dlpack`` (CPU and
  CUDA alike, so the CUDA path is the shared exporter the DLPack/torch tests run on the GPU)
  consumed by paddle's ``core.from_dlpack``; the capsule's deleter keeps the array alive;
- gradients: allocated with ``paddle.zeros`` (paddle's allocator) and installed zero-copy with
  ``t.grad_ = g`` (paddle accumulates into that buffer in place; ``_set_grad_ivar`` works only
  for ``Parameter`` objects).

Kernel -> ``paddle.autograd.PyLayer``: ``tapegrad.bridges.paddle_op`` (``tg.paddle_op``).
"""
from __future__ import annotations

import operator

import paddle

from tapegrad import types
from tapegrad.device import Device, get_device
from tapegrad.dlpack import to_dlpack
from tapegrad.storage import StorageCheck
from tapegrad.tensortypes import TensorLayout, TensorType, register_tensor_type

from ._base import Bridge, DeviceMap, DtypeMap, FrameworkAdapter, release_after, wait_for_handle
from .paddle_op import make_paddle_op

__all__ = ["from_paddle", "to_paddle", "device_from_paddle", "device_to_paddle", "dtype_from_paddle",
           "dtype_to_paddle", "stream_from_paddle", "stream_to_paddle", "paddle_op", "current_stream_handle",
           "DTYPES", "release_after"]

_core = paddle.base.core
_Tensor = paddle.Tensor
_tensor_init = paddle.original_init   # paddle.Tensor.__init__ before paddle wraps it in Python (its
_new_tensor = _Tensor.__new__         # wrapper resolves a place from a string on every call)
_from_capsule = _core.from_dlpack


# --------------------------------------------------------------------------------- devices

def _parse_device(x):
    if isinstance(x, str):
        s = x.strip().lower()
        kind, _, idx = s.partition(":")
        if kind in ("gpu", "cuda"):
            kind = "cuda"
        if idx:
            try:
                return kind, int(idx), x
            except ValueError:
                return "?", None, x
        return kind, None, x
    if hasattr(x, "is_cpu_place") and hasattr(x, "is_gpu_place"):   # paddle Place, CPUPlace, CUDAPlace...
        if x.is_cpu_place() or x.is_cuda_pinned_place():   # pinned host memory is CPU memory (as Warp)
            return "cpu", None, str(x)
        if x.is_gpu_place():
            return "cuda", x.gpu_device_id(), str(x)
        return "other", None, str(x)
    raise TypeError(f"device_from_paddle: expected a paddle place (paddle.CPUPlace(), paddle.CUDAPlace(0), "
                    f"tensor.place) or a str ('cpu', 'gpu', 'gpu:0'), got {type(x).__name__}")


def _current_cuda() -> int:
    if not paddle.is_compiled_with_cuda():
        raise RuntimeError("device_from_paddle: 'gpu' names paddle's current CUDA device, but this paddle build "
                           "has no CUDA (pip install paddlepaddle-gpu)")
    cur = paddle.device.get_device()            # "gpu:N", or "cpu" when paddle's default is the CPU
    return int(cur.partition(":")[2] or 0) if cur.startswith("gpu") else 0


_DEVICES = DeviceMap("paddle", _parse_device, _current_cuda, "gpu",
                     (_core.Place, _core.CPUPlace, _core.CUDAPlace, _core.CUDAPinnedPlace))


def device_from_paddle(paddle_device) -> Device:
    """The tapegrad device of a paddle place (``t.place``, ``paddle.CUDAPlace(0)``...) or string.

    ``"gpu:N"``/``"cuda:N"`` name CUDA device N, ``"gpu"`` paddle's current one; CUDA pinned
    memory (``paddle.CUDAPinnedPlace()``) is host memory: the CPU device (as in Warp).

    Raises:
        TypeError: neither a place nor a string.
        RuntimeError: a place tapegrad does not support (XPU, custom devices...), or a CUDA
            device that does not exist here.
    """
    return _DEVICES.from_framework(paddle_device)


def device_to_paddle(device=None) -> str:
    """The paddle device string (``"cpu"``, ``"gpu:N"``) of a tapegrad device (None: current).

    Paddle places are accepted too (returned as their string).

    Raises:
        ValueError, RuntimeError: unknown device name / a CUDA device that does not exist.
    """
    return _DEVICES.to_framework(device)


# ---------------------------------------------------------------------------------- dtypes

DTYPES = DtypeMap("paddle", paddle)   # both maps, from the scalar table's paddle_name column
_lookup = DTYPES.from_fw.get


def dtype_to_paddle(dtype):
    """The paddle dtype of a tapegrad dtype (vector/matrix types: their component type).

    Paddle has no unsigned 16/32/64-bit types (``paddle.uint16`` is a legacy alias that casts
    to bfloat16), so ``uint16/32/64`` map to the signed ``paddle.int16/32/64`` of the same width,
    as in Warp (and as ``dtype_to_torch``); ``bfloat16`` maps to ``paddle.bfloat16``.

    Raises:
        TypeError: struct dtypes, or a dtype paddle does not have.
    """
    try:
        t = types.resolve_dtype(dtype, arg="dtype_to_paddle(dtype)")
    except TypeError:
        t = None
    twin = _SIGNED_TWIN.get(getattr(t, "scalar", None))
    return DTYPES.to_framework(twin if twin is not None else dtype)


_SIGNED_TWIN = {types.uint16: types.int16, types.uint32: types.int32, types.uint64: types.int64}


def dtype_from_paddle(paddle_dtype) -> types.ScalarType:
    """The tapegrad scalar type of a paddle dtype (``paddle.bfloat16`` -> ``tg.bfloat16``).

    Raises:
        TypeError: the dtype has no tapegrad equivalent (complex, float8...).
    """
    return DTYPES.from_framework(paddle_dtype)


# --------------------------------------------------------------------------------- streams

def _cuda_stream(device_str: str):
    if not paddle.is_compiled_with_cuda():
        raise RuntimeError(f"paddle streams: this paddle build has no CUDA (device {device_str!r}); "
                           "install paddlepaddle-gpu")
    return paddle.device.current_stream(device_str)


def _handle(ps) -> int:
    base = getattr(ps, "stream_base", None)   # older paddle: the raw handle sits on stream_base
    return int(ps.cuda_stream if hasattr(ps, "cuda_stream") else base.cuda_stream)


def current_stream_handle(ordinal: int) -> int:
    """The raw handle of paddle's current CUDA stream on device ``ordinal``."""
    return _handle(_cuda_stream(f"gpu:{ordinal}"))


def _cuda_device_arg(x, fname) -> Device:
    """The CUDA device named by a paddle place/string or a tapegrad device (None: paddle's current)."""
    if x is None and not paddle.is_compiled_with_cuda():
        raise RuntimeError(f"{fname}: this paddle build has no CUDA (install paddlepaddle-gpu)")
    if x is None:
        dev = get_device(f"cuda:{_current_cuda()}")
    else:
        dev = x if isinstance(x, Device) else device_from_paddle(x)
    if not dev.is_cuda:
        raise RuntimeError(f"{fname}: device {dev} is not a CUDA device")
    return dev


def stream_from_paddle(stream_or_device=None):
    """A tapegrad Stream for a paddle CUDA stream (or the current paddle stream of a device).

    The handle is shared, not copied (blocking behaviour is the stream's own), and the paddle
    stream object is kept alive by the tapegrad stream. Use it with ``tg.ScopedStream`` to
    run tapegrad work on paddle's stream.

    Raises:
        RuntimeError: a CPU device, or a paddle build without CUDA.
    """
    from tapegrad.cuda.stream import Stream
    if isinstance(stream_or_device, paddle.device.Stream):
        ps = stream_or_device
        dev = device_from_paddle(ps.device) if hasattr(ps, "device") else get_device("cuda")
    else:
        dev = _cuda_device_arg(stream_or_device, "stream_from_paddle")
        ps = _cuda_stream(f"gpu:{dev.ordinal}")
    return Stream(dev, cuda_stream=_handle(ps), owner=ps)


def stream_to_paddle(stream_or_device=None):
    """A paddle stream (``paddle.device.get_stream_from_external``) for a tapegrad Stream, or
    for a device's current tapegrad stream. Warp has no such function.

    The paddle stream keeps the tapegrad stream alive (``._tg_stream``).

    Raises:
        RuntimeError: a CPU device, or a paddle build without CUDA.
    """
    from tapegrad.cuda.stream import Stream
    if isinstance(stream_or_device, Stream):
        s = stream_or_device
    else:
        s = _cuda_device_arg(stream_or_device, "stream_to_paddle").stream
    _cuda_stream(f"gpu:{s.device.ordinal}")   # a clear error on CPU-only paddle builds
    ps = paddle.device.get_stream_from_external(s.cuda_stream, f"gpu:{s.device.ordinal}")
    ps._tg_stream = s
    return ps


# ------------------------------------------------------------------------------ the adapter

def _wrap_capsule(capsule):
    """A paddle tensor consuming a DLPack capsule (its deleter keeps the producer alive)."""
    dense = _from_capsule(capsule)
    t = _new_tensor(_Tensor)
    _tensor_init(t, dense, dense._place())
    return t


def _custom_devices() -> bool:
    try:
        return bool(paddle.device.get_all_custom_device_type())
    except Exception:  # older paddle: no custom-device registry
        return False


# Where every tensor is a CPU tensor (a CPU-only paddle build without XPU or custom devices) the
# place need not be part of the layout key: hashing and comparing paddle places costs ~1.5 us
_PLACES_VARY = paddle.is_compiled_with_cuda() or paddle.is_compiled_with_xpu() or _custom_devices()


def _key_with_place(t):
    # paddle dtypes are singletons whose pybind __hash__/__eq__ cost ~0.75 us each: key on their
    # identity (the dtype map holds every dtype a Layout can be built for, so ids stay unique)
    return (id(t.dtype), tuple(t.shape), tuple(t.strides), t._place_str)


def _key_cpu_only(t):
    return (id(t.dtype), tuple(t.shape), tuple(t.strides))


def _layout(t):
    pdt = t.dtype
    scalar = _lookup(pdt) or dtype_from_paddle(pdt)   # the latter raises the explanatory TypeError
    return TensorLayout(scalar, tuple(t.shape), tuple(t.strides), device_from_paddle(t.place), str(pdt))


def _storage_check(t, ptr):
    # _clear_data() frees t's memory under a view (data_ptr() is None after it): compared at every use
    return StorageCheck(t.data_ptr, ptr, "paddle tensor")


_PLACE_DEVICES: dict = {}    # a tensor's place string ("Place(gpu:0)") -> tapegrad Device


def _tensor_device(t):
    # the place's string is cached by paddle: hashing a Place object costs ~1.5 us
    key = t._place_str
    d = _PLACE_DEVICES.get(key)
    if d is None:
        d = _PLACE_DEVICES[key] = device_from_paddle(t.place)
    return d


# paddle.Tensor's one row (registered at the end of this module): launch, from_paddle/to_paddle
# and the tape's version checks read it
TENSOR_TYPE = TensorType(
    framework="paddle", classes=(_Tensor,), layout=_layout,
    layout_key=_key_with_place if _PLACES_VARY else _key_cpu_only,
    data_ptr=operator.methodcaller("data_ptr"),   # includes the view's offset
    device=_tensor_device, version=operator.methodcaller("_inplace_version"),   # paddle's in-place counter
    requires_grad=lambda t: not t.stop_gradient,
    storage_check=_storage_check)


class PaddleAdapter(FrameworkAdapter):
    @staticmethod
    def requires_grad(t):
        return not t.stop_gradient

    def get_grad(self, t):
        return t.grad

    def alloc_grad(self, t):
        # paddle's allocator; the tensor's own element strides (kernels address a gradient with
        # its array's strides): a contiguous zero block, viewed with those strides when needed
        place = t.place
        if t.is_contiguous():
            g = paddle.zeros(t.shape, dtype=t.dtype, device=place)
        else:
            shape, strides = list(t.shape), list(t.strides)
            span = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
            g = paddle.as_strided(paddle.zeros([span], dtype=t.dtype, device=place), shape, strides)
        if t.is_leaf:     # paddle refuses grads on non-leaf tensors: the array keeps g to itself
            t.grad_ = g
        if not place.is_cpu_place():   # tapegrad's kernels run on tapegrad's stream: after the zero fill
            dev = device_from_paddle(place)
            wait_for_handle(dev, current_stream_handle(dev.ordinal))
        return g

    @staticmethod
    def grad_linkable(t):
        return t.is_leaf     # paddle gives non-leaf tensors no .grad

    @staticmethod
    def keep_grad(g):
        # paddle's t.grad_ = g shares g's storage object itself, and clear_grad(set_to_zero=False)
        # frees that object's memory: the array holds an alias of the memory, never installed
        return paddle.as_strided(g, g.shape, g.strides, g._offset())

    @staticmethod
    def is_grad(cur, keep):
        return cur is not None and cur.data_ptr() == keep.data_ptr()   # t.grad is a new wrapper per read

    def reinstall_grad(self, t, keep):
        keep.zero_()
        t.grad_ = self.keep_grad(keep)    # a fresh alias: the next clear frees that one, not keep
        place = t.place
        if not place.is_cpu_place():      # tapegrad's adjoints run on tapegrad's stream: after the zero fill
            dev = device_from_paddle(place)
            wait_for_handle(dev, current_stream_handle(dev.ordinal))

    def wrap(self, a):
        if a.readonly:
            raise ValueError(f"to_paddle: the array is read-only and paddle tensors cannot be (got {a!r}); "
                             "clone it first")
        return _wrap_capsule(to_dlpack(a))

    def set_grad(self, t, g):
        t.stop_gradient = False
        if g is not None:
            t.grad_ = g


_bridge = Bridge(TENSOR_TYPE, PaddleAdapter(), DTYPES, _DEVICES, current_stream_handle)
paddle_op = make_paddle_op(_bridge)   # the op builder is its own module; it gets the bridge, not an import


# ----------------------------------------------------------------------------- conversions

from_paddle = Bridge.public(_bridge.from_tensor, "from_paddle", """\
    Wrap a paddle tensor as a tapegrad array without copying.

    Args:
        t: the tensor (CPU or CUDA place). The array keeps it alive.
        dtype: tapegrad dtype (default: from ``t.dtype``). Scalar dtypes keep ``t``'s shape
            and strides (transposed and sliced views wrap as they are); vector and matrix
            dtypes consume ``t``'s trailing component dims, which must be contiguous
            (``vec3`` <-> ``[..., 3]``, ``mat22`` <-> ``[..., 2, 2]``).
        requires_grad: share a gradient (default: ``not t.stop_gradient``). ``t.grad``
            becomes the array's ``.grad``; when ``t`` has none, paddle allocates a zero one
            (``paddle.zeros``, the tensor's strides) and installs it as ``t.grad`` first (for
            a non-leaf tensor, which paddle gives no ``.grad``, the array alone holds it).
        grad: a gradient to use instead (a tapegrad array or a paddle tensor).
        return_ctype: return a launchable descriptor (no array object: fastest) that keeps
            ``t`` and its gradient alive.
        retain_grad: write adjoints leave the gradient in place (``array.retain_grad``;
            ValueError when the array gets no gradient).
    Raises:
        TypeError: ``t`` is not a paddle tensor; a dtype tapegrad lacks (complex...);
            ``requires_grad`` on a non-float tensor.
        BridgeTypeError: (a TypeError and a RuntimeError) ``dtype`` cannot view ``t``'s elements.
        RuntimeError: trailing dims do not match or are not contiguous (vector/matrix dtypes);
            more than 4 dims; a place that is neither CPU nor CUDA.
        GradLayoutError: (a ValueError and a RuntimeError) the gradient (``grad``, or an
            existing ``t.grad``) differs from ``t`` in dtype, shape, strides or device.
    """, __name__)

to_paddle = Bridge.public(_bridge.to_tensor, "to_paddle", """\
    A paddle tensor aliasing tapegrad array ``a`` (vector/matrix dims appended), no copy.

    The tensor keeps ``a`` alive (through the DLPack capsule's deleter). With
    ``requires_grad`` (default: ``a.requires_grad``) it has ``stop_gradient=False`` and its
    ``.grad`` is a zero-copy view of ``a.grad``: ``paddle.optimizer.Adam`` over it reads what
    the tape wrote (clone it before ``tape.zero()`` if paddle must keep the values).

    Raises:
        TypeError: not an array; ``requires_grad`` on a non-float array.
        BridgeTypeError: struct arrays (no paddle equivalent).
        ValueError: an array without memory, or a read-only one.
    """, __name__)


# ---------------------------------------------------------------------------- registration
# paddle's one registration: launch, the conversions above and the tape read this row
register_tensor_type(TENSOR_TYPE)

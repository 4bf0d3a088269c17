"""PyTorch bridge: zero-copy tensors <-> arrays with gradients, devices, dtypes, streams.

Imported lazily (``tg.from_torch`` or a torch tensor met by ``launch``), so ``import
tapegrad`` never imports torch. The logic shared with the other bridges (layouts, component
dims, grad wiring, descriptors) is in ``bridges._base``; this module holds what is torch's.
Kernel -> native custom op: ``bridges.torch_op.torch_op`` (re-exported here).
"""
from __future__ import annotations

import operator
import sys
import weakref

import torch

from tapegrad import types as T
from tapegrad.device import Device, get_device
from tapegrad.launch import register_launch_adapter

from ._base import Bridge, BridgeTypeError, FrameworkAdapter, release_after

__all__ = ["from_torch", "to_torch", "device_from_torch", "device_to_torch", "dtype_from_torch",
           "dtype_to_torch", "stream_from_torch", "stream_to_torch", "torch_op", "release_after"]


# --------------------------------------------------------------------------------- devices

_DEV_FROM: dict = {}     # torch.device / str -> Device (only explicit, stable names)


def device_from_torch(torch_device) -> Device:
    """The tapegrad device of a torch device (``torch.device`` or a string).

    ``torch.device("cuda")`` and ``"cuda"`` (no index) mean torch's current CUDA device.

    Raises:
        TypeError: ``torch_device`` is neither a ``torch.device`` nor a string.
        RuntimeError: a device type tapegrad does not support (mps, meta...), or a CUDA
            device that does not exist here.
    """
    try:
        d = _DEV_FROM.get(torch_device)
    except TypeError:
        d = None
    if d is not None:
        return d
    if isinstance(torch_device, str):
        try:
            td = torch.device(torch_device)
        except RuntimeError:
            raise RuntimeError(f"device_from_torch: unsupported torch device {torch_device!r}") from None
    elif isinstance(torch_device, torch.device):
        td = torch_device
    else:
        raise TypeError(f"device_from_torch: expected a torch.device or a str, got {type(torch_device).__name__}")
    if td.type == "cpu":
        d = get_device("cpu")
    elif td.type == "cuda":
        idx = td.index
        if idx is None:
            if not torch.cuda.is_available():
                raise RuntimeError(f"device_from_torch: {torch_device!r} names torch's current CUDA device, "
                                   "but torch sees no CUDA device")
            return get_device(f"cuda:{torch.cuda.current_device()}")  # not cached: it can change
        d = get_device(f"cuda:{idx}")
    else:
        raise RuntimeError(f"device_from_torch: unsupported torch device {str(td)!r} (tapegrad supports cpu and cuda)")
    _DEV_FROM[torch_device] = d
    return d


def device_to_torch(device=None) -> str:
    """The torch device string (``"cpu"``, ``"cuda:N"``) of a tapegrad device (None: current).

    Raises:
        ValueError, RuntimeError: unknown device name / a CUDA device that does not exist.
    """
    if isinstance(device, torch.device):
        device = device_from_torch(device)
    d = get_device(device)
    return "cpu" if d.is_cpu else f"cuda:{d.ordinal}"


# ---------------------------------------------------------------------------------- dtypes

_TO_TORCH: dict = {}
_FROM_TORCH: dict = {}


def _from_torch_table() -> dict:
    if not _FROM_TORCH:
        for s in T.SCALARS.values():
            if s.torch_name is not None and hasattr(torch, s.torch_name):
                _FROM_TORCH[getattr(torch, s.torch_name)] = s
    return _FROM_TORCH


def dtype_to_torch(dtype) -> torch.dtype:
    """The torch dtype of a tapegrad dtype (vector/matrix types: their component type).

    ``uint16/32/64`` map to torch's ``uint16/32/64`` (not to signed aliases as in Warp).

    Raises:
        TypeError: struct dtypes, or a dtype torch does not have.
    """
    try:
        r = _TO_TORCH.get(dtype)
    except TypeError:
        r = None
    if r is None:
        r = T.dtype_to_framework(dtype, "torch")
        try:
            _TO_TORCH[dtype] = r
        except TypeError:
            pass
    return r


def dtype_from_torch(torch_dtype) -> T.ScalarType:
    """The tapegrad scalar type of a torch dtype.

    Raises:
        TypeError: the dtype has no tapegrad equivalent. ``torch.bfloat16`` is one of them:
            tapegrad has no bfloat16 type. Its raw bits can still be viewed without a copy
            with ``from_torch(t, dtype=tg.uint16)`` (or ``int16``).
    """
    s = _from_torch_table().get(torch_dtype) if isinstance(torch_dtype, torch.dtype) else None
    if s is not None:
        return s
    if torch_dtype is torch.bfloat16:
        raise TypeError("dtype_from_torch: torch.bfloat16 has no tapegrad dtype (tapegrad has no bfloat16 type); "
                        "view its raw bits with from_torch(t, dtype=tg.uint16), or convert with t.float()")
    raise TypeError(f"dtype_from_torch: torch dtype {torch_dtype!r} has no tapegrad equivalent")


# ------------------------------------------------------------------------------ the adapter

class _DeviceView:
    """Exposes an array's CUDA memory to torch and keeps the array alive.

    When torch drops the tensor while its current stream is not ordered with tapegrad's (a
    non-blocking torch stream may still be using the memory), the array is released only once
    that torch stream has passed this point (``release_after``), so tapegrad cannot hand the
    memory out again under work that is still queued.
    """

    __slots__ = ("__cuda_array_interface__", "array")

    def __del__(self):
        if sys.is_finalizing():
            return
        try:
            a = self.array
            dev = a.device
            s, handle = _streams(dev)
            if handle is not None and not torch.cuda.is_current_stream_capturing():  # (graphs: docs/graphs.md)
                release_after(_tg_stream(dev, handle), a)
        except Exception:  # never raise from a finaliser (interpreter shutdown, no CUDA...)
            pass


_TG_STREAMS: dict = {}                       # (ordinal, handle) -> tapegrad Stream wrapping it
_TORCH_STREAMS = weakref.WeakKeyDictionary()  # tapegrad Stream -> torch ExternalStream
_BLOCKING = weakref.WeakKeyDictionary()       # tapegrad Stream -> is_blocking (fixed per stream)


def _streams(dev: Device):
    """``(tapegrad's current stream, torch's current stream handle)`` of a CUDA device, the
    handle replaced by None when CUDA already orders the two: the same stream, or torch on
    the legacy default stream and tapegrad on a blocking stream (the default setup)."""
    s = dev.stream
    handle = torch.cuda.current_stream(dev.ordinal).cuda_stream
    if handle == s.cuda_stream:
        return s, None
    if handle == 0:
        b = _BLOCKING.get(s)
        if b is None:
            b = _BLOCKING[s] = s.is_blocking
        if b:
            return s, None
    return s, handle


def _tg_stream(dev: Device, handle: int):
    """A tapegrad Stream wrapping a torch stream handle (a plain handle wrapper, cached)."""
    s = _TG_STREAMS.get((dev.ordinal, handle))
    if s is None:
        from tapegrad.cuda.stream import Stream
        if len(_TG_STREAMS) >= 256:
            _TG_STREAMS.clear()
        s = _TG_STREAMS[(dev.ordinal, handle)] = Stream(dev, cuda_stream=handle)
    return s


def _torch_stream(s):
    ts = _TORCH_STREAMS.get(s)
    if ts is None:
        ts = _TORCH_STREAMS[s] = torch.cuda.ExternalStream(s.cuda_stream, device=f"cuda:{s.device.ordinal}")
    return ts


class TorchAdapter(FrameworkAdapter):
    name = "torch"
    tensor_types = (torch.Tensor,)

    def layout_key(self, t):
        return (t.dtype, t.shape, t.stride(), t.device)

    def describe(self, t, dtype):
        tdt = t.dtype
        scalar = _from_torch_table().get(tdt)
        if scalar is None:
            want = getattr(dtype, "scalar", None)
            if tdt is torch.bfloat16 and want in (T.uint16, T.int16):
                scalar = T.uint16  # raw bits, asked for explicitly
            elif tdt is torch.bfloat16 and want is not None:
                raise BridgeTypeError(f"from_torch: cannot view a torch.bfloat16 tensor as {dtype!r}; tapegrad has "
                                      "no bfloat16 type, only its raw bits are viewable (dtype=tg.uint16 or tg.int16)")
            else:
                dtype_from_torch(tdt)  # raises the explanatory TypeError
        return scalar, tuple(t.shape), t.stride(), device_from_torch(t.device), str(tdt)

    # C-level accessors (no Python frame): these run once or twice per conversion
    data_ptr = operator.methodcaller("data_ptr")
    requires_grad = operator.attrgetter("requires_grad")

    def get_grad(self, t):
        # a non-leaf's .grad is only populated with retain_grad() (reading it otherwise warns)
        return t.grad if (t.is_leaf or t.retains_grad) else None

    def alloc_grad(self, t):
        # torch's allocator, on torch's current stream; the tensor's own strides (kernels
        # address a gradient with its array's strides), 0-strides and gaps included
        g = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).zero_()
        t.grad = g
        if g.is_cuda:
            # tapegrad's kernels run on tapegrad's stream: order them after the zero fill
            dev = device_from_torch(g.device)
            s, handle = _streams(dev)
            if handle is not None:
                from tapegrad.interop import _wait_foreign_stream
                _wait_foreign_stream(dev, handle)   # an event, no host block
        return g

    def wrap(self, a):
        if a.device.ordinal < 0:   # CPU: the array's cached numpy view, shared by torch
            t = torch.from_numpy(a.numpy())
            t._tg_array = a          # the view holds the memory's owner; this holds the array
            return t
        shape, strides = a._flat_layout()
        v = _DeviceView()
        # CAI v2 (no "stream"): no synchronisation, ordering is the caller's (see stream_from_torch)
        v.__cuda_array_interface__ = {"version": 2, "shape": shape, "typestr": a.dtype.scalar.np_dtype.str,
                                      "data": (a.ptr, a.readonly), "strides": strides}
        v.array = a
        return torch.as_tensor(v, device=f"cuda:{a.device.ordinal}")

    def set_grad(self, t, g):
        t.requires_grad_(True)
        if g is not None:
            t.grad = g

    def on_use(self, t, device):
        # tapegrad's work on its own stream reads t: tell torch's caching allocator, so that
        # freeing t does not let torch reuse the block before that stream has passed
        s, handle = _streams(device)
        if handle is not None:
            t.record_stream(_torch_stream(s))


_bridge = Bridge(TorchAdapter())
register_launch_adapter(torch.Tensor, _bridge.launch_adapter)


# ----------------------------------------------------------------------------- conversions

# The public conversions are the bridge's hot-path closures, published under torch's names.
from_torch = Bridge.public(_bridge.from_tensor, "from_torch", """Wrap a torch tensor as a tapegrad array without copying.

    Args:
        t: the tensor (CPU or CUDA). The array keeps it alive.
        dtype: tapegrad dtype (default: from ``t.dtype``). Scalar dtypes keep ``t``'s shape
            and strides (transposed, sliced and expanded tensors wrap as they are); vector
            and matrix dtypes consume ``t``'s trailing component dims, which must be
            contiguous (``vec3`` <-> ``(..., 3)``, ``mat22`` <-> ``(..., 2, 2)``).
        requires_grad: share a gradient (default: ``t.requires_grad``). ``t.grad`` becomes
            the array's ``.grad``; when ``t`` has none, torch allocates a zero one (its own
            allocator, no device-wide sync) and installs it as ``t.grad`` first.
        grad: a gradient to use instead (a tapegrad array or a torch tensor).
        return_ctype: return a launchable descriptor (no array object: fastest) that keeps
            ``t`` and its gradient alive.
    Raises:
        TypeError: ``t`` is not a tensor; a dtype tapegrad lacks (bfloat16: see
            ``dtype_from_torch``); ``requires_grad`` on a non-float tensor.
        BridgeTypeError: (a TypeError and a RuntimeError) ``dtype`` cannot view ``t``'s elements.
        RuntimeError: trailing dims do not match or are not contiguous (vector/matrix dtypes);
            more than 4 dims.
        GradLayoutError: (a ValueError and a RuntimeError) the gradient (``grad``, or an
            existing ``t.grad``) differs from ``t`` in dtype, shape, strides or device.
    """, __name__)

to_torch = Bridge.public(_bridge.to_tensor, "to_torch", """A torch tensor aliasing tapegrad array ``a`` (vector/matrix dims appended), no copy.

    The tensor keeps ``a`` alive. With ``requires_grad`` (default: ``a.requires_grad``) it is
    a leaf requiring grad whose ``.grad`` is a zero-copy view of ``a.grad`` (clone it before
    ``tape.zero()`` if torch must keep the values).

    Raises:
        TypeError: not an array; ``requires_grad`` on a non-float array.
        BridgeTypeError: struct arrays (no torch equivalent).
    """, __name__)


# --------------------------------------------------------------------------------- streams

def _torch_device_arg(x, fname):
    """A torch CUDA device (or None: torch's current one) from any device-like argument."""
    if x is None:
        return None
    if isinstance(x, torch.device):
        d = device_from_torch(x)
    else:
        d = get_device(x)
    if not d.is_cuda:
        raise RuntimeError(f"{fname}: device {d} is not a CUDA device")
    return torch.device("cuda", d.ordinal)


def stream_from_torch(stream_or_device=None):
    """A tapegrad Stream for a torch CUDA stream (or the current torch stream of a device).

    The handle is shared, not copied: blocking behaviour is the stream's own (torch's default
    stream is blocking, ``torch.cuda.Stream()`` is not), and the torch stream object is kept
    alive by the tapegrad stream. Use it with ``tg.ScopedStream`` to run tapegrad work on
    torch's stream (ordering and graph capture of both on one stream).

    Raises:
        RuntimeError: a CPU device, or no CUDA.
    """
    from tapegrad.cuda.stream import Stream
    if isinstance(stream_or_device, torch.cuda.Stream):
        ts = stream_or_device
    else:
        ts = torch.cuda.current_stream(_torch_device_arg(stream_or_device, "stream_from_torch"))
    return Stream(device_from_torch(ts.device), cuda_stream=int(ts.cuda_stream), owner=ts)


def stream_to_torch(stream_or_device=None):
    """A ``torch.cuda.ExternalStream`` for a tapegrad Stream (or a device's current stream).

    The torch stream keeps the tapegrad stream alive (``._tg_stream``); tapegrad's own
    streams are blocking, and stay so.

    Raises:
        RuntimeError: a CPU device, or no CUDA.
    """
    from tapegrad.cuda.stream import Stream
    if isinstance(stream_or_device, Stream):
        s = stream_or_device
    else:
        dev = device_from_torch(stream_or_device) if isinstance(stream_or_device, torch.device) \
            else get_device(stream_or_device)
        if not dev.is_cuda:
            raise RuntimeError(f"stream_to_torch: device {dev} is not a CUDA device")
        s = dev.stream
    ts = torch.cuda.ExternalStream(s.cuda_stream, device=f"cuda:{s.device.ordinal}")
    ts._tg_stream = s
    return ts


def __getattr__(name):
    if name == "torch_op":  # the op builder lives in its own module (imports torch.library)
        from .torch_op import torch_op
        globals()["torch_op"] = torch_op
        return torch_op
    raise AttributeError(f"module 'bridges.torch' has no attribute {name!r}")

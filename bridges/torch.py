"""PyTorch bridge: zero-copy tensors <-> arrays with gradients, devices, dtypes, streams.

Imported lazily (``tg.from_torch`` or a torch tensor met by ``launch``), so ``import
tapegrad`` never imports torch. The logic shared with the other bridges (layouts, component
dims, grad wiring, descriptors, dtype/device maps, stream handles) is in ``_base``; this
module holds what is torch's. Kernel -> native custom op: ``tapegrad.bridges.torch_op``
(``tg.torch_op``).
"""
from __future__ import annotations

import operator
import weakref

import numpy as np
import torch

from tapegrad import types
from tapegrad.device import Device, get_device
from tapegrad.storage import StorageCheck
from tapegrad.tensortypes import TensorLayout, TensorType, register_tensor_type

from . import torch_memory  # noqa: F401  registers the "torch" allocator and torch.cuda.graph's pool
from ._base import (
    Bridge,
    CudaView,
    DeviceMap,
    DtypeMap,
    FrameworkAdapter,
    release_after,
    unordered_handle,
    wait_for_handle,
)
from .torch_op import make_torch_op

__all__ = ["from_torch", "to_torch", "device_from_torch", "device_to_torch", "dtype_from_torch",
           "dtype_to_torch", "stream_from_torch", "stream_to_torch", "torch_op", "current_stream_handle", "DTYPES",
           "release_after"]


# --------------------------------------------------------------------------------- devices

def _parse_device(x):
    if isinstance(x, str):
        try:
            td = torch.device(x)
        except RuntimeError:
            raise RuntimeError(f"device_from_torch: unsupported torch device {x!r}") from None
    elif isinstance(x, torch.device):
        td = x
    else:
        raise TypeError(f"device_from_torch: expected a torch.device or a str, got {type(x).__name__}")
    return td.type, td.index, str(td)


def _current_cuda() -> int:
    if not torch.cuda.is_available():
        raise RuntimeError("device_from_torch: 'cuda' names torch's current CUDA device, but torch sees no CUDA device")
    return torch.cuda.current_device()


_DEVICES = DeviceMap("torch", _parse_device, _current_cuda, "cuda", (torch.device,))


def device_from_torch(torch_device) -> Device:
    """The tapegrad device of a torch device (``torch.device`` or a string).

    ``torch.device("cuda")`` and ``"cuda"`` (no index) mean torch's current CUDA device.

    Raises:
        TypeError: ``torch_device`` is neither a ``torch.device`` nor a string.
        RuntimeError: a device type tapegrad does not support (mps, meta...), or a CUDA
            device that does not exist here.
    """
    return _DEVICES.from_framework(torch_device)


def device_to_torch(device=None) -> str:
    """The torch device string (``"cpu"``, ``"cuda:N"``) of a tapegrad device (None: current).

    Raises:
        ValueError, RuntimeError: unknown device name / a CUDA device that does not exist.
    """
    return _DEVICES.to_framework(device)


# ---------------------------------------------------------------------------------- dtypes

DTYPES = DtypeMap("torch", torch)   # both maps, from the scalar table's torch_name column
_lookup = DTYPES.from_fw.get


# Warp's dtype_to_torch gives the signed twin of the same width for the wide unsigned types:
# torch's uint16/32/64 are "limited support" dtypes (most operators reject them), and Warp code
# relies on getting a tensor dtype it can compute with. The tensors to_torch/from_torch exchange
# keep the exact type (DTYPES below); only this public mapping follows Warp.
_SIGNED_TWIN = {types.uint16: types.int16, types.uint32: types.int32, types.uint64: types.int64}


def dtype_to_torch(dtype) -> torch.dtype:
    """The torch dtype of a tapegrad dtype (vector/matrix types: their component type).

    As in Warp, ``uint16/32/64`` map to the signed ``torch.int16/32/64`` of the same width
    (torch's own unsigned wide types support few operators); ``uint8`` stays ``torch.uint8``,
    ``bfloat16`` maps to ``torch.bfloat16``. ``to_torch`` and ``from_torch`` still exchange
    tensors of the exact type (``to_torch`` of a ``uint32`` array is a ``torch.uint32`` view).

    Raises:
        TypeError: struct dtypes, or a dtype torch does not have.
    """
    r = DTYPES.to_framework(dtype)
    twin = _SIGNED_TWIN.get(DTYPES.from_fw.get(r))
    return DTYPES.to_fw[twin] if twin is not None else r


def dtype_from_torch(torch_dtype) -> "tapegrad.ScalarType":  # noqa: F821
    """The tapegrad scalar type of a torch dtype (``torch.bfloat16`` -> ``tg.bfloat16``).

    ``from_torch(t, dtype=tg.uint16)`` (or ``int16``) still views a bfloat16 tensor's raw bits.

    Raises:
        TypeError: the dtype has no tapegrad equivalent (complex, float8...).
    """
    return DTYPES.from_framework(torch_dtype)


# --------------------------------------------------------------------------------- streams

# torch's C accessor of the current stream's raw handle (what torch.compile and Triton use):
# 0.16 us on an H200 against 3.0 us for torch.cuda.current_stream(n).cuda_stream, which builds a
# Stream object; every conversion and every tensor passed to launch on CUDA asks for it
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing


def current_stream_handle(ordinal: int) -> int:
    """The raw handle of torch's current CUDA stream on device ``ordinal``."""
    if _raw_stream is not None:
        return _raw_stream(ordinal)
    return torch.cuda.current_stream(ordinal).cuda_stream


def _release_handle(ordinal: int):
    # a graph capture forbids event queries: no stream-ordered release then (docs/graphs.md)
    return None if _capturing() else current_stream_handle(ordinal)


_TORCH_STREAMS = weakref.WeakKeyDictionary()  # tapegrad Stream -> torch ExternalStream
_CUDA_BASES = weakref.WeakKeyDictionary()  # CUDA array -> its torch tensor (to_torch aliases it)


def _torch_stream(s):
    ts = _TORCH_STREAMS.get(s)
    if ts is None:
        ts = _TORCH_STREAMS[s] = torch.cuda.ExternalStream(s.cuda_stream, device=f"cuda:{s.device.ordinal}")
    return ts


# ------------------------------------------------------------------ reading a tensor (the row)

def _layout_key(t):
    # get_device() (an int) and is_cpu say what t.device says (-1 and True: CPU; N: cuda:N;
    # -1 and False: meta and others, which never get a Layout) without building a
    # torch.device object per conversion
    return (t.dtype, t.shape, t.stride(), t.get_device(), t.is_cpu, t.__class__, t.is_neg())


_PLAIN_DISPATCH = torch.Tensor.__torch_dispatch__


def _layout(t):
    cls = t.__class__
    if cls.__torch_dispatch__ is not _PLAIN_DISPATCH:
        # a wrapper subclass (torch.compile's FakeTensor, FunctionalTensor, DTensor...): its
        # data_ptr() is no memory of its elements (a FakeTensor's is 0: a launch crashed)
        raise TypeError(f"a torch tensor of class {cls.__module__}.{cls.__qualname__} (a __torch_dispatch__ "
                        "subclass, e.g. torch.compile's fake tensors) has no memory tapegrad can use; pass a real "
                        "tensor, or call kernels inside torch.compile through tg.torch_op")
    if t.is_neg():
        # a lazily negated view (``z.conj().imag``): its memory holds the negated values
        raise TypeError("a torch tensor with the negative bit set (a lazily negated view, e.g. z.conj().imag) holds "
                        "its values negated in memory; pass t.resolve_neg() (a copy with the values)")
    tdt = t.dtype
    scalar = _lookup(tdt) or dtype_from_torch(tdt)   # the latter raises the explanatory TypeError
    return TensorLayout(scalar, tuple(t.shape), t.stride(), device_from_torch(t.device), str(tdt))


def _storage_check(t, ptr):
    # resize_ / set_ / storage resizing move or free t's data under a view: its bound
    # data_ptr (one C call per use) is compared with the view's address at every use
    return StorageCheck(t.data_ptr, ptr, "torch tensor")


_ORDINAL_DEVICES: dict = {}   # Tensor.get_device() (-1: CPU) -> tapegrad Device


def _tensor_device(t):
    # get_device() is an int from C (no torch.device object): a launch with tensors passed
    # directly asks it once per launch
    if t.is_cuda:
        k = t.get_device()
    elif t.is_cpu:
        k = -1
    else:           # meta, mps...: the generic probing (and its error)
        return None
    d = _ORDINAL_DEVICES.get(k)
    if d is None:
        d = _ORDINAL_DEVICES[k] = device_from_torch(t.device)
    return d


_ordered = [None, None, None]   # (device, tapegrad stream, torch stream handle) last found ordered


def _on_use(t, device):
    # tapegrad's work on its own stream reads t: tell torch's caching allocator, so that
    # freeing t does not let torch reuse the block before that stream has passed.
    # It runs per CUDA tensor of every conversion (return_ctype): the raw handle inline, and
    # the pair of streams last found ordered remembered (a stream's handle never changes)
    ordinal = device.ordinal
    h = _raw_stream(ordinal) if _raw_stream is not None else current_stream_handle(ordinal)
    d, ts, th = _ordered
    if d is device and th == h and ts is device.stream:
        return
    s, handle = unordered_handle(device, h)
    if handle is None:
        _ordered[:] = (device, s, h)
    else:
        t.record_stream(_torch_stream(s))


# torch.Tensor's one row (registered at the end of this module): launch (the Python packers and
# the native helper, which caches the descriptor per parameter under a layout key of the
# tensor's dtype, shape, strides and device read from C, and reads only data_ptr() per launch;
# torch's raw current stream says whether the stream rule's record_stream is needed, which the
# Python path then does), from_torch/to_torch and the tape's version checks all read it
TENSOR_TYPE = TensorType(
    framework="torch", classes=(torch.Tensor, torch.nn.Parameter), layout=_layout, layout_key=_layout_key,
    data_ptr=operator.methodcaller("data_ptr"), device=_tensor_device, on_use=_on_use,
    current_stream=_raw_stream or current_stream_handle,   # no Python frame on CUDA torch
    version=operator.attrgetter("_version"),   # torch's in-place counter (what autograd checks)
    requires_grad=operator.attrgetter("requires_grad"),
    storage_check=_storage_check,
    native_keys=(("dtype", False), ("shape", False), ("stride", True), ("device", False)), native_ptr="data_ptr")


# ------------------------------------------------------------------------------ the adapter

class TorchAdapter(FrameworkAdapter):
    # C-level accessor (no Python frame): it runs once per conversion
    requires_grad = operator.attrgetter("requires_grad")

    def get_grad(self, t):
        # a non-leaf's .grad is only populated with retain_grad() (reading it otherwise warns)
        return t.grad if (t.is_leaf or t.retains_grad) else None

    def alloc_grad(self, t):
        # torch's allocator, on torch's current stream; the tensor's own strides (kernels
        # address a gradient with its array's strides), 0-strides and gaps included
        g = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).zero_()
        t.grad = g
        if g.is_cuda:   # tapegrad's kernels run on tapegrad's stream: order them after the zero fill
            dev = device_from_torch(g.device)
            wait_for_handle(dev, current_stream_handle(dev.ordinal))
        return g

    @staticmethod
    def grad_linkable(t):
        return t.is_leaf or t.retains_grad

    def reinstall_grad(self, t, keep):
        keep.zero_()        # torch's stream; a gradient buffer never requires grad itself
        t.grad = keep
        if keep.is_cuda:    # tapegrad's adjoints run on tapegrad's stream: after the zero fill
            dev = device_from_torch(keep.device)
            wait_for_handle(dev, current_stream_handle(dev.ordinal))

    def wrap(self, a):
        if a.readonly:
            # torch tensors are always writable (torch.from_numpy only warns): a write through
            # the view would change memory that may be truly immutable (a read-only mmap: SIGSEGV)
            raise ValueError(f"to_torch: the array is read-only and torch tensors cannot be (got {a!r}); "
                             "clone it first")
        bf16 = a.dtype.scalar is types.bfloat16   # travels as its raw bits (numpy/CAI have no bfloat16)
        if a.device.ordinal < 0:   # CPU: the array's cached numpy view, shared by torch
            n = a.numpy()
            t = torch.from_numpy(n.view(np.uint16)).view(torch.bfloat16) if bf16 else torch.from_numpy(n)
            t._tg_array = a          # the view holds the memory's owner; this holds the array
            return t
        base = _CUDA_BASES.get(a)
        if base is None:
            # CAI v2 (no "stream"): no synchronisation, ordering is the caller's (see stream_from_torch)
            owner = a.memory_owner()
            base = torch.as_tensor(CudaView(a, _release_handle, owner), device=f"cuda:{a.device.ordinal}")
            if bf16:
                base = base.view(torch.bfloat16)
            if owner is None:   # the array itself frees the memory: the tensor must hold the array
                return base
            # the base's storage holds the memory owner, not the array: no cycle through the cache
            _CUDA_BASES[a] = base
        # a fresh alias of the cached base (same storage and version counter): 4-5 us less than
        # torch's CAI parsing per call; the base itself is never handed out, so no caller can
        # change its flags, grad or metadata
        return base.detach()

    def set_grad(self, t, g):
        t.requires_grad_(True)
        if g is not None:
            t.grad = g


_bridge = Bridge(TENSOR_TYPE, TorchAdapter(), DTYPES, _DEVICES, current_stream_handle)
torch_op = make_torch_op(_bridge)   # the op builder is its own module; it gets the bridge, not an import


# ----------------------------------------------------------------------------- conversions

# The public conversions are the bridge's hot-path closures, published under torch's names.
from_torch = Bridge.public(_bridge.from_tensor, "from_torch", """\
    Wrap a torch tensor as a tapegrad array without copying.

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
        retain_grad: write adjoints leave the gradient in place (``array.retain_grad``;
            ValueError when the array gets no gradient).
    Raises:
        TypeError: ``t`` is not a tensor; a dtype tapegrad lacks (complex, float8...);
            ``requires_grad`` on a non-float tensor.
        BridgeTypeError: (a TypeError and a RuntimeError) ``dtype`` cannot view ``t``'s elements.
        RuntimeError: trailing dims do not match or are not contiguous (vector/matrix dtypes);
            more than 4 dims.
        GradLayoutError: (a ValueError and a RuntimeError) the gradient (``grad``, or an
            existing ``t.grad``) differs from ``t`` in dtype, shape, strides or device.
    """, __name__)

to_torch = Bridge.public(_bridge.to_tensor, "to_torch", """\
    A torch tensor aliasing tapegrad array ``a`` (vector/matrix dims appended), no copy.

    The tensor keeps ``a`` alive. With ``requires_grad`` (default: ``a.requires_grad``) it is
    a leaf requiring grad whose ``.grad`` is a zero-copy view of ``a.grad`` (clone it before
    ``tape.zero()`` if torch must keep the values).

    Raises:
        TypeError: not an array; ``requires_grad`` on a non-float array.
        BridgeTypeError: struct arrays (no torch equivalent).
        ValueError: an array without memory, or a read-only one (torch tensors are always
            writable: clone it first).
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
        dev = _torch_device_arg(stream_or_device, "stream_from_torch")
        if not torch.cuda.is_available():   # torch's own answer is an AssertionError
            raise RuntimeError("stream_from_torch: torch sees no CUDA device (streams are CUDA's)")
        ts = torch.cuda.current_stream(dev)
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


# ---------------------------------------------------------------------------- registration
# torch's one registration: launch, the conversions above and the tape read this row
register_tensor_type(TENSOR_TYPE)

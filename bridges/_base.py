"""What every framework bridge shares: layouts, vector/matrix component dims, grad wiring,
fast descriptors and stream-ordered keep-alive.

A bridge (``bridges.torch``, ``bridges.paddle``...) supplies a small *framework adapter* (see
``FrameworkAdapter``) saying how to read a tensor's layout, pointer and gradient, and how to
make a tensor that aliases tapegrad memory. ``Bridge`` turns that into ``from_X`` / ``to_X`` /
the launch adapter, so the framework modules hold only what differs between frameworks.

Caches here never key on pointers (SPEC R19): a ``Layout`` is keyed by the tensor's dtype,
shape, element strides and device, holds no address, and is therefore valid for any tensor
with that metadata; the data and gradient pointers are read from the tensor on every call.
"""
from __future__ import annotations

import atexit
import threading

from tapegrad import types as T
from tapegrad.array import _fold_inner_dims, array
from tapegrad.launch import ArrayCtype

__all__ = ["BridgeTypeError", "GradLayoutError", "FrameworkAdapter", "Layout", "Bridge", "check_compatible",
           "release_after"]

_LAYOUT_CACHE_MAX = 4096


class BridgeTypeError(TypeError, RuntimeError):
    """A dtype the other side cannot represent or reinterpret.

    A ``TypeError`` (tapegrad's policy for type problems) that is also a ``RuntimeError``, so
    code written for Warp (which raises RuntimeError here) keeps working.
    """


class GradLayoutError(ValueError, RuntimeError):
    """A gradient whose dtype, shape, strides or device differ from its array's.

    Kernels address a gradient with its array's strides, so they must be equal. A
    ``ValueError`` (tapegrad's policy, and Warp's for arrays) that is also a ``RuntimeError``
    (Warp's for ``return_ctype`` descriptors).
    """


def check_compatible(src: T.ScalarType, dst: T.ScalarType, src_name: str, fname: str) -> None:
    """Raise unless a tensor of scalar type ``src`` may be viewed as ``dst`` (no conversion).

    The rule is DLPack's (``tapegrad.dlpack``), so every import path agrees: the same type, or
    integer/bool types of one width (int32 as uint32, bool as uint8...).
    """
    if not T.can_alias(dst, src):
        raise BridgeTypeError(f"{fname}: cannot view a tensor of {src_name} as tapegrad {dst!r} "
                              f"(zero-copy views need the same element type, or an integer/bool type of "
                              f"the same width; cast the tensor first)")


class Layout:
    """How a tensor's memory reads as a tapegrad array: dtype, shape, byte strides, device.

    Holds no pointer, so one Layout serves every tensor with the same metadata. The layout is
    checked once, when the Layout is built (through the ``array`` constructor); ``new_array``
    then uses ``array._wrap`` (no re-checking) and ``new_ctype`` copies a descriptor template,
    which makes conversions a dict lookup plus a few attribute stores.
    """

    __slots__ = ("dtype", "shape", "strides", "device", "cuda", "_tmpl")

    def __init__(self, dtype, shape, strides, device):
        proto = array(ptr=0, dtype=dtype, shape=shape, strides=strides, device=device)   # checks
        self.dtype, self.shape, self.strides, self.device = dtype, proto.shape, proto.strides, device
        self.cuda = device.is_cuda
        self._tmpl = bytes(proto.descriptor())

    @classmethod
    def build(cls, scalar, shape, elem_strides, device, dtype, fname, src_name):
        """Layout of a tensor of ``scalar`` elements viewed as ``dtype`` (None: ``scalar``).

        Scalar dtypes keep shape and strides (0-strides included); vector/matrix dtypes
        consume trailing, contiguous component dims (SPEC R11).

        Raises:
            TypeError: ``dtype`` is not a tapegrad dtype, or is a struct.
            BridgeTypeError: element types are incompatible.
            RuntimeError: component dims missing, mismatched or not contiguous; > 4 dims.
        """
        size = scalar.size
        shape = tuple(shape)
        strides = tuple(s * size for s in elem_strides)
        if dtype is None:
            dt = scalar
        else:
            dt = T.resolve_dtype(dtype, arg=f"{fname}(dtype=...)")
            if isinstance(dt, T.StructType):
                raise BridgeTypeError(f"{fname}: struct dtype {dt.name} cannot view a tensor")
            check_compatible(scalar, dt.scalar, src_name, fname)
        if not shape:                              # 0-d tensor: one element
            shape, strides = (1,), (size,)
        if dt.inner_shape and shape == dt.inner_shape:
            shape, strides = (1,) + shape, (dt.size,) + strides  # exactly one vector/matrix
        dt, shape, strides = _fold_inner_dims(dt.scalar, dt, shape, strides, f"{fname}: tensor of shape {shape}")
        return cls(dt, shape, strides, device)

    def new_array(self, ptr: int, owner) -> array:
        """A tapegrad array of this layout at ``ptr``, keeping ``owner`` alive."""
        return array._wrap(ptr, self.dtype, self.shape, self.strides, self.device, owner)

    def new_ctype(self, ptr: int, grad_ptr: int, refs) -> ArrayCtype:
        """A launchable descriptor of this layout; ``refs`` stay alive as long as it does."""
        d = ArrayCtype.from_buffer_copy(self._tmpl)   # flags (read-only: no) come from the template
        d.data = ptr
        if grad_ptr:
            d.grad = grad_ptr
        d.tg_dtype, d.tg_device, d.tg_refs = self.dtype, self.device, refs   # as ArrayCtype.bind
        return d


class FrameworkAdapter:
    """The framework-specific half of a bridge (subclass it; methods are duck-typed).

    Attributes:
        name: "torch", "paddle"...; used in messages as ``from_<name>``/``to_<name>``.
        tensor_types: tuple of the framework's tensor classes.
    """

    name = "framework"
    tensor_types: tuple = ()

    def layout_key(self, t):
        """A hashable of everything that determines the layout (dtype, shape, strides, device)."""
        raise NotImplementedError

    def describe(self, t, dtype):
        """``(scalar ScalarType, shape, element strides, tapegrad Device, dtype name)`` of ``t``.

        ``dtype`` is the tapegrad dtype asked for (None when inferred), so that raw-bit views
        (bfloat16 as uint16) can be allowed only when asked for.
        """
        raise NotImplementedError

    def data_ptr(self, t) -> int:
        """The tensor's data address (may be a class attribute such as ``operator.methodcaller``)."""
        raise NotImplementedError

    def requires_grad(self, t) -> bool:
        """Whether the framework tracks gradients for ``t`` (may be an ``operator.attrgetter``)."""
        raise NotImplementedError

    def get_grad(self, t):
        """The tensor's existing gradient tensor, or None (must not allocate)."""
        raise NotImplementedError

    def alloc_grad(self, t):
        """Allocate a zero gradient *with the framework's allocator*, install it as ``t``'s
        gradient and return it (B3: no foreign allocation, no device-wide sync)."""
        raise NotImplementedError

    def wrap(self, a: array):
        """A framework tensor aliasing ``a`` (a scalar layout: vector/matrix component dims
        appended, as ``a.numpy()`` and ``a._flat_layout()`` give it), keeping ``a`` alive for
        as long as the tensor lives. ``a`` has memory and is not a struct array."""
        raise NotImplementedError

    def set_grad(self, t, g) -> None:
        """Make ``t`` a leaf that requires grad; attach ``g`` (a tensor, or None) as its grad."""
        raise NotImplementedError

    def on_use(self, t, device) -> None:
        """Called when ``t`` is handed to tapegrad work on ``device`` (CUDA: stream bookkeeping)."""


class Bridge:
    """``from_X``/``to_X``/launch-adapter logic over a ``FrameworkAdapter``.

    ``from_tensor``, ``to_tensor`` and ``launch_adapter`` are closures built once with every
    lookup bound locally: they are the per-call hot paths (one Python frame per conversion).
    A framework module publishes them under its own names with ``public(...)``.
    """

    def __init__(self, fw: FrameworkAdapter):
        self.fw = fw
        self.from_name = f"from_{fw.name}"
        self.to_name = f"to_{fw.name}"
        self._layouts: dict = {}
        self.from_tensor = self._make_from()
        self.to_tensor = self._make_to()
        self.launch_adapter = self._make_launch_adapter()

    @staticmethod
    def public(fn, name, doc, module):
        """``fn`` under a public name, docstring and module (it is the hot-path closure itself)."""
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = doc
        fn.__module__ = module
        return fn

    # ------------------------------------------------------------------------- layouts
    def layout(self, t, dtype=None, fname=None) -> Layout:
        """The (cached) Layout of tensor ``t`` viewed as ``dtype``."""
        key = (self.fw.layout_key(t), dtype)
        lay = self._layouts.get(key)
        if lay is None:
            scalar, shape, elem_strides, device, src_name = self.fw.describe(t, dtype)
            lay = Layout.build(scalar, shape, elem_strides, device, dtype, fname or self.from_name, src_name)
            if len(self._layouts) >= _LAYOUT_CACHE_MAX:
                self._layouts.clear()
            self._layouts[key] = lay
        return lay

    # ----------------------------------------------------------------------- from_X
    def _make_from(self):
        fw, fname = self.fw, self.from_name
        tensor_types, key_of, requires_grad_of, ptr_of = fw.tensor_types, fw.layout_key, fw.requires_grad, fw.data_ptr
        cached, layout, grad_array = self._layouts.get, self.layout, self._grad_array

        def from_tensor(t, dtype=None, requires_grad=None, grad=None, return_ctype=False):
            """Wrap tensor ``t`` as a tapegrad array (or a launchable descriptor), zero-copy.

            Gradient (SPEC R10, R12, B3): ``grad`` (a tapegrad array or a tensor) is used as
            the array's gradient when given; else, when ``requires_grad`` (default: the
            tensor's own flag), the tensor's gradient is shared, allocated first by the
            framework when missing.
            """
            if not isinstance(t, tensor_types):
                raise TypeError(f"{fname}: expected a {fw.name} tensor, got {type(t).__name__}")
            lay = cached((key_of(t), dtype)) or layout(t, dtype)
            if grad is None and (requires_grad_of(t) if requires_grad is None else requires_grad):
                if not lay.dtype.scalar.is_float:
                    raise TypeError(f"{fname}: requires_grad=True needs a floating-point tensor, "
                                    f"got elements of {lay.dtype!r} (pass requires_grad=False)")
                grad = fw.get_grad(t)
                if grad is None:
                    grad = fw.alloc_grad(t)
            if lay.cuda:
                fw.on_use(t, lay.device)
            if return_ctype:
                if grad is None:
                    return lay.new_ctype(ptr_of(t), 0, (t,))
                return lay.new_ctype(ptr_of(t), grad_array(grad, lay).ptr, (t, grad))
            a = lay.new_array(ptr_of(t), t)
            if grad is not None:
                a.grad = grad_array(grad, lay)
            return a

        return from_tensor

    def _grad_array(self, grad, lay) -> array:
        """``grad`` (an array or a tensor) as an array with exactly the layout ``lay``."""
        fw = self.fw
        if isinstance(grad, fw.tensor_types):
            grad = self.from_tensor(grad, dtype=lay.dtype, requires_grad=False)
        elif not isinstance(grad, array):
            raise TypeError(f"{self.from_name}(grad=...): expected a tapegrad array or a {fw.name} tensor, "
                            f"got {type(grad).__name__}")
        have = (grad.dtype, grad.shape, grad.strides, grad.device)
        want = (lay.dtype, lay.shape, lay.strides, lay.device)
        if have != want:
            raise GradLayoutError(f"{self.from_name}: the gradient must have its array's dtype, shape, byte strides "
                                  f"and device {want}, got {have} (kernels address a gradient with its array's "
                                  "strides)")
        return grad

    def _make_launch_adapter(self):
        fw = self.fw
        key_of, ptr_of, cached, layout = fw.layout_key, fw.data_ptr, self._layouts.get, self.layout

        def launch_adapter(t, device, arg, dtype) -> ArrayCtype:
            """``launch`` calls this for a tensor passed directly: a descriptor, no gradient (R1)."""
            lay = cached((key_of(t), dtype)) or layout(t, dtype, fname=arg)
            if lay.cuda:
                fw.on_use(t, lay.device)
            return lay.new_ctype(ptr_of(t), 0, (t,))

        return launch_adapter

    # ------------------------------------------------------------------------- to_X
    def _make_to(self):
        fw, fname, wrap, check = self.fw, self.to_name, self.fw.wrap, self._check_wrappable

        def to_tensor(a, requires_grad=None):
            """A framework tensor aliasing tapegrad array ``a`` (and ``a.grad`` as its gradient).

            With ``requires_grad`` (default: ``a.requires_grad``) the tensor is a leaf that
            requires grad, and its gradient is a zero-copy view of ``a.grad`` when ``a`` has one.
            """
            if not isinstance(a, array):
                raise TypeError(f"{fname}: expected a tapegrad array, got {type(a).__name__}")
            if not a._ptr or a.dtype.__class__ is T.StructType:
                check(a)
            t = wrap(a)
            if a._requires_grad if requires_grad is None else requires_grad:
                if not a.dtype.scalar.is_float:
                    raise TypeError(f"{fname}(requires_grad=True): arrays of {a.dtype!r} cannot carry gradients")
                g = a.grad
                fw.set_grad(t, wrap(g) if g is not None else None)
            return t

        return to_tensor

    def _check_wrappable(self, a):
        if isinstance(a.dtype, T.StructType):
            raise BridgeTypeError(f"{self.to_name}: struct arrays ({a.dtype.name}) have no {self.fw.name} equivalent")
        if a.device is None or (not a._ptr and a.size):
            raise ValueError(f"{self.to_name}: the array has no memory (an annotation-only array)")


# ------------------------------------------------------------------------ keep-alive on streams

_pending: list = []          # [(event, objects)], oldest first
_pending_lock = threading.Lock()
atexit.register(_pending.clear)   # release before the CUDA runtime is torn down (clean exit, B8)


def release_after(stream, *objs) -> None:
    """Keep ``objs`` alive until the work submitted so far to ``stream`` has run.

    Use it for temporaries (arrays, tensors) that work queued on a *non-blocking* stream still
    reads after Python drops them: without it their memory could be handed out again while
    the stream is behind. No host synchronisation: an event is recorded on ``stream`` and
    the objects are released by a later call once the event has completed.

    Args:
        stream: a tapegrad ``Stream`` (None or a CPU stream: nothing to wait for).
    """
    if stream is None or not objs:
        return
    ev = stream.record_event()
    with _pending_lock:
        _purge()
        _pending.append((ev, objs))


def _purge():
    """Drop the batches whose events have completed (oldest first; stop at the first pending)."""
    try:
        while _pending and _pending[0][0].is_complete:
            _pending.pop(0)
    except Exception:  # an event query refused (e.g. during a global-mode capture): try later
        pass


def pending_releases() -> int:
    """Number of keep-alive batches not yet released (for tests and diagnostics)."""
    with _pending_lock:
        _purge()
        return len(_pending)

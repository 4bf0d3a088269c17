"""What every framework bridge shares: layouts, vector/matrix component dims, grad wiring,
fast descriptors and stream-ordered keep-alive.

A bridge (``tapegrad.bridges.torch``, ``.paddle``, ``.jax``) describes each tensor type once,
as a ``tapegrad.tensortypes.TensorType`` row (layout, pointer, device, stream rule, version;
registered in one block at the end of the bridge module), plus a small *framework adapter*
(see ``FrameworkAdapter``) for what only conversions need: the framework's gradients and how to
make a tensor that aliases tapegrad memory. ``Bridge`` turns the two into ``from_X`` / ``to_X``,
so the framework modules hold only what differs between frameworks. The other
framework-neutral pieces a bridge builds on:

- ``DtypeMap(framework, module)``: the two dtype maps, derived once from the scalar table's
  ``<framework>_name`` column (``tapegrad.types``), with Warp-style errors.
- ``DeviceMap(framework, parse, ...)``: ``device_from_X``/``device_to_X`` around a parser of
  the framework's device objects.
- ``wrap_stream_handle``/``unordered_handle``: tapegrad streams for a framework's raw CUDA
  stream handles, and whether CUDA already orders the two sides.
- ``CudaView``: a ``__cuda_array_interface__`` owner of an array's CUDA memory whose release
  is ordered after the framework's stream (``release_after``).

Caches here never key on pointers (SPEC R19): a ``Layout`` is keyed by the tensor's dtype,
shape, element strides and device, holds no address, and is therefore valid for any tensor
with that metadata; the data and gradient pointers are read from the tensor on every call.
"""
from __future__ import annotations

import atexit
import sys
import threading
import weakref

from tapegrad import types
from tapegrad.array import array
from tapegrad.device import Device, get_device
from tapegrad.errors import (  # re-exported: every error lives in tapegrad.errors
    ArgnamesError,
    BridgeTypeError,
    GradLayoutError,
)
from tapegrad.tensortypes import Layout, TensorType, check_compatible, layout_cache, layout_of

__all__ = ["BridgeTypeError", "GradLayoutError", "FrameworkAdapter", "TensorLink", "GradLink", "ViewLink", "AliasLink",
           "Layout", "Bridge", "check_compatible",
           "DtypeMap", "DeviceMap", "wrap_stream_handle", "unordered_handle", "wait_for_handle", "cai_typestr",
           "CudaView", "release_after", "pending_releases"]

class FrameworkAdapter:
    """The conversions' framework-specific half of a bridge (subclass it; methods are
    duck-typed): gradients and tensors over tapegrad memory. How a tensor is read (layout,
    pointer, device, stream rule, version) is its ``TensorType`` row's."""

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
        appended, as ``a.numpy()`` and ``a.flat_layout()`` give it), keeping ``a`` alive for
        as long as the tensor lives. ``a`` has memory and is not a struct array."""
        raise NotImplementedError

    def set_grad(self, t, g) -> None:
        """Make ``t`` a leaf that requires grad; attach ``g`` (a tensor, or None) as its grad."""
        raise NotImplementedError

    # gradient links (``GradLink``)
    def grad_linkable(self, t) -> bool:
        """Whether ``t``'s ``.grad`` is where the framework accumulates its gradient (a leaf)."""
        raise NotImplementedError

    def keep_grad(self, g):
        """The tensor a gradient array holds for gradient tensor ``g``: ``g`` itself, or an
        alias of its memory that the framework's resets cannot free (paddle)."""
        return g

    def is_grad(self, cur, keep) -> bool:
        """Whether ``cur`` (a tensor's current ``.grad``, or None) is the buffer ``keep``."""
        return cur is keep

    def reinstall_grad(self, t, keep) -> None:
        """Zero ``keep`` and install it as ``t``'s gradient again (the framework dropped it),
        ordered before tapegrad's later work on its stream."""
        raise NotImplementedError


class TensorLink:
    """The link of an array made by ``from_X`` to the tensor it views (``array._link``): the
    tensor's in-place version, which ``Tape.backward`` checks unchanged since the records that
    used the array. Shared by every such array of one framework (no per-conversion object)."""

    __slots__ = ("fw", "framework", "row")

    def __init__(self, fw: FrameworkAdapter, row: TensorType):
        self.fw, self.framework, self.row = fw, row.framework, row

    def sync_grad(self, a) -> None:
        """Nothing: the array's gradient is its own."""

    def version(self, a) -> int:
        """The in-place version of the tensor ``a`` views (``a`` holds it as its owner)."""
        return self.version_of(a._owner)

    def version_of(self, t) -> int:
        """The row's in-place version of tensor ``t`` (0 for a row without a ``version``)."""
        v = self.row.version
        return v(t) if v is not None else 0

    def view_of(self, base) -> "ViewLink":
        """The link of a view of ``base`` (an array this link belongs to)."""
        return ViewLink(base, self.framework)


class ViewLink:
    """The link of a view (slice, transpose, reshape...) of an array made by ``from_X``: the
    base's tensor version, and a gradient that stays the matching view of the base's gradient
    when the base follows a gradient the framework replaced (``GradLink``)."""

    __slots__ = ("base", "framework", "bgrad")

    def __init__(self, base, framework):
        self.base, self.framework, self.bgrad = base, framework, base._grad

    def version(self, v) -> int:
        return self.base._link.version(self.base)

    def view_of(self, base) -> "ViewLink":
        return ViewLink(base, self.framework)

    def sync_grad(self, v) -> None:
        base = self.base
        bg = base.grad                  # the base re-reads its tensor's gradient
        old = self.bgrad
        if bg is old:
            return
        self.bgrad = bg
        g = v._grad
        off = v._ptr - base._ptr
        # only a gradient derived from the base's (same offset: gradients share their array's
        # strides) is moved; one set on the view itself stays
        if g is None or old is None or bg is None or g._ptr - old._ptr != off:
            return
        v.grad = array.wrap_memory(bg._ptr + off, v.dtype, v._shape, v._strides, v.device, bg)


class AliasLink:
    """The link of a tapegrad array to the tensor ``to_X`` made of it, whose ``.grad`` is a view
    of the array's gradient: when the framework drops that gradient (``zero_grad()``), a fresh
    view of the array's gradient is zeroed and installed again; when it replaces it (its own
    backward after ``zero_grad()``), the array's gradient becomes the new one (zero-copy), so the
    tape and the framework's optimizer keep using one buffer. The tensor is held weakly (it
    holds the array), and no tensor made over tapegrad memory is held at all: the framework
    may release the array from inside its own deleters (paddle's deleter lock is not
    re-entrant). The array is tapegrad's, so its values carry no version check (as for any
    tapegrad array)."""

    __slots__ = ("fw", "framework", "ref", "garr", "bridge")

    def __init__(self, bridge: "Bridge", t, garr):
        self.fw, self.framework, self.bridge = bridge.fw, bridge.row.framework, bridge
        self.ref, self.garr = weakref.ref(t), garr

    def version(self, a) -> int:
        return 0

    def view_of(self, base) -> "ViewLink":
        return ViewLink(base, self.framework)

    def sync_grad(self, a) -> None:
        t = self.ref()
        garr = self.garr
        if t is None or a._grad is not garr:     # the tensor is gone, or a.grad was set on tapegrad's side
            a.__dict__["_link"] = None
            return
        cur = t.grad
        fw = self.fw
        if cur is None:
            fw.reinstall_grad(t, fw.wrap(garr))
            return
        if self.bridge.row.data_ptr(cur) == garr._ptr:
            return
        g = self.bridge.from_tensor(fw.keep_grad(cur), dtype=a.dtype, requires_grad=False)
        if (g.dtype, g.shape, g.strides, g.device) != (a.dtype, a.shape, a.strides, a.device):
            raise GradLayoutError(f"the {self.framework} tensor's .grad was replaced by a tensor the array cannot "
                                  f"share: {(g.dtype, g.shape, g.strides, g.device)} instead of the array's "
                                  f"{(a.dtype, a.shape, a.strides, a.device)}")
        a.grad = self.garr = g


class GradLink(TensorLink):
    """The link of an array whose gradient is its tensor's ``.grad``: ``array.grad`` (and the
    tape, before ``backward`` and ``zero``) asks ``sync_grad``, which keeps the array on the
    tensor's current gradient through the framework's own habits.

    - The framework dropped the gradient (torch's ``zero_grad()``, ``set_to_none=True`` by
      default; paddle's ``clear_grad(set_to_zero=False)``): the shared buffer is zeroed and
      installed again (a dropped gradient means zeros), so the tape's adjoints reach ``.grad``.
    - It replaced the gradient (``t.grad = g``, or the framework's autograd allocated a new
      one): the array follows it (zero-copy again; a layout the kernels cannot address is a
      ``GradLayoutError``).
    - The array's own gradient was set on tapegrad's side (``a.grad = ...``): that wins, and
      the link keeps only the version check.
    """

    __slots__ = ("tensor", "keep", "garr", "lay", "grad_array", "plain")

    def __init__(self, bridge: "Bridge", t, garr, lay):
        plain = bridge.tensor_link     # one per conversion with a gradient: no super() call
        self.fw, self.framework, self.plain, self.grad_array = plain.fw, plain.framework, plain, bridge.grad_array
        self.tensor, self.keep, self.garr, self.lay = t, garr._owner, garr, lay

    def sync_grad(self, a) -> None:
        if a._grad is not self.garr:
            a.__dict__["_link"] = self.plain     # set on tapegrad's side: no longer the tensor's
            return
        t = self.tensor
        cur = t.grad
        if cur is self.keep:            # torch: the tensor itself while it stays installed
            return
        fw = self.fw
        if fw.is_grad(cur, self.keep):
            return
        if cur is None:
            fw.reinstall_grad(t, self.keep)
            return
        try:
            g = self.grad_array(cur, self.lay)
        except GradLayoutError as e:
            raise GradLayoutError(f"the {self.framework} tensor's .grad was replaced by a tensor the array cannot "
                                  f"share: {e}; give it a gradient laid out as the tensor (empty_like)") from None
        a.grad = g
        self.garr, self.keep = g, g._owner

    def version(self, a) -> int:
        return self.plain.version_of(self.tensor)


class Bridge:
    """``from_X``/``to_X`` logic over a tensor type's row and a ``FrameworkAdapter``, and the
    bundle of what a framework's other modules (its op builder) need: ``row`` (the
    ``TensorType``), ``dtypes`` (a ``DtypeMap``), ``devices`` (a ``DeviceMap``),
    ``stream_handle(ordinal)`` and ``layout``.

    ``from_tensor`` and ``to_tensor`` are closures built once with every lookup bound locally:
    they are the per-call hot paths (one Python frame per conversion). A framework module
    publishes them under its own names with ``public(...)``. The launch path reads the row
    itself (``tapegrad.tensortypes``); both share the row's layout cache.
    """

    def __init__(self, row: TensorType, fw: FrameworkAdapter, dtypes: "DtypeMap" = None,
                 devices: "DeviceMap" = None, stream_handle=None):
        self.row, self.fw = row, fw
        self.dtypes, self.devices = dtypes, devices
        # f(ordinal) -> raw handle of the framework's current CUDA stream (None: no CUDA streams)
        self.stream_handle = stream_handle
        self.from_name = f"from_{row.framework}"
        self.to_name = f"to_{row.framework}"
        self.tensor_link = TensorLink(fw, row)
        self.grad_array = self._grad_array
        self.from_tensor = self._make_from()
        self.to_tensor = self._make_to()

    @staticmethod
    def public(fn, name, doc, module):
        """``fn`` under a public name, docstring and module (it is the hot-path closure itself)."""
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = doc
        fn.__module__ = module
        return fn

    # ------------------------------------------------------------------------- layouts
    def layout(self, t, dtype=None, fname=None) -> Layout:
        """The (cached) Layout of tensor ``t`` viewed as ``dtype`` (``tensortypes.layout_of``)."""
        return layout_of(self.row, t, dtype, fname or self.from_name)

    # ----------------------------------------------------------------------- from_X
    def _make_from(self):
        fw, fname, row = self.fw, self.from_name, self.row
        tensor_types, key_of, requires_grad_of, ptr_of = row.classes, row.layout_key, fw.requires_grad, row.data_ptr
        cached, layout, grad_array = layout_cache(row).get, self.layout, self._grad_array
        plain, linkable, bridge = self.tensor_link, fw.grad_linkable, self
        check_of, on_use = row.storage_check, row.on_use

        def from_tensor(t, dtype=None, requires_grad=None, grad=None, return_ctype=False, retain_grad=False):
            """Wrap tensor ``t`` as a tapegrad array (or a launchable descriptor), zero-copy.

            Gradient (SPEC R10, R12, B3): ``grad`` (a tapegrad array or a tensor) is used as
            the array's gradient when given; else, when ``requires_grad`` (default: the
            tensor's own flag), the tensor's gradient is shared, allocated first by the
            framework when missing. ``retain_grad``: write adjoints leave that gradient in place
            (``array.retain_grad``; also on ``return_ctype`` descriptors, which Warp drops).
            """
            if not isinstance(t, tensor_types):
                raise TypeError(f"{fname}: expected a {row.framework} tensor, got {type(t).__name__}")
            lay = cached((key_of(t), dtype)) or layout(t, dtype)
            shared = False                  # the gradient is the tensor's own .grad
            if grad is not None and not lay.dtype.scalar.is_float:
                raise TypeError(f"{fname}(grad=...): arrays of {lay.dtype!r} cannot carry gradients (only floating-"
                                "point ones do)")
            if grad is None and (requires_grad_of(t) if requires_grad is None else requires_grad):
                if not lay.dtype.scalar.is_float:
                    raise TypeError(f"{fname}: requires_grad=True needs a floating-point tensor, "
                                    f"got elements of {lay.dtype!r} (pass requires_grad=False)")
                grad = fw.get_grad(t)
                if grad is None:
                    grad = fw.alloc_grad(t)
                shared = True
            if lay.cuda and on_use is not None:
                on_use(t, lay.device)
            if retain_grad and grad is None:
                raise ValueError(f"{fname}(retain_grad=True): the array gets no gradient; pass requires_grad=True "
                                 "(or grad=...) too")
            if return_ctype:
                if grad is None:
                    return lay.new_ctype(ptr_of(t), 0, (t,))
                ga = grad_array(grad, lay)
                c = lay.new_ctype(ptr_of(t), ga.ptr, (t, ga._owner))
                if retain_grad:
                    c.flags |= types.ARRAY_FLAG_RETAIN_GRAD
                return c
            a = lay.new_array(ptr_of(t), t)
            if check_of is not None:   # refuse the view once the framework moves or frees its storage
                a._storage_check = check_of(t, a.ptr)
            if grad is None:
                a._link = plain
                return a
            a.grad = ga = grad_array(grad, lay)
            a._link = GradLink(bridge, t, ga, lay) if shared and linkable(t) else plain
            if retain_grad:
                a.retain_grad = True
            return a

        return from_tensor

    def _grad_array(self, grad, lay) -> array:
        """``grad`` (an array or a tensor) as an array with exactly the layout ``lay``."""
        fw = self.fw
        if isinstance(grad, self.row.classes):
            grad = self.from_tensor(fw.keep_grad(grad), dtype=lay.dtype, requires_grad=False)
        elif not isinstance(grad, array):
            raise TypeError(f"{self.from_name}(grad=...): expected a tapegrad array or a {self.row.framework} tensor, "
                            f"got {type(grad).__name__}")
        have = (grad.dtype, grad.shape, grad.strides, grad.device)
        want = (lay.dtype, lay.shape, lay.strides, lay.device)
        if have != want:
            raise GradLayoutError(f"{self.from_name}: the gradient must have its array's dtype, shape, byte strides "
                                  f"and device {want}, got {have} (kernels address a gradient with its array's "
                                  "strides)")
        return grad

    # ------------------------------------------------------------------------- to_X
    def _make_to(self):
        fw, fname, wrap, check, bridge = self.fw, self.to_name, self.fw.wrap, self._check_wrappable, self

        def to_tensor(a, requires_grad=None):
            """A framework tensor aliasing tapegrad array ``a`` (and ``a.grad`` as its gradient).

            With ``requires_grad`` (default: ``a.requires_grad``) the tensor is a leaf that
            requires grad, and its gradient is a zero-copy view of ``a.grad`` when ``a`` has one.
            """
            if not isinstance(a, array):
                raise TypeError(f"{fname}: expected a tapegrad array, got {type(a).__name__}")
            if not a._ptr or a.dtype.__class__ is types.StructType:
                check(a)
            t = wrap(a)
            # an integer array's requires_grad flag (Warp's; it keeps no gradient) shares nothing
            if (a._requires_grad and a._grad is not None) if requires_grad is None else requires_grad:
                if not a.dtype.scalar.is_float:
                    raise TypeError(f"{fname}(requires_grad=True): arrays of {a.dtype!r} cannot carry gradients")
                g = a.grad
                gt = wrap(g) if g is not None else None
                fw.set_grad(t, gt)
                link = a._link
                if gt is not None and (link is None or (link.__class__ is AliasLink and link.ref() is None)):
                    a._link = AliasLink(bridge, t, g)   # the first live tensor made of a: its .grad is a.grad
            return t

        return to_tensor

    def _check_wrappable(self, a):
        if isinstance(a.dtype, types.StructType):
            raise BridgeTypeError(f"{self.to_name}: struct arrays ({a.dtype.name}) have no {self.row.framework} "
                                  "equivalent")
        if a.device is None or (not a._ptr and a.size):
            raise ValueError(f"{self.to_name}: the array has no memory (an annotation-only array)")


# ------------------------------------------------------------------------------- dtype maps

class DtypeMap:
    """A framework's two dtype maps, derived once from one column of the scalar table.

    The column is ``<framework>_name`` of ``tapegrad.types.ScalarType`` (``torch_name``,
    ``paddle_name``, ``jax_name``): the attribute of ``module`` naming that type. Rows whose
    name is None, or which ``module`` lacks, have no mapping.

    Args:
        framework: "torch", "paddle", "jax"...; used in messages (``dtype_to_<framework>``).
        module: where the framework's dtype objects live (``torch``, ``paddle``, ``jax.numpy``).
        column: the table column to read (default ``"<framework>_name"``).
        normalize: optional ``f(x) -> key`` applied to a foreign dtype whose direct lookup
            missed (JAX: ``numpy.dtype``), returning None when ``x`` is no dtype at all.

    Attributes:
        to_fw: ``{ScalarType: framework dtype}``.
        from_fw: ``{framework dtype (and normalised key): ScalarType}``.
    """

    __slots__ = ("framework", "to_fw", "from_fw", "_normalize", "_to_cache")

    def __init__(self, framework: str, module, column: str | None = None, normalize=None):
        self.framework = framework
        self._normalize = normalize
        column = column or f"{framework}_name"
        self.to_fw: dict = {}
        self.from_fw: dict = {}
        for s in types.SCALARS.values():
            name = getattr(s, column)
            fd = getattr(module, name, None) if name is not None else None
            if fd is None:
                continue
            self.to_fw[s] = fd
            self.from_fw.setdefault(fd, s)
            if normalize is not None:
                key = normalize(fd)
                if key is not None:
                    self.from_fw.setdefault(key, s)
        self._to_cache: dict = dict(self.to_fw)   # any hashable dtype-like the user passed -> result

    def to_framework(self, dtype):
        """The framework dtype of a tapegrad dtype (vector/matrix types: their component type).

        Raises:
            TypeError: not a tapegrad dtype; a struct; a type the framework does not have.
        """
        try:
            r = self._to_cache.get(dtype)
        except TypeError:       # unhashable input: resolve_dtype says what is wrong
            r = None
        if r is not None:
            return r
        fname = f"dtype_to_{self.framework}"
        t = types.resolve_dtype(dtype, arg=fname)
        if isinstance(t, types.StructType):
            raise TypeError(f"{fname}: struct dtype {t.name} has no {self.framework} equivalent")
        r = self.to_fw.get(t.scalar)
        if r is None:
            raise TypeError(f"{fname}: {t.scalar!r} has no {self.framework} dtype")
        try:
            self._to_cache[dtype] = r
        except TypeError:
            pass
        return r

    def lookup(self, fdtype):
        """The tapegrad scalar type of a framework dtype, or None (never raises)."""
        try:
            s = self.from_fw.get(fdtype)
        except TypeError:
            return None
        if s is None and self._normalize is not None:
            try:
                key = self._normalize(fdtype)
                s = self.from_fw.get(key) if key is not None else None
            except Exception:  # normalisers may reject arbitrary objects in their own ways
                s = None
        return s

    def from_framework(self, fdtype) -> types.ScalarType:
        """The tapegrad scalar type of a framework dtype.

        Raises:
            TypeError: the dtype has no tapegrad equivalent (complex, fp8...).
        """
        s = self.lookup(fdtype)
        if s is None:
            shown = repr(fdtype) if isinstance(fdtype, str) else str(fdtype)   # paddle's repr is <DataType...>
            raise TypeError(f"dtype_from_{self.framework}: {self.framework} dtype {shown} has no tapegrad "
                            f"equivalent (supported: {', '.join(str(d) for d in self.to_fw.values())})")
        return s


# ---------------------------------------------------------------------------------- devices

class DeviceMap:
    """``device_from_X`` / ``device_to_X`` around a parser of the framework's device objects.

    Args:
        framework: "torch", "paddle"...; used in messages.
        parse: ``f(x) -> (kind, index, shown)``: ``kind`` is the framework's device type
            ("cpu", "cuda", or anything else, which is refused), ``index`` the CUDA ordinal or
            None for "the framework's current CUDA device", ``shown`` the text for messages.
            It raises TypeError for objects that are no device at all.
        current_cuda: ``f() -> ordinal`` of the framework's current CUDA device; raises
            RuntimeError when the framework sees none.
        cuda_prefix: the framework's CUDA device name ("cuda" for torch, "gpu" for paddle).
        native_types: the framework's device classes, accepted by ``to_framework`` too.
    """

    __slots__ = ("framework", "_parse", "_current", "_prefix", "_native", "_cache")

    def __init__(self, framework: str, parse, current_cuda, cuda_prefix: str = "cuda", native_types: tuple = ()):
        self.framework = framework
        self._parse, self._current, self._prefix, self._native = parse, current_cuda, cuda_prefix, native_types
        self._cache: dict = {}   # framework device -> Device (explicit names only: stable)

    def from_framework(self, fdev) -> Device:
        """The tapegrad device of a framework device.

        Raises:
            TypeError: ``fdev`` is no device of this framework.
            RuntimeError: a device type tapegrad does not support, or a CUDA device that does
                not exist here.
        """
        try:
            d = self._cache.get(fdev)
        except TypeError:
            d = None
        if d is not None:
            return d
        kind, index, shown = self._parse(fdev)
        fname = f"device_from_{self.framework}"
        if kind == "cpu":
            d = get_device("cpu")
        elif kind == "cuda":
            if index is None:                 # the framework's current device: it can change
                return get_device(f"cuda:{self._current()}")
            d = get_device(f"cuda:{index}")
        else:
            raise RuntimeError(f"{fname}: unsupported {self.framework} device {shown!r} "
                               "(tapegrad supports cpu and cuda)")
        try:
            self._cache[fdev] = d
        except TypeError:
            pass
        return d

    def to_framework(self, device=None) -> str:
        """The framework's device string ("cpu", "<prefix>:N") of a tapegrad device (None: current).

        Raises:
            ValueError, RuntimeError: unknown device name / a CUDA device that does not exist.
        """
        if self._native and isinstance(device, self._native):
            device = self.from_framework(device)
        d = get_device(device)
        return "cpu" if d.is_cpu else f"{self._prefix}:{d.ordinal}"


# ---------------------------------------------------------------------------------- streams

_TG_STREAMS: dict = {}                        # (ordinal, handle) -> tapegrad Stream wrapping it


def wrap_stream_handle(dev: Device, handle: int):
    """A tapegrad Stream wrapping a framework's raw stream handle on ``dev`` (cached, not owned)."""
    s = _TG_STREAMS.get((dev.ordinal, handle))
    if s is None:
        from tapegrad.cuda.stream import Stream
        if len(_TG_STREAMS) >= 256:
            _TG_STREAMS.clear()
        s = _TG_STREAMS[(dev.ordinal, handle)] = Stream(dev, cuda_stream=handle)
    return s


def unordered_handle(dev: Device, handle: int):
    """``(tapegrad's current stream on dev, handle or None)``: None when CUDA already orders
    the framework's stream ``handle`` with tapegrad's: the same stream, or the framework on
    the legacy default stream (0) and tapegrad on a blocking stream (the default setup)."""
    s = dev.stream
    if handle == s.cuda_stream:
        return s, None
    if handle == 0 and s.is_blocking:    # known from the stream's construction (no driver query)
        return s, None
    return s, handle


def wait_for_handle(dev: Device, handle: int) -> None:
    """Order tapegrad's current stream on ``dev`` after the framework's stream ``handle``
    (an event, no host block; nothing when CUDA already orders the two)."""
    s, handle = unordered_handle(dev, handle)
    if handle is not None:
        from tapegrad.protocols import wait_foreign_stream
        wait_foreign_stream(dev, handle)


def cai_typestr(dtype) -> str:
    """The ``__cuda_array_interface__`` typestr of a dtype's components (bfloat16: its raw
    bits, ``<u2``, which the framework re-views as its bfloat16)."""
    s = dtype.scalar
    return "<u2" if s is types.bfloat16 else s.np_dtype.str


class CudaView:
    """Exposes an array's CUDA memory through ``__cuda_array_interface__`` (v2, no stream: no
    synchronisation, ordering is the caller's) and keeps the array (or its memory owner) alive.

    When the framework drops its tensor while its current stream is not ordered with
    tapegrad's (a non-blocking framework stream may still be using the memory), the array is
    released only once that stream has passed this point (``release_after``), so tapegrad
    cannot hand the memory out again under work still queued.

    Args:
        a: the array (CUDA, with memory; a scalar layout with component dims appended).
        current_handle: ``f(ordinal) -> handle`` of the framework's current stream, or None
            when no stream-ordered release is possible (a graph capture is running).
        owner: what to keep alive instead of ``a`` (``a.memory_owner()``), so that ``a`` can
            cache the framework tensor without a reference cycle (default: ``a`` itself).
    """

    __slots__ = ("__cuda_array_interface__", "owner", "device", "_current")

    def __init__(self, a, current_handle, owner=None):
        shape, strides = a.flat_layout()
        self.__cuda_array_interface__ = {"version": 2, "shape": shape, "typestr": cai_typestr(a.dtype),
                                         "data": (a.ptr, a.readonly), "strides": strides}
        self.owner = a if owner is None else owner
        self.device = a.device
        self._current = current_handle

    def __del__(self):
        if sys.is_finalizing():
            return
        try:
            dev = self.device
            handle = self._current(dev.ordinal)
            if handle is not None:
                s, handle = unordered_handle(dev, handle)
                if handle is not None:
                    release_after(wrap_stream_handle(dev, handle), self.owner)
        except Exception:  # never raise from a finaliser (interpreter shutdown, no CUDA...)
            pass


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


def check_argnames(names, params, who: str, what: str = "in_out_argnames") -> None:
    """Check a list of parameter names given to a bridge (``in_out_argnames``...).

    Args:
        names: the names given (None or empty: nothing to check). params: the parameters'
            names. who: the caller, for messages. what: the argument's name.
    Raises:
        ArgnamesError: a name given twice (Warp's AssertionError). ValueError: a name that is
            no parameter.
    """
    names = list(names or ())
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ArgnamesError(f"{who}: {what} must not contain duplicate names (duplicates: {dup}; got {names})")
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError(f"{who}: {what} {missing} did not match any function argument names (the parameters are "
                         f"{list(params)})")


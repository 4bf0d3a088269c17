"""Foreign tensor types: one row (``TensorType``) says everything tapegrad reads of one.

A framework bridge describes each of its tensor types once, as a ``TensorType`` row (its
classes, how to read a tensor's layout, data pointer and device, its stream rule, gradient and
in-place version), and registers that row once, in one block at the end of the bridge module
(``register_tensor_type``). Every path reads the same row:

- ``launch``'s Python packers take a registered tensor passed directly through the row's
  descriptor (``launch_adapter``: a ``Layout`` cached per layout key, the data pointer read per
  launch, the gradient pointer when the row has a ``grad`` reader), and read its device with the
  row's ``device`` accessor; the native launch helper's layout cache is set up from the row's
  ``native_keys``/``native_ptr``/``current_stream`` (``launch`` registers it when a row is
  registered, through ``add_listener``).
- A bridge's conversions (``from_torch``, ``to_torch``... built by ``bridges/_base.Bridge`` over
  the row) use the row's layout reader, layout cache, pointer, stream rule and storage check.
- The tape checks the row's ``version`` of the tensors its arrays view, and the adjoint of a
  recorded launch accumulates into the row's ``grad`` of a tensor passed directly.

The core names no framework: a type met for the first time whose module names a bridge in
``tapegrad.frameworks`` imports that bridge (which registers its rows) before the lookup.

Also here, because descriptors of foreign memory are built from rows: ``ArrayCtype`` (the
launchable descriptor ``return_ctype=True`` conversions give) and ``Layout`` (a checked
descriptor template per tensor layout, holding no pointer).
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any, Callable

from . import types
from .array import array
from .errors import BridgeTypeError, GradLayoutError
from .frameworks import bridge_for_type_module
from .storage import fold_inner_dims

__all__ = ["TensorType", "TensorLayout", "ArrayCtype", "Layout", "check_compatible", "register_tensor_type",
           "tensor_type_for", "registered", "add_listener", "layout_of", "layout_cache", "launch_adapter"]

_DESC_GRAD = types.ArrayDesc.grad   # the field's own accessor (None for NULL)


class ArrayCtype(types.ArrayDesc):
    """A launchable array descriptor that remembers its dtype/device and keeps owners alive.

    Returned by ``from_torch(..., return_ctype=True)`` and friends; pass it to ``launch``.
    ``grad`` is the gradient's address as an int, 0 when there is none (Warp's ``array_t``).
    """

    grad = property(lambda self: _DESC_GRAD.__get__(self) or 0, lambda self, v: _DESC_GRAD.__set__(self, v),
                    doc="The gradient's address (int; 0: no gradient), as Warp's array_t.grad.")

    def bind(self, dtype, device, refs=(), readonly=False):
        self.tg_dtype = dtype
        self.tg_device = device
        self.tg_refs = tuple(refs)  # the tensor and its grad: alive as long as the descriptor
        self.flags = 1 if readonly else 0
        return self


# dtype= views of bfloat16 data as its raw bits (kept from before bf16 existed)
_RAW_BF16 = (types.uint16, types.int16)
_LAYOUT_CACHE_MAX = 4096


def check_compatible(src: types.ScalarType, dst: types.ScalarType, src_name: str, fname: str) -> None:
    """Raise unless a tensor of scalar type ``src`` may be viewed as ``dst`` (no conversion).

    The rule is DLPack's (``tapegrad.dlpack``), so every import path agrees: the same type, or
    integer/bool types of one width (int32 as uint32, bool as uint8...).

    Raises:
        BridgeTypeError: the two types cannot alias.
    """
    if not types.can_alias(dst, src):
        raise BridgeTypeError(f"{fname}: cannot view a tensor of {src_name} as tapegrad {dst!r} "
                              f"(zero-copy views need the same element type, or an integer/bool type of "
                              f"the same width; cast the tensor first)")


class Layout:
    """How a tensor's memory reads as a tapegrad array: dtype, shape, byte strides, device.

    Holds no pointer, so one Layout serves every tensor with the same metadata. The layout is
    checked once, when the Layout is built (through the ``array`` constructor); ``new_array``
    then uses ``array.wrap_memory`` (no re-checking) and ``new_ctype`` copies a descriptor template,
    which makes conversions a dict lookup plus a few attribute stores.
    """

    __slots__ = ("dtype", "shape", "strides", "device", "cuda", "_tmpl")

    def __init__(self, dtype, shape, strides, device):
        proto = array.layout_prototype(dtype, shape, strides, device)   # checks
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
            dt = types.resolve_dtype(dtype, arg=f"{fname}(dtype=...)")
            if isinstance(dt, types.StructType):
                raise BridgeTypeError(f"{fname}: struct dtype {dt.name} cannot view a tensor")
            if not (scalar is types.bfloat16 and dt.scalar in _RAW_BF16):   # raw bits, asked for explicitly
                check_compatible(scalar, dt.scalar, src_name, fname)
        if not shape:                              # 0-d tensor: one element
            shape, strides = (1,), (size,)
        if dt.inner_shape and shape == dt.inner_shape:
            shape, strides = (1,) + shape, (dt.size,) + strides  # exactly one vector/matrix
        dt, shape, strides = fold_inner_dims(dt.scalar, dt, shape, strides, f"{fname}: tensor of shape {shape}")
        return cls(dt, shape, strides, device)

    def new_array(self, ptr: int, owner) -> array:
        """A tapegrad array of this layout at ``ptr``, keeping ``owner`` alive."""
        return array.wrap_memory(ptr, self.dtype, self.shape, self.strides, self.device, owner)

    def new_ctype(self, ptr: int, grad_ptr: int, refs) -> ArrayCtype:
        """A launchable descriptor of this layout; ``refs`` stay alive as long as it does."""
        d = ArrayCtype.from_buffer_copy(self._tmpl)   # flags (read-only: no) come from the template
        d.data = ptr
        if grad_ptr:
            d.grad = grad_ptr
        d.tg_dtype, d.tg_device, d.tg_refs = self.dtype, self.device, refs   # as ArrayCtype.bind
        return d


@dataclass(frozen=True)
class TensorLayout:
    """What a row's ``layout`` reader gives for one tensor (the row's ``layout_key`` must
    determine all of it).

    Attributes:
        scalar: the tapegrad ``ScalarType`` of its elements. shape: its shape (a tuple).
        strides: its strides in *elements*. device: the tapegrad ``Device`` its memory is on.
        dtype_name: the framework's name of its element type (for messages: ``"torch.int64"``).
    """

    scalar: Any
    shape: tuple
    strides: tuple
    device: Any
    dtype_name: str


def _callable(name, v, optional=True):
    if v is None and optional:
        return
    if not callable(v):
        raise TypeError(f"TensorType({name}=...): expected a callable{' or None' if optional else ''}, "
                        f"got {type(v).__name__}")


@dataclass(frozen=True, eq=False, kw_only=True)
class TensorType:
    """One foreign tensor type, as launch, the conversions and the tape read it.

    Register it once with ``register_tensor_type`` (a bridge: in one block at the end of its
    module). Rows compare by identity.

    Attributes:
        framework: the framework's name, for messages (``"torch"``).
        classes: the tensor classes (instances of subclasses match too; the native launch
            helper's layout cache takes the listed classes exactly).
        match: optional ``f(cls) -> bool``, for types not listed in ``classes``.
        layout: ``f(t) -> TensorLayout``; raises TypeError for an element type tapegrad lacks.
        layout_key: ``f(t) -> hashable`` of everything ``layout`` reads (dtype, shape, strides,
            device; never the pointer): layouts are checked and cached per key.
        data_ptr: ``f(t) -> int``, the address of the tensor's first element (read per use).
        device: optional ``f(t) -> Device or None``, a cheap accessor ``launch`` uses to pick the
            device of a launch given only such tensors (None: the layout's device).
        on_use: optional ``f(t, device)``, called when a CUDA tensor is handed to tapegrad work
            on ``device`` (the framework's stream rule: tell its allocator about the use).
        current_stream: optional ``f(ordinal) -> int``, the raw handle of the framework's current
            CUDA stream: the native launch helper launches CUDA tensors of this type only when
            that stream is ordered with tapegrad's (else the Python path calls ``on_use``).
        grad: optional ``f(t) -> tensor or None``, the tensor's gradient (a tensor of this type
            laid out as ``t``): a launch's adjoint accumulates into it, also when a ``Tape``
            replays a recorded launch. None: tensors passed directly carry no gradient.
        requires_grad: optional ``f(t) -> bool``, whether the framework differentiates ``t`` (torch's
            ``requires_grad``): a ``Tape`` refuses to record a differentiable launch given such
            a tensor directly when the row has no ``grad`` (its gradient would be dropped).
        version: optional ``f(t) -> int``, the framework's in-place counter of ``t``: the tape
            refuses a backward after an array's tensor was modified in place.
        storage_check: optional ``f(t, ptr) -> storage.StorageCheck`` for frameworks that can
            move or free a tensor's storage under a view of it.
        native_keys: up to 4 ``(name, is_method)`` pairs whose values together determine
            ``layout`` (read by the native launch helper from C; empty: no native layout cache).
        native_ptr: the method returning the data pointer (with ``native_keys``).
    """

    framework: str
    classes: tuple = ()
    match: Callable | None = None
    layout: Callable
    layout_key: Callable
    data_ptr: Callable
    device: Callable | None = None
    on_use: Callable | None = None
    current_stream: Callable | None = None
    grad: Callable | None = None
    requires_grad: Callable | None = None
    version: Callable | None = None
    storage_check: Callable | None = None
    native_keys: tuple = ()
    native_ptr: str | None = None

    def __post_init__(self):
        if not isinstance(self.framework, str) or not self.framework:
            raise TypeError(f"TensorType(framework=...): expected a non-empty str, got {self.framework!r}")
        if not isinstance(self.classes, tuple) or not all(isinstance(c, type) for c in self.classes):
            raise TypeError(f"TensorType(classes=...): expected a tuple of classes, got {self.classes!r}")
        if not self.classes and self.match is None:
            raise ValueError("TensorType: give the tensor classes (classes=...) or a predicate (match=...)")
        for name in ("layout", "layout_key", "data_ptr"):
            _callable(name, getattr(self, name), optional=False)
        for name in ("match", "device", "on_use", "current_stream", "grad", "requires_grad", "version",
                     "storage_check"):
            _callable(name, getattr(self, name))
        keys = self.native_keys
        if not isinstance(keys, tuple) or len(keys) > 4 or not all(
                isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], str) and isinstance(k[1], bool)
                for k in keys):
            raise TypeError(f"TensorType(native_keys=...): expected up to 4 (name, is_method) pairs, got {keys!r}")
        if keys and not isinstance(self.native_ptr, str):
            raise TypeError(f"TensorType(native_ptr=...): native_keys need the data pointer method's name (a str), "
                            f"got {self.native_ptr!r}")

    def covers(self, cls) -> bool:
        """Whether instances of ``cls`` are tensors of this type."""
        return issubclass(cls, self.classes) or (self.match is not None and bool(self.match(cls)))


# ------------------------------------------------------------------------------- the registry

_lock = threading.Lock()
_ROWS: list = []           # registered rows, in order
_FOR_TYPE: dict = {}       # exact class -> its row, or None (misses are cached too)
_LISTENERS: list = []      # fn(row), told of every registration
_LAYOUTS: dict = {}        # row -> {(layout key, dtype): Layout}
_ADAPTERS: dict = {}       # row -> its launch adapter


def register_tensor_type(row: TensorType) -> TensorType:
    """Register ``row``: from now on ``launch``, the conversions and the tape take tensors of its
    classes through it. A row for the same classes registered before (a module reloaded) is
    replaced.

    Returns:
        ``row``.
    Raises:
        TypeError: ``row`` is not a ``TensorType``.
    """
    if not isinstance(row, TensorType):
        raise TypeError(f"register_tensor_type: expected a TensorType, got {type(row).__name__}")
    with _lock:
        for old in [r for r in _ROWS if r.classes and r.classes == row.classes]:
            _ROWS.remove(old)
        _ROWS.append(row)
        _FOR_TYPE.clear()
        listeners = list(_LISTENERS)
    for fn in listeners:
        fn(row)
    return row


def add_listener(fn) -> None:
    """Call ``fn(row)`` for every row registered from now on, and now for those already
    registered (``launch`` keeps its caches and the native helper's layout sources this way)."""
    with _lock:
        _LISTENERS.append(fn)
        rows = list(_ROWS)
    for row in rows:
        fn(row)


def registered() -> tuple:
    """The registered rows, in registration order."""
    return tuple(_ROWS)


def tensor_type_for(cls) -> TensorType | None:
    """The row covering instances of ``cls``, or None. The first time a class of a module that
    names a bridge (``tapegrad.frameworks``) is met, that bridge is imported (registering its
    rows); a bridge whose framework fails to import answers None. The most derived registered
    class wins over a predicate."""
    row = _FOR_TYPE.get(cls, _FOR_TYPE)
    if row is not _FOR_TYPE:
        return row
    mod = bridge_for_type_module(getattr(cls, "__module__", "").split(".")[0])
    if mod is not None:
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    rows = registered()
    row = next((r for base in cls.__mro__ for r in reversed(rows) if base in r.classes), None)
    if row is None:
        row = next((r for r in reversed(rows) if r.match is not None and r.covers(cls)), None)
    _FOR_TYPE[cls] = row
    return row


# ----------------------------------------------------------------------- layouts and descriptors

def layout_cache(row: TensorType) -> dict:
    """The row's ``{(layout key, dtype): Layout}`` cache (shared by launches and conversions)."""
    c = _LAYOUTS.get(row)
    if c is None:
        c = _LAYOUTS.setdefault(row, {})
    return c


def layout_of(row: TensorType, t, dtype=None, fname: str | None = None) -> Layout:
    """The (cached) ``Layout`` of tensor ``t`` of ``row`` viewed as ``dtype`` (None: its own).

    Raises:
        TypeError, BridgeTypeError, RuntimeError: as ``Layout.build``, naming ``fname``.
    """
    cache = layout_cache(row)
    key = (row.layout_key(t), dtype)
    lay = cache.get(key)
    if lay is None:
        ly = row.layout(t)
        lay = Layout.build(ly.scalar, ly.shape, ly.strides, ly.device, dtype, fname or f"from_{row.framework}",
                           ly.dtype_name)
        if len(cache) >= _LAYOUT_CACHE_MAX:
            cache.clear()
        cache[key] = lay
    return lay


def launch_adapter(row: TensorType):
    """``f(t, device, arg, dtype) -> ArrayCtype``: the descriptor ``launch`` packs for a tensor
    of ``row`` passed directly (``arg`` names the kernel argument in errors, ``dtype`` is the
    parameter's element type). With a ``grad`` reader, the descriptor carries the gradient's
    pointer (the adjoint accumulates into it), which must be laid out as the tensor."""
    fn = _ADAPTERS.get(row)
    if fn is not None:
        return fn
    cached, key_of, ptr_of, on_use, grad_of = layout_cache(row).get, row.layout_key, row.data_ptr, row.on_use, row.grad

    def adapter(t, device, arg, dtype) -> ArrayCtype:
        lay = cached((key_of(t), dtype)) or layout_of(row, t, dtype, arg)
        if lay.cuda and on_use is not None:
            on_use(t, lay.device)
        g = grad_of(t) if grad_of is not None else None
        if g is None:
            return lay.new_ctype(ptr_of(t), 0, (t,))
        glay = layout_of(row, g, dtype, f"{arg} (its gradient)")
        if (glay.dtype, glay.shape, glay.strides, glay.device) != (lay.dtype, lay.shape, lay.strides, lay.device):
            raise GradLayoutError(f"{arg}: the {row.framework} tensor's gradient must have its dtype, shape, byte "
                                  f"strides and device {(lay.dtype, lay.shape, lay.strides, lay.device)}, got "
                                  f"{(glay.dtype, glay.shape, glay.strides, glay.device)}")
        if glay.cuda and on_use is not None:
            on_use(g, glay.device)
        return lay.new_ctype(ptr_of(t), ptr_of(g), (t, g))

    return _ADAPTERS.setdefault(row, adapter)

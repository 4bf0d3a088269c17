"""The Python packers: each kernel parameter's ``pack(value, device)``, built once per kernel.

They are the reference of the launch and the source of every error message it raises: the
native helper (``fastlaunch``) takes only values it packs exactly as they do, and passes every
other launch to the Python path, whose packers raise. Also here: ``ArrayCtype`` (a launchable
descriptor, ``tensortypes``' own), the adapters of registered tensor types (their rows), and the adjoint
arguments of ``launch(adjoint=True)`` (each array's ``.grad``, a buffer given, a zero value).
"""
from __future__ import annotations

import contextlib
import ctypes
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import memory_ops, tensortypes, types
from ..array import array
from ..errors import LaunchArgumentError, LaunchConversionError
from ..lang.facts import ELEMENT, null_unsafe, null_unsafe_fields, written_fields
from ..protocols import interface_layout, parse_cuda_array_interface
from ..storage import check_extent, fold_inner_dims
from ..tensortypes import ArrayCtype, tensor_type_for

__all__ = ["ArrayCtype", "check_null_argument", "null_array_desc", "check_null_elements", "check_null_fields",
           "check_written_fields", "forget_adapters", "adapter_for", "arg_label", "foreign_desc", "make_packers",
           "adjoint_values", "grad_desc", "zero_value", "check_adjoint_shapes", "exact_adjoint_buffers",
           "finish_adjoint_buffers", "AdjointScratch"]


# Foreign tensor types (torch, paddle, JAX... whose protocol path is missing, refuses or is
# slow) are packed through their registered ``tensortypes.TensorType`` row: the adapter built
# from it is cached per exact type here (misses too: one dict lookup per foreign object).
_ADAPTERS: dict = {}
_numpy_adapted = False   # a row covers numpy arrays: they are packed through it


def forget_adapters(numpy_adapted: bool) -> None:
    """Forget the per-type adapters (a row was registered); ``numpy_adapted``: a row covers
    numpy arrays from now on."""
    global _numpy_adapted
    _ADAPTERS.clear()
    _numpy_adapted = _numpy_adapted or numpy_adapted


def adapter_for(obj):
    """The launch adapter of ``obj``'s registered ``TensorType`` row (``tensortypes.launch_adapter``),
    or None."""
    cls = type(obj)
    fn = _ADAPTERS.get(cls, _ADAPTERS)
    if fn is not _ADAPTERS:
        return fn
    row = tensor_type_for(cls)
    fn = _ADAPTERS[cls] = tensortypes.launch_adapter(row) if row is not None else None
    return fn


def arg_label(kernel, i):
    return f"kernel '{kernel.key}' argument {i} ('{kernel.arg_names[i]}')"

def _check_array(kernel, i, ptype, dtype, ndim, device, launch_device):
    if dtype is not ptype.dtype:
        raise TypeError(f"{arg_label(kernel, i)}: expected an array of {ptype.dtype!r}, got {dtype!r}")
    if ndim != ptype.ndim:
        raise TypeError(f"{arg_label(kernel, i)}: expected a {ptype.ndim}-D array, got {ndim}-D")
    if device is not launch_device:
        raise RuntimeError(f"{arg_label(kernel, i)}: array is on device {device}, but the launch device is "
                           f"{launch_device}")

def foreign_desc(kernel, i, ptype, obj, device):
    """Descriptor for an object passed directly through its array protocol (R1)."""
    label = arg_label(kernel, i)
    if device.is_cuda and hasattr(obj, "__cuda_array_interface__"):
        _, ptr, dt, shape, strides, ro = parse_cuda_array_interface(obj.__cuda_array_interface__, device, label)
    elif device.is_cpu and hasattr(obj, "__array_interface__"):
        ptr, dt, shape, strides, ro = interface_layout(obj.__array_interface__, label)
    else:
        other = "__cuda_array_interface__ (a CUDA object)" if hasattr(obj, "__cuda_array_interface__") else \
            "__array_interface__ (a CPU object)" if hasattr(obj, "__array_interface__") else None
        if other:
            raise RuntimeError(f"{label}: the object exposes only {other}, but the launch device is {device} "
                               f"(device mismatch)")
        raise TypeError(f"{label}: expected an array (tapegrad array, or an object with "
                        f"__array_interface__/__cuda_array_interface__), got {type(obj).__name__}")
    if ptype.dtype.scalar is not dt and not isinstance(ptype.dtype, types.StructType):
        raise TypeError(f"{label}: expected an array of {ptype.dtype!r}, got elements of {dt!r}")
    edt, shape, strides = fold_inner_dims(dt, ptype.dtype, shape, strides, label)
    check_extent(shape, strides, edt.size, label)   # the descriptor's int64 fields would wrap
    d = ArrayCtype()
    d.data = ptr or None
    for k, (n, s) in enumerate(zip(shape, strides)):
        d.shape[k] = n
        d.strides[k] = s
    d.ndim = len(shape)
    return d.bind(ptype.dtype, device, (obj,), ro)

def _ndarray_desc(kernel, i, ptype, value, device, layouts):
    """``foreign_desc`` of a numpy array on the CPU, with the checked descriptor cached per layout.

    The slow path's result depends only on the protocol's typestr, shape, strides and read-only
    flag (numpy's ``data`` pointer already includes any offset), so a hit copies the template
    and sets the pointer: no protocol parsing, dtype folding or checks per launch.
    """
    iface = value.__array_interface__
    ptr, ro = iface["data"]
    key = (iface["typestr"], iface["shape"], iface["strides"], ro, device)
    tmpl = layouts.get(key)
    if tmpl is None:
        d = foreign_desc(kernel, i, ptype, value, device)
        if d.tg_dtype is not ptype.dtype or d.ndim != ptype.ndim or d.tg_device is not device:
            _check_array(kernel, i, ptype, d.tg_dtype, d.ndim, d.tg_device, device)
        if len(layouts) >= 64:
            layouts.clear()
        layouts[key] = bytes(d)
        return d
    d = ArrayCtype.from_buffer_copy(tmpl)
    d.data = ptr or None
    d.tg_dtype, d.tg_device, d.tg_refs = ptype.dtype, device, (value,)   # as ArrayCtype.bind
    return d

def _make_array_packer(kernel, i, ptype):
    dtype, ndim = ptype.dtype, ptype.ndim
    label = arg_label(kernel, i)
    layouts: dict = {}   # numpy layouts met by this parameter (see _ndarray_desc)
    ndarray = np.ndarray
    null_refused = []    # [bool] once known: whether None (a null array) would be dereferenced
    # arrays of structs: the element fields (array-valued) the kernel dereferences untested
    element_paths = [] if isinstance(dtype, types.StructType) else [()]

    def pack(value, device):
        if isinstance(value, array):
            if value.dtype is not dtype or value.ndim != ndim or value.device is not device:
                _check_array(kernel, i, ptype, value.dtype, value.ndim, value.device, device)
            if value._storage_check is not None:   # foreign memory its framework may have moved
                value._storage_check.verify(label)
            if not element_paths:
                element_paths.append((tuple(p[1:] for p in null_unsafe_fields(kernel, i) if p[:1] == (ELEMENT,)),
                                      tuple(p[1:] for p in written_fields(kernel, i) if p[:1] == (ELEMENT,))))
            if element_paths[0] and (element_paths[0][0] or element_paths[0][1]):
                check_null_elements(kernel, i, value, *element_paths[0])
            return value.descriptor()
        if value is None:    # Warp's null array: no data, every extent 0 (``if not a:`` in the kernel)
            if not null_refused:
                null_refused.append(i in null_unsafe(kernel))
            if null_refused[0]:
                check_null_argument(kernel, i, label)
            return null_array_desc(ndim)
        if type(value) is ndarray and device.is_cpu and not _numpy_adapted:
            return _ndarray_desc(kernel, i, ptype, value, device, layouts)
        if not isinstance(value, ArrayCtype):
            fn = adapter_for(value)
            value = (fn(value, device, label, dtype) if fn is not None
                     else foreign_desc(kernel, i, ptype, value, device))
        if value.tg_dtype is not dtype or value.ndim != ndim or value.tg_device is not device:
            _check_array(kernel, i, ptype, value.tg_dtype, value.ndim, value.tg_device, device)
        return value

    def check_buffer(value, device):
        """An adjoint buffer given as a tapegrad array: the parameter's element type, ndim and
        device, as for the array itself (the adjoint writes it as one: a float32 buffer for a
        float64 parameter was written past its end; another device's memory cannot be written)."""
        if value.dtype is not dtype or value.ndim != ndim or value.device is not device:
            try:
                _check_array(kernel, i, ptype, value.dtype, value.ndim, value.device, device)
            except (TypeError, RuntimeError) as e:
                raise type(e)(f"launch(adjoint=True): the adjoint buffer of {e}") from None
    pack.check_buffer = check_buffer
    return pack

def _make_scalar_packer(kernel, i, ptype):
    return types.scalar_packer(ptype, arg_label(kernel, i))   # the rule jax_kernel's static values share


def _make_composite_packer(kernel, i, ptype):
    n = ptype.length
    ctype = ptype.ctype
    npdt = ptype.scalar.np_dtype

    tname = getattr(ptype, "__name__", ptype.name)

    def pack(value, device):
        if value is not None and not hasattr(value, "__len__") and not (
                isinstance(value, np.ndarray) and value.ndim):   # one number: Warp refuses to broadcast it
            raise LaunchArgumentError(
                f"{arg_label(kernel, i)}: argument '{kernel.arg_names[i]}' expects {tname} but got a single value "
                f"of type {type(value).__name__}. Construct the value explicitly, e.g.: {tname}(...).")
        try:
            if isinstance(value, (str, bytes)) or value is None:
                raise TypeError
            if ptype.scalar in (types.float16, types.bfloat16):
                flat = types.bits16(ptype.scalar, value)
            else:
                flat = np.asarray(value, dtype=npdt).reshape(-1)
        except (TypeError, ValueError):
            raise LaunchConversionError(
                f"{arg_label(kernel, i)}: expected {ptype!r} ({n} numbers), got {type(value).__name__} {value!r} "
                f"(Failed to convert argument for param {kernel.arg_names[i]} to {tname})") from None
        if flat.size != n:
            raise LaunchConversionError(
                f"{arg_label(kernel, i)}: expected {ptype!r} ({n} components), got {np.size(value)} values "
                f"(Failed to convert argument for param {kernel.arg_names[i]} to {tname})")
        return ctype(*flat.tolist())
    return pack

def _field_value(value, path):
    """The value at struct field ``path`` of a struct instance or dict (None where unset)."""
    for name in path:
        if value is None:
            return None
        value = value.get(name) if isinstance(value, dict) else getattr(value, name, None)
    return value


def null_array_desc(ndim: int):
    """The descriptor of Warp's null array (``None`` for an array parameter): no memory, every
    extent 0."""
    d = types.ArrayDesc()
    d.ndim = ndim
    return d


def check_null_argument(kernel, i: int, label=None) -> None:
    """Refuse ``None`` (a null array) for array parameter ``i`` of ``kernel`` where the kernel loads
    or stores its elements without testing it first (a null pointer; fact ``null_unsafe``).

    Raises:
        TypeError: naming the argument.
    """
    if i in null_unsafe(kernel):
        raise TypeError(f"{arg_label(kernel, i) if label is None else label}: got None (Warp's null array, no "
                        f"memory), but the kernel loads or stores its elements without testing it on the way "
                        f"(if {kernel.arg_names[i]}: ...): pass an array, or guard the accesses")


def check_null_fields(kernel, i: int, ptype, value, paths=None, label=None) -> None:
    """Refuse a struct value (parameter ``i`` of ``kernel``) whose array field the kernel loads or
    stores untested is None (a null pointer the kernel would dereference; fact ``null_unsafe``).

    Args:
        kernel: a concrete ``Kernel``. i: the parameter index. ptype: its ``StructType``.
        value: the struct instance or dict. paths: the field paths (``null_unsafe_fields``;
            looked up when None). label: how errors name the argument (default: the launch's).
    Raises:
        TypeError: such a field is None, naming it.
    """
    for path in (null_unsafe_fields(kernel, i) if paths is None else paths):
        if _field_value(value, path) is None:
            who = arg_label(kernel, i) if label is None else label
            name = ".".join((kernel.arg_names[i],) + path)
            if path == ("data",) and getattr(ptype, "indexed", None) is not None:
                raise TypeError(f"{who}: got an indexed array without data (an annotation-only tg.indexedarray), but "
                                f"the kernel loads or stores its elements")
            raise TypeError(f"{who}: field {name} is None (Warp's null array, no memory), but the kernel loads or "
                            f"stores its elements without testing it (if {name}: ...): set it to an array, or guard "
                            f"the accesses")


# CUDA arrays of structs whose elements passed check_null_elements: array -> (version, address,
# paths, written). Reading the elements back is a device-to-host copy (and illegal while a CUDA
# graph is captured); tapegrad bumps an array's version at every write it makes to its elements
# (launches storing into them, assign, copy, fill_), and writes through the elements' array fields
# change no element, so a checked array stays checked until its version moves.
_ELEMENTS_CHECKED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def check_null_elements(kernel, i: int, value, paths, written=()) -> None:
    """Refuse an array of structs (parameter ``i`` of ``kernel``) in which an element's array
    field at one of ``paths`` (field names) is None, where the kernel dereferences that field
    untested (a null pointer; fact ``null_unsafe``), or is read-only at one of ``written`` (the
    fields the kernel writes). Reads the elements (a copy from the GPU).

    Raises:
        TypeError: such a field is None. RuntimeError: such a field is read-only. Both name
            the element and the field.
    """
    if not value.size:
        return
    key = (value.version, value.ptr, tuple(paths), tuple(written))
    cuda = value.device.is_cuda
    if cuda and _ELEMENTS_CHECKED.get(value) == key:
        return
    recs = np.ascontiguousarray(value.numpy()).reshape(-1)

    def descs(path):     # the fields' ArrayDesc bytes, one row per element
        field = recs
        for name in path:
            field = field[name]
        return np.ascontiguousarray(field).view(np.uint8).reshape(len(recs), -1)

    flags_at = types.ArrayDesc.flags.offset
    for path in written:
        flags = descs(path)[:, flags_at:flags_at + 4].copy().view(np.uint32).reshape(-1)
        bad = np.flatnonzero(flags & types.ARRAY_FLAG_READONLY)
        if bad.size:
            k = np.unravel_index(int(bad[0]), value.shape)
            raise RuntimeError(f"{arg_label(kernel, i)}: element {tuple(int(j) for j in k)}: the kernel writes field "
                               f"{'.'.join(path)}, but that array is read-only")
    for path in paths:
        ptrs = descs(path)[:, :8].copy().view(np.uint64)
        bad = np.flatnonzero(ptrs.reshape(-1) == 0)
        if bad.size:
            k = np.unravel_index(int(bad[0]), value.shape)
            name = ".".join(path)
            raise TypeError(f"{arg_label(kernel, i)}: element {tuple(int(j) for j in k)} has field {name} None "
                            f"(Warp's null array, no memory), but the kernel loads or stores its elements without "
                            f"testing it (if {kernel.arg_names[i]}[i].{name}: ...): set it to an array, or guard the "
                            f"accesses")
    if cuda:
        _ELEMENTS_CHECKED[value] = key


def check_written_fields(kernel, i: int, value, paths=None, label=None) -> None:
    """Refuse a struct value (parameter ``i`` of ``kernel``) holding a read-only array in a field
    the kernel writes (fact ``written_fields``), as a read-only array parameter is refused.

    Raises:
        RuntimeError: such a field's array is read-only, naming the field.
    """
    for path in (written_fields(kernel, i) if paths is None else paths):
        if ELEMENT in path:
            continue     # arrays of structs: checked with their elements
        v = _field_value(value, path)
        if getattr(v, "readonly", False):
            name = ".".join((kernel.arg_names[i],) + path)
            raise RuntimeError(f"{arg_label(kernel, i) if label is None else label}: the kernel writes field "
                               f"{name}, but that array is read-only")


def _make_struct_packer(kernel, i, ptype):
    null_paths = []    # [(field paths accessed untested, field paths written)] once known

    def pack(value, device):
        if not (isinstance(value, ptype.cls) or isinstance(value, dict)):
            what = f"a {ptype.name} struct" if getattr(ptype, "indexed", None) is None else f"a tg.{ptype!r}"
            raise TypeError(f"{arg_label(kernel, i)}: expected {what}, got {type(value).__name__}")
        if not null_paths:
            null_paths.append((null_unsafe_fields(kernel, i), written_fields(kernel, i)))
        if null_paths[0][0]:     # a None array field would be dereferenced: a null pointer
            check_null_fields(kernel, i, ptype, value, null_paths[0][0])
        if null_paths[0][1]:
            check_written_fields(kernel, i, value, null_paths[0][1])
        return ptype.to_ctype(value, device)   # its arrays must be on the launch device

    def pack_buffer(value, device):
        """An adjoint buffer or a placeholder: a None field there is "no gradient" / "not set yet"."""
        if not (isinstance(value, ptype.cls) or isinstance(value, dict)):
            return pack(value, device)
        return ptype.to_ctype(value, device)
    pack.unchecked = pack_buffer
    return pack


def make_packers(kernel) -> tuple:
    """One ``pack(value, device) -> ctypes value`` per parameter of ``kernel``.

    The packers name the kernel in their errors through a weak proxy: the plan holding them
    lives on the kernel, and a strong reference back, through the native plan (a capsule the
    garbage collector cannot see into), would keep every launched kernel alive forever."""
    k = weakref.proxy(kernel)
    p = []
    for i, t in enumerate(kernel.arg_types):
        if isinstance(t, types.ArrayType):
            p.append(_make_array_packer(k, i, t))
        elif isinstance(t, types.ScalarType):
            p.append(_make_scalar_packer(k, i, t))
        elif isinstance(t, types.StructType):
            p.append(_make_struct_packer(k, i, t))
        else:
            p.append(_make_composite_packer(k, i, t))
    return tuple(p)


def adjoint_values(kernel, args, adj_args, device, vals):
    """Adjoint argument values: explicit ones, else each array's .grad (a descriptor's gradient
    pointer: ``return_ctype`` descriptors, tensors whose ``TensorType`` row reads a gradient),
    else zero. ``vals``: the packed forward arguments."""
    out = []
    for i, (t, a) in enumerate(zip(kernel.arg_types, args)):
        g = adj_args[i] if adj_args is not None and i < len(adj_args) else None
        if isinstance(t, types.ArrayType):
            if g is None and isinstance(a, array):
                g = a.grad
            elif g is None and isinstance(vals[i], ArrayCtype) and vals[i].grad:
                g = _desc_grad(vals[i])
            out.append(g)
        else:
            out.append(g if g is not None else zero_value(t))
    return out

def _desc_grad(d):
    """The gradient a launch descriptor carries (``from_torch(..., return_ctype=True)``), as an
    adjoint buffer: its ``grad`` pointer with the data's layout (the ABI's rule: they share
    strides), so an adjoint launch accumulates into it as into an array's ``.grad``."""
    g = ArrayCtype()
    ctypes.memmove(ctypes.addressof(g), ctypes.addressof(d), ctypes.sizeof(types.ArrayDesc))
    g.bind(d.tg_dtype, d.tg_device, (d,))
    g.data, g.grad = d.grad, None
    return g

def grad_desc(g, pack, device):
    """Descriptor of a gradient buffer: its *data* is what the adjoint kernel accumulates into."""
    if isinstance(g, array):
        check = getattr(pack, "check_buffer", None)
        if check is not None:
            check(g, device)
        return g.descriptor()
    if g is None:
        return types.ArrayDesc()    # NULL data: "no gradient" (reads accumulate nothing)
    return getattr(pack, "unchecked", pack)(g, device)   # a struct's None fields: no gradient either

def check_adjoint_shapes(kernel, arrays, vals, adj_descs):
    """Raise ValueError when an adjoint buffer given for an array parameter (non-NULL data) has
    another shape than its array: the adjoint indexes both alike, so a smaller buffer would be
    read and written past its end."""
    for i in arrays:
        g, d = adj_descs[i], vals[i]
        if g.data and (g.ndim != d.ndim or any(g.shape[k] != d.shape[k] for k in range(d.ndim))):
            raise ValueError(f"launch(adjoint=True): the adjoint buffer of {arg_label(kernel, i)} has shape "
                             f"{tuple(g.shape)[:g.ndim]}, its array has shape {tuple(d.shape)[:d.ndim]}: an adjoint "
                             "buffer must have its array's shape")


@dataclass(frozen=True)
class AdjointScratch:
    """A written array's explicit adjoint buffer, replaced for one adjoint launch by a copy.

    Attributes:
        buffer: the caller's buffer (an array view of its descriptor).
        scratch: the copy the launch consumed (laid out as the forward array).
        copy_back: the kernel also reads the array: the scratch ends as the gradient with
            respect to the array's values before the launch, which goes back into ``buffer``.
        stream: the launch's stream (None: the device's current one).
    """

    buffer: array
    scratch: array
    copy_back: bool
    stream: Any = None


def _view(desc, dtype, device, owner):
    n = desc.ndim
    return array.wrap_memory(desc.data, dtype, tuple(desc.shape[:n]), tuple(desc.strides[:n]), device, owner)


def _scratch_copy(layout, g, dtype, device):
    """A copy of the buffer ``g`` laid out as the array ``layout`` (its strides: views of the
    array, ``a[i][j] = v``, move its data and grad pointers by the same offsets, which the
    consume test compares); returns the scratch array, a view of ``g``, and the scratch's
    descriptor."""
    n = layout.ndim
    shape, strides = tuple(layout.shape[:n]), tuple(layout.strides[:n])
    lo = sum((k - 1) * s for k, s in zip(shape, strides) if s < 0)
    hi = sum((k - 1) * s for k, s in zip(shape, strides) if s > 0) + dtype.size
    raw = array(shape=(hi - lo,), dtype=types.uint8, device=device)
    scratch = array.wrap_memory(raw.ptr - lo, dtype, shape, strides, device, raw)
    buffer = _view(g, dtype, device, g)
    memory_ops.copy(scratch, buffer)
    sd = _copy_desc(layout)
    sd.data, sd.grad = scratch.ptr, None
    return scratch, buffer, sd


def _copy_desc(d):
    out = types.ArrayDesc()
    ctypes.memmove(ctypes.addressof(out), ctypes.addressof(d), ctypes.sizeof(types.ArrayDesc))
    return out


def _on_stream(stream):
    """The copies on the launch's stream (None: the device's current one, memory_ops' own)."""
    if stream is None:
        return contextlib.nullcontext()
    from ..cuda.stream import ScopedStream
    return ScopedStream(stream, sync_enter=False)


def exact_adjoint_buffers(kernel, written, vals, adj_descs, device, tan_adj_descs=None, stream=None) -> list:
    """``_exact_adjoint_buffers`` with its copies on ``stream`` (a CUDA launch's stream given)."""
    with _on_stream(stream):
        return _exact_adjoint_buffers(kernel, written, vals, adj_descs, device, tan_adj_descs, stream)


def _exact_adjoint_buffers(kernel, written, vals, adj_descs, device, tan_adj_descs, stream) -> list:
    """Give an adjoint launch with explicit buffers the tape's exact semantics.

    The adjoint of a store ``a[i] = v`` (and of ``atomic_min``/``atomic_max``) consumes the
    gradient element (passes it to ``v`` and zeroes it: the final write wins) only when the
    adjoint buffer is the array's own ``.grad`` (``lang.builtins``' test ``aa.data == a.grad``);
    any other buffer was only read, so an element written twice counted twice (a silent wrong
    gradient). For each written array whose buffer is not its ``.grad`` (and which does not
    ``retain_grad``), the launch gets a copy of the buffer both as adjoint buffer and as the
    forward descriptor's ``grad``: the kernel consumes the copy, exactly as under a tape, and
    the caller's buffer stays unchanged, unless the kernel reads the array too (then the copy,
    the gradient with respect to the array's values before the launch, is copied back).

    Args:
        kernel: the kernel. written: indices of the parameters it writes. vals: the packed
            forward arguments; adj_descs: the adjoint descriptors (both changed in place).
        device: the launch device.
        tan_adj_descs: the tangent-of-adjoint launch's tangents of the adjoint buffers (the
            store consumes them with the buffers): copied alike (changed in place).
        stream: the launch's stream (None: the device's current one): the copies run on it.
    Returns:
        The ``AdjointScratch`` entries; ``finish_adjoint_buffers`` copies back after the launch.
    """
    out = []
    for i in written:
        d, g = vals[i], adj_descs[i]
        if (not isinstance(d, types.ArrayDesc) or not g.data or g.data == d.grad
                or d.flags & types.ARRAY_FLAG_RETAIN_GRAD or any(d.shape[k] == 0 for k in range(d.ndim))):
            continue
        dtype = kernel.arg_types[i].dtype
        read = bool(kernel.arg_access[i][0])
        scratch, buffer, adj_descs[i] = _scratch_copy(d, g, dtype, device)
        fwd = _copy_desc(d)
        fwd.grad = scratch.ptr
        vals[i] = fwd
        out.append(AdjointScratch(buffer, scratch, read, stream))
        t = tan_adj_descs[i] if tan_adj_descs is not None else None
        if t is not None and t.data:
            tscratch, tbuffer, tan_adj_descs[i] = _scratch_copy(d, t, dtype, device)
            out.append(AdjointScratch(tbuffer, tscratch, read, stream))
    return out


def finish_adjoint_buffers(entries) -> None:
    """After the adjoint launch: copy back the scratch of each array the kernel also reads."""
    for e in entries:
        if e.copy_back:
            with _on_stream(e.stream):
                memory_ops.copy(e.buffer, e.scratch)

def zero_value(t):
    """A zero value of the non-array kernel type ``t`` (scalar, vector, matrix, struct)."""
    if isinstance(t, types.ScalarType):
        return 0
    if isinstance(t, types.StructType):
        return t.cls()
    return np.zeros(t.length)

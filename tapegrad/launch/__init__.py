"""launch(): turn arguments into kernel-ABI values and call a compiled kernel.

Two paths. The native one (``tapegrad.launch.fastlaunch``, a small C helper) packs the arguments and
launches in one C call from a per-kernel plan built once beside the packers; it takes the
common launches (forward and adjoint ones, ``Tape.backward``'s replays, and launches under a
recording tape, which it records through ``_record_launch`` before launching) and returns
``NotImplemented`` for anything else. The Python path below is the
rest, and the source of every error message: each kernel gets a list of per-parameter packers
built once (``_plan``), so a launch is one packer call per argument plus one ctypes call.
"""
from __future__ import annotations

import ctypes
import dataclasses
import importlib
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import abi, cpu_capture, types
from ..array import array
from ..config import config
from ..device import Device, get_device
from ..frameworks import bridge_for_type_module
from ..lang import facts
from ..lang.kernel import Kernel
from ..protocols import interface_layout, parse_cuda_array_interface, pointer_device
from ..recording import Access, active_tape
from ..storage import CheckedDesc, check_extent, fold_inner_dims
from . import fastlaunch

__all__ = ["launch", "ArrayCtype", "register_launch_adapter", "register_device_of", "LaunchRecord", "PreparedLaunch",
           "prepare_launch", "adjoint_descriptors", "zero_value", "register_tangent_launcher"]


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


# Foreign tensor types whose protocol path is missing, refuses or is slow (torch tensors that
# require grad raise RuntimeError from __cuda_array_interface__, CPU torch tensors have no
# __array_interface__): a bridge registers fn(obj, device, arg, dtype) -> ArrayCtype, where
# ``dtype`` is the element type the kernel parameter expects (vector/matrix types fold the
# object's trailing component dims). Registered adapters are consulted before the protocols.
_ADAPTERS: dict = {}


def register_launch_adapter(cls, fn):
    """Let ``launch`` accept instances of ``cls`` directly; ``fn(obj, device, arg, dtype) -> ArrayCtype``."""
    for k in [k for k, v in _ADAPTERS.items() if v is None]:
        del _ADAPTERS[k]  # forget cached misses: a subclass of ``cls`` may have been met already
    _ADAPTERS[cls] = fn
    if issubclass(np.ndarray, cls):
        fastlaunch.numpy_off()   # the adapter decides numpy descriptors now: not the helper's cache
    fastlaunch.forget_types()    # a CAI type the helper caches may be the adapter's now


def _adapter_for(obj):
    cls = type(obj)
    fn = _ADAPTERS.get(cls, _ADAPTERS)
    if fn is not _ADAPTERS:
        return fn
    fn = None
    mod = bridge_for_type_module(cls.__module__.split(".")[0])
    if mod is not None:
        try:
            importlib.import_module(mod)
        except ImportError:
            mod = None
    if mod is not None:
        fn = next((_ADAPTERS[b] for b in cls.__mro__ if _ADAPTERS.get(b) is not None), None)
    _ADAPTERS[cls] = fn  # negative results are cached too: one dict lookup per foreign object
    return fn


def _arg_label(kernel, i):
    return f"kernel '{kernel.key}' argument {i} ('{kernel.arg_names[i]}')"


def _check_array(kernel, i, ptype, dtype, ndim, device, launch_device):
    if dtype is not ptype.dtype:
        raise TypeError(f"{_arg_label(kernel, i)}: expected an array of {ptype.dtype!r}, got {dtype!r}")
    if ndim != ptype.ndim:
        raise TypeError(f"{_arg_label(kernel, i)}: expected a {ptype.ndim}-D array, got {ndim}-D")
    if device is not launch_device:
        raise RuntimeError(f"{_arg_label(kernel, i)}: array is on device {device}, but the launch device is "
                           f"{launch_device}")


def _foreign_desc(kernel, i, ptype, obj, device):
    """Descriptor for an object passed directly through its array protocol (R1)."""
    label = _arg_label(kernel, i)
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
    """``_foreign_desc`` of a numpy array on the CPU, with the checked descriptor cached per layout.

    The slow path's result depends only on the protocol's typestr, shape, strides and read-only
    flag (numpy's ``data`` pointer already includes any offset), so a hit copies the template
    and sets the pointer: no protocol parsing, dtype folding or checks per launch.
    """
    iface = value.__array_interface__
    ptr, ro = iface["data"]
    key = (iface["typestr"], iface["shape"], iface["strides"], ro, device)
    tmpl = layouts.get(key)
    if tmpl is None:
        d = _foreign_desc(kernel, i, ptype, value, device)
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
    label = _arg_label(kernel, i)
    layouts: dict = {}   # numpy layouts met by this parameter (see _ndarray_desc)
    ndarray = np.ndarray

    def pack(value, device):
        if isinstance(value, array):
            if value.dtype is not dtype or value.ndim != ndim or value.device is not device:
                _check_array(kernel, i, ptype, value.dtype, value.ndim, value.device, device)
            if value._storage_check is not None:   # foreign memory its framework may have moved
                value._storage_check.verify(label)
            return value.descriptor()
        if value is None:
            raise TypeError(f"{label}: expected an array for {ptype!r}, got None (a kernel would read "
                            "through a NULL pointer; pass an empty array instead)")
        if type(value) is ndarray and device.is_cpu and _ADAPTERS.get(ndarray) is None:
            return _ndarray_desc(kernel, i, ptype, value, device, layouts)
        if not isinstance(value, ArrayCtype):
            fn = _adapter_for(value)
            value = (fn(value, device, label, dtype) if fn is not None
                     else _foreign_desc(kernel, i, ptype, value, device))
        if value.tg_dtype is not dtype or value.ndim != ndim or value.tg_device is not device:
            _check_array(kernel, i, ptype, value.tg_dtype, value.ndim, value.tg_device, device)
        return value
    return pack


def scalar_range(ptype):
    """``(lo, hi)``: the values an integer scalar parameter of type ``ptype`` takes (None for
    float and bool parameters). ctypes would wrap an out-of-range int silently: the packer
    refuses it, and the native helper's plan carries the same range."""
    return abi.int_range(ptype.kind, ptype.bits) if ptype.kind in ("int", "uint") else None


def _make_scalar_packer(kernel, i, ptype):
    return types.scalar_packer(ptype, _arg_label(kernel, i))   # the rule jax_kernel's static values share


def _make_composite_packer(kernel, i, ptype):
    n = ptype.length
    ctype = ptype.ctype
    npdt = ptype.scalar.np_dtype

    def pack(value, device):
        try:
            if isinstance(value, (str, bytes)) or value is None:
                raise TypeError
            if ptype.scalar in (types.float16, types.bfloat16):
                flat = types.bits16(ptype.scalar, value)
            else:
                flat = np.asarray(value, dtype=npdt).reshape(-1)
        except (TypeError, ValueError):
            raise TypeError(f"{_arg_label(kernel, i)}: expected {ptype!r} ({n} numbers), got "
                            f"{type(value).__name__} {value!r}") from None
        if flat.size != n:
            raise TypeError(f"{_arg_label(kernel, i)}: expected {ptype!r} ({n} components), got "
                            f"{np.size(value)} values")
        return ctype(*flat.tolist())
    return pack


def _make_struct_packer(kernel, i, ptype):
    def pack(value, device):
        if not (isinstance(value, ptype.cls) or isinstance(value, dict)):
            raise TypeError(f"{_arg_label(kernel, i)}: expected a {ptype.name} struct, got {type(value).__name__}")
        return ptype.to_ctype(value, device)   # its arrays must be on the launch device
    return pack


@dataclass(frozen=True)
class LaunchPlan:
    """What ``launch`` computes once per kernel (kept in ``Kernel.launch_plan``).

    Attributes:
        packers: one ``pack(value, device) -> ctypes value`` per parameter.
        written: indices of the parameters the forward writes (read-only and version checks).
        native: the native helper's plan of the same parameters (``tapegrad.launch.fastlaunch``), or
            None when the helper is not available.
        tid_checks: the kernel's unguarded ``tid()`` accesses of array parameters
            (``lang.facts.tid_accesses``): a grid past one of those arrays is refused.
        arrays: indices of the array parameters (adjoint buffers are checked against them).
    """

    packers: tuple
    written: tuple
    native: Any = None
    tid_checks: tuple = ()
    arrays: tuple = ()


def _plan(kernel) -> LaunchPlan:
    plan = kernel.launch_plan
    if plan is not None:
        return plan
    with kernel.build_lock:   # threads making the first launch together build the plan once
        plan = kernel.launch_plan
        if plan is not None:
            return plan
        # The packers name the kernel in their errors through a weak proxy: the plan lives on
        # the kernel, and a strong reference back, through the native plan (a capsule the
        # garbage collector cannot see into), would keep every launched kernel alive forever.
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
        written = tuple(i for i, (r, w) in enumerate(kernel.arg_access) if w)
        ts = kernel.arg_types
        arrays = tuple(i for i, t in enumerate(ts) if isinstance(t, types.ArrayType))
        checks = tuple(a for a in facts.tid_accesses(kernel) if isinstance(ts[a.param], types.ArrayType))
        # the process's first launch does not load the native helper (a one-shot launch gains
        # nothing from it; its load, 1-2 ms, moves to the next Python-path launch)
        native = _native_plan(kernel, tuple(p), written, checks) if _python_launches or _fast is not None \
            else DEFERRED
        plan = kernel.launch_plan = LaunchPlan(tuple(p), written, native, checks, arrays)
    return plan


DEFERRED = "deferred"   # LaunchPlan.native of a plan made before the helper was wanted


def _upgrade_plan(kernel, plan) -> LaunchPlan:
    """``plan`` with its native plan made now (it was ``DEFERRED``)."""
    with kernel.build_lock:
        cur = kernel.launch_plan
        if cur is plan:
            cur = kernel.launch_plan = dataclasses.replace(plan, native=_native_plan(kernel, plan.packers,
                                                                                      plan.written, plan.tid_checks))
    return cur


# ------------------------------------------------------------------------ the native path

_fast = None   # tapegrad.launch.fastlaunch's launch function once its helper is loaded (None: Python path only)
_python_launches = 0   # launches the Python path ran (counted up to 1: whether there was one)


def _count_python_launch():
    global _python_launches
    _python_launches = 1


def _native_plan(kernel, packers, written, tid_checks=()):
    """The native helper's plan for ``kernel`` (None without the helper): each parameter's kind,
    and for arrays the dtype and ndim the C code checks (``tapegrad.launch.fastlaunch``)."""
    global _fast
    if _fast is None:   # once per kernel while the helper is unavailable (load() remembers why)
        _fast = fastlaunch.load(fastlaunch.NativeHooks(
            kernel_type=Kernel, array_type=array, desc_type=types.ArrayDesc, ctype_type=ArrayCtype,
            device_type=Device, capture_state=vars(cpu_capture), active_tape=active_tape, get_device=get_device,
            infer_device=_infer_device, descriptor_cache=array.DESCRIPTOR_CACHE, max_size=NARROW_LAUNCH_SIZE,
            float_types=(np.float16, np.float32, np.float64),
            int_types=(np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64),
            record=_record_launch, cai_kind=_cai_kind, checked_type=CheckedDesc))
        if _fast is not None:
            _listen_for_build_changes()
    if _fast is None:
        return None
    kinds, ndims, dtypes, zero_sizes, ranges = [], [], [], [], []
    for t in kernel.arg_types:
        if isinstance(t, types.ArrayType):
            kinds.append("array")
            ndims.append(t.ndim)
            dtypes.append(t.dtype)
            zero_sizes.append(0)
            ranges.append(None)
            continue
        ranges.append(scalar_range(t) if isinstance(t, types.ScalarType) else None)
        kinds.append(t.name if isinstance(t, types.ScalarType) and t.name in fastlaunch.KINDS else "py")
        ndims.append(0)
        dtypes.append(None)
        # an adjoint launch's zero adjoint of a scalar/vector/matrix is that many zero bytes
        # (_zero_value); a struct's (its default instance there) is never read by the backward
        # entries (CPU: a local accumulates only scalar/vector/matrix adjoints into the slot;
        # CUDA: every non-array adjoint is a local), so zero bytes of its size serve too
        zero_sizes.append(ctypes.sizeof(t.ctype))
    w = set(written)
    return fastlaunch.new_plan(kinds, ndims, [i in w for i in range(len(kinds))], dtypes, packers, kernel.tid_ndim,
                               zero_sizes, tid_checks, ranges)


def _record_launch(kernel, dim, inputs, outputs, device, stream, block_dim, max_blocks):
    """Record a launch the native helper is about to make on the recording tape (as the Python
    path does; ``dim``: an int or a tuple of ints, checked by the helper)."""
    tape = active_tape()
    if tape is not None:
        tape.record(LaunchRecord(kernel, (dim,) if dim.__class__ is int else dim, tuple(inputs), tuple(outputs),
                                 device, stream, block_dim, max_blocks))


def _listen_for_build_changes():
    # tg.config.mode and module options choose the build kernel.module(dev) returns: a change
    # makes the native plans forget the modules they launch
    from ..config import add_mode_listener
    from ..lang.options import add_options_listener
    add_mode_listener(fastlaunch.invalidate)
    add_options_listener(fastlaunch.invalidate)


_BOUNDS: dict = {}   # dim -> (dim tuple, LaunchBounds bytes): validated once per distinct dim


def _bounds(dim):
    try:
        hit = _BOUNDS.get(dim)
    except TypeError:  # unhashable (a list)
        hit = None
    if hit is not None:
        return hit[0], types.LaunchBounds.from_buffer_copy(hit[1])
    dims, b = _make_bounds(dim)
    if len(_BOUNDS) < 1024:
        try:
            _BOUNDS[dim] = (dims, bytes(b))
        except TypeError:
            pass
    return dims, b


MAX_LAUNCH_SIZE = 2 ** 63 - 1       # threads in one launch: the grid loops' index is an int64
NARROW_LAUNCH_SIZE = 2 ** 31 - 1    # launches up to this size run the default build (int32 tid())


def _make_bounds(dim):
    if isinstance(dim, (int, np.integer)):
        dim = (int(dim),)
    try:
        if isinstance(dim, (str, bytes, float)) or any(isinstance(d, (str, bytes, float)) for d in dim):
            raise TypeError
        dim = tuple(int(d) for d in dim)
    except TypeError:
        raise TypeError(f"launch: dim must be an int or a tuple of up to {types.MAX_DIMS} ints, got {dim!r}") from None
    if not 1 <= len(dim) <= types.MAX_DIMS or any(d < 0 for d in dim):
        raise ValueError(f"launch: dim must have 1..{types.MAX_DIMS} non-negative entries, got {dim}")
    if any(d > MAX_LAUNCH_SIZE for d in dim):
        raise ValueError(f"launch: dim {dim} has an extent over {MAX_LAUNCH_SIZE} (2^63 - 1, the int64 launch bounds)")
    size = 1
    for d in dim:
        size *= d
    if size > MAX_LAUNCH_SIZE:
        # Python ints do not overflow: the product is exact, so (2^32, 2^32) is refused here
        # instead of wrapping to 0 threads in the int64 launch bounds
        raise ValueError(f"launch: dim {dim} has {size} threads; at most {MAX_LAUNCH_SIZE} (2^63 - 1, the "
                         "int64 thread index) are supported: split the launch, or loop inside the kernel")
    b = types.LaunchBounds()
    for k, d in enumerate(dim):
        b.shape[k] = d
    b.ndim = len(dim)
    b.size = size
    return dim, b


def _infer_device(device, stream, args):
    if device is not None:
        return get_device(device)
    if stream is not None:
        return stream.device
    for a in args:
        if isinstance(a, array) and a.device is not None:
            return a.device
        if isinstance(a, ArrayCtype):
            return a.tg_device
    for a in args:  # arrays held in struct arguments come next (their pointers are the kernel's too)
        st = getattr(type(a), "_tg_struct", None)
        if st is not None:
            d = next((v.device for v in st.array_values(a) if isinstance(v, array) and v.device is not None), None)
            if d is not None:
                return d
    for a in args:  # no tapegrad array: the first foreign array decides (a CPU tensor -> "cpu")
        d = _foreign_device(a)
        if d is not None:
            return d
    return get_device(None)


def _iterable(x) -> bool:
    try:
        iter(x)
    except TypeError:
        return False
    return True


_DEVICE_OF: dict = {}   # foreign tensor type -> fn(obj) -> Device (registered by its bridge)


def register_device_of(cls, fn):
    """Let ``launch`` read the device of ``cls`` instances passed directly with ``fn(obj) -> Device``
    (a framework's own cheap accessor) instead of the generic attribute probing."""
    _DEVICE_OF[cls] = fn
    fastlaunch.forget_types()   # the native helper's _cai_kind answers may change


def _foreign_device(a):
    """Device of a foreign array object passed directly, or None when ``a`` is not one."""
    fn = _DEVICE_OF.get(a.__class__)
    if fn is not None:
        return fn(a)
    if isinstance(a, np.ndarray):   # before the call below: CPU launches with numpy arrays ask per launch
        return get_device("cpu")
    d = _declared_device(a)
    if d is not None:
        return d
    if hasattr(a, "__cuda_array_interface__"):
        return pointer_device(a.__cuda_array_interface__["data"][0])
    return None


def _declared_device(a):
    """The device a foreign object other than a numpy array names itself (a ``device``
    attribute of torch's or paddle's kind, ``__array_interface__``), or None (a CAI object's
    comes from its pointer)."""
    d = getattr(a, "device", None)
    kind = getattr(d, "type", None)          # torch.device and similar
    if kind == "cpu":
        return get_device("cpu")
    if kind == "cuda":
        return get_device("cuda" if d.index is None else f"cuda:{d.index}")
    if isinstance(d, str) and (d == "cpu" or d.startswith("gpu:")):   # paddle tensors: "cpu", "gpu:N"
        return get_device("cpu" if d == "cpu" else "cuda:" + d[4:])
    if hasattr(a, "__array_interface__"):
        return get_device("cpu")
    return None


def _cai_kind(obj) -> int:
    """How the native helper treats objects of ``type(obj)`` passed for an array parameter on
    CUDA (it asks once per exact type, with the first object it meets):

    0: not its CAI path (tapegrad arrays, numpy arrays, types a launch adapter packs, objects
       without ``__cuda_array_interface__``): the Python packer, called from C, as before.
    1: the Python packer reads ``__cuda_array_interface__`` (``_foreign_desc``) and a launch
       with no tapegrad array takes its device from the data pointer (``_foreign_device``):
       the helper caches the packer's descriptor per layout and may infer the device from the
       pointer's (the driver's ordinal of device memory, as the packer's layout was cached).
    2: as 1, but the device comes from elsewhere (a ``device`` attribute, a registered
       accessor): the helper takes it only when the launch's other arguments fix the device.
    """
    try:
        if isinstance(obj, (array, ArrayCtype, np.ndarray)) or _adapter_for(obj) is not None:
            return 0
        if not hasattr(obj, "__cuda_array_interface__"):
            return 0
    except Exception:  # noqa: BLE001  an object whose attributes raise: the packer (and its error)
        return 0
    if obj.__class__ in _DEVICE_OF:
        return 2
    try:
        declared = _declared_device(obj) is not None
    except Exception:  # noqa: BLE001  it names a device that does not resolve: never the pointer's
        declared = True
    return 2 if declared else 1


def _adjoint_values(kernel, args, adj_args, device):
    """Adjoint argument values: explicit ones, else each array's .grad, else zero."""
    out = []
    for i, (t, a) in enumerate(zip(kernel.arg_types, args)):
        g = adj_args[i] if adj_args is not None and i < len(adj_args) else None
        if isinstance(t, types.ArrayType):
            if g is None and isinstance(a, array):
                g = a.grad
            elif g is None and isinstance(a, ArrayCtype) and a.grad:
                g = _desc_grad(a)
            out.append(g)
        else:
            out.append(g if g is not None else _zero_value(t))
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


def _zero_value(t):
    if isinstance(t, types.ScalarType):
        return 0
    if isinstance(t, types.StructType):
        return t.cls()
    return np.zeros(t.length)


def _check_grid(kernel, checks, dim, size, args, vals):
    """Raise ValueError when the grid ``dim`` (``size`` threads) overruns an array the kernel
    indexes by ``tid()`` unguarded (``checks``: its ``lang.facts.TidAccess``es). A tapegrad
    array's shape is read from the array (a descriptor's ctypes fields cost ~0.3 us a read)."""
    for a in checks:
        p, d = a.param, a.dim
        v = args[p]
        # a packed tapegrad array has its parameter's ndim, so dimension d exists
        n = v._shape[d] if v.__class__ is array else (vals[p].shape[d] if d < vals[p].ndim else None)
        if n is not None:
            # a lone i = tid() takes every value of the grid
            ext = size if a.components == 1 else facts.tid_extent(a.component, a.components, dim)
            if ext > n:
                raise ValueError(facts.overrun_message(kernel, dim, (a, ext, n), "launch"))


def _check_adjoint_shapes(kernel, arrays, vals, adj_descs):
    """Raise ValueError when an adjoint buffer given for an array parameter (non-NULL data) has
    another shape than its array: the adjoint indexes both alike, so a smaller buffer would be
    read and written past its end."""
    for i in arrays:
        g, d = adj_descs[i], vals[i]
        if g.data and (g.ndim != d.ndim or any(g.shape[k] != d.shape[k] for k in range(d.ndim))):
            raise ValueError(f"launch(adjoint=True): the adjoint buffer of {_arg_label(kernel, i)} has shape "
                             f"{tuple(g.shape)[:g.ndim]}, its array has shape {tuple(d.shape)[:d.ndim]}: an adjoint "
                             "buffer must have its array's shape")


def _grad_desc(g, pack, device):
    """Descriptor of a gradient buffer: its *data* is what the adjoint kernel accumulates into."""
    if isinstance(g, array):
        return g.descriptor()
    if g is None:
        return types.ArrayDesc()    # NULL data: "no gradient" (reads accumulate nothing)
    return pack(g, device)


def launch(kernel, dim, inputs=(), outputs=(), device=None, stream=None, adjoint=False,
           adj_inputs=None, adj_outputs=None, record_tape=True, block_dim=256, max_blocks=0, *,
           tangent=False, tan_inputs=None, tan_outputs=None, tan_adj_inputs=None, tan_adj_outputs=None):
    """Run ``kernel`` over a grid of ``dim`` threads.

    Args:
        kernel: a ``@tg.kernel`` function.
        dim: grid size, an int or a tuple of up to 4 ints.
        inputs, outputs: the kernel's arguments in order (inputs first). Arrays may be
            tapegrad arrays, ``return_ctype`` descriptors, or any object exposing
            ``__array_interface__`` (CPU) / ``__cuda_array_interface__`` (CUDA) — these carry
            no gradients.
        device: launch device (default: the first array argument's device, else current).
        stream: a tapegrad Stream (CUDA; default: the device's current stream).
        adjoint: run the generated adjoint instead of the forward.
        adj_inputs, adj_outputs: adjoint buffers per argument (None entries: the array's .grad).
        record_tape: record on the active Tape (forward launches only).
        block_dim: CUDA threads per block.
        max_blocks: cap on CUDA blocks (0: none).
        tangent: forward mode (docs/tape.md, "Forward mode and second order"): run the kernel's
            tangent code, which writes the outputs and, into ``tan_inputs``/``tan_outputs``
            (one entry per argument: an array of the argument's dtype and shape, a value for a
            float scalar/vector/matrix, None for a zero tangent), their tangents. With
            ``adjoint=True`` too: the tangent of the adjoint (second order), which accumulates
            the adjoints into ``adj_inputs``/``adj_outputs`` and their tangents into
            ``tan_adj_inputs``/``tan_adj_outputs``. Tangent launches are not recorded on a tape.
    Raises:
        TypeError: wrong argument count, dtype, ndim or type (message names the argument).
        RuntimeError: device mismatch, or a write to a read-only array.
        KernelError: ``tangent=True`` with a construct without a forward-mode rule.
    """
    if tangent:
        _tangent_launcher[0](kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs,
                             tan_inputs, tan_outputs, tan_adj_inputs, tan_adj_outputs, block_dim, max_blocks)
        return
    fast = _fast
    if fast is not None:
        # the native helper launches it (tapegrad.launch.fastlaunch; two more arguments: the adjoint)
        if not adjoint:
            if fast(kernel, dim, inputs, outputs, device, stream, record_tape, block_dim, max_blocks) is None:
                return
        elif fast(kernel, dim, inputs, outputs, device, stream, False, block_dim, max_blocks, adj_inputs,
                  adj_outputs) is None:
            return
    _launch_python(kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs, record_tape,
                   block_dim, max_blocks)


def _launch_python(kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs, record_tape,
                   block_dim, max_blocks):
    """``launch``'s Python path: every launch the native helper does not take, and every error."""
    try:
        args = list(inputs) + list(outputs)
    except TypeError:
        bad = "inputs" if not _iterable(inputs) else "outputs"
        raise TypeError(f"launch: {bad} must be a list or tuple of the kernel's arguments, got "
                        f"{type(inputs if bad == 'inputs' else outputs).__name__}") from None
    if not isinstance(kernel, Kernel):
        raise TypeError(f"launch: expected a @tg.kernel function, got {type(kernel).__name__}")
    if stream is not None:
        from ..cuda.stream import Stream
        if not isinstance(stream, Stream):
            raise TypeError(f"launch: stream must be a tapegrad Stream, got {type(stream).__name__}")
    plan = kernel.launch_plan
    if plan is None:
        if kernel.is_generic():   # typing.Any parameters: the specialization for these arguments
            kernel = kernel.specialize_for(args)
        plan = kernel.launch_plan or _plan(kernel)
    packers = plan.packers
    if len(args) != len(packers):
        raise TypeError(f"launch: kernel '{kernel.key}' takes {len(packers)} arguments "
                        f"({', '.join(kernel.arg_names)}), got {len(args)} "
                        f"({len(inputs)} inputs + {len(outputs)} outputs)")
    dev = _infer_device(device, stream, args)
    dim, bounds = _bounds(dim)
    if kernel.tid_ndim > len(dim):   # i, j = tid() in a 1-D launch: the missing index would be 0
        raise ValueError(f"launch: kernel '{kernel.key}' unpacks tid() into {kernel.tid_ndim} indices, so dim needs "
                         f"{kernel.tid_ndim} entries (e.g. dim=(n, m)), got dim={dim}")
    if stream is not None:
        if stream.device is not dev:
            raise RuntimeError(f"launch: stream is on {stream.device}, launch device is {dev}")
    handle = (stream or dev.stream).cuda_stream if dev.is_cuda else 0
    vals = [pack(a, dev) for pack, a in zip(packers, args)]
    written = plan.written
    for i in written:
        if isinstance(vals[i], types.ArrayDesc) and vals[i].flags & 1:
            raise RuntimeError(f"{_arg_label(kernel, i)}: the kernel writes this array, but it is read-only")
    if plan.tid_checks:   # every thread indexes these arrays by tid(), unguarded: the grid must fit
        _check_grid(kernel, plan.tid_checks, dim, bounds.size, args, vals)
    if adjoint:
        if not kernel.enable_backward:
            raise RuntimeError(f"launch(adjoint=True): kernel '{kernel.key}' was built with enable_backward=False")
        n_in = len(inputs)
        adj_given = None
        if adj_inputs is not None or adj_outputs is not None:
            ai = list(adj_inputs) if adj_inputs is not None else [None] * n_in
            ao = list(adj_outputs) if adj_outputs is not None else [None] * len(outputs)
            if len(ai) != n_in or len(ao) != len(outputs):
                raise TypeError(f"launch(adjoint=True): adj_inputs/adj_outputs must have {n_in}/{len(outputs)} "
                                f"entries, got {len(ai)}/{len(ao)}")
            adj_given = ai + ao
        adj_vals = _adjoint_values(kernel, args, adj_given, dev)
        adj_descs = [_grad_desc(g, pack, dev) for g, pack in zip(adj_vals, packers)]
        _check_adjoint_shapes(kernel, plan.arrays, vals, adj_descs)
        vals = vals + adj_descs
    elif record_tape:
        tape = active_tape()
        if tape is not None:
            tape.record(LaunchRecord(kernel, tuple(dim), tuple(inputs), tuple(outputs), dev, stream, block_dim,
                                     max_blocks))
    argv = _argv_type(len(vals))(*[ctypes.addressof(v) for v in vals])
    if cpu_capture.open_count and dev.is_cpu and cpu_capture.capturing():
        # a CPU graph capture records the launch (the packed values and arguments stay alive
        # with the graph) and runs it at each replay
        mod = kernel.module(dev) if bounds.size <= NARROW_LAUNCH_SIZE else kernel.module_for(dev, wide=True)
        cpu_capture.record(lambda: mod.launch(bounds, argv, adjoint, 0, block_dim, max_blocks), (vals, args))
    else:
        # past 2^31 - 1 threads: the kernel's wide build (int64 tid()), compiled on first use
        mod = kernel.module(dev) if bounds.size <= NARROW_LAUNCH_SIZE else kernel.module_for(dev, wide=True)
        mod.launch(bounds, argv, adjoint, handle, block_dim, max_blocks)
        if plan.native is not None and bounds.size <= NARROW_LAUNCH_SIZE:
            if plan.native is DEFERRED and _python_launches:
                plan = _upgrade_plan(kernel, plan)
            if plan.native is not None and plan.native is not DEFERRED:
                fastlaunch.register_module(plan.native, dev, mod, config.mode)   # later launches: native
        _count_python_launch()
    if not adjoint:
        for i in written:
            if isinstance(args[i], array):
                args[i].version += 1


# forward mode (tapegrad.launch.tangent registers it): launch(tangent=True) calls it
_tangent_launcher: list = [None]


def register_tangent_launcher(fn) -> None:
    """Let ``launch(..., tangent=True)`` call ``fn`` (``tapegrad.launch.tangent`` registers it)."""
    _tangent_launcher[0] = fn


@dataclass(frozen=True)
class PreparedLaunch:
    """A launch's checked and packed arguments (``prepare_launch``).

    Attributes:
        kernel: the kernel (a generic kernel's specialization). device: the launch device.
        dim: the grid. bounds: its ``launch_t``. packers: one packer per parameter.
        values: the packed arguments. stream_handle: the CUDA stream handle (0 on the CPU).
    """

    kernel: Any
    device: Any
    dim: tuple
    bounds: Any
    packers: tuple
    values: list
    stream_handle: int


def prepare_launch(kernel, dim, inputs, outputs, device, stream) -> PreparedLaunch:
    """Check and pack a launch's arguments as ``launch`` does (the other launch forms use it).

    Raises:
        TypeError, ValueError, RuntimeError: as ``launch``, naming the argument.
    """
    args = list(inputs) + list(outputs)
    if not isinstance(kernel, Kernel):
        raise TypeError(f"launch: expected a @tg.kernel function, got {type(kernel).__name__}")
    if kernel.is_generic():
        kernel = kernel.specialize_for(args)
    packers = _plan(kernel).packers
    if len(args) != len(packers):
        raise TypeError(f"launch: kernel '{kernel.key}' takes {len(packers)} arguments "
                        f"({', '.join(kernel.arg_names)}), got {len(args)} "
                        f"({len(inputs)} inputs + {len(outputs)} outputs)")
    dev = _infer_device(device, stream, args)
    dim, bounds = _bounds(dim)
    if kernel.tid_ndim > len(dim):
        raise ValueError(f"launch: kernel '{kernel.key}' unpacks tid() into {kernel.tid_ndim} indices, so dim needs "
                         f"{kernel.tid_ndim} entries (e.g. dim=(n, m)), got dim={dim}")
    if stream is not None and stream.device is not dev:
        raise RuntimeError(f"launch: stream is on {stream.device}, launch device is {dev}")
    handle = (stream or dev.stream).cuda_stream if dev.is_cuda else 0
    vals = [pack(a, dev) for pack, a in zip(packers, args)]
    for i, (r, w) in enumerate(kernel.arg_access):
        if w and isinstance(vals[i], types.ArrayDesc) and vals[i].flags & 1:
            raise RuntimeError(f"{_arg_label(kernel, i)}: the kernel writes this array, but it is read-only")
    return PreparedLaunch(kernel, dev, tuple(dim), bounds, tuple(packers), vals, handle)


def adjoint_descriptors(prep: PreparedLaunch, args, adj_args) -> list:
    """The adjoint arguments of a prepared launch: ``adj_args[i]`` when given, else each
    array's ``.grad`` (None: no gradient), else a zero value (as ``launch(adjoint=True)``)."""
    vals = _adjoint_values(prep.kernel, args, adj_args, prep.device)
    return [_grad_desc(g, pack, prep.device) for g, pack in zip(vals, prep.packers)]


def zero_value(t):
    """A zero value of the non-array kernel type ``t`` (scalar, vector, matrix, struct)."""
    return _zero_value(t)


@dataclass(frozen=True, init=False)
class LaunchRecord:
    """A forward launch recorded on a Tape (built by ``launch`` when a tape is active).

    Attributes:
        kernel: the ``Kernel``. dim: the grid. inputs, outputs: the arguments as passed.
        device: the launch device. stream: the stream given to ``launch`` (None: current).
        block_dim, max_blocks: the CUDA launch shape.
    """

    kernel: Kernel
    dim: tuple
    inputs: tuple
    outputs: tuple
    device: Device
    stream: Any          # a tapegrad Stream, or None
    block_dim: int
    max_blocks: int

    def __init__(self, kernel, dim, inputs, outputs, device, stream, block_dim, max_blocks):
        # one is made per launch under a tape: one dict update instead of the frozen
        # dataclass's eight object.__setattr__ calls (2.9 -> 1 us on the CPU machine)
        self.__dict__.update(kernel=kernel, dim=dim, inputs=inputs, outputs=outputs, device=device, stream=stream,
                             block_dim=block_dim, max_blocks=max_blocks)

    def accesses(self) -> tuple:
        """The tapegrad arrays among the arguments, with the kernel's reads and writes of each
        (an array the kernel neither reads nor writes counts as read: its adjoint may be)."""
        k = self.kernel
        out = []
        for i, ((r, w), a) in enumerate(zip(k.arg_access, self.inputs + self.outputs)):
            if isinstance(a, array):
                name = k.arg_names[i]
                out.append(Access(a, name, r or not w, w, f"kernel '{k.key}' writing '{name}'", f"{k.key}.{name}"))
        return tuple(out)

    def label(self, index: int) -> str:
        return f"launch #{index} of kernel '{self.kernel.key}'"

    def replay(self) -> None:
        """Launch the kernel's adjoint with the recorded arguments (gradients: each array's .grad)."""
        # launch(..., adjoint=True) without its keyword handling: the native helper, else the Python path
        fast = _fast
        if fast is None or fast(self.kernel, self.dim, self.inputs, self.outputs, self.device, self.stream, False,
                                self.block_dim, self.max_blocks, None, None) is not None:
            _launch_python(self.kernel, self.dim, self.inputs, self.outputs, self.device, self.stream, True, None,
                           None, False, self.block_dim, self.max_blocks)


_ARGV: dict = {}


def _argv_type(n):
    t = _ARGV.get(n)
    if t is None:
        t = _ARGV[n] = ctypes.c_void_p * n
    return t

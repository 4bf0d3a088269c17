"""The native launch helper: pack a kernel's arguments and launch it in one C call.

``launch`` spends most of a small launch in Python: one packer call per argument, a ctypes
call, a ``cuLaunchKernel`` through CuPy. This module builds a small C helper
(``fastlaunch.c``, shipped beside this file) that does the whole launch from a per-kernel
plan built once: it checks each argument against the parameter's kind (a tapegrad array's
dtype, ndim and device; a scalar's range), points the parameter block at each array's cached
descriptor, converts scalars, and calls the kernel's CPU entry point or ``cuLaunchKernel``
(taken from ``libcuda.so.1``) directly, then bumps the written arrays' versions.

Adjoint launches (``launch(..., adjoint=True)``, what ``Tape.backward`` replays) take the same
path with the kernel's backward entry point: the forward arguments packed the same way, then
one adjoint argument per parameter, as ``launch`` builds them: an array's ``.grad`` descriptor
(or the adjoint buffer given, a tapegrad array or an object its packer takes), a NULL
descriptor where there is none, a zeroed slot for a scalar, vector, matrix or struct.

Under a recording tape it packs the arguments and records the common launch itself (a plain
array per array parameter, nothing overwritten that the tape still needs:
``Tape._record_plain_launch``'s checks, in C): it appends the record's values to the tape's
pending list and the arrays the adjoint reads to its live memory roots
(``recording.PENDING_FIELD``); the tape makes the ``LaunchRecord`` when next read. An in-place
step (an array read and then overwritten, over memory no record needs) is recorded so too,
after one call to the tape's saver, which copies the array's current values into the tape's
arena. Any other launch calls back into Python to record it (``Tape.record``, which saves what
the launch overwrites). Then it launches.

Whatever it does not take (an open CPU capture, debug builds, a wrong dtype
or count, a read-only array written, a scalar out of range, an unknown object, a kernel
without a backward...) makes it return ``NotImplemented`` without side
effects, and ``launch`` runs its Python path, which stays the source of every error message. Vector, matrix and struct
arguments and other unknown objects are packed by the Python packers, called from C. numpy
arrays (CPU) are read from numpy's struct, their descriptors cached per layout. Foreign tensor
types whose bridge registers a layout source (``register_foreign``: torch) get their layout
cached per parameter, keyed by the values of the registered attributes (dtype, shape,
strides, device; never by pointer), and only the data pointer is read per launch.

``__cuda_array_interface__`` objects (CuPy, Numba, any CAI v3 producer) on a CUDA launch need
no registration: ``devices.cai_kind`` says once per exact type whether the Python packer would
read the interface (not a type a launch adapter packs); the helper then reads the CAI dict
itself (one attribute get per launch) and caches the packer's descriptor per parameter, keyed
by (exact type, typestr, shape, strides, read-only flag, launch device) compared with ``==``;
per launch only the pointer changes. The CAI v3 stream rule is ``protocols.cai_stream`` and
``foreign_stream_ordered``: where the Python path would wait for the producer's stream with an
event (or refuse the handle), the helper returns ``NotImplemented``, so the Python path does
it. A launch that no tapegrad array, ``device=`` or ``stream=`` places takes its device from a
CAI pointer only for types whose device ``devices.infer_device`` reads from the pointer, and
only when the driver's ordinal of that (plain device) memory matches a cached layout made for
that device; else it asks ``devices.infer_device``. Masks, offsets and other unusual dicts go to the
Python packer; a read-only object passed to a written parameter, to the Python path (its
error). ``forget_types`` drops the per-type answers and the layouts (a launch adapter or a
device accessor was registered); ``cai_decision`` gives the C rule's answer for a dict.

The helper needs no ``Python.h`` and no CUDA header: the C-API functions arrive as a table of
addresses from ``ctypes.pythonapi``, the driver's entry points as addresses from ctypes. It is
compiled at install (``setup.py``) and loaded with ``ctypes.PyDLL`` through ``tapegrad.native``,
which compiles it into the kernel cache instead when that library is missing or stale. When it cannot be built
(no compiler, a free-threaded Python, an unexpected object layout) ``launch`` runs its Python
path alone. ``TAPEGRAD_FAST_LAUNCH=0`` turns it off.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Optional

from .. import abi, modules, native, types  # noqa: F401  types registers the scalar table's kinds with abi

__all__ = ["KINDS", "C_SOURCE_PATH", "NativeHooks", "load", "new_plan", "register_module", "register_foreign",
           "invalidate", "numpy_off", "forget_types", "cai_decision", "stats", "error", "front", "front_switch"]

C_SOURCE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fastlaunch.c")

# parameter kinds by name: the kernel ABI's (the C side's TG_KIND_* enum of tg_abi.h)
_KIND = {k.name: k.code for k in abi.kinds()}
KINDS = tuple(_KIND)

# Order of the C-API table handed to tg_fl_init (must match the C enum).
_API_NAMES = ("Py_IncRef", "Py_DecRef", "PyObject_GetAttr", "PyObject_SetAttr", "PyObject_RichCompareBool",
              "PyObject_IsInstance", "PyObject_Vectorcall", "PyObject_VectorcallMethod", "PyFloat_AsDouble",
              "PyLong_AsLongLongAndOverflow", "PyLong_AsDouble", "PyLong_FromLongLong", "PyErr_Occurred",
              "PyErr_Clear", "PyTuple_Size", "PyTuple_GetItem", "PyList_Size", "PyList_GetItem", "PyTuple_New",
              "PyTuple_SetItem", "PyDict_GetItemWithError", "PyCapsule_New", "PyCapsule_GetPointer",
              "PyEval_SaveThread", "PyEval_RestoreThread", "PyCFunction_NewEx", "PyUnicode_InternFromString",
              "PyLong_AsUnsignedLongLong", "PyUnicode_AsUTF8AndSize", "PySet_New", "PySet_Add", "PySet_Size",
              "PyDict_SetItem", "PyList_Append", "PyObject_GenericGetDict",
              "<None>", "<True>", "<False>", "<NotImplemented>", "<float>", "<int>", "<bool>", "<tuple>", "<list>",
              "<str>", "<dict>")
_OBJS = {"<None>": None, "<True>": True, "<False>": False, "<NotImplemented>": NotImplemented, "<float>": float,
         "<int>": int, "<bool>": bool, "<tuple>": tuple, "<list>": list,
         "<str>": str, "<dict>": dict}

_lock = threading.Lock()
_state: dict = {}      # "lib", "fn" (the launch function) once loaded; "error" when it cannot be
_FOREIGN: list = []    # register_foreign's arguments, applied when the helper loads
_P = ctypes.py_object
_V = ctypes.c_void_p


def _layout_ok(types) -> bool:
    """The object layouts the C code relies on: ob_type after the refcount, a ctypes object's
    buffer pointer after the head, and the ABI structs' sizes (the ctypes twins against the table)."""
    # free-threaded builds ("t" ABI flag; sysconfig would say so too, at 2 ms of import per process)
    if "t" in getattr(sys, "abiflags", ""):
        return False
    x = 1.5
    if _V.from_address(id(x) + ctypes.sizeof(ctypes.c_ssize_t)).value != id(float):
        return False
    d = types.ArrayDesc()
    if _V.from_address(id(d) + 2 * ctypes.sizeof(ctypes.c_void_p)).value != ctypes.addressof(d):
        return False
    return ctypes.sizeof(types.ArrayDesc) == abi.ARRAY.size and ctypes.sizeof(types.LaunchBounds) == abi.BOUNDS.size


def _build():
    if os.environ.get("TAPEGRAD_FAST_LAUNCH", "1") == "0":
        raise OSError("disabled by TAPEGRAD_FAST_LAUNCH=0")
    if sys.implementation.name != "cpython" or not _layout_ok(types):
        raise OSError("this Python's object layout is not the one the helper reads")
    lib = native.load("tg_fastlaunch", python_api=True)   # built at install; else compiled, verified
    pyapi = ctypes.pythonapi
    table = (_V * len(_API_NAMES))()
    for i, name in enumerate(_API_NAMES):
        table[i] = id(_OBJS[name]) if name.startswith("<") else ctypes.cast(getattr(pyapi, name), _V).value
    lib.tg_fl_init.argtypes = [_V, ctypes.c_int]
    lib.tg_fl_init.restype = ctypes.c_int
    sizes = lib.tg_fl_init(table, len(_API_NAMES))
    if sizes != abi.ARRAY.size * 1000 + abi.BOUNDS.size:   # the header the helper was built with
        raise OSError(f"fast launch helper: unexpected struct sizes {sizes}")
    lib.tg_fl_set_hooks.argtypes = [_P]
    lib.tg_fl_set_hooks.restype = ctypes.c_int
    lib.tg_fl_set_ndarray.argtypes = [_P]
    lib.tg_fl_set_ndarray.restype = None
    lib.tg_fl_set_cuda.argtypes = [_P, _V, _V, _V, _V]
    lib.tg_fl_set_cuda.restype = None
    lib.tg_fl_forget_types.argtypes = []
    lib.tg_fl_forget_types.restype = None
    lib.tg_fl_cai_decision.argtypes = [_P, ctypes.c_ulonglong, ctypes.c_int]
    lib.tg_fl_cai_decision.restype = ctypes.c_int
    lib.tg_fl_current_context.argtypes = []
    lib.tg_fl_current_context.restype = _V
    lib.tg_fl_register_foreign.argtypes = [_P] * 5 + [ctypes.c_char_p, _P, _P]
    lib.tg_fl_register_foreign.restype = ctypes.c_int
    lib.tg_fl_plan_new.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, _P, _P,
                                   ctypes.c_int, _P, ctypes.c_int, ctypes.c_char_p]
    lib.tg_fl_plan_new.restype = _P
    lib.tg_fl_set_entry.argtypes = [_P, _P, _P, _P, ctypes.c_int, _V, _V, ctypes.c_longlong, _V,
                                    ctypes.c_longlong, ctypes.c_longlong, _V]
    lib.tg_fl_set_entry.restype = ctypes.c_int
    lib.tg_fl_has_entry.argtypes = [_P, _P, _P, _P]
    lib.tg_fl_has_entry.restype = ctypes.c_int
    lib.tg_fl_invalidate.argtypes = []
    lib.tg_fl_invalidate.restype = None
    lib.tg_fl_stats.argtypes = [_V]
    lib.tg_fl_stats.restype = None
    lib.tg_fl_set_device_stream_field.argtypes = [ctypes.c_char_p]
    lib.tg_fl_set_device_stream_field.restype = None
    lib.tg_fl_set_dict_fields.argtypes = [ctypes.c_int]
    lib.tg_fl_set_dict_fields.restype = None
    lib.tg_fl_function.argtypes = [ctypes.c_int]
    lib.tg_fl_function.restype = _P
    lib.tg_fl_front.argtypes = [_P] * 7 + [ctypes.c_char_p, _P, _P]
    lib.tg_fl_front.restype = _P
    lib.tg_fl_front_switch.argtypes = [ctypes.c_int]
    lib.tg_fl_front_switch.restype = ctypes.c_int
    return lib, table


@dataclass(frozen=True)
class NativeHooks:
    """Everything the C helper takes from Python, handed over once when it loads (``load``).

    Attributes:
        kernel_type, array_type, desc_type, ctype_type, device_type: the ``Kernel``, ``array``,
            ``ArrayDesc``, ``ArrayCtype`` and ``Device`` classes (arguments are compared with
            them by exact type).
        capture_count: a ``ctypes.c_long`` holding the number of open CPU graph captures
            (``cpu_capture.OPEN_COUNT_CELL``; not 0: launches take the Python path).
        active_tape: ``tapegrad.recording.active_tape``.
        get_device: ``tapegrad.device.get_device``.
        infer_device: ``fn(device, stream, args) -> Device``, launch's device rule, asked where
            no tapegrad array, ``device=`` or ``stream=`` places a launch.
        array_fields: the names of the ``array`` fields the helper reads, as the array module
            names them: ``descriptor()``'s cache, the gradient field, the link field and the
            owner field (``array.DESCRIPTOR_CACHE``, ``GRAD_FIELD``, ``LINK_FIELD``,
            ``OWNER_FIELD``: the gradient field is ``.grad``'s value whenever it is set and the
            link field is None; else the helper asks ``.grad``).
        max_size: the largest grid the helper launches (larger ones take the Python path).
        float_types, int_types: numpy's scalar types taken for float / integer parameters.
        record: ``fn(kernel, dim, inputs, outputs, device, stream, block_dim, max_blocks)``,
            called under a recording tape after the arguments are packed and before the kernel
            runs (None: such launches take the Python path).
        cai_kind: ``fn(obj) -> 0, 1 or 2``: whether objects of ``type(obj)`` take the helper's
            ``__cuda_array_interface__`` path, and whether their data pointer may decide the
            launch device (None: the Python packers pack them).
        checked_type: ``storage.CheckedDesc``: an array's descriptor of this type is used only
            while its ``check_fn()`` returns its ``check_ptr``, else the launch takes the Python
            path, which raises (None: no such descriptors).
        record_plan: ``fn(kernel) -> tuple or None``: per parameter, the flags the helper
            records a launch from itself (1 an array, 2 read before a write, 4 read after one,
            8 written), asked once per kernel (None: always through ``record``).
        tape_field: the recording tape's attribute (``recording.PENDING_FIELD``) holding its
            pending records, live memory roots, pending roots and in-place saver
            (``saver(tape, arrays, stream)``: True once it saved them, None when the tape does
            not save); the common launch is recorded there without a Python call, an in-place
            step with one call to the saver (None: always through ``record``).
        device_stream_field: the ``Device`` field ``Device.stream`` returns whenever it is set
            (``Device.STREAM_FIELD``): a CUDA launch reads it without the property call (None:
            the property).
        tape_state: the thread-local object whose ``tape`` attribute is what ``active_tape()``
            returns (``recording.THREAD_STATE``): read at every launch instead of calling
            ``active_tape`` (None: the call).
        tape_count: a ``ctypes.c_long`` holding the number of threads with a recording tape
            (``recording.TAPES_ACTIVE_CELL``): while it is 0 the helper skips the thread-local
            read (None: read it always).
    """

    kernel_type: type
    array_type: type
    desc_type: type
    ctype_type: type
    device_type: type
    capture_count: ctypes.c_long
    active_tape: Callable
    get_device: Callable
    infer_device: Callable
    array_fields: tuple
    max_size: int
    float_types: tuple
    int_types: tuple
    record: Optional[Callable] = None
    cai_kind: Optional[Callable] = None
    checked_type: Optional[type] = None
    record_plan: Optional[Callable] = None
    tape_field: Optional[str] = None
    device_stream_field: Optional[str] = None
    tape_state: object = None
    tape_count: Optional[ctypes.c_long] = None


def load(hooks: NativeHooks):
    """Build and load the helper once and hand it ``hooks``; returns its launch function, or None
    when the helper is unavailable (``error()`` says why)."""
    with _lock:
        if "fn" in _state or "error" in _state:
            return _state.get("fn")
        try:
            if type(hooks.capture_count) is not ctypes.c_long or (
                    hooks.tape_count is not None and type(hooks.tape_count) is not ctypes.c_long):
                raise TypeError("the helper's counts must be ctypes.c_long objects (it reads their memory)")
            lib, table = _build()
            if lib.tg_fl_set_hooks(hooks) != 1:
                raise OSError("the native launch helper refused its hooks")
        except Exception as e:  # noqa: BLE001  no compiler, odd Python: the Python path alone
            _state["error"] = f"{type(e).__name__}: {e}"
            return None
        _state.update(lib=lib, table=table, fn=lib.tg_fl_function(0), has_entry=lib.tg_fl_function(1))
        lib.tg_fl_set_dict_fields(int(_dict_fields_ok(hooks.array_type, hooks.array_fields)))
        field = hooks.device_stream_field
        if field is not None and _plain_fields(hooks.device_type, (field,)):
            lib.tg_fl_set_device_stream_field(field.encode())
        for args in _FOREIGN:
            _register_foreign(lib, *args)
        if _numpy_layout_ok() and not _state.get("numpy_off"):
            import numpy
            lib.tg_fl_set_ndarray(numpy.ndarray)
        return _state["fn"]


_MISSING = object()


def _plain_fields(cls, names) -> bool:
    """Whether ``getattr(obj, name)`` of an instance of ``cls`` is its instance dict's value when
    there is one: object's attribute access, and no class of the MRO makes a name a descriptor."""
    if cls.__getattribute__ is not object.__getattribute__ or cls.__setattr__ is not object.__setattr__ \
            or getattr(cls, "__getattr__", None) is not None or not cls.__dictoffset__:
        return False
    for name in names:
        for klass in cls.__mro__:
            v = klass.__dict__.get(name, _MISSING)
            if v is not _MISSING:
                if hasattr(type(v), "__get__"):
                    return False
                break
    return True


def _dict_fields_ok(cls, fields) -> bool:
    """Whether the helper may read a plain array's fields from its instance dict (a name missing
    there being the class's default): the fields (``array_fields``) default to None and
    ``version`` to 0 as plain class attributes, ``dtype`` and ``device`` are instance values,
    no class of the MRO makes one a descriptor, and attribute access is object's own."""
    if not _plain_fields(cls, (*fields, "version", "dtype", "device")):
        return False
    return all(getattr(cls, f, _MISSING) is None for f in fields) and getattr(cls, "version", None).__class__ is int \
        and cls.version == 0


def _numpy_layout_ok() -> bool:
    """numpy's array struct as the C code reads it (data, nd, dimensions, strides, descr, flags)."""
    import numpy as np
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    ro = base[1:, ::2]
    ro.flags.writeable = False
    for x in (base, ro, np.zeros((2, 1, 3, 2), np.int16).transpose(3, 1, 0, 2)):
        a = id(x)
        q = ctypes.sizeof(ctypes.c_void_p)
        dims, strides = (_V.from_address(a + k * q).value for k in (4, 5))
        nd = ctypes.c_int.from_address(a + 3 * q).value
        flags = ctypes.c_int.from_address(a + 8 * q).value
        if (_V.from_address(a + 2 * q).value != x.__array_interface__["data"][0] or nd != x.ndim
                or tuple((ctypes.c_ssize_t * nd).from_address(dims)) != x.shape
                or tuple((ctypes.c_ssize_t * nd).from_address(strides)) != x.strides
                or _V.from_address(a + 7 * q).value != id(x.dtype)
                or bool(flags & 0x0400) != x.flags.writeable):
            return False
    return True


def numpy_off() -> None:
    """Pack numpy arrays with the Python packer only (a launch adapter was registered for them:
    its descriptors may depend on more than the layout the helper caches)."""
    with _lock:
        _state["numpy_off"] = True
        lib = _state.get("lib")
        if lib is not None:
            lib.tg_fl_set_ndarray(None)


_NCHK = 128  # fastlaunch.c NCHK


def new_plan(kinds, ndims, written, dtypes, packers, tid_ndim=0, zero_sizes=None, tid_checks=()):
    """A native plan (a capsule) for one kernel, or None when the helper is not loaded.

    Args:
        kinds: one name of ``KINDS`` per parameter. ndims: array parameters' ndim (else 0).
        written: per parameter, whether the forward writes it. dtypes: array parameters'
            element types (else None). packers: the Python packers (``pack(value, device)``).
        tid_ndim: how many indices the kernel unpacks ``tid()`` into; a launch with fewer grid
            dimensions takes the Python path (which raises).
        zero_sizes: per parameter, the bytes of a non-array's value: an adjoint launch passes
            that many zero bytes as its adjoint (0, or None for all: adjoint launches take the
            Python path).
        tid_checks: ``lang.facts.TidAccess``es of array parameters: a grid that overruns one
            takes the Python path (which raises); more than 128: no native plan.
    """
    lib = _state.get("lib")
    if lib is None or len(kinds) > 64 or len(tid_checks) > _NCHK:
        return None
    n = len(kinds)
    zs = tuple(int(z) for z in zero_sizes) if zero_sizes is not None else (0,) * n
    cap = lib.tg_fl_plan_new(n, bytes(_KIND[k] for k in kinds) + b"\0", bytes(ndims) + b"\0",
                             bytes(1 if w else 0 for w in written) + b"\0", tuple(dtypes), tuple(packers),
                             int(tid_ndim), zs, len(tid_checks),
                             bytes(v for c in tid_checks for v in (c.param, c.dim, c.component, c.components)) + b"\0")
    return cap


def register_module(plan, device, module, mode) -> bool:
    """Let ``plan``'s kernel launch natively on ``device`` through ``module`` (a CpuModule or
    CudaModule) while ``tg.config.mode`` is ``mode``; another module (a debug build's checking
    wrapper) is recorded as declining, so its launches take the Python path without asking
    again. Returns whether the helper launches ``module`` now."""
    lib = _state.get("lib")
    if lib is None or plan is None:
        return False
    if _state["has_entry"](plan, device, module, mode):
        return True
    # exactly these classes: a debug build's wrapper (which checks every launch) forwards
    # attribute reads to the module it wraps, so asking it for fast_entry would bypass its check
    entry = module.fast_entry() if type(module) in (modules.CpuModule, modules.CudaModule) else None
    if entry is None:
        entry = modules.FastEntry(False, None, None, 0, -1, 1)
    cuda, fn, bfn = entry.cuda, entry.forward, entry.backward
    ctx = None
    if fn and cuda:
        if _cuda_ready(lib):
            with device.context_guard():
                ctx = lib.tg_fl_current_context()
        if not ctx:
            fn = None   # no driver entry points, or no context: the Python path (CuPy) launches
    # fn None: recorded as declining, so the Python path does not ask again for this module
    return lib.tg_fl_set_entry(plan, device, module, mode, int(bool(cuda)), fn or None, bfn or None,
                               int(entry.threads_cap), ctx, int(entry.ordinal), int(entry.lanes),
                               entry.error_flag or None) == 1 and bool(fn)


def _cuda_ready(lib) -> bool:
    ok = _state.get("cuda")
    if ok is None:
        try:
            from ..cuda.stream import Stream
            cu = ctypes.CDLL("libcuda.so.1")
            launch, current, set_current = cu.cuLaunchKernel, cu.cuCtxGetCurrent, cu.cuCtxSetCurrent
            attrs = cu.cuPointerGetAttributes   # CUDA >= 7: the device of a CAI object's pointer
        except (OSError, AttributeError, ImportError):
            ok = False
        else:
            lib.tg_fl_set_cuda(Stream, ctypes.cast(launch, _V).value, ctypes.cast(current, _V).value,
                               ctypes.cast(set_current, _V).value, ctypes.cast(attrs, _V).value)
            _state["libcuda"] = cu
            ok = True
        _state["cuda"] = ok
    return ok


def register_foreign(cls, keys, ptr: str, stream_of=None) -> None:
    """Cache launch layouts of ``cls`` instances (exact type) passed directly to ``launch``.

    Args:
        cls: the tensor type. keys: up to 4 ``(name, is_method)`` pairs whose values, together,
            determine the layout the type's launch adapter builds (dtype, shape, strides,
            device); compared with ``==`` at every launch.
        ptr: the method returning the data pointer (read at every launch).
        stream_of: ``f(ordinal) -> handle`` of the framework's current CUDA stream: a launch on
            a stream not ordered with it takes the Python path (whose adapter tells the
            framework's allocator). None: launches with CUDA tensors of ``cls`` always take
            the Python path.
    Raises:
        ValueError: no keys, or more than 4.
    """
    if not 1 <= len(keys) <= 4:
        raise ValueError(f"register_foreign: 1 to 4 key attributes, got {len(keys)}")
    with _lock:
        _FOREIGN.append((cls, tuple(keys), ptr, stream_of))
        lib = _state.get("lib")
        if lib is not None:
            _register_foreign(lib, cls, keys, ptr, stream_of)


def _register_foreign(lib, cls, keys, ptr, stream_of):
    names = [k for k, _ in keys] + [None] * (4 - len(keys))
    methods = "".join("m" if m else "a" for _, m in keys).ljust(4, "a").encode()
    if stream_of is None:
        def stream_of(ordinal):
            return -1   # never ordered: the Python path
    lib.tg_fl_register_foreign(cls, *names, methods, ptr, stream_of)


def forget_types() -> None:
    """Forget which foreign types take the helper's ``__cuda_array_interface__`` path (a launch
    adapter or a device accessor was registered: ``devices.cai_kind`` may answer otherwise now);
    the layouts cached for them are dropped too."""
    lib = _state.get("lib")
    if lib is not None:
        lib.tg_fl_forget_types()


_DECISIONS = ("native", "packer", "fallback")


def cai_decision(iface, current_stream: int, blocking: bool) -> str:
    """What the helper does with a ``__cuda_array_interface__`` dict ``iface`` of an object on a
    CUDA launch whose device's current tapegrad stream has handle ``current_stream`` (blocking
    or not): ``"native"`` (its cached layout, only the pointer read), ``"packer"`` (a dict it
    does not read itself: the Python packer, called from C, as for other objects) or
    ``"fallback"`` (the stream needs an event wait or is refused: the whole launch takes the
    Python path). The same C code decides real launches; tests compare it with
    ``protocols.cai_stream`` and ``protocols.foreign_stream_ordered``.

    Raises:
        RuntimeError: the helper is not loaded.
    """
    lib = _state.get("lib")
    if lib is None:
        raise RuntimeError(f"the native launch helper is not loaded ({error()})")
    return _DECISIONS[lib.tg_fl_cai_decision(iface, int(current_stream), int(bool(blocking)))]


def invalidate() -> None:
    """Forget every plan's modules (``tg.config.mode`` or module options changed: launches may
    pick other builds); the next Python-path launch of each kernel registers its module again."""
    lib = _state.get("lib")
    if lib is not None:
        lib.tg_fl_invalidate()


def stats(adjoint: bool = False) -> tuple:
    """``(fast, fallback)``: launches the helper made, and the ones it passed to the Python path
    (forward and adjoint launches together; ``adjoint=True``: the adjoint launches alone)."""
    lib = _state.get("lib")
    if lib is None:
        return (0, 0)
    out = (ctypes.c_ulonglong * 4)()
    lib.tg_fl_stats(out)
    return (int(out[2]), int(out[3])) if adjoint else (int(out[0]), int(out[1]))


def front(fn, finish, fast, off):
    """``fn`` (a Python function) made by the helper into a builtin that makes its common call
    with no Python frame: a call that binds, by position or keyword, only ``fast`` (the 9
    parameters ``fast_launch`` takes, in its order, missing ones from ``fn``'s defaults), with
    each parameter of ``off`` absent or False and every other parameter absent or None, goes to
    ``fast_launch``; a result other than None to ``finish(result, *fast_args)``. Every other call
    goes to ``fn`` unchanged, which binds it (or raises its TypeError). The builtin has ``fn``'s
    name, module and docstring, its signature as text. One front per process.

    Args:
        fn: the Python function (positional-or-keyword parameters only, at most 32).
        finish: ``finish(result, *fast_args)``, called with ``fast_launch``'s result when it is
            not None (NotImplemented: the Python path; a module: a kernel runtime error).
        fast: the names of ``fn``'s parameters ``fast_launch`` takes, in its argument order.
        off: the names of ``fn``'s switches, which the front takes only absent or False.
    Returns:
        The builtin, or ``fn`` itself when the helper is not loaded (or ``fn`` does not fit).
    """
    import inspect
    lib = _state.get("lib")
    if lib is None or "front" in _state:
        return fn
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params):
        return fn
    names = tuple(sys.intern(p.name) for p in params)
    required = tuple(p.default is p.empty for p in params)
    defaults = tuple(None if p.default is p.empty else p.default for p in params)
    doc = f"{fn.__name__}{sig}\n--\n\n{inspect.getdoc(fn) or ''}"
    module = sys.modules[fn.__module__]
    try:
        builtin = lib.tg_fl_front(fn, finish, names, defaults, required, tuple(sys.intern(n) for n in fast),
                                  tuple(sys.intern(n) for n in off), doc.encode(), module, fn.__module__)
    except ValueError:   # NULL: the tables do not fit
        return fn
    _state["front"] = builtin
    return builtin


def front_switch(on: bool) -> bool:
    """Turn the front (``front``) on or off: off, each call goes to its Python function (tests
    compare the native and Python paths). Returns whether it was on."""
    lib = _state.get("lib")
    return bool(lib.tg_fl_front_switch(int(bool(on)))) if lib is not None else False


def error():
    """Why the helper is not loaded (None when it is, or has not been tried)."""
    return _state.get("error")

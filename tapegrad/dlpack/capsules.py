"""The DLPack capsule machinery: one small C helper, with a pure-ctypes fallback.

Why C: a DLPack deleter may run on any thread and at any time, including after the Python
interpreter has been torn down (a torch or JAX view that outlives ``Py_Finalize``, freed by
the framework's own C++ exit code). A ctypes callback cannot survive that: ctypes' trampoline
takes the GIL before any of our code runs, which crashes or hangs once the interpreter is
gone (this is Warp 1.19's exit crash). The C deleter below checks ``Py_IsInitialized()``
first, and when Python is gone (or finalizing on a thread without the GIL) it frees only its
own malloc'd block and leaves the owner alone; otherwise it takes the GIL with
``PyGILState_Ensure`` and releases the owner.

The helper (``capsule_helper.c``, shipped as package data) needs no ``Python.h``: the few
C-API functions it calls arrive as a table of addresses taken from ``ctypes.pythonapi``, so
it builds against libc only. It is compiled at install (``setup.py``) and loaded through
``tapegrad.native`` with ``ctypes.PyDLL`` (GIL held, Python errors propagate); when that library
is missing or stale, ``tapegrad.build`` compiles it into the kernel cache (``$TAPEGRAD_CACHE``
or ``~/.cache/tapegrad``, same checks and atomic rename as kernels).

Both backends expose the same two functions:

``export(owner, desc: bytes, versioned: int) -> capsule``
    ``desc`` packs little-endian int64s: data, device_type, device_id, code, bits, lanes,
    ndim, flags, version major, version minor, shape[ndim], strides[ndim] (elements). The
    capsule keeps a reference to ``owner`` until the consumer calls the deleter (or the
    capsule is dropped unconsumed).

``import_(capsule, accept: bytes) -> tuple``
    Consumes a ``dltensor``/``dltensor_versioned`` capsule (renaming it ``used_...``) and
    returns ``(owner, ptr, device_type, device_id, code, bits, lanes, flags, shape,
    strides_or_None, versioned)`` where ``ptr`` already includes ``byte_offset``, strides are
    in elements and ``owner`` calls the producer's deleter exactly once when it dies. Capsules
    with an unsupported device or dtype (``accept`` lists allowed (code, bits) byte pairs) are
    refused *without* being consumed.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading

from .. import build, native
from ..errors import ConsumedCapsuleError, DLPackDtypeError

__all__ = ["backend", "use_backend", "build_helper", "entry_points", "ENTRY_POINTS", "C_SOURCE_PATH"]


# Supported DLDeviceType values on import: CPU, CUDA, CUDAHost (pinned), CUDAManaged.
_IMPORT_DEVICES = (1, 2, 3, 13)

# Order of the C-API table handed to tg_dlpack_init (must match the C enum).
_API_NAMES = ("Py_IncRef", "Py_DecRef", "PyCapsule_New", "PyCapsule_IsValid", "PyCapsule_GetPointer",
              "PyCapsule_SetName", "PyErr_SetString", "Py_IsInitialized", "<is_finalizing>",
              "PyGILState_Ensure", "PyGILState_Release", "PyGILState_Check", "PyTuple_New",
              "PyTuple_SetItem", "PyLong_FromLongLong", "PyLong_FromUnsignedLongLong", "<None>",
              "<TypeError>", "<ValueError>", "<BufferError>", "<ConsumedCapsuleError>", "<MemoryError>")

# the helper's source ships as package data beside this module
C_SOURCE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capsule_helper.c")



def build_helper() -> str:
    """Compile the helper into the kernel cache (once per source version, through
    ``tapegrad.build``, whose cache checks apply); returns the library path.

    Raises:
        CompileError: no C++ compiler works.
        CacheDirError: the cache directory is unsafe (a PermissionError).
    """
    return build.build_cpu(_helper_source(), "tg_dlpack")


def _helper_source() -> str:
    with open(C_SOURCE_PATH) as f:
        return f.read()


def _api_table(consumed_exc, memory_exc=MemoryError):
    pyapi = ctypes.pythonapi
    fin = getattr(pyapi, "Py_IsFinalizing", None) or getattr(pyapi, "_Py_IsFinalizing", None)
    objs = {"<None>": None, "<TypeError>": DLPackDtypeError, "<ValueError>": ValueError,
            "<BufferError>": BufferError, "<ConsumedCapsuleError>": consumed_exc, "<MemoryError>": memory_exc}
    table = (ctypes.c_void_p * len(_API_NAMES))()
    for i, name in enumerate(_API_NAMES):
        if name == "<is_finalizing>":
            table[i] = ctypes.cast(fin, ctypes.c_void_p).value if fin is not None else None
        elif name.startswith("<"):
            table[i] = id(objs[name])
        else:
            table[i] = ctypes.cast(getattr(pyapi, name), ctypes.c_void_p).value
    return table


class _NativeBackend:
    name = "native"

    def __init__(self):
        lib = native.load("tg_dlpack", python_api=True)   # built at install; else compiled, verified
        lib.tg_dlpack_init.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.tg_dlpack_init.restype = ctypes.c_int
        table = _api_table(ConsumedCapsuleError)
        sizes = lib.tg_dlpack_init(table, len(_API_NAMES))
        if sizes != 80 * 1000 + 64:
            raise OSError(f"DLPack helper: unexpected struct sizes {sizes}")
        self._lib = lib
        self._table = table
        ex = lib.tg_dlpack_export
        ex.argtypes = [ctypes.py_object, ctypes.c_char_p, ctypes.c_int]
        ex.restype = ctypes.py_object
        im = lib.tg_dlpack_import
        im.argtypes = [ctypes.py_object, ctypes.c_char_p, ctypes.c_int]
        im.restype = ctypes.py_object
        self.export = ex
        self._im = im

    def import_(self, capsule, accept):
        return self._im(capsule, accept, len(accept))


# ------------------------------------------------------------------- pure-ctypes fallback

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


class _CtypesBackend:
    """Used only when no C compiler works. Sound at exit by a different route: an ``atexit``
    hook rewrites the deleter of every capsule still held by a foreign framework to libc's
    ``free`` (keeping the owners alive), so no Python callback can run after teardown."""

    name = "ctypes"

    def __init__(self):
        libc = ctypes.CDLL(None) if sys.platform != "win32" else ctypes.cdll.msvcrt
        self._malloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(("malloc", libc))
        self._free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(("free", libc))
        self._free_addr = ctypes.cast(self._free, ctypes.c_void_p).value
        api = ctypes.pythonapi
        P = ctypes.PYFUNCTYPE  # private prototypes: never touch the shared ctypes.pythonapi.* argtypes
        self._cap_dtor_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        self._cap_new = P(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(("PyCapsule_New", api))
        self._cap_isvalid = P(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", api))
        self._cap_getptr = P(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", api))
        self._cap_setname = P(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(("PyCapsule_SetName", api))
        # capsule names must outlive the capsules: module-lifetime bytes
        self._names = {n: ctypes.create_string_buffer(n) for n in
                       (b"dltensor", b"dltensor_versioned", b"used_dltensor", b"used_dltensor_versioned")}
        self._live: dict[int, tuple] = {}
        self._lock = threading.Lock()
        self._deleter_legacy = _DELETER(self._on_delete)
        self._deleter_versioned = _DELETER(self._on_delete)
        self._deleter_addr = ctypes.cast(self._deleter_legacy, ctypes.c_void_p).value
        self._deleter_v_addr = ctypes.cast(self._deleter_versioned, ctypes.c_void_p).value
        self._cap_dtor = self._cap_dtor_t(self._on_capsule_dtor)
        self._cap_dtor_addr = ctypes.cast(self._cap_dtor, ctypes.c_void_p).value
        self._deleter_fns: dict[int, object] = {}
        self._deleter_t = _DELETER
        self._void_p = ctypes.c_void_p
        atexit.register(self._at_exit)

    def _on_delete(self, addr):
        with self._lock:
            self._live.pop(addr, None)
        self._free(addr)

    def _on_capsule_dtor(self, cap):
        for name, off in ((b"dltensor_versioned", 16), (b"dltensor", 56)):
            if self._cap_isvalid(cap, name):
                m = self._cap_getptr(cap, name)
                fn = self._void_p.from_address(m + off).value
                if fn:
                    self._call_deleter(fn, m)
                return

    def _call_deleter(self, fn, m):
        f = self._deleter_fns.get(fn)
        if f is None:   # (no module globals here: this may run late in interpreter shutdown)
            f = self._deleter_fns[fn] = self._deleter_t(fn)
        f(m)

    def _at_exit(self):
        with self._lock:
            for addr, (owner, versioned) in list(self._live.items()):
                off = 16 if versioned else 56
                ctypes.c_void_p.from_address(addr + off).value = self._free_addr
            # owners stay referenced (leaked at exit) so views stay valid to the end

    def export(self, owner, desc, versioned):
        import struct
        h = struct.unpack_from("<10q", desc)
        ndim = h[6]
        head = ctypes.sizeof(_DLManagedTensorVersioned if versioned else _DLManagedTensor)
        addr = self._malloc(head + 16 * ndim)
        if not addr:
            raise MemoryError("DLPack export: out of memory")
        if versioned:
            m = _DLManagedTensorVersioned.from_address(addr)
            m.major, m.minor, m.flags = h[8], h[9], h[7]
            m.deleter = self._deleter_v_addr
        else:
            m = _DLManagedTensor.from_address(addr)
            m.deleter = self._deleter_addr
        m.manager_ctx = None
        t = m.dl_tensor
        t.data = h[0] or None
        t.device.device_type, t.device.device_id = h[1], h[2]
        t.dtype.code, t.dtype.bits, t.dtype.lanes = h[3], h[4], h[5]
        t.ndim = ndim
        ctypes.memmove(addr + head, desc[80:80 + 16 * ndim], 16 * ndim)
        t.shape = ctypes.cast(addr + head, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(addr + head + 8 * ndim, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = 0
        with self._lock:
            self._live[addr] = (owner, bool(versioned))
        name = self._names[b"dltensor_versioned" if versioned else b"dltensor"]
        try:
            return self._cap_new(addr, ctypes.addressof(name), self._cap_dtor_addr)
        except BaseException:
            self._on_delete(addr)
            raise

    def import_(self, capsule, accept):
        if type(capsule).__name__ != "PyCapsule":
            raise DLPackDtypeError("from_dlpack: expected a PyCapsule named 'dltensor' or 'dltensor_versioned'")
        cap = id(capsule)
        if self._cap_isvalid(cap, b"dltensor_versioned"):
            versioned, name = 1, b"dltensor_versioned"
        elif self._cap_isvalid(cap, b"dltensor"):
            versioned, name = 0, b"dltensor"
        elif self._cap_isvalid(cap, b"used_dltensor") or self._cap_isvalid(cap, b"used_dltensor_versioned"):
            raise ConsumedCapsuleError("from_dlpack: this DLPack capsule was already consumed (a capsule can be "
                                       "imported once; call __dlpack__/to_dlpack again for a new one)")
        else:
            raise DLPackDtypeError("from_dlpack: expected a PyCapsule named 'dltensor' or 'dltensor_versioned'")
        p = self._cap_getptr(cap, name)
        flags = 0
        if versioned:
            m = _DLManagedTensorVersioned.from_address(p)
            if m.major != 1:
                major, minor, fn = m.major, m.minor, m.deleter
                self._cap_setname(capsule, ctypes.addressof(self._names[b"used_dltensor_versioned"]))
                if fn:
                    self._call_deleter(fn, p)
                raise BufferError(f"from_dlpack: DLPack version {major}.{minor} is not supported "
                                  "(tapegrad reads 1.x capsules)")
            flags, t, fn = m.flags, m.dl_tensor, m.deleter
        else:
            m = _DLManagedTensor.from_address(p)
            t, fn = m.dl_tensor, m.deleter
        dt, did = t.device.device_type, t.device.device_id
        if dt not in _IMPORT_DEVICES:
            raise DLPackDtypeError(f"Unsupported source device for DLPack: device_type={dt}, device_id={did} "
                                   "(tapegrad imports CPU, CUDA, CUDA-host and CUDA-managed memory)")
        ndim = t.ndim
        if not 0 <= ndim <= 64 or (ndim and not t.shape):
            raise ValueError(f"from_dlpack: bad ndim {ndim} in DLPack tensor")
        code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
        pairs = {(accept[i], accept[i + 1]) for i in range(0, len(accept) - 1, 2)}
        if (code, bits) not in pairs or lanes == 0:
            raise DLPackDtypeError(f"from_dlpack: DLPack dtype (code={code}, bits={bits}, lanes={lanes}) has no "
                                   "tapegrad equivalent")
        shape = tuple(t.shape[i] for i in range(ndim))
        strides = tuple(t.strides[i] for i in range(ndim)) if (ndim and t.strides) else None
        ptr = (t.data or 0) + t.byte_offset
        owner = _ImportOwner(self, fn, p)
        self._cap_setname(capsule, ctypes.addressof(
            self._names[b"used_dltensor_versioned" if versioned else b"used_dltensor"]))
        return (owner, ptr, dt, did, code, bits, lanes, flags, shape, strides, versioned)


class _ImportOwner:
    __slots__ = ("_backend", "_fn", "_m")

    def __init__(self, backend, fn, m):
        self._backend, self._fn, self._m = backend, fn, m

    def __del__(self):
        fn, self._fn = self._fn, None
        if fn:
            self._backend._call_deleter(fn, self._m)


# ------------------------------------------------------------------------------- selection

_backend = None
_backend_lock = threading.Lock()
# (export, import_) of the active backend, read by the hot paths of export and from_dlpack;
# [None, None] until the first call (entry_points() fills it)
ENTRY_POINTS = [None, None]


def entry_points() -> list:
    """``[export, import_]`` of the active backend (building it on first use), cached in
    ``ENTRY_POINTS``."""
    b = backend()
    ENTRY_POINTS[0], ENTRY_POINTS[1] = b.export, b.import_
    return ENTRY_POINTS


def backend():
    """The active backend (built on first use): native C unless ``TAPEGRAD_DLPACK_NATIVE=0``
    or no C compiler works, then the ctypes fallback."""
    global _backend
    if _backend is None:
        with _backend_lock:
            if _backend is None:
                b = None
                if os.environ.get("TAPEGRAD_DLPACK_NATIVE", "1") != "0":
                    try:
                        b = _NativeBackend()
                    except Exception as e:  # no compiler, unsafe cache dir, unloadable library
                        import warnings
                        warnings.warn(f"tapegrad.dlpack: C helper unavailable ({e}); using the ctypes fallback",
                                      RuntimeWarning, stacklevel=3)
                _backend = b or _CtypesBackend()
    return _backend


_backends: dict = {}


def use_backend(name: str):
    """Switch backends ('native' or 'ctypes'); returns the previous one's name. For tests."""
    global _backend
    prev = backend().name
    b = _backends.get(name)
    if b is None:
        if _backend is not None and _backend.name == name:
            b = _backend
        else:
            b = _NativeBackend() if name == "native" else _CtypesBackend()
    _backends[prev] = _backend
    _backends[name] = b
    _backend = b
    ENTRY_POINTS[0], ENTRY_POINTS[1] = b.export, b.import_
    return prev

"""The DLPack capsule machinery: one small C helper, with a pure-ctypes fallback.

Why C: a DLPack deleter may run on any thread and at any time, including after the Python
interpreter has been torn down (a torch or JAX view that outlives ``Py_Finalize``, freed by
the framework's own C++ exit code). A ctypes callback cannot survive that: ctypes' trampoline
takes the GIL before any of our code runs, which crashes or hangs once the interpreter is
gone (this is Warp 1.19's exit crash). The C deleter below checks ``Py_IsInitialized()``
first, and when Python is gone (or finalizing on a thread without the GIL) it frees only its
own malloc'd block and leaves the owner alone; otherwise it takes the GIL with
``PyGILState_Ensure`` and releases the owner.

The helper needs no ``Python.h``: the few C-API functions it calls arrive as a table of
addresses taken from ``ctypes.pythonapi``, so it builds with any C compiler against libc only.
It is compiled once per source version into the tapegrad cache directory
(``$TAPEGRAD_CACHE`` or ``~/.cache/tapegrad``) with an atomic rename, and loaded with
``ctypes.PyDLL`` (GIL held, Python errors propagate).

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
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading

__all__ = ["backend", "use_backend", "ConsumedCapsuleError", "DLPackDtypeError", "cache_dir"]


class ConsumedCapsuleError(RuntimeError):
    """A DLPack capsule was consumed already (capsules are single-use)."""


class DLPackDtypeError(TypeError, RuntimeError):
    """A dtype has no DLPack form (TypeError; also RuntimeError, as Warp raises)."""


# Supported DLDeviceType values on import: CPU, CUDA, CUDAHost (pinned), CUDAManaged.
_IMPORT_DEVICES = (1, 2, 3, 13)

# Order of the C-API table handed to tg_dlpack_init (must match the C enum).
_API_NAMES = ("Py_IncRef", "Py_DecRef", "PyCapsule_New", "PyCapsule_IsValid", "PyCapsule_GetPointer",
              "PyCapsule_SetName", "PyErr_SetString", "Py_IsInitialized", "<is_finalizing>",
              "PyGILState_Ensure", "PyGILState_Release", "PyGILState_Check", "PyTuple_New",
              "PyTuple_SetItem", "PyLong_FromLongLong", "PyLong_FromUnsignedLongLong", "<None>",
              "<TypeError>", "<ValueError>", "<BufferError>", "<ConsumedCapsuleError>", "<MemoryError>")

C_SOURCE = r"""
/* tapegrad DLPack helper. Built by tapegrad/dlpack/_native.py; needs libc only. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _object PyObject;
typedef void (*capsule_destructor)(PyObject *);

typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data; DLDevice device; int32_t ndim; DLDataType dtype;
    int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version; void *manager_ctx; void (*deleter)(struct DLManagedTensorVersioned *);
    uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;

enum { A_INCREF, A_DECREF, A_CAP_NEW, A_CAP_ISVALID, A_CAP_GETPTR, A_CAP_SETNAME, A_ERR_SET,
       A_IS_INIT, A_IS_FINALIZING, A_GIL_ENSURE, A_GIL_RELEASE, A_GIL_CHECK, A_TUPLE_NEW,
       A_TUPLE_SET, A_LONG_LL, A_LONG_ULL, A_NONE, A_EXC_TYPE, A_EXC_VALUE, A_EXC_BUFFER,
       A_EXC_CONSUMED, A_EXC_MEMORY, A_COUNT };

static struct {
    void (*incref)(PyObject *);
    void (*decref)(PyObject *);
    PyObject *(*cap_new)(void *, const char *, capsule_destructor);
    int (*cap_isvalid)(PyObject *, const char *);
    void *(*cap_getptr)(PyObject *, const char *);
    int (*cap_setname)(PyObject *, const char *);
    void (*err_set)(PyObject *, const char *);
    int (*is_init)(void);
    int (*is_finalizing)(void);           /* may be NULL */
    int (*gil_ensure)(void);              /* PyGILState_STATE is an int-sized enum */
    void (*gil_release)(int);
    int (*gil_check)(void);
    PyObject *(*tuple_new)(intptr_t);
    int (*tuple_set)(PyObject *, intptr_t, PyObject *);
    PyObject *(*long_ll)(long long);
    PyObject *(*long_ull)(unsigned long long);
    PyObject *none;
    PyObject *exc_type, *exc_value, *exc_buffer, *exc_consumed, *exc_memory;
} api;
static int api_ready = 0;

static const char N_LEGACY[] = "dltensor";
static const char N_VERSIONED[] = "dltensor_versioned";
static const char N_USED_LEGACY[] = "used_dltensor";
static const char N_USED_VERSIONED[] = "used_dltensor_versioned";
static const char N_OWNER_LEGACY[] = "tapegrad.dlpack_owner";
static const char N_OWNER_VERSIONED[] = "tapegrad.dlpack_owner_versioned";
static const char N_DEAD[] = "tapegrad.dlpack_dead";

int tg_dlpack_init(void **table, int n) {
    if (n != A_COUNT) return -1;
    void **dst = (void **)&api;
    for (int i = 0; i < A_COUNT; i++) dst[i] = table[i];
    /* exception classes and None must outlive every call: keep them forever */
    api.incref(api.exc_type); api.incref(api.exc_value); api.incref(api.exc_buffer);
    api.incref(api.exc_consumed); api.incref(api.exc_memory);
    api_ready = 1;
    return (int)sizeof(DLManagedTensorVersioned) * 1000 + (int)sizeof(DLManagedTensor);
}

/* Release the exported array a capsule kept alive. Never touches a dead interpreter. */
static void release_owner(PyObject *o) {
    if (!o || !api_ready) return;
    if (!api.is_init()) return;                     /* after (or late in) Py_Finalize: leak */
    if (api.is_finalizing && api.is_finalizing() && !api.gil_check()) return;  /* foreign thread at exit */
    int st = api.gil_ensure();
    api.decref(o);
    api.gil_release(st);
}

static void deleter_legacy(DLManagedTensor *m) {
    if (!m) return;
    PyObject *o = (PyObject *)m->manager_ctx;
    m->manager_ctx = NULL;
    m->deleter = NULL;
    free(m);
    release_owner(o);
}

static void deleter_versioned(DLManagedTensorVersioned *m) {
    if (!m) return;
    PyObject *o = (PyObject *)m->manager_ctx;
    m->manager_ctx = NULL;
    m->deleter = NULL;
    free(m);
    release_owner(o);
}

/* Destructor of an exported capsule: runs the deleter only if nobody consumed it. */
static void export_capsule_dtor(PyObject *cap) {
    if (api.cap_isvalid(cap, N_VERSIONED)) {
        DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)api.cap_getptr(cap, N_VERSIONED);
        if (m && m->deleter) m->deleter(m);
    } else if (api.cap_isvalid(cap, N_LEGACY)) {
        DLManagedTensor *m = (DLManagedTensor *)api.cap_getptr(cap, N_LEGACY);
        if (m && m->deleter) m->deleter(m);
    }
}

PyObject *tg_dlpack_export(PyObject *owner, const char *desc, int versioned) {
    int64_t h[10];
    memcpy(h, desc, sizeof h);
    int64_t ndim = h[6];
    if (ndim < 0 || ndim > 64) { api.err_set(api.exc_value, "DLPack export: bad ndim"); return NULL; }
    size_t dims = 2 * (size_t)ndim * sizeof(int64_t);
    DLTensor *t;
    void *block;
    if (versioned) {
        DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)malloc(sizeof *m + dims);
        if (!m) { api.err_set(api.exc_memory, "DLPack export: out of memory"); return NULL; }
        m->version.major = (uint32_t)h[8];
        m->version.minor = (uint32_t)h[9];
        m->manager_ctx = owner;
        m->deleter = deleter_versioned;
        m->flags = (uint64_t)h[7];
        t = &m->dl_tensor;
        block = m;
        t->shape = (int64_t *)((char *)m + sizeof *m);
    } else {
        DLManagedTensor *m = (DLManagedTensor *)malloc(sizeof *m + dims);
        if (!m) { api.err_set(api.exc_memory, "DLPack export: out of memory"); return NULL; }
        m->manager_ctx = owner;
        m->deleter = deleter_legacy;
        t = &m->dl_tensor;
        block = m;
        t->shape = (int64_t *)((char *)m + sizeof *m);
    }
    t->data = (void *)(uintptr_t)h[0];
    t->device.device_type = (int32_t)h[1];
    t->device.device_id = (int32_t)h[2];
    t->dtype.code = (uint8_t)h[3];
    t->dtype.bits = (uint8_t)h[4];
    t->dtype.lanes = (uint16_t)h[5];
    t->ndim = (int32_t)ndim;
    t->strides = t->shape + ndim;
    t->byte_offset = 0;
    if (ndim) memcpy(t->shape, desc + sizeof h, dims);
    api.incref(owner);
    PyObject *cap = api.cap_new(block, versioned ? N_VERSIONED : N_LEGACY, export_capsule_dtor);
    if (!cap) {
        api.decref(owner);
        free(block);
        return NULL;
    }
    return cap;
}

/* Destructor of the owner capsule tapegrad keeps for an imported tensor. */
static void owner_dtor(PyObject *cap) {
    if (api.cap_isvalid(cap, N_OWNER_VERSIONED)) {
        DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)api.cap_getptr(cap, N_OWNER_VERSIONED);
        if (m && m->deleter) m->deleter(m);
    } else if (api.cap_isvalid(cap, N_OWNER_LEGACY)) {
        DLManagedTensor *m = (DLManagedTensor *)api.cap_getptr(cap, N_OWNER_LEGACY);
        if (m && m->deleter) m->deleter(m);
    }
}

static PyObject *int_tuple(const int64_t *v, int64_t n) {
    PyObject *t = api.tuple_new((intptr_t)n);
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++) {
        PyObject *x = api.long_ll((long long)v[i]);
        if (!x) { api.decref(t); return NULL; }
        api.tuple_set(t, (intptr_t)i, x);
    }
    return t;
}

PyObject *tg_dlpack_import(PyObject *cap, const unsigned char *accept, int n_accept) {
    char msg[256];
    int versioned;
    const char *name;
    if (api.cap_isvalid(cap, N_VERSIONED)) { versioned = 1; name = N_VERSIONED; }
    else if (api.cap_isvalid(cap, N_LEGACY)) { versioned = 0; name = N_LEGACY; }
    else if (api.cap_isvalid(cap, N_USED_VERSIONED) || api.cap_isvalid(cap, N_USED_LEGACY)) {
        api.err_set(api.exc_consumed, "from_dlpack: this DLPack capsule was already consumed "
                    "(a capsule can be imported once; call __dlpack__/to_dlpack again for a new one)");
        return NULL;
    } else {
        api.err_set(api.exc_type, "from_dlpack: expected a PyCapsule named 'dltensor' or 'dltensor_versioned'");
        return NULL;
    }
    void *p = api.cap_getptr(cap, name);
    if (!p) return NULL;
    DLTensor *t;
    uint64_t flags = 0;
    if (versioned) {
        DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)p;
        if (m->version.major != 1) {
            /* a different major version: the only thing we may do is call the deleter */
            unsigned major = m->version.major, minor = m->version.minor;
            api.cap_setname(cap, N_USED_VERSIONED);
            if (m->deleter) m->deleter(m);
            snprintf(msg, sizeof msg, "from_dlpack: DLPack version %u.%u is not supported "
                     "(tapegrad reads 1.x capsules)", major, minor);
            api.err_set(api.exc_buffer, msg);
            return NULL;
        }
        flags = m->flags;
        t = &m->dl_tensor;
    } else {
        t = &((DLManagedTensor *)p)->dl_tensor;
    }
    int32_t dt = t->device.device_type;
    if (!(dt == 1 || dt == 2 || dt == 3 || dt == 13)) {
        snprintf(msg, sizeof msg, "Unsupported source device for DLPack: device_type=%d, device_id=%d "
                 "(tapegrad imports CPU, CUDA, CUDA-host and CUDA-managed memory)", (int)dt, (int)t->device.device_id);
        api.err_set(api.exc_type, msg);
        return NULL;
    }
    if (t->ndim < 0 || t->ndim > 64 || (t->ndim > 0 && !t->shape)) {
        snprintf(msg, sizeof msg, "from_dlpack: bad ndim %d in DLPack tensor", (int)t->ndim);
        api.err_set(api.exc_value, msg);
        return NULL;
    }
    int ok = 0;
    for (int i = 0; i + 1 < n_accept; i += 2)
        if (accept[i] == t->dtype.code && accept[i + 1] == t->dtype.bits) { ok = 1; break; }
    if (!ok || t->dtype.lanes == 0) {
        snprintf(msg, sizeof msg, "from_dlpack: DLPack dtype (code=%u, bits=%u, lanes=%u) has no tapegrad "
                 "equivalent", (unsigned)t->dtype.code, (unsigned)t->dtype.bits, (unsigned)t->dtype.lanes);
        api.err_set(api.exc_type, msg);
        return NULL;
    }
    /* build the result first: nothing is consumed if this fails */
    PyObject *res = api.tuple_new(11);
    if (!res) return NULL;
    PyObject *shape = int_tuple(t->shape, t->ndim);
    PyObject *strides;
    if (t->strides && t->ndim) strides = int_tuple(t->strides, t->ndim);
    else { strides = api.none; api.incref(strides); }
    PyObject *items[10] = {
        api.long_ull((unsigned long long)((uintptr_t)t->data + t->byte_offset)),
        api.long_ll(dt), api.long_ll(t->device.device_id), api.long_ll(t->dtype.code),
        api.long_ll(t->dtype.bits), api.long_ll(t->dtype.lanes), api.long_ull(flags),
        shape, strides, api.long_ll(versioned)};
    int bad = 0;
    for (int i = 0; i < 10; i++) {
        if (!items[i]) bad = 1;
        else api.tuple_set(res, i + 1, items[i]);
    }
    if (bad) { api.decref(res); return NULL; }
    PyObject *owner = api.cap_new(p, versioned ? N_OWNER_VERSIONED : N_OWNER_LEGACY, owner_dtor);
    if (!owner) { api.decref(res); return NULL; }
    if (api.cap_setname(cap, versioned ? N_USED_VERSIONED : N_USED_LEGACY) != 0) {
        api.cap_setname(owner, N_DEAD);        /* keep the deleter single-shot */
        api.decref(owner);
        api.decref(res);
        return NULL;
    }
    api.tuple_set(res, 0, owner);
    return res;
}

#ifdef __cplusplus
}
#endif
"""


def cache_dir() -> str:
    """tapegrad's per-user cache directory (``$TAPEGRAD_CACHE`` or ``~/.cache/tapegrad``, mode 0700).

    The kernel compiler's checks apply (``tapegrad.compile.cache_dir``): a world-writable
    directory or one owned by another user is refused (``PermissionError``), since a library
    loaded from it could be planted by someone else.
    """
    try:
        from ..compile import cache_dir as kernel_cache_dir
    except ImportError:
        kernel_cache_dir = None
    if kernel_cache_dir is not None:
        return kernel_cache_dir()
    d = os.path.abspath(os.path.expanduser(os.environ.get("TAPEGRAD_CACHE") or "~/.cache/tapegrad"))
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.stat(d)
    if st.st_mode & 0o002 or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        raise PermissionError(f"refusing to load a library from {d}: it is world-writable or not yours "
                              "(set TAPEGRAD_CACHE to a private directory)")
    return d


def _compilers():
    """Compiler commands to try: C compilers first, then the C++ compiler the kernel compiler uses
    (the source is valid C and C++)."""
    seen = []
    for c in (os.environ.get("TAPEGRAD_CC"), os.environ.get("CC"), "cc", "gcc", "clang"):
        if c and c.split() not in seen and shutil.which(c.split()[0]):
            seen.append(c.split())
    try:
        from ..compile import find_cxx
        cmd = list(find_cxx()[0])
        if cmd not in seen:
            seen.append(cmd)
    except Exception:  # no C++ compiler either, or the compiler module unavailable
        pass
    return seen


def _build() -> str:
    """Compile the helper into the cache (once per source version); return the library path."""
    tag = hashlib.sha256((C_SOURCE + sys.platform + platform.machine()).encode()).hexdigest()[:16]
    ext = ".dylib" if sys.platform == "darwin" else ".so"
    d = cache_dir()
    lib = os.path.join(d, f"dlpack-{tag}{ext}")
    if os.path.exists(lib):
        return lib
    fd, src = tempfile.mkstemp(prefix="dlpack-", suffix=".c", dir=d)
    with os.fdopen(fd, "w") as f:
        f.write(C_SOURCE)
    out = src[:-2] + ext
    errors = []
    try:
        for cc in _compilers():
            cmd = cc + ["-O2", "-shared", "-fPIC", "-o", out, src]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as e:
                errors.append(f"{' '.join(cc)}: {e}")
                continue
            if r.returncode == 0:
                os.replace(out, lib)  # atomic: concurrent builders all end with a complete file
                return lib
            errors.append(f"{' '.join(cc)}: {r.stderr.strip()[-500:]}")
        raise OSError("no working C compiler (" + ("; ".join(errors) or "none found") + ")")
    finally:
        for p in (src, out):
            try:
                os.unlink(p)
            except OSError:
                pass


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
        lib = ctypes.PyDLL(_build())
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
    return prev

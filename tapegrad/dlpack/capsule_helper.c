/* tapegrad DLPack helper: capsule deleters that are safe at interpreter exit.
   Built by tapegrad/dlpack/capsules.py through tapegrad.build (as C++); needs libc only. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kernels build with -fvisibility=hidden: the three entry points must stay visible */
#if defined(__GNUC__) || defined(__clang__)
#define TG_EXPORT __attribute__((visibility("default")))
#else
#define TG_EXPORT
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

TG_EXPORT int tg_dlpack_init(void **table, int n) {
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

TG_EXPORT PyObject *tg_dlpack_export(PyObject *owner, const char *desc, int versioned) {
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

TG_EXPORT PyObject *tg_dlpack_import(PyObject *cap, const unsigned char *accept, int n_accept) {
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

/* tapegrad fast launch: pack a kernel's arguments and launch it in one native call.
   Built by tapegrad/launch/fastlaunch.py through tapegrad.build (as C++); needs libc only. The Python
   C-API functions arrive as a table of addresses (ctypes.pythonapi), the CUDA driver entry
   points as addresses from ctypes.CDLL("libcuda.so.1"), so no Python.h or CUDA header is used.

   fast_launch(kernel, dim, inputs, outputs, device, stream, record_tape, block_dim, max_blocks)
   returns None when it launched, NotImplemented when the launch is not one it takes (launch()
   then runs its Python path, which raises every error message); it never raises itself. A CPU
   launch that ran but met a runtime error in the kernel (a zero slice step: the library's error
   code, read after the launch, is set) returns the module it launched, whose ErrorSlot launch()
   raises from (the launch ran and was recorded: it must not run again on the Python path). With
   two more arguments, adj_inputs and adj_outputs (None or sequences), it launches the kernel's
   adjoint instead: the forward arguments packed as for a forward launch, then one adjoint
   argument per parameter (an array's .grad descriptor or the one given, a NULL descriptor for
   none, a zeroed slot for a scalar/vector/matrix/struct), as launch(..., adjoint=True) packs them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the kernel ABI (tapegrad/abi): structs, parameter kinds, integer ranges, the grid formula */
#include "tg_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TG_EXPORT __attribute__((visibility("default")))
#else
#define TG_EXPORT
#endif

typedef struct _object PyObject;
typedef intptr_t Py_ssize_t;
typedef PyObject *(*PyCFunctionFast)(PyObject *, PyObject *const *, Py_ssize_t);
typedef struct { const char *name; void *meth; int flags; const char *doc; } PyMethodDef;
#define METH_FASTCALL 0x0080

/* ob_type follows ob_refcnt in every non-free-threaded CPython (checked at init from Python) */
#define TYPE(o) (((PyObject **)(o))[1])
/* a ctypes object's buffer pointer (CDataObject.b_ptr) follows the object head (checked at init) */
#define CBUF(o) (((void **)(o))[2])

enum { A_INCREF, A_DECREF, A_GETATTR, A_SETATTR, A_RICHCMP_BOOL, A_ISINSTANCE, A_VECTORCALL,
       A_CALLMETHOD, A_FLOAT_AS_DOUBLE, A_LONG_AS_LL_OVF, A_LONG_AS_DOUBLE, A_LONG_FROM_LL,
       A_ERR_OCCURRED, A_ERR_CLEAR, A_TUPLE_SIZE, A_TUPLE_GETITEM, A_LIST_SIZE, A_LIST_GETITEM,
       A_TUPLE_NEW, A_TUPLE_SETITEM, A_DICT_GETITEM, A_CAP_NEW, A_CAP_GETPTR, A_SAVE_THREAD,
       A_RESTORE_THREAD, A_CFUNC_NEW, A_INTERN, A_LONG_AS_ULL, A_UNICODE_UTF8,
       A_SET_NEW, A_SET_ADD, A_SET_SIZE, A_DICT_SETITEM, A_LIST_APPEND, A_GENERIC_GETDICT,
       A_NONE, A_TRUE, A_FALSE, A_NOTIMPL, A_T_FLOAT, A_T_INT, A_T_BOOL, A_T_TUPLE, A_T_LIST, A_T_STR,
       A_T_DICT, A_COUNT };

static struct {
    void (*incref)(PyObject *);
    void (*decref)(PyObject *);
    PyObject *(*getattr)(PyObject *, PyObject *);
    int (*setattr)(PyObject *, PyObject *, PyObject *);
    int (*richcmp_bool)(PyObject *, PyObject *, int);
    int (*isinstance)(PyObject *, PyObject *);
    PyObject *(*vectorcall)(PyObject *, PyObject *const *, size_t, PyObject *);
    PyObject *(*callmethod)(PyObject *, PyObject *const *, size_t, PyObject *);
    double (*float_as_double)(PyObject *);
    long long (*long_as_ll_ovf)(PyObject *, int *);
    double (*long_as_double)(PyObject *);
    PyObject *(*long_from_ll)(long long);
    PyObject *(*err_occurred)(void);
    void (*err_clear)(void);
    Py_ssize_t (*tuple_size)(PyObject *);
    PyObject *(*tuple_getitem)(PyObject *, Py_ssize_t);
    Py_ssize_t (*list_size)(PyObject *);
    PyObject *(*list_getitem)(PyObject *, Py_ssize_t);
    PyObject *(*tuple_new)(Py_ssize_t);
    int (*tuple_setitem)(PyObject *, Py_ssize_t, PyObject *);
    PyObject *(*dict_getitem)(PyObject *, PyObject *);   /* PyDict_GetItemWithError: see dict_get */
    PyObject *(*cap_new)(void *, const char *, void (*)(PyObject *));
    void *(*cap_getptr)(PyObject *, const char *);
    void *(*save_thread)(void);
    void (*restore_thread)(void *);
    PyObject *(*cfunc_new)(PyMethodDef *, PyObject *, PyObject *);
    PyObject *(*intern)(const char *);
    unsigned long long (*long_as_ull)(PyObject *);
    const char *(*unicode_utf8)(PyObject *, Py_ssize_t *);
    PyObject *(*set_new)(PyObject *);
    int (*set_add)(PyObject *, PyObject *);
    Py_ssize_t (*set_size)(PyObject *);
    int (*dict_setitem)(PyObject *, PyObject *, PyObject *);
    int (*list_append)(PyObject *, PyObject *);
    PyObject *(*generic_getdict)(PyObject *, void *);
    PyObject *none, *true_, *false_, *notimpl;
    PyObject *t_float, *t_int, *t_bool, *t_tuple, *t_list, *t_str, *t_dict;
} api;

/* d[key] borrowed, NULL when absent. PyDict_GetItemWithError: PyDict_GetItem saves and restores
   the thread's exception state around every lookup, a tenth of a launch's lookups' cost; the
   error a lookup may raise (an unhashable key: none of the helper's) is cleared here */
static PyObject *dict_get(PyObject *d, PyObject *key) {
    PyObject *v = api.dict_getitem(d, key);
    if (!v && api.err_occurred()) api.err_clear();
    return v;
}


#define Py_EQ 2
#define MAXP 64      /* parameters per kernel on the fast path */
#define NENT 4       /* devices per kernel */
#define NLAY 4       /* foreign layouts remembered per parameter */
#define NSPEC 8      /* registered foreign tensor types */
#define NKEY 4       /* key attributes per foreign type */
typedef tg_bounds_t bounds_t;
typedef tg_array_desc_t desc_t;

typedef int (*cuLaunchKernel_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, void *, void **, void **);
typedef int (*cuCtxGetCurrent_t)(void **);
typedef int (*cuCtxSetCurrent_t)(void *);
typedef int (*cuPointerGetAttributes_t)(unsigned, int *, void **, unsigned long long);

typedef struct {
    PyObject *type;                 /* the foreign tensor type (exact match) */
    PyObject *key[NKEY];            /* attribute / method names whose values key a layout */
    int is_method[NKEY];
    int nkey;
    PyObject *ptr;                  /* method name returning the data pointer */
    PyObject *stream_of;            /* callable(ordinal) -> the framework's current stream handle */
} spec_t;

typedef struct {
    spec_t *spec;                   /* NULL: empty slot */
    PyObject *key[NKEY];
    PyObject *device;
    desc_t tmpl;
} layout_t;

typedef struct {
    PyObject *device, *module, *mode;   /* NULL device: empty slot */
    PyObject *ordinal;              /* the device ordinal as an int (foreign stream queries) */
    long long ord;                  /* the same, in C (a CAI pointer's device against it) */
    unsigned long long epoch;       /* build choices change (tg.config.mode, module options): stale */
    int cuda;
    void *fn;                       /* CPU: void(*)(const launch_t*, void**); CUDA: CUfunction */
    void *bfn;                      /* the backward entry, the same way (NULL: enable_backward=False) */
    const int32_t *err;             /* CPU: the library's runtime-error code (modules.ErrorSlot) */
    int64_t threads_cap;
    int64_t lanes;                  /* CUDA: launch threads per CUDA thread (elementwise entry) */
    void *ctx;                      /* CUDA: the primary context launches need current */
    PyObject *last_stream;          /* CUDA: the current Stream last met, its handle, blocking */
    void *last_handle;
    int last_blocking;
} entry_t;

/* a numpy layout met by a parameter: the Python packer's descriptor for it, pointer cleared */
typedef struct {
    PyObject *descr;                /* NULL: empty slot */
    int nd, writeable;
    int64_t dims[4], strides[4];
    desc_t tmpl;
} np_layout_t;

/* a __cuda_array_interface__ layout met by a parameter (objects of a type launch.devices.cai_kind
   takes): the Python packer's descriptor for it, pointer cleared, keyed by the exact type and
   the dict's typestr, shape, strides (None: C-contiguous) and read-only flag, compared with
   ==, and by the launch device it was packed for; never by pointer */
typedef struct {
    PyObject *type;                 /* NULL: empty slot */
    PyObject *typestr, *shape, *strides;
    int readonly;
    PyObject *device;
    long long ptr_ord;              /* the driver's ordinal of the pointer's device memory then (-1: none) */
    int infer;                      /* ptr_ord is the device's: a kind-1 launch with no tapegrad array
                                       may take its device from a pointer on that ordinal */
    unsigned long long epoch;       /* cai_epoch then (forget_types: stale) */
    desc_t tmpl;
} cai_layout_t;

/* The last plain descriptor object (types.ArrayDesc) a parameter's tapegrad array held, with the
   launch device it passed the dtype, device and ndim checks on. An array's descriptor object is
   its own (descriptor() makes one per array and drops it when a field it holds changes) and an
   array's dtype and device are set once, when it is made; so meeting the same object again on
   the same device skips both field reads. The references keep the identities from being reused. */
typedef struct {
    PyObject *desc, *dev;           /* NULL: none yet */
} seen_t;

typedef struct {
    int kind, ndim, written;
    int rec;                        /* the tape's facts of an array parameter (R_*), once asked */
    int zsize;                      /* bytes of the zeroed adjoint slot of a non-array (0: its
                                       adjoint launches take the Python path) */
    PyObject *dtype;                /* arrays: the element type the parameter expects */
    layout_t lay[NLAY];
    int lay_next;
    np_layout_t np_lay[NLAY];
    int np_next;
    cai_layout_t cai_lay[NLAY];
    int cai_next;
    seen_t seen, adj_seen;          /* forward arguments; adjoint buffers */
} param_t;

/* numpy's PyArrayObject_fields (ndarraytypes.h, the same in numpy 1.x and 2.x; checked from
   Python at load against __array_interface__) */
typedef struct {
    intptr_t ob_refcnt; PyObject *ob_type;
    char *data; int nd; intptr_t *dimensions; intptr_t *strides; PyObject *base; PyObject *descr; int flags;
} np_array_t;
#define NPY_WRITEABLE 0x0400
static PyObject *T_NDARRAY = NULL;

#define NCHK 128     /* unguarded tid() accesses checked per kernel (more: no native plan) */

typedef struct {
    int n;
    int tid_ndim;                   /* indices tid() is unpacked into: a smaller grid is launch()'s error */
    int rec_state;                  /* the record plan: 0 not asked yet, 1 known (param_t.rec), -1 none */
    int nchecks;                    /* lang.facts.tid_accesses: (param, dim, component, components) of
                                       each array access every thread makes, indexed by tid() unguarded;
                                       a grid past that array's length is launch()'s error */
    unsigned char checks[NCHK][4];
    PyObject *packers;              /* tuple of the Python packers (TG_KIND_PY parameters, layout misses) */
    entry_t ent[NENT];
    param_t p[1];
} plan_t;

static int ready = 0;
static PyObject *T_KERNEL, *T_ARRAY, *T_ARRAYDESC, *T_ARRAYCTYPE, *T_DEVICE, *T_STREAM;
static PyObject *ACTIVE_TAPE, *GET_DEVICE, *INFER_DEVICE;
/* hooks.capture_count, hooks.tape_count: ctypes.c_long counts their Python owners keep beside
   their ints (under their locks, with the GIL held: a launch reads a consistent value); two loads
   instead of two module-dict lookups per launch */
static PyObject *CAPTURE_CELL = NULL, *TAPES_CELL = NULL;
#define CELL(o) (*(volatile long *)CBUF(o))
static PyObject *RECORDER = NULL;   /* hands the recording tape its record (None: such launches take the Python path) */
static PyObject *CAI_KIND = NULL;   /* launch's cai_kind (None: CAI objects go to the Python packers) */
static PyObject *T_CHECKED = NULL;  /* storage.CheckedDesc: a view of foreign memory its framework may move */
/* the fields of a tapegrad array the helper reads, as the array module names them (hooks.array_fields:
   array.DESCRIPTOR_CACHE, GRAD_FIELD, LINK_FIELD) */
static PyObject *S_DESC = NULL, *S_GRAD_FIELD = NULL, *S_LINK_FIELD = NULL, *S_OWNER_FIELD = NULL;
static PyObject *RECORD_PLAN = NULL;
static PyObject *TAPE_STATE = NULL;    /* hooks.tape_state: its ``tape`` is active_tape()'s answer */
static PyObject *S_TAPE = NULL;   /* fn(kernel) -> per-parameter record flags (R_*), or None */
static PyObject *S_TAPE_FIELD = NULL;  /* the tape attribute holding (pending list, live roots dict) */
static PyObject *S_LAUNCH_PLAN, *S_NATIVE, *S_DTYPE, *S_DEVICE, *S_VERSION, *S_TG_DTYPE, *S_TG_DEVICE,
                *S_DESCRIPTOR, *S_CUDA_STREAM, *S_IS_BLOCKING, *S_GRAD, *S_CAI, *S_TYPESTR,
                *S_SHAPE, *S_STRIDES, *S_DATA, *S_STREAM, *S_MASK, *S_OFFSET, *S_ENABLE_BACKWARD;
static int64_t MAX_SIZE = 2147483647LL;
static cuLaunchKernel_t cu_launch = NULL;
static cuCtxGetCurrent_t cu_ctx_current = NULL;
static cuCtxSetCurrent_t cu_ctx_set = NULL;
static cuPointerGetAttributes_t cu_ptr_attrs = NULL;
static spec_t specs[NSPEC];
static int nspecs = 0;
static unsigned long long n_fast = 0, n_fallback = 0, n_adj_fast = 0, n_adj_fallback = 0;
static unsigned long long epoch = 1;

/* the modules entries name may no longer be the ones launch() picks: forget every entry */
TG_EXPORT void tg_fl_invalidate(void) { epoch++; }

static void xdecref(PyObject *o) { if (o) api.decref(o); }
static void xincref(PyObject *o) { if (o) api.incref(o); }

/* public attribute names and protocol keys, interned once */
TG_EXPORT int tg_fl_init(void **table, int n) {
    if (n != A_COUNT) return -1;
    void **dst = (void **)&api;
    for (int i = 0; i < A_COUNT; i++) dst[i] = table[i];
    const char *names[] = {"launch_plan", "native", "dtype", "device", "version", "tg_dtype", "tg_device",
                           "descriptor", "cuda_stream", "is_blocking", "grad",
                           "__cuda_array_interface__", "typestr", "shape", "strides", "data", "stream", "mask",
                           "offset", "enable_backward"};
    PyObject **slots[] = {&S_LAUNCH_PLAN, &S_NATIVE, &S_DTYPE, &S_DEVICE, &S_VERSION, &S_TG_DTYPE, &S_TG_DEVICE,
                          &S_DESCRIPTOR, &S_CUDA_STREAM, &S_IS_BLOCKING, &S_GRAD, &S_CAI,
                          &S_TYPESTR, &S_SHAPE, &S_STRIDES, &S_DATA, &S_STREAM, &S_MASK, &S_OFFSET,
                          &S_ENABLE_BACKWARD};
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *slots[i] = api.intern(names[i]);
        if (!*slots[i]) return -2;
    }
    return (int)(sizeof(desc_t) * 1000 + sizeof(bounds_t));
}

TG_EXPORT void tg_fl_set_scalar_types(PyObject *floats, PyObject *ints);
static int read_int(PyObject *v, long long *out);

/* hooks attribute ``name``: a new reference kept forever (None: NULL where ``optional``) */
static int hook(PyObject *hooks, const char *name, int optional, PyObject **out) {
    PyObject *key = api.intern(name);
    if (!key) { api.err_clear(); return 0; }
    PyObject *v = api.getattr(hooks, key);
    api.decref(key);
    if (!v) { api.err_clear(); return 0; }
    if (v == api.none && optional) { api.decref(v); v = NULL; }
    else if (v == api.none) { api.decref(v); return 0; }
    *out = v;
    return 1;
}

/* The one hooks object (fastlaunch.NativeHooks), read once: the classes the helper compares
   arguments against, the Python functions it calls, the scalar types it converts, the name of
   the array attribute it reads and the largest grid. 1, or 0 when a field is missing or of
   the wrong type (the helper then stays off). */
TG_EXPORT int tg_fl_set_hooks(PyObject *hooks) {
    static const char *req[] = {"kernel_type", "array_type", "desc_type", "ctype_type", "device_type",
                                "capture_count", "active_tape", "get_device", "infer_device"};
    PyObject **rslots[] = {&T_KERNEL, &T_ARRAY, &T_ARRAYDESC, &T_ARRAYCTYPE, &T_DEVICE, &CAPTURE_CELL,
                           &ACTIVE_TAPE, &GET_DEVICE, &INFER_DEVICE};
    static const char *opt[] = {"record", "cai_kind", "checked_type", "record_plan", "tape_state", "tape_count"};
    PyObject **oslots[] = {&RECORDER, &CAI_KIND, &T_CHECKED, &RECORD_PLAN, &TAPE_STATE, &TAPES_CELL};
    if (!S_TAPE && !(S_TAPE = api.intern("tape"))) { api.err_clear(); return 0; }
    PyObject *floats = NULL, *ints = NULL, *cache = NULL, *size = NULL;
    for (unsigned i = 0; i < sizeof(req) / sizeof(req[0]); i++)
        if (!hook(hooks, req[i], 0, rslots[i])) return 0;
    for (unsigned i = 0; i < sizeof(opt) / sizeof(opt[0]); i++)
        if (!hook(hooks, opt[i], 1, oslots[i])) return 0;
    if (!hook(hooks, "float_types", 0, &floats) || !hook(hooks, "int_types", 0, &ints)) return 0;
    tg_fl_set_scalar_types(floats, ints);
    api.decref(floats); api.decref(ints);
    if (!hook(hooks, "array_fields", 0, &cache) || TYPE(cache) != api.t_tuple || api.tuple_size(cache) != 4) return 0;
    PyObject **fslots[4] = {&S_DESC, &S_GRAD_FIELD, &S_LINK_FIELD, &S_OWNER_FIELD};
    for (int i = 0; i < 4; i++) {
        PyObject *f = api.tuple_getitem(cache, i);
        const char *name = f && TYPE(f) == api.t_str ? api.unicode_utf8(f, NULL) : NULL;
        *fslots[i] = name ? api.intern(name) : NULL;
        if (!*fslots[i]) { api.err_clear(); api.decref(cache); return 0; }
    }
    api.decref(cache);
    if (!hook(hooks, "tape_field", 1, &cache)) return 0;
    if (cache) {                /* a name: interned (None: recorded launches through the recorder) */
        const char *name = TYPE(cache) == api.t_str ? api.unicode_utf8(cache, NULL) : NULL;
        S_TAPE_FIELD = name ? api.intern(name) : NULL;
        api.decref(cache);
        if (!S_TAPE_FIELD) { api.err_clear(); return 0; }
    }
    long long m = 0;
    if (!hook(hooks, "max_size", 0, &size) || !read_int(size, &m) || m < 0) return 0;
    api.decref(size);
    MAX_SIZE = m;
    ready = 1;
    return 1;
}

/* numpy.ndarray (exact type) read natively on CPU launches; None: through the Python packer */
TG_EXPORT void tg_fl_set_ndarray(PyObject *t) {
    xdecref(T_NDARRAY);
    T_NDARRAY = t == api.none ? NULL : t;
    xincref(T_NDARRAY);
}

TG_EXPORT void tg_fl_set_cuda(PyObject *stream_t, void *launch, void *ctx_current, void *ctx_set, void *ptr_attrs) {
    api.incref(stream_t);
    xdecref(T_STREAM);
    T_STREAM = stream_t;
    cu_launch = (cuLaunchKernel_t)launch;
    cu_ctx_current = (cuCtxGetCurrent_t)ctx_current;
    cu_ctx_set = (cuCtxSetCurrent_t)ctx_set;
    cu_ptr_attrs = (cuPointerGetAttributes_t)ptr_attrs;
}

TG_EXPORT void *tg_fl_current_context(void) {
    void *ctx = NULL;
    if (!cu_ctx_current || cu_ctx_current(&ctx) != 0) return NULL;
    return ctx;
}

/* keys: tuple of (name, is_method) pairs flattened as names + a flag string */
TG_EXPORT int tg_fl_register_foreign(PyObject *type, PyObject *k0, PyObject *k1, PyObject *k2, PyObject *k3,
                                     const char *methods, PyObject *ptr, PyObject *stream_of) {
    spec_t *s = NULL;
    for (int i = 0; i < nspecs; i++)
        if (specs[i].type == type) s = &specs[i];
    if (!s) {
        if (nspecs >= NSPEC) return -1;
        s = &specs[nspecs++];
        memset(s, 0, sizeof(*s));
        api.incref(type);
        s->type = type;
    } else {
        for (int k = 0; k < s->nkey; k++) xdecref(s->key[k]);
        xdecref(s->ptr); xdecref(s->stream_of);
    }
    PyObject *ks[NKEY] = {k0, k1, k2, k3};
    s->nkey = 0;
    for (int k = 0; k < NKEY; k++) {
        if (ks[k] == api.none) break;
        api.incref(ks[k]);
        s->key[k] = ks[k];
        s->is_method[k] = methods[k] == 'm';
        s->nkey++;
    }
    api.incref(ptr); s->ptr = ptr;
    api.incref(stream_of); s->stream_of = stream_of;
    return nspecs;
}

/* ------------------------------------------------------------------------------- plans */

static void entry_clear(entry_t *e) {
    xdecref(e->device); xdecref(e->module); xdecref(e->mode); xdecref(e->last_stream); xdecref(e->ordinal);
    memset(e, 0, sizeof(*e));
}

static void layout_clear(layout_t *l) {
    if (l->spec) {
        for (int k = 0; k < l->spec->nkey; k++) xdecref(l->key[k]);
        xdecref(l->device);
    }
    memset(l, 0, sizeof(*l));
}

static void cai_layout_clear(cai_layout_t *l) {
    if (l->type) {
        api.decref(l->type); api.decref(l->typestr); api.decref(l->shape); api.decref(l->strides);
        api.decref(l->device);
    }
    memset(l, 0, sizeof(*l));
}

static void plan_free(PyObject *cap) {
    plan_t *p = (plan_t *)api.cap_getptr(cap, "tapegrad.fastlaunch_plan");
    if (!p) { api.err_clear(); return; }
    for (int e = 0; e < NENT; e++) entry_clear(&p->ent[e]);
    for (int i = 0; i < p->n; i++) {
        xdecref(p->p[i].dtype);
        xdecref(p->p[i].seen.desc); xdecref(p->p[i].seen.dev);
        xdecref(p->p[i].adj_seen.desc); xdecref(p->p[i].adj_seen.dev);
        for (int l = 0; l < NLAY; l++) {
            layout_clear(&p->p[i].lay[l]);
            xdecref(p->p[i].np_lay[l].descr);
            cai_layout_clear(&p->p[i].cai_lay[l]);
        }
    }
    xdecref(p->packers);
    free(p);
}

#define ZMAX 8192    /* bytes of zeroed adjoint slots per launch (more: the Python path) */

/* the int of tuple ``t`` at ``i`` as a long long (0 when it is none) */
static void tuple_int(PyObject *t, Py_ssize_t i, long long *out) {
    PyObject *v = api.tuple_getitem(t, i);
    int ovf = 0;
    *out = 0;
    if (!v || TYPE(v) != api.t_int) { api.err_clear(); return; }
    *out = api.long_as_ll_ovf(v, &ovf);
    if (api.err_occurred() || ovf) { api.err_clear(); *out = 0; }
}

/* kinds/ndims/written: one byte per parameter; dtypes: a tuple (None for non-arrays);
   zsizes: a tuple of ints, the bytes of each non-array parameter's value (0: none native) */
TG_EXPORT PyObject *tg_fl_plan_new(int n, const char *kinds, const char *ndims, const char *written,
                                   PyObject *dtypes, PyObject *packers, int tid_ndim, PyObject *zsizes,
                                   int nchecks, const unsigned char *checks) {
    if (n < 0 || n > MAXP || nchecks < 0 || nchecks > NCHK) { api.incref(api.none); return api.none; }
    plan_t *p = (plan_t *)calloc(1, sizeof(plan_t) + sizeof(param_t) * (n > 0 ? n : 1));
    if (!p) { api.incref(api.none); return api.none; }
    p->n = n;
    p->tid_ndim = tid_ndim;
    p->nchecks = nchecks;
    for (int c = 0; c < nchecks; c++)
        for (int k = 0; k < 4; k++) p->checks[c][k] = checks[4 * c + k];
    for (int i = 0; i < n; i++) {
        p->p[i].kind = kinds[i];
        p->p[i].ndim = ndims[i];
        p->p[i].written = written[i];
        PyObject *dt = api.tuple_getitem(dtypes, i);
        if (!dt) { api.err_clear(); dt = api.none; }
        api.incref(dt);
        p->p[i].dtype = dt;
        long long z = 0;
        tuple_int(zsizes, i, &z);
        p->p[i].zsize = z > 0 && z <= ZMAX ? (int)z : 0;
    }
    api.incref(packers);
    p->packers = packers;
    return api.cap_new(p, "tapegrad.fastlaunch_plan", plan_free);
}

static plan_t *plan_of(PyObject *cap) {
    return (plan_t *)api.cap_getptr(cap, "tapegrad.fastlaunch_plan");
}

/* Install (or replace) the entry of ``device``; fn NULL records that its module declines (a
   debug build): launches on it take the Python path without asking again. */
TG_EXPORT int tg_fl_set_entry(PyObject *cap, PyObject *device, PyObject *module, PyObject *mode, int cuda,
                              void *fn, void *bfn, long long threads_cap, void *ctx, long long ordinal,
                              long long lanes, const int32_t *err) {
    plan_t *p = plan_of(cap);
    if (!p) { api.err_clear(); return -1; }
    entry_t *slot = NULL;
    for (int e = 0; e < NENT; e++)
        if (p->ent[e].device == device) { slot = &p->ent[e]; break; }
    if (!slot) {
        for (int e = 0; e < NENT; e++)
            if (!p->ent[e].device) { slot = &p->ent[e]; break; }
        if (!slot) slot = &p->ent[NENT - 1];
    }
    entry_clear(slot);
    api.incref(device); api.incref(module); api.incref(mode);
    slot->device = device; slot->module = module; slot->mode = mode;
    slot->cuda = cuda; slot->fn = fn; slot->bfn = fn ? bfn : NULL; slot->threads_cap = threads_cap; slot->ctx = ctx;
    slot->lanes = lanes > 1 ? lanes : 1;
    slot->err = cuda ? NULL : err;
    slot->ordinal = api.long_from_ll(ordinal);
    slot->ord = ordinal;
    slot->epoch = epoch;
    if (!slot->ordinal) { api.err_clear(); entry_clear(slot); return -1; }
    return 1;
}

/* 1 when ``device`` has an entry for ``module`` built under ``mode`` */
TG_EXPORT int tg_fl_has_entry(PyObject *cap, PyObject *device, PyObject *module, PyObject *mode) {
    plan_t *p = plan_of(cap);
    if (!p) { api.err_clear(); return 0; }
    for (int e = 0; e < NENT; e++)
        if (p->ent[e].device == device)
            return p->ent[e].module == module && p->ent[e].mode == mode && p->ent[e].epoch == epoch;
    return 0;
}

TG_EXPORT void tg_fl_stats(unsigned long long *out) {
    out[0] = n_fast; out[1] = n_fallback; out[2] = n_adj_fast; out[3] = n_adj_fallback;
}

/* ------------------------------------------------------------------------------ packing */

/* double -> IEEE half bits, round to nearest even; -1 where numpy would warn or say NaN
   (overflow, NaN: the Python path handles those) */
static int32_t half_bits(double d) {
    uint64_t x;
    memcpy(&x, &d, 8);
    uint32_t sign = (uint32_t)(x >> 48) & 0x8000u;
    uint64_t ax = x & 0x7fffffffffffffffULL;
    if (ax >= 0x7ff0000000000000ULL) return ax == 0x7ff0000000000000ULL ? (int32_t)(sign | 0x7c00u) : -1;
    int e = (int)(ax >> 52);
    if (e == 0) return (int32_t)sign;                         /* zero or a double subnormal: far below half's */
    uint64_t m = (ax & 0xfffffffffffffULL) | (1ULL << 52);   /* value = m * 2^(e - 1075) */
    int he = e - 1023 + 15;
    int k;
    uint64_t base;
    if (he >= 1) { k = 42; base = (uint64_t)(he - 1) << 10; }
    else { k = 1051 - e; base = 0; if (k >= 64) return (int32_t)sign; }
    uint64_t r = m >> k, rem = m & ((1ULL << k) - 1), halfway = 1ULL << (k - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) r++;
    uint64_t bits = base + r;
    if (bits >= 0x7c00u) return -1;                           /* overflow to inf: numpy warns */
    return (int32_t)(sign | (uint32_t)bits);
}

static int32_t bfloat16_bits(double d) {
    float f = (float)d;
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return -1;           /* NaN */
    if ((x & 0x7fffffffu) == 0x7f800000u && d - d == 0.0) return -1;   /* a finite double overflowing float */
    return (int32_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

typedef union { double d; float f; int64_t i64; uint64_t u64; int32_t i32; uint32_t u32; int16_t i16;
                uint16_t u16; int8_t i8; uint8_t u8; unsigned char b; } scalar_t;

/* numpy's scalar types (exact types) taken for scalar parameters as the Python packers take them:
   floating ones for float parameters (float(v)), integer ones for integer parameters (int(v)) */
#define NSCAL 12
static PyObject *np_floats[NSCAL], *np_ints[NSCAL];
static int n_np_floats = 0, n_np_ints = 0;

static int in_types(PyObject *t, PyObject **types, int n) {
    for (int i = 0; i < n; i++)
        if (types[i] == t) return 1;
    return 0;
}

TG_EXPORT void tg_fl_set_scalar_types(PyObject *floats, PyObject *ints) {
    PyObject *src[2] = {floats, ints};
    PyObject **dst[2] = {np_floats, np_ints};
    int *cnt[2] = {&n_np_floats, &n_np_ints};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < *cnt[k]; i++) api.decref(dst[k][i]);
        *cnt[k] = 0;
        Py_ssize_t n = api.tuple_size(src[k]);
        if (n < 0) { api.err_clear(); continue; }
        for (Py_ssize_t i = 0; i < n && *cnt[k] < NSCAL; i++) {
            PyObject *t = api.tuple_getitem(src[k], i);
            if (!t) { api.err_clear(); break; }
            api.incref(t);
            dst[k][(*cnt[k])++] = t;
        }
    }
}

/* bool parameters: exact bools and ints (as bool(v)) */
static int pack_bool(PyObject *v, scalar_t *out) {
    if (v == api.true_ || v == api.false_) { out->b = v == api.true_; return 1; }
    if (TYPE(v) != api.t_int) return 0;
    int ovf = 0;
    long long x = api.long_as_ll_ovf(v, &ovf);
    if (api.err_occurred()) { api.err_clear(); return 0; }
    out->b = (x != 0 || ovf != 0);
    return 1;
}

/* float parameters: floats, ints, bools and numpy's floating types (float(v)), converted as
   ctypes and numpy do; a half/bfloat16 overflow or NaN takes the Python path */
static int pack_float(int kind, PyObject *v, scalar_t *out) {
    PyObject *t = TYPE(v);
    double d;
    if (t == api.t_float) d = api.float_as_double(v);
    else if (t == api.t_int) {
        d = api.long_as_double(v);
        if (api.err_occurred()) { api.err_clear(); return 0; }
    } else if (v == api.true_ || v == api.false_) d = v == api.true_ ? 1.0 : 0.0;
    else if (in_types(t, np_floats, n_np_floats)) {
        d = api.float_as_double(v);     /* numpy's __float__, exact for its float types */
        if (api.err_occurred()) { api.err_clear(); return 0; }
    } else return 0;
    switch (kind) {
    case TG_KIND_FLOAT32: out->f = (float)d; return 1;   /* as ctypes.c_float(x) */
    case TG_KIND_FLOAT64: out->d = d; return 1;
    case TG_KIND_FLOAT16: { int32_t h = half_bits(d); if (h < 0) return 0; out->u16 = (uint16_t)h; return 1; }
    default: { int32_t h = bfloat16_bits(d); if (h < 0) return 0; out->u16 = (uint16_t)h; return 1; }
    }
}

/* integer parameters: exact ints, bools and numpy integers (through __index__, as int(v)) in
   the kind's range (the ABI table's, which the Python packer checks), stored in the kind's
   width (two's complement: the low bytes); anything else takes the Python path */
static int pack_int(int kind, PyObject *v, scalar_t *out) {
    PyObject *t = TYPE(v);
    if (t != api.t_int && t != api.t_bool && !in_types(t, np_ints, n_np_ints)) return 0;
    int ovf = 0;
    unsigned long long u, hi = tg_kind_max(kind);
    long long x = api.long_as_ll_ovf(v, &ovf);
    if (api.err_occurred()) { api.err_clear(); return 0; }
    if (ovf > 0) {              /* past int64: only a 64-bit unsigned range holds it */
        u = api.long_as_ull(v);
        if (api.err_occurred()) { api.err_clear(); return 0; }
        if (u > hi) return 0;
    } else {
        if (ovf < 0 || x < tg_kind_min(kind) || (x >= 0 && (unsigned long long)x > hi)) return 0;
        u = (unsigned long long)x;
    }
    switch (tg_kind_size(kind)) {
    case 1: out->u8 = (uint8_t)u; return 1;
    case 2: out->u16 = (uint16_t)u; return 1;
    case 4: out->u32 = (uint32_t)u; return 1;
    case 8: out->u64 = u; return 1;
    }
    return 0;
}

/* 1: packed; 0: not a value the fast path takes */
static int pack_scalar(const param_t *pp, PyObject *v, scalar_t *out) {
    if (pp->kind == TG_KIND_BOOL) return pack_bool(v, out);
    if (tg_kind_is_float(pp->kind)) return pack_float(pp->kind, v, out);
    return pack_int(pp->kind, v, out);
}

/* a new reference to attribute ``name``, NULL (error cleared) when missing */
static PyObject *attr(PyObject *o, PyObject *name) {
    PyObject *r = api.getattr(o, name);
    if (!r) api.err_clear();
    return r;
}

/* Plain tapegrad arrays' fields read from the instance dict (tg_fl_set_dict_fields: the loader
   checked that the array class defines them as plain class attributes, None or 0, that no
   class in its MRO makes them descriptors, and that dtype and device are instance values):
   a name missing from the dict is the class's default. Else through getattr. */
static int DICT_FIELDS = 0;
static PyObject *ZERO = NULL;   /* the class default of ``version`` */

TG_EXPORT void tg_fl_set_dict_fields(int on) {
    if (!ZERO) ZERO = api.long_from_ll(0);
    DICT_FIELDS = on && ZERO;
}

/* the instance dict of plain array ``a`` (borrowed: the array holds it); NULL: getattr */
static PyObject *array_dict(PyObject *a) {
    if (!DICT_FIELDS) return NULL;
    PyObject *d = api.generic_getdict(a, NULL);
    if (!d) { api.err_clear(); return NULL; }
    api.decref(d);
    return TYPE(d) == api.t_dict ? d : NULL;
}

/* field ``name`` of plain array ``a`` (dict ``d`` from array_dict, or NULL), borrowed; a field
   missing from the dict is ``dflt`` (the class default); NULL when unreadable */
static PyObject *field(PyObject *a, PyObject *d, PyObject *name, PyObject *dflt) {
    if (d) {
        PyObject *v = dict_get(d, name);
        return v ? v : dflt;
    }
    PyObject *v = attr(a, name);
    if (v) api.decref(v);       /* the array (or its class) holds it */
    return v;
}

static PyObject *call_method0(PyObject *o, PyObject *name) {
    PyObject *args[1] = {o};
    PyObject *r = api.callmethod(name, args, 1, NULL);
    if (!r) api.err_clear();
    return r;
}

static spec_t *spec_for(PyObject *type) {
    for (int i = 0; i < nspecs; i++)
        if (specs[i].type == type) return &specs[i];
    return NULL;
}

/* The key values of foreign tensor ``v`` (new references in ``key``); 0 when one is unreadable. */
static int foreign_key(spec_t *s, PyObject *v, PyObject **key) {
    for (int k = 0; k < s->nkey; k++) {
        key[k] = s->is_method[k] ? call_method0(v, s->key[k]) : attr(v, s->key[k]);
        if (!key[k]) { for (int j = 0; j < k; j++) api.decref(key[j]); return 0; }
    }
    return 1;
}

static layout_t *layout_hit(param_t *pp, spec_t *s, PyObject **key) {
    for (int l = 0; l < NLAY; l++) {
        layout_t *lay = &pp->lay[l];
        if (lay->spec != s) continue;
        int same = 1;
        for (int k = 0; k < s->nkey && same; k++) {
            int r = api.richcmp_bool(lay->key[k], key[k], Py_EQ);
            if (r < 0) { api.err_clear(); r = 0; }
            same = r == 1;
        }
        if (same) return lay;
    }
    return NULL;
}

/* the data pointer of foreign tensor ``v``; 0 with *ok = 0 when unreadable */
static void *foreign_ptr(spec_t *s, PyObject *v, int *ok) {
    PyObject *r = call_method0(v, s->ptr);
    *ok = 0;
    if (!r) return NULL;
    void *ptr = NULL;
    if (TYPE(r) == api.t_int) {
        ptr = (void *)(uintptr_t)api.long_as_ull(r);
        if (api.err_occurred()) api.err_clear();
        else *ok = 1;
    }
    api.decref(r);
    return ptr;
}

/* ------------------------------------------------------------------------------ launch */

typedef struct {
    PyObject *objs[6 * MAXP + 16];  /* references released after the launch (per parameter at most:
                                       the argument, a CAI dict, a packer's result, an adjoint
                                       buffer and its packer's result or descriptor) */
    int nobjs;
} refs_t;

static void keep(refs_t *r, PyObject *o) { r->objs[r->nobjs++] = o; }   /* takes a reference */

static PyObject *arg_at(PyObject *seq, int seq_list, Py_ssize_t i) {
    return seq_list ? api.list_getitem(seq, i) : api.tuple_getitem(seq, i);
}

static Py_ssize_t seq_len(PyObject *seq, int *is_list) {
    PyObject *t = TYPE(seq);
    if (t == api.t_tuple) { *is_list = 0; return api.tuple_size(seq); }
    if (t == api.t_list) { *is_list = 1; return api.list_size(seq); }
    return -1;
}

static int read_int(PyObject *v, long long *out) {
    if (TYPE(v) != api.t_int) return 0;
    int ovf = 0;
    *out = api.long_as_ll_ovf(v, &ovf);
    if (api.err_occurred()) { api.err_clear(); return 0; }
    return !ovf;
}

static int make_bounds(PyObject *dim, bounds_t *b) {
    memset(b, 0, sizeof(*b));
    long long d;
    if (TYPE(dim) == api.t_int) {
        if (!read_int(dim, &d) || d < 0 || d > MAX_SIZE) return 0;
        b->shape[0] = d; b->ndim = 1; b->size = d;
        return 1;
    }
    if (TYPE(dim) != api.t_tuple) return 0;
    Py_ssize_t n = api.tuple_size(dim);
    if (n < 1 || n > TG_MAX_DIMS) return 0;
    int64_t size = 1;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (!read_int(api.tuple_getitem(dim, k), &d) || d < 0 || d > MAX_SIZE) return 0;
        b->shape[k] = d;
        size *= d;              /* each factor <= MAX_SIZE < 2^63: check before it can overflow */
        if (size > MAX_SIZE) return 0;
    }
    b->ndim = (int32_t)n;
    b->size = size;
    return 1;
}

/* the values tid() component k of n takes over the grid (lang.facts.tid_extent) */
static int64_t tid_extent(int k, int n, const bounds_t *b) {
    int nd = b->ndim, d = k + nd - n;
    if (n == 1 || (k == 0 && d >= 0)) {
        int64_t e = 1;                      /* at most bounds.size: no overflow */
        for (int i = 0; i < (n == 1 ? nd : d + 1); i++) e *= b->shape[i];
        return e;
    }
    return d >= 0 && d < nd ? b->shape[d] : 1;
}

/* 1 when the grid makes every thread index an array past its end (launch()'s ValueError) */
static int grid_overruns(const plan_t *p, const bounds_t *b, void *const *argv) {
    for (int c = 0; c < p->nchecks; c++) {
        const unsigned char *k = p->checks[c];
        const desc_t *d = (const desc_t *)argv[k[0]];
        if (k[1] < d->ndim && tid_extent(k[2], k[3], b) > d->shape[k[1]]) return 1;
    }
    return 0;
}

/* 1 when an adjoint buffer given (non-NULL data) has another shape than its array (launch()'s
   ValueError: the adjoint would read and write past the smaller one) */
static int adjoint_mismatch(const desc_t *primal, const desc_t *adj) {
    if (!adj->data) return 0;
    if (adj->ndim != primal->ndim) return 1;
    for (int k = 0; k < primal->ndim && k < TG_MAX_DIMS; k++)
        if (adj->shape[k] != primal->shape[k]) return 1;
    return 0;
}


/* --------------------------------------------------- __cuda_array_interface__ objects */

/* Exact types passed for array parameters on CUDA, with launch.devices.cai_kind's answer for them:
   0 the Python packer (as any other object), 1 the cached-layout path below, the data pointer
   deciding a launch device no tapegrad array fixes, 2 the same path only when the launch's
   other arguments fix the device. */
#define NCAI 16
static struct { PyObject *type; int kind; } cai_types[NCAI];
static int ncai = 0, cai_next = 0;
static unsigned long long cai_epoch = 1;

/* a launch adapter or device accessor was registered: ask again, and drop the cached layouts */
TG_EXPORT void tg_fl_forget_types(void) {
    for (int i = 0; i < ncai; i++) xdecref(cai_types[i].type);
    memset(cai_types, 0, sizeof(cai_types));
    ncai = cai_next = 0;
    cai_epoch++;
}

static int cai_kind(PyObject *v) {
    PyObject *t = TYPE(v);
    for (int i = 0; i < ncai; i++)
        if (cai_types[i].type == t) return cai_types[i].kind;
    if (!CAI_KIND) return 0;
    PyObject *r = api.vectorcall(CAI_KIND, &v, 1, NULL);   /* may import a bridge (forget_types) */
    if (!r) { api.err_clear(); return 0; }
    long long k = 0;
    if (!read_int(r, &k) || k < 0 || k > 2) k = 0;
    api.decref(r);
    int slot;
    if (ncai < NCAI) slot = ncai++;
    else { slot = cai_next; cai_next = (cai_next + 1) % NCAI; }
    xdecref(cai_types[slot].type);
    api.incref(t);
    cai_types[slot].type = t;
    cai_types[slot].kind = (int)k;
    return (int)k;
}

/* The fields of a CAI dict (borrowed from it) as protocols.interface_layout reads them */
typedef struct {
    PyObject *typestr, *shape, *strides;   /* strides: None when absent */
    uintptr_t ptr;
    int readonly;
    long long version;
    PyObject *stream;                      /* NULL when absent */
} cai_t;

/* 1: a dict the helper reads itself; 0: anything else (a mapping that is not a dict, a mask,
   an offset, a list shape, a pointer or flag of another type...): the Python packer */
static int cai_read(PyObject *d, cai_t *c) {
    if (TYPE(d) != api.t_dict) return 0;
    PyObject *m = dict_get(d, S_MASK);
    if (m && m != api.none) return 0;                  /* the packer's ValueError */
    PyObject *off = dict_get(d, S_OFFSET);
    long long x;
    if (off && off != api.none && (!read_int(off, &x) || x != 0)) return 0;
    c->typestr = dict_get(d, S_TYPESTR);
    if (!c->typestr || TYPE(c->typestr) != api.t_str) return 0;
    c->shape = dict_get(d, S_SHAPE);
    if (!c->shape || TYPE(c->shape) != api.t_tuple) return 0;
    c->strides = dict_get(d, S_STRIDES);
    if (!c->strides) c->strides = api.none;
    else if (c->strides != api.none && TYPE(c->strides) != api.t_tuple) return 0;
    PyObject *data = dict_get(d, S_DATA);
    c->ptr = 0;
    c->readonly = 0;
    if (data && data != api.none) {
        if (TYPE(data) != api.t_tuple || api.tuple_size(data) != 2) { api.err_clear(); return 0; }
        PyObject *ptr = api.tuple_getitem(data, 0), *ro = api.tuple_getitem(data, 1);
        if (!ptr || !ro || TYPE(ptr) != api.t_int) { api.err_clear(); return 0; }
        unsigned long long u = api.long_as_ull(ptr);
        if (api.err_occurred()) { api.err_clear(); return 0; }
        if (ro == api.true_) c->readonly = 1;
        else if (ro != api.false_) return 0;
        c->ptr = (uintptr_t)u;
    }
    PyObject *ver = dict_get(d, S_VERSION);
    c->version = 0;
    if (ver && !read_int(ver, &c->version)) return 0;
    c->stream = dict_get(d, S_STREAM);
    return 1;
}

/* protocols.cai_stream, then foreign_stream_ordered against tapegrad's current stream ``cur``:
   0 nothing to order; 1 the legacy default stream, ordered only when ``cur`` is blocking; 2 an
   event wait or a refused handle (0, not an int): the Python path */
static int cai_stream_rule(const cai_t *c, uintptr_t cur) {
    if (!c->stream || c->stream == api.none || c->version < 3) return 0;
    if (TYPE(c->stream) != api.t_int) return 2;
    int ovf = 0;
    long long h = api.long_as_ll_ovf(c->stream, &ovf);
    if (api.err_occurred()) { api.err_clear(); return 2; }
    if (ovf || h <= 0) return 2;
    if ((uintptr_t)h == cur) return 0;
    return h == 1 ? 1 : 2;
}

/* 0 native, 2 the Python path: the rule, with the blocking flag of tapegrad's current stream
   (``e``'s, asked only for the legacy stream; without an entry ``blocking``) */
static int current_blocking(entry_t *e);
static int cai_stream_decision(const cai_t *c, uintptr_t cur, entry_t *e, int blocking) {
    int rule = cai_stream_rule(c, cur);
    if (rule == 1) rule = (e ? current_blocking(e) : blocking) == 1 ? 0 : 2;
    return rule;
}

/* the driver's device ordinal of plain device memory at ``ptr``; -1 for anything else (NULL,
   managed, host or unknown memory: launch.devices.infer_device decides there) */
static long long ptr_ordinal(uintptr_t ptr) {
    if (!ptr || !cu_ptr_attrs) return -1;
    /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE, _IS_MANAGED, _DEVICE_ORDINAL; 8 zeroed bytes each */
    int which[3] = {2, 8, 9};
    uint64_t out[3] = {0, 0, 0};
    void *data[3] = {&out[0], &out[1], &out[2]};
    if (cu_ptr_attrs(3, which, data, (unsigned long long)ptr) != 0) return -1;
    uint32_t memtype, ordinal;
    unsigned char managed;
    memcpy(&memtype, &out[0], 4);
    memcpy(&managed, &out[1], 1);
    memcpy(&ordinal, &out[2], 4);
    if (memtype != 2 /* CU_MEMORYTYPE_DEVICE */ || managed) return -1;
    return (int32_t)ordinal >= 0 ? (long long)(int32_t)ordinal : -1;
}

static int same_value(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    int r = api.richcmp_bool(a, b, Py_EQ);
    if (r < 0) { api.err_clear(); return 0; }
    return r;
}

/* the cached layout of ``c`` for type ``t`` at parameter ``pp``: packed for launch device
   ``dev``, or (dev NULL) one that may decide the device of a pointer on ordinal ``ord`` */
static cai_layout_t *cai_hit(param_t *pp, PyObject *t, const cai_t *c, PyObject *dev, long long ord) {
    for (int l = 0; l < NLAY; l++) {
        cai_layout_t *lay = &pp->cai_lay[l];
        if (lay->type != t || lay->epoch != cai_epoch || lay->readonly != c->readonly) continue;
        if (dev ? lay->device != dev : !(lay->infer && lay->ptr_ord == ord)) continue;
        if (same_value(lay->typestr, c->typestr) && same_value(lay->shape, c->shape) &&
            same_value(lay->strides, c->strides))
            return lay;
    }
    return NULL;
}

/* test hook (fastlaunch.cai_decision): 0 native, 1 the packer, 2 the Python path */
TG_EXPORT int tg_fl_cai_decision(PyObject *d, unsigned long long cur, int blocking) {
    cai_t c;
    if (!cai_read(d, &c)) return 1;
    return cai_stream_decision(&c, (uintptr_t)cur, NULL, blocking ? 1 : 0);
}

/* get_device(name) of the names that always mean one device: "cpu" and "cuda:N" ("cuda" means
   the current device: never cached). Strings compared by value, the Devices kept forever. */
#define NNAMES 8
static struct { PyObject *name, *device; } names[NNAMES];
static int nnames = 0;

static int fixed_device_name(PyObject *s) {
    Py_ssize_t n = 0;
    const char *c = api.unicode_utf8(s, &n);
    if (!c) { api.err_clear(); return 0; }
    if (n == 3 && memcmp(c, "cpu", 3) == 0) return 1;
    if (n < 6 || n > 8 || memcmp(c, "cuda:", 5) != 0) return 0;
    for (Py_ssize_t i = 5; i < n; i++)
        if (c[i] < '0' || c[i] > '9') return 0;
    return 1;
}

static PyObject *named_device(PyObject *s) {
    for (int i = 0; i < nnames; i++) {
        if (names[i].name == s) { api.incref(names[i].device); return names[i].device; }
    }
    for (int i = 0; i < nnames; i++) {
        int r = api.richcmp_bool(names[i].name, s, Py_EQ);
        if (r < 0) { api.err_clear(); return NULL; }
        if (r) { api.incref(names[i].device); return names[i].device; }
    }
    PyObject *r = api.vectorcall(GET_DEVICE, &s, 1, NULL);
    if (!r) { api.err_clear(); return NULL; }
    if (nnames < NNAMES && TYPE(r) == T_DEVICE && fixed_device_name(s)) {
        api.incref(s); api.incref(r);
        names[nnames].name = s; names[nnames].device = r;
        nnames++;
    }
    return r;
}

/* The device of the first tapegrad array or descriptor argument: 1 with *out (a new reference,
   NULL for the Python path: an array subclass, an unreadable attribute), 0 when there is none */
static int array_device(plan_t *p, PyObject **args, int n, PyObject **out) {
    *out = NULL;
    for (int i = 0; i < n; i++) {
        PyObject *a = args[i], *t = TYPE(a);
        if (t == T_ARRAY) {
            PyObject *fields = array_dict(a);
            const seen_t *sn = &p->p[i].seen;
            if (fields && sn->desc && dict_get(fields, S_DESC) == sn->desc) {
                api.incref(sn->dev);
                *out = sn->dev;
                return 1;
            }
            PyObject *dv = field(a, fields, S_DEVICE, NULL);
            if (dv && dv != api.none) { api.incref(dv); *out = dv; return 1; }
            if (!dv) return 1;
        } else if (t == T_ARRAYCTYPE) {
            *out = attr(a, S_TG_DEVICE);
            return 1;
        } else if (t != api.t_float && t != api.t_int && t != api.t_bool) {
            int r1 = api.isinstance(a, T_ARRAY), r2 = api.isinstance(a, T_ARRAYCTYPE);
            if (r1 < 0 || r2 < 0) { api.err_clear(); return 1; }
            if (r1 || r2) return 1;   /* subclasses: the Python path */
        }
    }
    return 0;
}

/* No tapegrad array: the first foreign object decides (launch's infer_device). A registered
   tensor type whose layout this parameter has met knows its device (the layout was cached only
   after the Python packer accepted the tensor on that device); so does a CAI object whose device
   comes from its pointer (cai_kind 1) with a layout cached for device memory on the same
   ordinal. A new reference, or NULL: ask Python. (A struct argument's arrays come first there:
   the struct packer refuses arrays on another device than the one chosen here.) */
static PyObject *foreign_device(plan_t *p, PyObject **args, int n, refs_t *refs, PyObject **cai) {
    for (int i = 0; i < n; i++) {
        PyObject *a = args[i], *t = TYPE(a);
        if (t == api.t_float || t == api.t_int || t == api.t_bool) continue;   /* no device */
        spec_t *s = p->p[i].kind == TG_KIND_ARRAY ? spec_for(t) : NULL;
        if (!s && p->p[i].kind == TG_KIND_ARRAY && cai_kind(a) == 1) {
            PyObject *d = attr(a, S_CAI);
            if (!d) return NULL;
            keep(refs, d);
            cai[i] = d;
            cai_t c;
            if (!cai_read(d, &c)) return NULL;
            long long ord = ptr_ordinal(c.ptr);
            cai_layout_t *lay = ord >= 0 ? cai_hit(&p->p[i], t, &c, NULL, ord) : NULL;
            if (!lay) return NULL;
            api.incref(lay->device);
            return lay->device;
        }
        if (!s) return NULL;
        PyObject *key[NKEY];
        if (!foreign_key(s, a, key)) return NULL;
        layout_t *lay = layout_hit(&p->p[i], s, key);
        for (int k = 0; k < s->nkey; k++) api.decref(key[k]);
        if (!lay) return NULL;
        api.incref(lay->device);
        return lay->device;
    }
    return NULL;
}

/* The launch device, as launch's infer_device; a new reference, NULL for the Python path.
   A CAI dict read to find it is left in cai[i] (its reference kept in refs). */
static PyObject *launch_device(plan_t *p, PyObject *device, PyObject *stream, PyObject **args, int n,
                               refs_t *refs, PyObject **cai) {
    if (device != api.none) {
        if (TYPE(device) == T_DEVICE) { api.incref(device); return device; }
        if (TYPE(device) == api.t_str) return named_device(device);
        PyObject *r = api.vectorcall(GET_DEVICE, &device, 1, NULL);
        if (!r) api.err_clear();
        return r;
    }
    if (stream != api.none) {   /* the stream's device (a Stream's own check follows in given_stream) */
        if (!T_STREAM || TYPE(stream) != T_STREAM) return NULL;
        return attr(stream, S_DEVICE);
    }
    PyObject *r;
    if (array_device(p, args, n, &r) || (r = foreign_device(p, args, n, refs, cai)) != NULL) return r;
    PyObject *tup = api.tuple_new(n);
    if (!tup) { api.err_clear(); return NULL; }
    for (int i = 0; i < n; i++) { api.incref(args[i]); api.tuple_setitem(tup, i, args[i]); }
    PyObject *cargs[3] = {api.none, api.none, tup};
    r = api.vectorcall(INFER_DEVICE, cargs, 3, NULL);
    api.decref(tup);
    if (!r) api.err_clear();
    return r;
}

/* 1 when a CheckedDesc's memory is still where the view was made (storage.StorageCheck):
   check_fn() returns the address check_ptr holds (both follow the ABI fields in its buffer;
   the descriptor, kept alive by the caller, holds check_fn) */
static int storage_ok(PyObject *d) {
    const char *buf = (const char *)CBUF(d);
    PyObject *fn = *(PyObject *const *)(buf + TG_SIZEOF_ARRAY_DESC + 8);
    if (!fn) return 0;
    PyObject *r = api.vectorcall(fn, NULL, 0, NULL);
    if (!r) { api.err_clear(); return 0; }
    int ok = 0;
    if (TYPE(r) == api.t_int) {
        unsigned long long now = api.long_as_ull(r);
        if (api.err_occurred()) api.err_clear();
        else ok = now == *(const uint64_t *)(buf + TG_SIZEOF_ARRAY_DESC);
    }
    api.decref(r);
    return ok;
}

/* tapegrad array ``a``'s cached descriptor (a.descriptor()), kept alive through ``refs``; NULL
   for the Python path (which raises for a moved foreign storage). Otherwise unchecked: an
   adjoint's gradient buffer is used as launch.packers.grad_desc does */
static desc_t *array_descriptor(PyObject *a, PyObject *fields, refs_t *refs, PyObject **obj) {
    PyObject *d = field(a, fields, S_DESC, api.none);
    if (!d) return NULL;
    if (d != api.none) api.incref(d);
    else {
        PyObject *args[1] = {a};
        d = api.callmethod(S_DESCRIPTOR, args, 1, NULL);
        if (!d) { api.err_clear(); return NULL; }
    }
    keep(refs, d);
    *obj = d;
    if (TYPE(d) == T_CHECKED && T_CHECKED) return storage_ok(d) ? (desc_t *)CBUF(d) : NULL;
    if (TYPE(d) != T_ARRAYDESC && TYPE(d) != T_ARRAYCTYPE) return NULL;
    return (desc_t *)CBUF(d);
}

/* a tapegrad array's descriptor buffer for parameter ``pp`` (borrowed through ``refs``), NULL
   for the Python path */
static desc_t *array_desc(param_t *pp, seen_t *sn, PyObject *a, PyObject *dev, refs_t *refs) {
    PyObject *fields = array_dict(a);
    if (fields && sn->desc && sn->dev == dev) {
        PyObject *d = dict_get(fields, S_DESC);
        if (d == sn->desc) {
            api.incref(d);
            keep(refs, d);
            return (desc_t *)CBUF(d);
        }
    }
    PyObject *dt = field(a, fields, S_DTYPE, NULL);   /* dtype objects live in the type tables */
    if (!dt || dt != pp->dtype) return NULL;
    PyObject *dv = field(a, fields, S_DEVICE, NULL);  /* the array (kept alive by the caller) holds it */
    if (!dv || dv != dev) return NULL;
    PyObject *obj = NULL;
    desc_t *desc = array_descriptor(a, fields, refs, &obj);
    if (!desc || desc->ndim != pp->ndim) return NULL;
    if (fields && TYPE(obj) == T_ARRAYDESC) {   /* (a CheckedDesc is checked at every launch) */
        api.incref(obj); xdecref(sn->desc); sn->desc = obj;
        api.incref(dev); xdecref(sn->dev); sn->dev = dev;
    }
    return desc;
}

static desc_t *ctype_desc(param_t *pp, PyObject *a, PyObject *dev) {
    PyObject *dt = attr(a, S_TG_DTYPE);
    if (!dt) return NULL;
    api.decref(dt);
    PyObject *dv = attr(a, S_TG_DEVICE);
    if (!dv) return NULL;
    api.decref(dv);
    if (dt != pp->dtype || dv != dev) return NULL;
    desc_t *desc = (desc_t *)CBUF(a);
    return desc->ndim == pp->ndim ? desc : NULL;
}

/* the descriptor of numpy array ``v`` for parameter ``pp`` from its cached layout, into ``out``;
   0 on a miss */
static int np_hit(param_t *pp, PyObject *v, desc_t *out) {
    np_array_t *a = (np_array_t *)v;
    if (a->nd < 0 || a->nd > TG_MAX_DIMS) return 0;
    int w = (a->flags & NPY_WRITEABLE) != 0;
    for (int l = 0; l < NLAY; l++) {
        np_layout_t *nl = &pp->np_lay[l];
        if (nl->descr != a->descr || nl->nd != a->nd || nl->writeable != w) continue;
        int same = 1;
        for (int k = 0; k < a->nd && same; k++)
            same = nl->dims[k] == a->dimensions[k] && nl->strides[k] == a->strides[k];
        if (!same) continue;
        *out = nl->tmpl;
        out->data = a->data;
        return 1;
    }
    return 0;
}

static void np_remember(param_t *pp, PyObject *v, const desc_t *d) {
    np_array_t *a = (np_array_t *)v;
    if (a->nd < 0 || a->nd > TG_MAX_DIMS) return;
    np_layout_t *nl = &pp->np_lay[pp->np_next];
    pp->np_next = (pp->np_next + 1) % NLAY;
    xdecref(nl->descr);
    api.incref(a->descr);       /* kept: its identity keys the layout */
    nl->descr = a->descr;
    nl->nd = a->nd;
    nl->writeable = (a->flags & NPY_WRITEABLE) != 0;
    for (int k = 0; k < a->nd; k++) { nl->dims[k] = a->dimensions[k]; nl->strides[k] = a->strides[k]; }
    nl->tmpl = *d;
    nl->tmpl.data = NULL;
}

/* the Python packer's value for parameter i (its ctypes buffer), kept alive through ``refs`` */
static void *py_pack(plan_t *p, int i, PyObject *a, PyObject *dev, refs_t *refs, PyObject **out) {
    PyObject *fn = api.tuple_getitem(p->packers, i);
    if (!fn) { api.err_clear(); return NULL; }
    PyObject *args[2] = {a, dev};
    PyObject *r = api.vectorcall(fn, args, 2, NULL);
    if (!r) { api.err_clear(); return NULL; }   /* the Python path raises the same error again */
    keep(refs, r);
    if (out) *out = r;
    return CBUF(r);
}

typedef struct { void *stream; int ok; } stream_info_t;

/* Device.stream (a new reference): the device's stream field where it is set and the loader
   checked that the property returns it then (tg_fl_set_device_stream_field), else the property */
static PyObject *S_DEVICE_STREAM = NULL;

TG_EXPORT void tg_fl_set_device_stream_field(const char *name) {
    xdecref(S_DEVICE_STREAM);
    S_DEVICE_STREAM = name ? api.intern(name) : NULL;
    if (!S_DEVICE_STREAM) api.err_clear();
}

static PyObject *device_stream(PyObject *dev) {
    if (S_DEVICE_STREAM && TYPE(dev) == T_DEVICE) {
        PyObject *d = api.generic_getdict(dev, NULL);
        if (!d) api.err_clear();
        else {
            api.decref(d);          /* the device holds it */
            PyObject *s = TYPE(d) == api.t_dict ? dict_get(d, S_DEVICE_STREAM) : NULL;
            if (s && s != api.none) { api.incref(s); return s; }
        }
    }
    return attr(dev, S_STREAM);
}

/* tapegrad's current stream on the entry's device (Device.stream), cached per Stream object */
static stream_info_t current_stream(entry_t *e) {
    stream_info_t si = {NULL, 0};
    PyObject *s = device_stream(e->device);
    if (!s) return si;
    if (s == api.none || TYPE(s) != T_STREAM) { api.decref(s); return si; }
    if (s != e->last_stream) {
        PyObject *h = attr(s, S_CUDA_STREAM);
        if (!h) { api.decref(s); return si; }
        unsigned long long hv = TYPE(h) == api.t_int ? api.long_as_ull(h) : 0;
        int bad = TYPE(h) != api.t_int || api.err_occurred() != NULL;
        api.err_clear();
        api.decref(h);
        if (bad) { api.decref(s); return si; }
        xdecref(e->last_stream);
        e->last_stream = s;     /* keeps the object: its identity cannot be reused */
        api.incref(s);
        e->last_handle = (void *)(uintptr_t)hv;
        e->last_blocking = -1;  /* asked only when a foreign tensor's stream check needs it */
    }
    api.decref(s);
    si.stream = e->last_handle;
    si.ok = 1;
    return si;
}

/* Stream.is_blocking of the entry's current stream (cached with it); -1 when unreadable */
static int current_blocking(entry_t *e) {
    if (e->last_blocking < 0 && e->last_stream) {
        PyObject *b = attr(e->last_stream, S_IS_BLOCKING);
        if (!b) return -1;
        e->last_blocking = b == api.true_;
        api.decref(b);
    }
    return e->last_blocking;
}

/* Parameter i's descriptor for object ``v`` on a CUDA entry, if launch.devices.cai_kind takes its
   type: 1 with *out set (the cached layout and the dict's pointer; on a miss the Python
   packer's descriptor, then cached), 0 for the Python packer as before (another type, or a dict
   the helper does not read), -1 for the Python path (a producer stream to wait for or a
   refused one: protocols.parse_cuda_array_interface does that; a packer error). ``d``: the
   dict launch_device read, or NULL. */
static int cai_desc(plan_t *p, int i, PyObject *v, PyObject *d, PyObject *dev, entry_t *e, void *cur,
                    refs_t *refs, desc_t *buf, desc_t **out) {
    if (cai_kind(v) == 0) return 0;
    param_t *pp = &p->p[i];
    if (!d) {
        d = attr(v, S_CAI);
        if (!d) return 0;
        keep(refs, d);
    }
    cai_t c;
    if (!cai_read(d, &c)) return 0;
    if (cai_stream_decision(&c, (uintptr_t)cur, e, 0) != 0) return -1;
    PyObject *t = TYPE(v);
    cai_layout_t *lay = cai_hit(pp, t, &c, dev, -1);
    if (lay) {
        *buf = lay->tmpl;
        buf->data = (void *)c.ptr;      /* as the packer's ``ptr or None`` */
        *out = buf;
        return 1;
    }
    /* a miss: the packer checks the layout and builds the descriptor (no stream wait: none is
       needed, checked above); the key's values are held through its Python code */
    PyObject *key[3] = {c.typestr, c.shape, c.strides};
    for (int k = 0; k < 3; k++) api.incref(key[k]);
    PyObject *r = NULL;
    unsigned long long ep = cai_epoch;
    desc_t *dd = (desc_t *)py_pack(p, i, v, dev, refs, &r);
    if (!dd || (TYPE(r) != T_ARRAYCTYPE && TYPE(r) != T_ARRAYDESC)) {
        for (int k = 0; k < 3; k++) api.decref(key[k]);
        return -1;
    }
    if (ep != cai_epoch) {      /* the packer's code registered an adapter: ask about the type again */
        for (int k = 0; k < 3; k++) api.decref(key[k]);
        *out = dd;
        return 1;
    }
    lay = &pp->cai_lay[pp->cai_next];
    pp->cai_next = (pp->cai_next + 1) % NLAY;
    cai_layout_clear(lay);
    api.incref(t);
    api.incref(dev);
    lay->type = t;
    lay->typestr = key[0]; lay->shape = key[1]; lay->strides = key[2];   /* takes the references */
    lay->readonly = c.readonly;
    lay->device = dev;
    lay->ptr_ord = ptr_ordinal(c.ptr);
    lay->infer = lay->ptr_ord >= 0 && lay->ptr_ord == e->ord;
    lay->epoch = cai_epoch;
    lay->tmpl = *dd;
    lay->tmpl.data = NULL;
    *out = dd;
    return 1;
}

/* ------------------------------------------------------------ one launch, step by step */

/* Everything one fast_launch call reads and packs. Each step below fills its part and returns
   0 when the launch is not one the helper takes: the Python path then runs it (or raises). */
typedef struct {
    PyObject *kernel, *dim, *inputs, *outputs, *device, *stream, *record_tape, *block_dim, *max_blocks;
    PyObject *adj_in, *adj_out;     /* None, or the adjoint buffers given (adjoint launches) */
    PyObject *tape;                 /* the recording tape (record: 1; its reference kept in refs) */
    int adjoint, record, n, in_list, out_list, ain_list, aout_list;
    Py_ssize_t nin, nout;
    plan_t *p;
    PyObject *args[MAXP];           /* inputs then outputs (references kept in refs) */
    PyObject *cai[MAXP];            /* CAI dicts launch_device read */
    bounds_t bounds;
    PyObject *dev;                  /* the launch device (a new reference once known) */
    entry_t *e;
    void *fn;                       /* the forward or backward entry */
    PyObject *mod;                  /* the module launched (its reference kept in refs) */
    const int32_t *err;             /* CPU: its library's runtime-error code (NULL: CUDA) */
    void *handle;                   /* CUDA: the stream launched on */
    stream_info_t cur;              /* CUDA: tapegrad's current stream on the device */
    unsigned blocks, threads;
    void *argv[2 * MAXP + 1];
    scalar_t scal[MAXP];
    desc_t fdesc[MAXP];             /* descriptors made from cached layouts */
    desc_t gdesc[MAXP];             /* a descriptor argument's own gradient (launch.packers._desc_grad) */
    desc_t zdesc;                   /* "no gradient": NULL data, reads accumulate nothing */
    size_t zused;
    union { double align[ZMAX / 8]; unsigned char b[ZMAX]; } zbuf __attribute__((aligned(16)));   /* zeroed
                                       scalar/vector/matrix adjoint slots, 16-byte aligned each */
    refs_t refs;
} call_t;

static PyObject *fallback(call_t *c) {
    for (int i = 0; i < c->refs.nobjs; i++) api.decref(c->refs.objs[i]);
    xdecref(c->dev);
    n_fallback++;
    if (c->adjoint) n_adj_fallback++;
    api.incref(api.notimpl);
    return api.notimpl;
}

/* None; the module launched when the kernel recorded a runtime error (its code is set: one
   load after the launch; launch() raises through the module's ErrorSlot, which clears it) */
static PyObject *launched(call_t *c) {
    PyObject *r = c->err && __atomic_load_n(c->err, __ATOMIC_RELAXED) ? c->mod : api.none;
    api.incref(r);
    for (int i = 0; i < c->refs.nobjs; i++) api.decref(c->refs.objs[i]);
    xdecref(c->dev);
    n_fast++;
    if (c->adjoint) n_adj_fast++;
    return r;
}

/* 1 when no thread has a recording tape (recording's count is 0): the thread-local read,
   several dict lookups, is skipped; 0 when one may (or there is no count) */
static int no_tape_records(void) { return TAPES_CELL && CELL(TAPES_CELL) == 0; }

/* the call's arguments, and the states the Python path handles: an open CPU graph capture, a
   recording tape without a recorder (or record_tape not a bool) */
static int call_open(call_t *c, PyObject *const *a, Py_ssize_t nargs) {
    c->refs.nobjs = 0;
    c->dev = NULL;
    c->adjoint = nargs == 11;
    if (!ready || (nargs != 9 && nargs != 11) || TYPE(a[0]) != T_KERNEL) return 0;
    c->kernel = a[0]; c->dim = a[1]; c->inputs = a[2]; c->outputs = a[3]; c->device = a[4]; c->stream = a[5];
    c->record_tape = a[6]; c->block_dim = a[7]; c->max_blocks = a[8];
    c->adj_in = c->adjoint ? a[9] : api.none;
    c->adj_out = c->adjoint ? a[10] : api.none;
    if (CELL(CAPTURE_CELL) != 0) return 0;
    /* adjoint launches are never recorded; a forward one under a tape is (record_call) */
    c->record = 0;
    c->tape = NULL;
    if (c->adjoint || c->record_tape == api.false_ || no_tape_records()) return 1;
    PyObject *t = TAPE_STATE ? api.getattr(TAPE_STATE, S_TAPE) : api.vectorcall(ACTIVE_TAPE, NULL, 0, NULL);
    if (!t) { api.err_clear(); return 0; }
    keep(&c->refs, t);
    if (t == api.none) return 1;
    if (c->record_tape != api.true_ || !RECORDER) return 0;
    c->record = 1;
    c->tape = t;
    return 1;
}

/* the LaunchPlan last read and its native plan: a LaunchPlan is frozen (a changed plan is a new
   object), so meeting the same object again skips its attribute read; the references keep the
   identity from being reused and the capsule alive */
static PyObject *LAST_LP = NULL, *LAST_CAP = NULL;
static plan_t *LAST_PLAN = NULL;

/* the kernel's native plan, its arguments (alive through the launch, whatever the caller's
   lists do) and the grid */
static int call_plan(call_t *c) {
    PyObject *lp = attr(c->kernel, S_LAUNCH_PLAN);
    if (!lp) return 0;
    keep(&c->refs, lp);
    if (lp == api.none) return 0;   /* first launch, or a generic kernel */
    if (lp == LAST_LP) {
        c->p = LAST_PLAN;
    } else {
        PyObject *cap = attr(lp, S_NATIVE);
        if (!cap) return 0;
        keep(&c->refs, cap);
        c->p = cap == api.none ? NULL : plan_of(cap);
        if (!c->p) { api.err_clear(); return 0; }
        api.incref(lp); api.incref(cap);
        PyObject *old_lp = LAST_LP, *old_cap = LAST_CAP;
        LAST_LP = lp; LAST_CAP = cap; LAST_PLAN = c->p;
        xdecref(old_lp); xdecref(old_cap);   /* (last: a finalizer run here sees a consistent cache) */
    }
    c->nin = seq_len(c->inputs, &c->in_list);
    c->nout = seq_len(c->outputs, &c->out_list);
    if (c->nin < 0 || c->nout < 0 || c->nin + c->nout != c->p->n) return 0;
    c->n = c->p->n;
    for (int i = 0; i < c->n; i++) {
        PyObject *v = i < c->nin ? arg_at(c->inputs, c->in_list, i) : arg_at(c->outputs, c->out_list, i - c->nin);
        api.incref(v);
        keep(&c->refs, v);
        c->args[i] = v;
    }
    if (!make_bounds(c->dim, &c->bounds)) return 0;
    return c->bounds.ndim >= c->p->tid_ndim;   /* i, j = tid() in a 1-D launch: the Python path's error */
}

/* the launch device and the plan's entry for it: a stale one (tg.config.mode or module options
   changed since: invalidate) or a missing backward takes the Python path */
static int call_entry(call_t *c) {
    memset(c->cai, 0, sizeof(c->cai[0]) * (size_t)c->n);
    c->dev = launch_device(c->p, c->device, c->stream, c->args, c->n, &c->refs, c->cai);
    if (!c->dev) return 0;
    c->e = NULL;
    for (int k = 0; k < NENT; k++)
        if (c->p->ent[k].device == c->dev) { c->e = &c->p->ent[k]; break; }
    if (!c->e || c->e->epoch != epoch || !c->e->fn) return 0;
    c->fn = c->adjoint ? c->e->bfn : c->e->fn;
    if (!c->fn) return 0;
    /* the adjoint buffers given: sequences of the inputs' and outputs' lengths (else the error) */
    c->ain_list = c->aout_list = 0;
    if (c->adj_in != api.none && seq_len(c->adj_in, &c->ain_list) != c->nin) return 0;
    if (c->adj_out != api.none && seq_len(c->adj_out, &c->aout_list) != c->nout) return 0;
    return 1;
}

/* a Stream given to the launch: on the launch device, its handle */
static int given_stream(call_t *c) {
    if (!T_STREAM || TYPE(c->stream) != T_STREAM) return 0;
    PyObject *sd = attr(c->stream, S_DEVICE);
    if (!sd) return 0;
    api.decref(sd);
    if (sd != c->dev) return 0;
    PyObject *h = attr(c->stream, S_CUDA_STREAM);
    if (!h) return 0;
    keep(&c->refs, h);
    if (TYPE(h) != api.t_int) return 0;
    c->handle = (void *)(uintptr_t)api.long_as_ull(h);
    if (api.err_occurred()) { api.err_clear(); return 0; }
    return 1;
}

/* CUDA blocks and threads per block: the ABI's grid formula (tg_grid_blocks); an elementwise
   entry runs one CUDA thread per group of `lanes` launch threads (adjoint entries are grid-stride
   loops over single threads) */
static int grid_size(call_t *c) {
    long long bd, mb;
    if (!read_int(c->block_dim, &bd) || !read_int(c->max_blocks, &mb) || bd < 0 || bd > TG_MAX_BLOCK_DIM) return 0;
    if (bd == 0) bd = TG_DEFAULT_BLOCK_DIM;
    c->blocks = (unsigned)tg_grid_blocks(c->bounds.size, bd, c->adjoint ? 1 : c->e->lanes, mb, c->e->threads_cap);
    c->threads = (unsigned)bd;
    return 1;
}

/* the entry's context current on this thread. A thread that has made no CUDA call yet has none:
   make the device's primary context current, as the runtime does on a thread's first call (H200:
   every launch of a new thread took the Python path). Another device's context: the Python path
   switches. */
static int context_current(entry_t *e) {
    void *ctx = NULL;
    if (!cu_launch || !cu_ctx_current || cu_ctx_current(&ctx) != 0) return 0;
    if (!ctx && cu_ctx_set && cu_ctx_set(e->ctx) == 0) ctx = e->ctx;
    return ctx == e->ctx;
}

/* CUDA: the stream (the one given, else tapegrad's current one), the grid, the context; the CPU
   takes no stream */
static int call_cuda(call_t *c) {
    c->handle = NULL;
    c->cur.stream = NULL;
    c->cur.ok = 0;
    c->blocks = 0;
    c->threads = TG_DEFAULT_BLOCK_DIM;
    if (!c->e->cuda) return c->stream == api.none;
    c->cur = current_stream(c->e);
    if (!c->cur.ok) return 0;
    if (c->stream == api.none) c->handle = c->cur.stream;
    else if (!given_stream(c)) return 0;
    return grid_size(c) && context_current(c->e);
}

/* The Python packer's descriptor of ``v`` for parameter i (numpy misses, CAI dicts the helper
   does not read, adjoint buffers given as other objects...); remembered as a numpy layout when
   ``remember``. NULL for the Python path: an array subclass (its version bump, its unchecked
   descriptor there), a packer error, a result that is no descriptor. */
static desc_t *packer_desc(call_t *c, int i, PyObject *v, int remember) {
    int sub = api.isinstance(v, T_ARRAY);
    if (sub != 0) { api.err_clear(); return NULL; }
    PyObject *r = NULL;
    desc_t *desc = (desc_t *)py_pack(c->p, i, v, c->dev, &c->refs, &r);
    if (desc && TYPE(r) != T_ARRAYCTYPE && TYPE(r) != T_ARRAYDESC) return NULL;
    if (desc && remember && TYPE(v) == T_NDARRAY && !c->e->cuda) np_remember(&c->p->p[i], v, desc);
    return desc;
}

/* a registered foreign tensor's descriptor: its cached layout with the data pointer read now,
   or on a miss the Python packer's descriptor (then cached); NULL for the Python path */
static desc_t *foreign_desc(call_t *c, int i, spec_t *s) {
    param_t *pp = &c->p->p[i];
    PyObject *v = c->args[i], *key[NKEY];
    if (!foreign_key(s, v, key)) return NULL;
    layout_t *lay = layout_hit(pp, s, key);
    if (lay) {
        for (int k = 0; k < s->nkey; k++) api.decref(key[k]);
        if (lay->device != c->dev) return NULL;   /* the Python path's error */
        int ok;
        c->fdesc[i] = lay->tmpl;
        c->fdesc[i].data = foreign_ptr(s, v, &ok);
        return ok ? &c->fdesc[i] : NULL;
    }
    /* a miss: the Python packer checks the layout and builds its descriptor */
    PyObject *r = NULL;
    desc_t *d = (desc_t *)py_pack(c->p, i, v, c->dev, &c->refs, &r);
    if (!d || (TYPE(r) != T_ARRAYCTYPE && TYPE(r) != T_ARRAYDESC)) {
        for (int k = 0; k < s->nkey; k++) api.decref(key[k]);
        return NULL;
    }
    lay = &pp->lay[pp->lay_next];
    pp->lay_next = (pp->lay_next + 1) % NLAY;
    layout_clear(lay);
    lay->spec = s;
    for (int k = 0; k < s->nkey; k++) lay->key[k] = key[k];   /* takes the references */
    api.incref(c->dev);
    lay->device = c->dev;
    lay->tmpl = *d;
    lay->tmpl.data = NULL;
    return d;
}

/* the framework's current stream is ordered with tapegrad's; else the Python path tells the
   framework's allocator (record_stream) about the use */
static int foreign_stream_ordered(call_t *c, spec_t *s) {
    PyObject *h = api.vectorcall(s->stream_of, &c->e->ordinal, 1, NULL);
    if (!h) { api.err_clear(); return 0; }
    unsigned long long hv = TYPE(h) == api.t_int ? api.long_as_ull(h) : 1;
    api.err_clear();
    api.decref(h);
    return (void *)(uintptr_t)hv == c->cur.stream || (hv == 0 && current_blocking(c->e) == 1);
}

/* parameter i's descriptor for its array argument; NULL for the Python path. ``checked``: the
   tensor type whose framework stream was last checked in this launch */
static desc_t *pack_array(call_t *c, int i, spec_t **checked) {
    param_t *pp = &c->p->p[i];
    PyObject *v = c->args[i], *t = TYPE(v);
    if (t == T_ARRAY) return array_desc(pp, &pp->seen, v, c->dev, &c->refs);
    if (t == T_ARRAYCTYPE) return ctype_desc(pp, v, c->dev);
    if (v == api.none) return NULL;
    spec_t *s = spec_for(t);
    if (s) {
        desc_t *desc = foreign_desc(c, i, s);
        if (desc && c->e->cuda && *checked != s) {
            if (!foreign_stream_ordered(c, s)) return NULL;
            *checked = s;
        }
        return desc;
    }
    if (t == T_NDARRAY && !c->e->cuda && np_hit(pp, v, &c->fdesc[i])) return &c->fdesc[i];
    if (c->e->cuda && t != T_NDARRAY) {
        desc_t *desc = NULL;
        int state = cai_desc(c->p, i, v, c->cai[i], c->dev, c->e, c->cur.stream, &c->refs, &c->fdesc[i], &desc);
        if (state < 0) return NULL;
        if (state > 0) return desc;
    }
    return packer_desc(c, i, v, 1);
}

/* the forward arguments, then the grid against the arrays tid() indexes unguarded */
static int pack_forward(call_t *c) {
    spec_t *checked = NULL;
    for (int i = 0; i < c->n; i++) {
        param_t *pp = &c->p->p[i];
        if (pp->kind == TG_KIND_ARRAY) {
            desc_t *desc = pack_array(c, i, &checked);
            if (!desc) return 0;
            if (pp->written && (desc->flags & TG_ARRAY_FLAG_READONLY)) return 0;   /* read-only: the Python path's error */
            c->argv[i] = desc;
        } else if (pp->kind == TG_KIND_PY) {
            void *buf = py_pack(c->p, i, c->args[i], c->dev, &c->refs, NULL);
            if (!buf) return 0;
            c->argv[i] = buf;
        } else {
            if (!pack_scalar(pp, c->args[i], &c->scal[i])) return 0;
            c->argv[i] = &c->scal[i];
        }
    }
    return !(c->p->nchecks && grid_overruns(c->p, &c->bounds, c->argv));
}

/* the adjoint buffer given for parameter i: None, or a new reference kept in refs (alive
   whatever packers do to the lists); NULL for the Python path */
static PyObject *adjoint_given(call_t *c, int i) {
    PyObject *g = i < c->nin ? (c->adj_in == api.none ? api.none : arg_at(c->adj_in, c->ain_list, i))
                             : (c->adj_out == api.none ? api.none : arg_at(c->adj_out, c->aout_list, i - c->nin));
    if (!g) { api.err_clear(); return NULL; }
    if (g != api.none) { api.incref(g); keep(&c->refs, g); }
    return g;
}

/* tapegrad array ``v``'s .grad (a new reference; NULL for the Python path): the gradient field
   where the array module says it is .grad's value (set, and no framework link), else .grad
   itself (a link's refresh, a view's late gradient) */
static PyObject *array_grad(PyObject *v) {
    PyObject *link = attr(v, S_LINK_FIELD);
    if (!link) return NULL;
    api.decref(link);
    if (link == api.none) {
        PyObject *g = attr(v, S_GRAD_FIELD);
        if (!g) return NULL;
        if (g != api.none) return g;
        api.decref(g);
    }
    return attr(v, S_GRAD);
}

/* an array parameter's adjoint argument (launch.packers: adjoint_values, grad_desc, _desc_grad) */
static void *adjoint_array(call_t *c, int i, PyObject *g) {
    PyObject *v = c->args[i];
    if (g == api.none && TYPE(v) == T_ARRAY) {
        g = array_grad(v);          /* the array's .grad (None: no gradient) */
        if (!g) return NULL;
        keep(&c->refs, g);
    }
    if (g == api.none && TYPE(v) != T_ARRAY && ((desc_t *)c->argv[i])->grad) {
        /* a descriptor carrying a gradient pointer (return_ctype=True, or a tensor whose
           TensorType row reads a gradient): its gradient, laid out as the data */
        c->gdesc[i] = *(desc_t *)c->argv[i];
        c->gdesc[i].data = c->gdesc[i].grad;
        c->gdesc[i].grad = NULL;
        return &c->gdesc[i];
    }
    if (g == api.none) return &c->zdesc;
    /* a tapegrad array buffer of the parameter's element type, ndim and device (else the Python
       path, which raises) */
    if (TYPE(g) == T_ARRAY) return array_desc(&c->p->p[i], &c->p->p[i].adj_seen, g, c->dev, &c->refs);
    return packer_desc(c, i, g, 0);   /* a buffer given as another object: its packer, as launch() */
}

/* a non-array parameter's adjoint argument: the value given, packed as launch() does, else a
   zeroed slot (the CPU entry atomically adds a scalar's adjoint into it: a fresh zero per launch;
   a struct's slot is never read: zero bytes serve as launch()'s default instance does) */
static void *adjoint_value(call_t *c, int i, PyObject *g) {
    param_t *pp = &c->p->p[i];
    if (g != api.none) return py_pack(c->p, i, g, c->dev, &c->refs, NULL);
    if (pp->zsize <= 0 || c->zused + (size_t)pp->zsize > ZMAX) return NULL;
    void *slot = c->zbuf.b + c->zused;
    c->zused += ((size_t)pp->zsize + 15) & ~(size_t)15;
    return slot;
}

/* the adjoint arguments after the forward ones; an adjoint buffer of another shape than its
   array is the Python path's error */
static int pack_adjoint(call_t *c) {
    memset(&c->zdesc, 0, sizeof(c->zdesc));
    c->zused = 0;
    for (int i = 0; i < c->n; i++) {
        PyObject *g = adjoint_given(c, i);
        if (!g) return 0;
        int array = c->p->p[i].kind == TG_KIND_ARRAY;
        void *slot = array ? adjoint_array(c, i, g) : adjoint_value(c, i, g);
        if (!slot) return 0;
        if (array && adjoint_mismatch((const desc_t *)c->argv[i], (const desc_t *)slot)) return 0;
        c->argv[c->n + i] = slot;
    }
    if (c->zused > ZMAX) c->zused = ZMAX;
    memset(c->zbuf.b, 0, c->zused);
    return 1;
}

/* ------------------------------------------------------------------ recording, natively */

/* The common recorded launch, as Tape._record_plain_launch takes it, recorded here without a
   Python call: a different plain tapegrad array (no framework link) per array parameter of a
   kernel without struct parameters, nothing written that a differentiable record still needs
   (the tape's live roots). The tape field (hooks.tape_field) holds (pending list, live roots
   dict, pending roots dict, saver): the record's values are appended to the list as one tuple
   (record_tuple), which the tape turns into a LaunchRecord when next read (Tape._drain, which
   also makes the reads live), and the memory root of each array whose values its adjoint reads
   is marked pending at once, so the next launch's check sees it. An in-place step (an array
   the differentiable launch reads and then overwrites, over memory no record needs) is recorded
   here too: saver(tape, arrays, stream) copies the arrays' current values into the tape's
   arena before the launch and returns True (None: the tape does not save, the recorder words
   the warning), so the common loop of in-place steps makes no LaunchRecord and walks no
   record() path per step. */
#define R_ARRAY 1
#define R_BEFORE 2
#define R_AFTER 4
#define R_WRITES 8

typedef struct { PyObject *a, *fields; uintptr_t root; int rec; } rec_arg_t;   /* fields: array_dict(a) */

/* the kernel's record plan (hooks.record_plan), asked once per plan; 0: none (a struct parameter) */
static int record_plan(call_t *c) {
    plan_t *p = c->p;
    if (p->rec_state == 0) {
        p->rec_state = -1;
        PyObject *r = RECORD_PLAN ? api.vectorcall(RECORD_PLAN, &c->kernel, 1, NULL) : NULL;
        if (!r) api.err_clear();
        else if (TYPE(r) == api.t_tuple && api.tuple_size(r) == p->n) {
            for (int i = 0; i < p->n; i++) {
                long long f = 0;
                tuple_int(r, i, &f);
                p->p[i].rec = (int)f;
            }
            p->rec_state = 1;
        }
        xdecref(r);
    }
    return p->rec_state == 1;
}

/* tape_saves.memory_root of plain array ``a`` (``fields``: its array_dict): up the owners while
   they are plain arrays; 0 for the recorder (an owner that is an array subclass, an unreadable field) */
static PyObject *OWNER_TYPES[4];   /* owner types met that are not array subclasses (held: HostBuffer...) */
static int n_owner_types = 0;

static uintptr_t memory_root(PyObject *a, PyObject *fields) {
    for (int depth = 0; depth < 256; depth++, fields = array_dict(a)) {
        PyObject *o = field(a, fields, S_OWNER_FIELD, api.none);   /* the array holds it */
        if (!o) return 0;
        if (TYPE(o) == T_ARRAY) { a = o; continue; }
        if (o == api.none) return (uintptr_t)a;
        for (int k = 0; k < n_owner_types; k++)
            if (TYPE(o) == OWNER_TYPES[k]) return (uintptr_t)a;     /* the memory's own buffer object */
        int sub = api.isinstance(o, T_ARRAY);
        if (sub != 0) { api.err_clear(); return 0; }
        if (n_owner_types < 4) {
            api.incref(TYPE(o));
            OWNER_TYPES[n_owner_types++] = TYPE(o);
        }
        return (uintptr_t)a;
    }
    return 0;
}

/* 1 when memory root ``root`` has live keys in the tape's dict, or is one of the pending
   records' (a differentiable record still needs values there), 0 when not, -1 when unreadable */
static int root_live(PyObject *live, PyObject *roots, uintptr_t root) {
    PyObject *key = api.long_from_ll((long long)root);
    if (!key) { api.err_clear(); return -1; }
    PyObject *keys = dict_get(live, key);      /* borrowed; NULL: absent */
    PyObject *marked = dict_get(roots, key);
    api.decref(key);
    if (marked) return 1;
    if (!keys) return 0;
    Py_ssize_t n = api.set_size(keys);
    if (n < 0) { api.err_clear(); return -1; }
    return n > 0;
}

/* the launch's plain arrays and whether it is differentiable (Tape._differentiable over them);
   -1 for the recorder (a subclass, a tensor passed directly, a linked array, an array passed twice) */
static int record_arrays(call_t *c, rec_arg_t *ra, int *na) {
    int diff = 0;
    *na = 0;
    for (int i = 0; i < c->n; i++) {
        if (!(c->p->p[i].rec & R_ARRAY)) continue;
        PyObject *a = c->args[i];
        if (TYPE(a) != T_ARRAY) {
            if (a == api.none) continue;    /* Warp's null array: no memory, no gradient */
            return -1;    /* a subclass, or a framework tensor passed directly: Tape.record checks it */
        }
        PyObject *fields = array_dict(a), *link = field(a, fields, S_LINK_FIELD, api.none);
        PyObject *g = link ? field(a, fields, S_GRAD_FIELD, api.none) : NULL;
        if (!g || link != api.none) return -1;
        diff |= g != api.none;
        for (int j = 0; j < *na; j++)
            if (ra[j].a == a) return -1;
        ra[*na].a = a;
        ra[*na].fields = fields;
        ra[*na].rec = c->p->p[i].rec;
        ra[*na].root = 0;
        (*na)++;
    }
    if (!diff) return 0;
    PyObject *eb = attr(c->kernel, S_ENABLE_BACKWARD);
    xdecref(eb);
    if (eb != api.true_ && eb != api.false_) return -1;
    return eb == api.true_;
}

/* Tape._record_plain_launch's checks: 1 when the launch is one recorded here (nothing changed
   yet), 0 for the recorder; each array's memory root filled in */
static int record_checks(PyObject *live, PyObject *roots, rec_arg_t *ra, int na, int diff, int *nown) {
    uintptr_t written[MAXP];
    int nw = 0;
    *nown = 0;
    for (int k = 0; k < na; k++) {
        ra[k].root = memory_root(ra[k].a, ra[k].fields);
        if (!ra[k].root) return 0;
        int r = ra[k].rec;
        if (!(r & R_WRITES)) continue;
        if (diff && (r & R_AFTER)) return 0;                /* reads back what it wrote: the recorder warns */
        if (diff && (r & R_BEFORE)) (*nown)++;               /* in place: its old values are saved */
        for (int j = 0; j < nw; j++)
            if (written[j] == ra[k].root) return 0;         /* two views of one allocation written */
        written[nw++] = ra[k].root;
        if (root_live(live, roots, ra[k].root) != 0) return 0;     /* values a record still needs */
    }
    for (int k = 0; k < na && nw; k++) {
        if (!diff || !(ra[k].rec & R_BEFORE) || (ra[k].rec & R_WRITES)) continue;
        for (int j = 0; j < nw; j++)
            if (written[j] == ra[k].root) return 0;         /* writes a view of what it reads */
    }
    return 1;
}

/* the pending record's tuple (kernel, dim, args, n_inputs, device, stream, block_dim,
   max_blocks, differentiable): the arguments in one tuple, as launched (the caller's lists may
   change); a new reference, NULL when it could not be made */
static PyObject *record_tuple(call_t *c, int diff) {
    PyObject *args = api.tuple_new(c->n);
    PyObject *nin = args ? api.long_from_ll((long long)c->nin) : NULL;
    PyObject *t = nin ? api.tuple_new(9) : NULL;
    if (!t) { api.err_clear(); xdecref(args); xdecref(nin); return NULL; }
    for (int i = 0; i < c->n; i++) { api.incref(c->args[i]); api.tuple_setitem(args, i, c->args[i]); }
    PyObject *items[9] = {c->kernel, c->dim, args, nin, c->dev, c->stream, c->block_dim, c->max_blocks,
                          diff ? api.true_ : api.false_};
    for (int i = 0; i < 9; i++) {
        if (i != 2 && i != 3) api.incref(items[i]);   /* args, nin: references made here */
        api.tuple_setitem(t, i, items[i]);
    }
    return t;
}

/* the memory root of each array whose values the adjoint reads is marked (the tape's dict of
   pending roots: id(root) -> True; Tape._drain makes the arrays live) */
static void record_live(PyObject *roots, const rec_arg_t *ra, int na) {
    for (int k = 0; k < na; k++) {
        if ((ra[k].rec & (R_BEFORE | R_WRITES)) != R_BEFORE) continue;
        PyObject *key = api.long_from_ll((long long)ra[k].root);
        if (!key || api.dict_setitem(roots, key, api.true_) < 0) api.err_clear();
        xdecref(key);
    }
}

/* the in-place step's saves: saver(tape, (arrays...), stream) for the ``nown`` arrays the
   launch reads and then overwrites; 1 when the tape saved them, 0 for the recorder */
static int record_saves(call_t *c, PyObject *saver, const rec_arg_t *ra, int na, int nown) {
    if (saver == api.none) return 0;
    PyObject *own = api.tuple_new(nown);
    if (!own) { api.err_clear(); return 0; }
    for (int k = 0, j = 0; k < na; k++) {
        if ((ra[k].rec & (R_WRITES | R_BEFORE)) != (R_WRITES | R_BEFORE)) continue;
        api.incref(ra[k].a);
        api.tuple_setitem(own, j++, ra[k].a);
    }
    PyObject *sargs[3] = {c->tape, own, c->stream};
    PyObject *r = api.vectorcall(saver, sargs, 3, NULL);
    api.decref(own);
    if (!r) { api.err_clear(); return 0; }
    api.decref(r);
    return r == api.true_;
}

/* 2: recorded here, with an in-place step's saves (Python ran copies); 1: recorded here; 0: the
   recorder (hooks.record) records it */
static int native_record(call_t *c) {
    if (!S_TAPE_FIELD || !record_plan(c)) return 0;
    PyObject *st = attr(c->tape, S_TAPE_FIELD);
    if (!st) return 0;
    keep(&c->refs, st);
    if (TYPE(st) != api.t_tuple || api.tuple_size(st) != 4) return 0;
    PyObject *pending = api.tuple_getitem(st, 0), *live = api.tuple_getitem(st, 1), *roots = api.tuple_getitem(st, 2);
    PyObject *saver = api.tuple_getitem(st, 3);
    if (!pending || !live || !roots || !saver || TYPE(pending) != api.t_list || TYPE(live) != api.t_dict ||
        TYPE(roots) != api.t_dict) { api.err_clear(); return 0; }
    rec_arg_t ra[MAXP];
    int na = 0, nown = 0, diff = record_arrays(c, ra, &na);
    if (diff < 0 || !record_checks(live, roots, ra, na, diff, &nown)) return 0;
    PyObject *rec = record_tuple(c, diff);
    if (!rec) return 0;
    /* the saves first: a tape that does not save leaves the launch to the recorder unrecorded */
    if (nown && !record_saves(c, saver, ra, na, nown)) { api.decref(rec); return 0; }
    int ok = api.list_append(pending, rec);
    api.decref(rec);
    if (ok < 0) { api.err_clear(); return 0; }
    if (diff) record_live(roots, ra, na);
    return nown ? 2 : 1;
}

/* Under a recording tape: the record, before the launch (the tape saves what the launch
   overwrites). Nothing may pass the launch to the Python path once it is recorded (it would
   record it again), except a driver error, which leaves a record of a launch that ran on
   neither path (the Python path raises it). */
static int record_call(call_t *c, void **prev_ctx, int *restore_ctx) {
    *restore_ctx = 0;
    if (!c->record) return 1;
    int native = native_record(c);
    if (native == 1) return 1;
    if (native == 0) {
        PyObject *rargs[8] = {c->kernel, c->dim, c->inputs, c->outputs, c->dev, c->stream, c->block_dim,
                              c->max_blocks};
        PyObject *r = api.vectorcall(RECORDER, rargs, 8, NULL);
        if (!r) { api.err_clear(); return 0; }
        api.decref(r);
    }
    if (c->e->cuda) {
        /* the tape's copies may have switched the thread's context: launch in the entry's */
        void *now = NULL;
        if (cu_ctx_current(&now) != 0) now = NULL;
        if (now != c->e->ctx && cu_ctx_set && cu_ctx_set(c->e->ctx) == 0) { *prev_ctx = now; *restore_ctx = 1; }
    }
    return 1;
}

/* the launch, the GIL released; 0 when the driver refused it (nothing ran: the Python path
   raises the driver's error) */
static int run_kernel(call_t *c, void *prev_ctx, int restore_ctx) {
    int nparams = c->adjoint ? 2 * c->n : c->n;
    api.incref(c->e->module);       /* the loaded binary stays loaded through the call */
    keep(&c->refs, c->e->module);
    c->mod = c->e->module;
    c->err = c->e->err;             /* (another thread may replace the entry while this one runs) */
    if (!c->e->cuda) {
        void *ts = api.save_thread();
        ((void (*)(const bounds_t *, void **))c->fn)(&c->bounds, c->argv);
        api.restore_thread(ts);
        return 1;
    }
    if (c->bounds.size == 0) {
        if (restore_ctx) cu_ctx_set(prev_ctx);
        return 1;
    }
    void *params[2 * MAXP + 1];
    params[0] = &c->bounds;
    for (int i = 0; i < nparams; i++) params[i + 1] = c->argv[i];
    void *ts = api.save_thread();
    int rc = cu_launch(c->fn, c->blocks, 1, 1, c->threads, 1, 1, 0, c->handle, params, NULL);
    if (restore_ctx) cu_ctx_set(prev_ctx);
    api.restore_thread(ts);
    return rc == 0;
}

/* versions of the written tapegrad arrays (launch() does the same; adjoints bump none) */
static void bump_versions(call_t *c) {
    for (int i = 0; i < c->n; i++) {
        if (!c->p->p[i].written || TYPE(c->args[i]) != T_ARRAY) continue;
        PyObject *a = c->args[i], *fields = array_dict(a);
        PyObject *ver = field(a, fields, S_VERSION, ZERO);
        long long x;
        if (!ver || !read_int(ver, &x)) continue;
        PyObject *nv = api.long_from_ll(x + 1);
        if (!nv) { api.err_clear(); continue; }
        if ((fields ? api.dict_setitem(fields, S_VERSION, nv) : api.setattr(a, S_VERSION, nv)) < 0) api.err_clear();
        api.decref(nv);
    }
}

static PyObject *fl_launch(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    (void)self;
    call_t c;
    if (!call_open(&c, a, nargs) || !call_plan(&c) || !call_entry(&c) || !call_cuda(&c) || !pack_forward(&c))
        return fallback(&c);
    if (c.adjoint && !pack_adjoint(&c)) return fallback(&c);
    void *prev_ctx = NULL;
    int restore_ctx = 0;
    if (!record_call(&c, &prev_ctx, &restore_ctx) || !run_kernel(&c, prev_ctx, restore_ctx)) return fallback(&c);
    if (!c.adjoint) bump_versions(&c);
    return launched(&c);
}

/* has_entry(plan, device, module, mode) -> bool: launch()'s Python path asks after each launch
   whether the plan already knows the module it used (cheap: no ctypes call) */
static PyObject *fl_has_entry(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    (void)self;
    int r = nargs == 4 && tg_fl_has_entry(a[0], a[1], a[2], a[3]);
    PyObject *o = r ? api.true_ : api.false_;
    api.incref(o);
    return o;
}

/* ------------------------------------------------- the front: launch() itself, in C

   launch()'s Python frame (its 18 parameters bound, its branches, the call into the helper) cost
   as much as the helper's own work on a small launch. The front takes launch()'s own arguments,
   positional or by keyword, and makes the common call (a forward launch: adjoint, tangent and
   record_cmd absent or False, no adjoint or tangent buffers) with no Python frame; any other call,
   an unknown or repeated keyword, a missing argument, goes to the Python function unchanged
   (which makes it, or raises its error). The signature is the Python function's, handed over by
   tg_fl_front: its parameter names and defaults, and which of them the helper takes. */

#define METH_KEYWORDS 0x0002
#define NFRONT 32           /* launch()'s parameters at most (a bit each) */
#define NFAST 9             /* fast_launch's arguments */
static PyObject *FRONT_FALLBACK = NULL, *FRONT_FINISH = NULL;
static PyObject *FRONT_NAMES[NFRONT], *FRONT_DEFAULTS[NFRONT];
static int front_n = 0, front_on = 0;
static int front_fast[NFAST];       /* the parameters passed to fast_launch, in its order */
#define ROLE_FALSE (-1)             /* a switch: absent or False */
#define ROLE_NONE (-2)              /* any other parameter: absent or None */
static int front_role[NFRONT];      /* per parameter: its index among fast_launch's, or ROLE_* */

/* launch()'s parameter named ``name`` (compared by identity: interned names), or -1 */
static int name_index(PyObject *name) {
    for (int j = 0; j < front_n; j++)
        if (FRONT_NAMES[j] == name) return j;
    return -1;
}

/* fast_launch's arguments from launch()'s (fa), or 0 for the Python function */
static int front_bind(PyObject *const *a, Py_ssize_t nargs, PyObject *kwnames, PyObject **fa) {
    if (!front_on || nargs > front_n) return 0;
    unsigned seen = 0;
    for (int i = 0; i < NFAST; i++) fa[i] = NULL;
    Py_ssize_t nk = kwnames ? api.tuple_size(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nargs + nk; k++) {
        int j = (int)k;
        if (k >= nargs) {
            /* keyword names are interned (the compiler's, **kwargs' keys almost always): an equal
               string at another address takes the Python function, which binds it */
            j = name_index(api.tuple_getitem(kwnames, k - nargs));
            if (j < 0 || (seen >> j) & 1u) return 0;
        }
        seen |= 1u << j;
        PyObject *x = a[k];
        int role = front_role[j];
        if (role >= 0) fa[role] = x;
        else if (x != (role == ROLE_FALSE ? api.false_ : api.none)) return 0;
    }
    for (int i = 0; i < NFAST; i++)
        if (!fa[i] && !(fa[i] = FRONT_DEFAULTS[front_fast[i]]))
            return 0;               /* kernel or dim missing: the Python function's TypeError */
    return 1;
}

static PyObject *fl_front(PyObject *self, PyObject *const *a, Py_ssize_t nargs, PyObject *kwnames) {
    (void)self;
    PyObject *fa[NFAST + 1];
    if (!front_bind(a, nargs, kwnames, fa + 1)) return api.vectorcall(FRONT_FALLBACK, a, (size_t)nargs, kwnames);
    PyObject *r = fl_launch(NULL, fa + 1, NFAST);
    if (r == api.none) return r;
    /* NotImplemented (the Python path) or the module whose kernel recorded a runtime error */
    fa[0] = r;
    PyObject *out = api.vectorcall(FRONT_FINISH, fa, NFAST + 1, NULL);
    api.decref(r);
    return out;
}

static PyMethodDef front_def = {"launch", (void *)fl_front, METH_FASTCALL | METH_KEYWORDS, NULL};

/* The front for the Python function ``fallback``: ``names`` its parameters (interned strings, in
   order), ``defaults`` one per parameter (NULL-free: None where a parameter has no default and
   ``required`` says so), ``fast`` the 9 names fast_launch takes, ``off`` the switches that must
   be absent or False; every other parameter must be absent or None. ``finish(result, *fast)``
   takes a result other than None. ``doc`` the builtin's docstring (text signature first); the
   builtin reports ``module`` (a module object) as its __self__ and ``module_name`` as its
   __module__. NULL when the tables do not fit. */
TG_EXPORT PyObject *tg_fl_front(PyObject *fallback, PyObject *finish, PyObject *names, PyObject *defaults,
                                PyObject *required, PyObject *fast, PyObject *off, const char *doc,
                                PyObject *module, PyObject *module_name) {
    Py_ssize_t n = api.tuple_size(names);
    if (n < NFAST || n > NFRONT || api.tuple_size(defaults) != n || api.tuple_size(required) != n ||
        api.tuple_size(fast) != NFAST || api.tuple_size(off) > NFRONT || FRONT_FALLBACK) return NULL;
    front_n = (int)n;
    for (int j = 0; j < front_n; j++) {
        FRONT_NAMES[j] = api.tuple_getitem(names, j);
        api.incref(FRONT_NAMES[j]);
        PyObject *req = api.tuple_getitem(required, j);
        FRONT_DEFAULTS[j] = req == api.true_ ? NULL : api.tuple_getitem(defaults, j);
        xincref(FRONT_DEFAULTS[j]);
    }
    for (int j = 0; j < front_n; j++) front_role[j] = ROLE_NONE;
    for (int i = 0; i < NFAST; i++) {
        int j = name_index(api.tuple_getitem(fast, i));
        if (j < 0 || front_role[j] != ROLE_NONE) return NULL;
        front_fast[i] = j;
        front_role[j] = i;
    }
    for (Py_ssize_t i = 0; i < api.tuple_size(off); i++) {
        int j = name_index(api.tuple_getitem(off, i));
        if (j < 0 || front_role[j] != ROLE_NONE) return NULL;
        front_role[j] = ROLE_FALSE;
    }
    size_t len = strlen(doc) + 1;
    char *d = (char *)malloc(len);   /* the builtin reads its doc for its lifetime: the process's */
    if (!d) return NULL;
    memcpy(d, doc, len);
    front_def.doc = d;
    api.incref(fallback); FRONT_FALLBACK = fallback;
    api.incref(finish); FRONT_FINISH = finish;
    front_on = 1;
    return api.cfunc_new(&front_def, module, module_name);
}

/* the front's own switch: off, every call goes to the Python function (tests compare the paths) */
TG_EXPORT int tg_fl_front_switch(int on) {
    int was = front_on;
    front_on = on && FRONT_FALLBACK;
    return was;
}

static PyMethodDef methods[] = {
    {"fast_launch", (void *)fl_launch, METH_FASTCALL,
     "fast_launch(kernel, dim, inputs, outputs, device, stream, record_tape, block_dim, max_blocks"
     "[, adj_inputs, adj_outputs])\n"
     "Pack and launch in one native call (with adj_inputs/adj_outputs: the adjoint); None when "
     "launched, NotImplemented for launch()'s Python path, the module launched when its kernel "
     "recorded a runtime error (launch() raises it)."},
    {"has_entry", (void *)fl_has_entry, METH_FASTCALL,
     "has_entry(plan, device, module, mode)\nWhether the plan launches module on device under mode."},
    {NULL, NULL, 0, NULL}};

TG_EXPORT PyObject *tg_fl_function(int which) { return api.cfunc_new(&methods[which], NULL, NULL); }

#ifdef __cplusplus
}
#endif

// tapegrad's XLA FFI handlers: a tapegrad kernel (and a jax_callable) as an XLA custom call.
//
// Built once per machine with tapegrad's own build module (tapegrad.compile.build_cpu) and
// cached; the real `xla/ffi/api/c_api.h` of the running jaxlib is prepended to this file by
// bridges/jax/ffi.py (so a jaxlib upgrade rebuilds it).
//
// Per call, no Python runs for a kernel: the handler reads the call frame, finds the "plan"
// attribute (the address of a tgx_plan built at trace time by bridges/jax/plan.py, which holds
// every static fact of the call: slots, expected dtypes and dims, packed scalar values, the
// launch grid, the compiled entry point), builds the kernel's array descriptors from XLA's
// buffers and calls the kernel's CPU entry point, or cuLaunchKernel on XLA's stream.
//
// vmap: buffers may carry leading batch dims (XLA's ffi_call batching puts them first). The
// handler runs the launch once per batch element with offset pointers, so a batched call is
// exactly the stack of unbatched calls; inputs with fewer or size-1 batch dims broadcast.

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#define TGX_EXPORT extern "C" __attribute__((visibility("default")))
#define TGX_MAX_SLOTS 128
#define TGX_MAX_BATCH 8

// ------------------------------------------- the kernel ABI and the plan (tapegrad/abi: one table)
// the header's text is inlined here by bridges/jax/ffi.py (tapegrad.abi.inline_header); TG_ABI_XLA
// declares the plan bridges/jax/plan.py builds (tg_xla_plan_t, its slots and slot kinds)
#define TG_ABI_XLA 1
#include "tg_abi.h"
typedef tg_bounds_t tgx_launch;
typedef tg_array_desc_t tgx_array;
typedef tg_xla_slot_t tgx_slot;
typedef tg_xla_plan_t tgx_plan;
#define TGX_MAX_DEVICES TG_XLA_MAX_DEVICES

typedef void (*tgx_cpu_entry)(const tgx_launch*, void**);

// CUDA blocks of the plan's launch on device `ordinal`: the kernel ABI's grid (tg_grid_blocks,
// the formula tg.launch uses), with the entry's lanes and the device's cap. Adjoint and tangent
// plans carry lanes 1 (their entries are grid-stride loops over single threads).
TGX_EXPORT int64_t tgx_plan_blocks(const tgx_plan* p, int32_t ordinal) {
    if (ordinal < 0 || ordinal >= TGX_MAX_DEVICES) return 0;
    return tg_grid_blocks(p->bounds.size, p->block_dim, p->cuda_lanes[ordinal], 0, p->cuda_threads_cap[ordinal]);
}

// --------------------------------------------------------------------------------- errors
static XLA_FFI_Error* tgx_error(const XLA_FFI_Api* api, XLA_FFI_Error_Code code, const char* msg) {
    XLA_FFI_Error_Create_Args a;
    memset(&a, 0, sizeof(a));
    a.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    a.message = msg;
    a.errc = code;
    return api->XLA_FFI_Error_Create(&a);
}

// XLA's metadata query (the first call of a registered handler) carries a metadata extension
// and nothing else. The extension header changed across jaxlib versions (XLA_FFI_Extension_Base
// {size, type, next} -> XLA_FFI_Extension {size, id, next}), so the query is recognised by
// its shape and the metadata pointer read right after whatever header this jaxlib declares;
// the metadata struct itself is ABI-stable ({size, api_version, traits}).
typedef std::remove_pointer<decltype(((XLA_FFI_CallFrame*)0)->extension_start)>::type tgx_ext_header;
struct tgx_api_version { size_t struct_size; void* extension_start; int major_version; int minor_version; };
struct tgx_metadata_t { size_t struct_size; tgx_api_version api_version; uint32_t traits; };

// Answer the metadata query. Returns 1 when the call was one.
static int tgx_metadata(XLA_FFI_CallFrame* frame, uint32_t traits) {
    if (!frame->extension_start || frame->attrs.size || frame->args.size || frame->rets.size) return 0;
    const char* ext = (const char*)frame->extension_start;
    if (*(const size_t*)ext < sizeof(tgx_ext_header) + sizeof(void*)) return 0;
    tgx_metadata_t* m = *(tgx_metadata_t* const*)(ext + sizeof(tgx_ext_header));
    if (!m) return 0;
    m->api_version.major_version = XLA_FFI_API_MAJOR;
    m->api_version.minor_version = XLA_FFI_API_MINOR;
    m->traits = traits;
    return 1;
}

// The int64 scalar attribute named `name`, or -1 when absent.
static int tgx_attr_i64(XLA_FFI_CallFrame* frame, const char* name, int64_t* out) {
    size_t n = strlen(name);
    for (int64_t i = 0; i < frame->attrs.size; ++i) {
        XLA_FFI_ByteSpan* s = frame->attrs.names[i];
        if (s->len == n && memcmp(s->ptr, name, n) == 0 && frame->attrs.types[i] == XLA_FFI_AttrType_SCALAR) {
            XLA_FFI_Scalar* sc = (XLA_FFI_Scalar*)frame->attrs.attrs[i];
            if (sc->dtype == XLA_FFI_DataType_S64) { *out = *(int64_t*)sc->value; return 0; }
            if (sc->dtype == XLA_FFI_DataType_U64) { *out = (int64_t)*(uint64_t*)sc->value; return 0; }
        }
    }
    return -1;
}

static void tgx_dims_text(char* out, size_t n, const int64_t* d, int64_t rank) {
    size_t k = 0;
    k += snprintf(out + k, n - k, "(");
    for (int64_t i = 0; i < rank && k < n; ++i) k += snprintf(out + k, n - k, i ? ", %lld" : "%lld", (long long)d[i]);
    if (k < n) snprintf(out + k, n - k, rank == 1 ? ",)" : ")");
}

// -------------------------------------------------------------------------- call geometry
// Everything one call needs once the buffers are checked: per slot, the buffer pointers and
// the byte stride of each batch dim (0: broadcast), and the batch shape.
struct tgx_geom {
    int64_t brank;
    int64_t bshape[TGX_MAX_BATCH];
    int64_t nbatch;
    void* in_ptr[TGX_MAX_SLOTS];
    void* out_ptr[TGX_MAX_SLOTS];
    int64_t in_bstride[TGX_MAX_SLOTS][TGX_MAX_BATCH];
    int64_t out_bstride[TGX_MAX_SLOTS][TGX_MAX_BATCH];
    int64_t item_bytes[TGX_MAX_SLOTS];
};

// Check one buffer against its slot; returns its number of batch dims or -1 (msg filled).
static int64_t tgx_check_buffer(const tgx_plan* p, const tgx_slot* s, const XLA_FFI_Buffer* b, const char* role,
                                char* msg, size_t msglen) {
    int64_t extra = b->rank - s->rank;
    int ok = b->dtype == s->dtype && extra >= 0 && extra <= TGX_MAX_BATCH;
    for (int32_t k = 0; ok && k < s->rank; ++k) ok = b->dims[extra + k] == s->dims[k];
    if (ok) return extra;
    char want[160], got[160];
    tgx_dims_text(want, sizeof(want), s->dims, s->rank);
    tgx_dims_text(got, sizeof(got), b->dims, b->rank);
    snprintf(msg, msglen, "tapegrad jax_kernel '%s': %s '%s': expected an XLA buffer of dtype %d and shape %s "
             "(after any leading vmap batch dims), got dtype %d and shape %s", p->kernel, role, s->name, (int)s->dtype,
             want, (int)b->dtype, got);
    return -1;
}

static void tgx_batch_strides(const tgx_geom* g, const XLA_FFI_Buffer* b, int64_t extra, int64_t item, int64_t* st) {
    // right-align the buffer's batch dims with the call's; missing and size-1 dims broadcast
    int64_t acc = item;
    for (int64_t k = g->brank - 1; k >= 0; --k) {
        int64_t j = k - (g->brank - extra);
        if (j < 0) { st[k] = 0; continue; }
        int64_t n = b->dims[j];
        st[k] = n == 1 ? 0 : acc;
        acc *= n;
    }
}

static int tgx_geometry(const tgx_plan* p, XLA_FFI_CallFrame* f, tgx_geom* g, char* msg, size_t msglen) {
    if (f->args.size != p->nargs || f->rets.size != p->nrets) {
        snprintf(msg, msglen, "tapegrad jax_kernel '%s': the call has %lld operands and %lld results, the plan "
                 "expects %d and %d", p->kernel, (long long)f->args.size, (long long)f->rets.size, p->nargs, p->nrets);
        return -1;
    }
    if (p->nslots > TGX_MAX_SLOTS) {
        snprintf(msg, msglen, "tapegrad jax_kernel '%s': too many parameters (%d)", p->kernel, p->nslots);
        return -1;
    }
    // the batch shape: results always carry every batch dim
    g->brank = -1;
    for (int32_t i = 0; i < p->nslots; ++i) {
        const tgx_slot* s = &p->slots[i];
        if (s->kind != TG_XLA_OUT && s->kind != TG_XLA_INOUT) continue;
        const XLA_FFI_Buffer* b = (const XLA_FFI_Buffer*)f->rets.rets[s->ret];
        int64_t extra = tgx_check_buffer(p, s, b, "output", msg, msglen);
        if (extra < 0) return -1;
        if (g->brank < 0) {
            g->brank = extra;
            for (int64_t k = 0; k < extra; ++k) g->bshape[k] = b->dims[k];
        } else if (extra != g->brank || memcmp(g->bshape, b->dims, extra * sizeof(int64_t)) != 0) {
            snprintf(msg, msglen, "tapegrad jax_kernel '%s': output '%s' has other batch dims than the first output",
                     p->kernel, s->name);
            return -1;
        }
    }
    if (g->brank < 0) g->brank = 0;
    g->nbatch = 1;
    for (int64_t k = 0; k < g->brank; ++k) g->nbatch *= g->bshape[k];
    for (int32_t i = 0; i < p->nslots; ++i) {
        const tgx_slot* s = &p->slots[i];
        g->in_ptr[i] = g->out_ptr[i] = 0;
        if (s->kind > TG_XLA_INOUT) continue;
        int64_t item = s->elem_size;
        for (int32_t k = 0; k < s->ndim; ++k) item *= s->dims[k];
        g->item_bytes[i] = item;
        if (s->kind == TG_XLA_IN || s->kind == TG_XLA_INOUT) {
            const XLA_FFI_Buffer* b = (const XLA_FFI_Buffer*)f->args.args[s->arg];
            int64_t extra = tgx_check_buffer(p, s, b, "argument", msg, msglen);
            if (extra < 0) return -1;
            if (extra > g->brank) {
                snprintf(msg, msglen, "tapegrad jax_kernel '%s': argument '%s' has %lld batch dims, the outputs %lld",
                         p->kernel, s->name, (long long)extra, (long long)g->brank);
                return -1;
            }
            for (int64_t j = 0; j < extra; ++j) {
                int64_t n = b->dims[j], want = g->bshape[g->brank - extra + j];
                if (n != 1 && n != want) {
                    snprintf(msg, msglen, "tapegrad jax_kernel '%s': argument '%s': batch dim %lld has size %lld, the "
                             "outputs' has %lld", p->kernel, s->name, (long long)j, (long long)n, (long long)want);
                    return -1;
                }
            }
            g->in_ptr[i] = b->data;
            tgx_batch_strides(g, b, extra, item, g->in_bstride[i]);
        }
        if (s->kind == TG_XLA_OUT || s->kind == TG_XLA_INOUT) {
            const XLA_FFI_Buffer* b = (const XLA_FFI_Buffer*)f->rets.rets[s->ret];
            g->out_ptr[i] = b->data;
            tgx_batch_strides(g, b, g->brank, item, g->out_bstride[i]);
        }
    }
    return 0;
}

// one per thread: a handler call is never re-entered on its own thread
static thread_local tgx_geom tgx_tls_geom;

static inline int64_t tgx_offset(const tgx_geom* g, const int64_t* st, int64_t b) {
    int64_t off = 0;
    for (int64_t k = g->brank - 1; k >= 0; --k) {
        int64_t n = g->bshape[k];
        off += (b % n) * st[k];
        b /= n;
    }
    return off;
}

// The kernel-ABI values of batch element `b`: descriptors into `arrs`, argument pointers into `argv`.
static void tgx_fill(const tgx_plan* p, const tgx_geom* g, int64_t b, tgx_array* arrs, void** argv, int cuda) {
    for (int32_t i = 0; i < p->nslots; ++i) {
        const tgx_slot* s = &p->slots[i];
        switch (s->kind) {
            case TG_XLA_VALUE: argv[i] = p->values + s->value_offset; continue;
            case TG_XLA_NULL_VALUE: argv[i] = cuda ? p->values + s->value_offset : 0; continue;
            default: break;
        }
        tgx_array* a = &arrs[i];
        memset(a, 0, sizeof(*a));
        a->ndim = s->ndim;
        if (s->kind != TG_XLA_NULL_ARRAY) {
            char* base = (char*)(s->kind == TG_XLA_IN ? g->in_ptr[i] : g->out_ptr[i]);
            const int64_t* st = s->kind == TG_XLA_IN ? g->in_bstride[i] : g->out_bstride[i];
            a->data = base + tgx_offset(g, st, b);
            int64_t stride = s->elem_size;
            for (int32_t k = s->ndim - 1; k >= 0; --k) {
                a->shape[k] = s->dims[k];
                a->strides[k] = stride;
                stride *= s->dims[k];
            }
            if (s->kind == TG_XLA_IN) a->flags = 1;   // XLA's operands are read-only
        } else {
            for (int32_t k = 0; k < s->ndim; ++k) a->shape[k] = s->dims[k];
        }
        argv[i] = a;
    }
}

// ------------------------------------------------------------------- finding the plan
// A call carries three attributes: `tapegrad_plan` (the plan's address in the process that
// traced it), `tapegrad_process` (that process's random id) and `tapegrad_key` (the plan's
// stable key: the kernel's stable name and every static fact of the call, as text). The
// address is used only when the process id is this process's: a program serialized by
// jax.export and run elsewhere carries a foreign id, and its plan is found by key instead
// (resolved once per key by Python, which rebuilds the plan for the kernel this process has
// defined under that name, or explains which kernel to define). Nothing read from a call is
// dereferenced before it is validated.

typedef int64_t (*tgx_resolver_fn)(const char* key, int64_t len, char* msg, int64_t msglen);
static int64_t tgx_process = 0;
static tgx_resolver_fn tgx_resolver = 0;

TGX_EXPORT void tgx_set_process(int64_t process, tgx_resolver_fn resolver) {
    tgx_process = process;
    tgx_resolver = resolver;
}

// The string attribute named `name` (not NUL-terminated), or -1 when absent.
static int tgx_attr_str(XLA_FFI_CallFrame* frame, const char* name, const char** ptr, size_t* len) {
    size_t n = strlen(name);
    for (int64_t i = 0; i < frame->attrs.size; ++i) {
        XLA_FFI_ByteSpan* s = frame->attrs.names[i];
        if (s->len == n && memcmp(s->ptr, name, n) == 0 && frame->attrs.types[i] == XLA_FFI_AttrType_STRING) {
            XLA_FFI_ByteSpan* v = (XLA_FFI_ByteSpan*)frame->attrs.attrs[i];
            *ptr = v->ptr;
            *len = v->len;
            return 0;
        }
    }
    return -1;
}

// keys resolved in this process (a short list: one entry per distinct foreign call)
struct tgx_resolved { char* key; size_t len; const tgx_plan* plan; tgx_resolved* next; };
static tgx_resolved* tgx_resolved_head = 0;
static pthread_mutex_t tgx_resolve_lock = PTHREAD_MUTEX_INITIALIZER;

static const tgx_plan* tgx_plan_by_key(const char* key, size_t len, char* msg, size_t msglen) {
    pthread_mutex_lock(&tgx_resolve_lock);
    const tgx_plan* p = 0;
    for (tgx_resolved* r = tgx_resolved_head; r; r = r->next)
        if (r->len == len && memcmp(r->key, key, len) == 0) { p = r->plan; break; }
    if (!p) {
        int64_t addr = 0;
        if (!tgx_resolver) {
            snprintf(msg, msglen, "tapegrad FFI handler: this call was traced in another process and tapegrad's "
                     "Python side is not set up here (build the kernel with tapegrad.jax_kernel first)");
        } else {
            msg[0] = 0;
            addr = tgx_resolver(key, (int64_t)len, msg, (int64_t)msglen);
            if (!addr && !msg[0]) snprintf(msg, msglen, "tapegrad FFI handler: cannot resolve the call's kernel");
        }
        if (addr && ((const tgx_plan*)addr)->magic == TG_XLA_PLAN_MAGIC) {
            tgx_resolved* r = (tgx_resolved*)malloc(sizeof(tgx_resolved));
            char* copy = (char*)malloc(len + 1);
            if (r && copy) {
                memcpy(copy, key, len);
                copy[len] = 0;
                r->key = copy;
                r->len = len;
                r->plan = (const tgx_plan*)addr;
                r->next = tgx_resolved_head;
                tgx_resolved_head = r;
            } else {
                free(r);
                free(copy);
            }
            p = (const tgx_plan*)addr;
        }
    }
    pthread_mutex_unlock(&tgx_resolve_lock);
    return p;
}

static const tgx_plan* tgx_get_plan(XLA_FFI_CallFrame* f, char* msg, size_t msglen) {
    int64_t process = 0, addr = 0;
    if (tgx_process && tgx_attr_i64(f, "tapegrad_process", &process) == 0 && process == tgx_process) {
        // traced in this process: the address is one of this process's plans (kept alive forever)
        if (tgx_attr_i64(f, "tapegrad_plan", &addr) == 0 && addr) {
            const tgx_plan* p = (const tgx_plan*)addr;
            if (p->magic == TG_XLA_PLAN_MAGIC) return p;
        }
        snprintf(msg, msglen, "tapegrad FFI handler: attribute 'tapegrad_plan' does not point at a tapegrad plan");
        return 0;
    }
    const char* key = 0;
    size_t len = 0;
    if (tgx_attr_str(f, "tapegrad_key", &key, &len) != 0) {
        snprintf(msg, msglen, "tapegrad FFI handler: the call was traced in another process and carries no "
                 "'tapegrad_key' attribute (exported by an older tapegrad?): export the program again");
        return 0;
    }
    return tgx_plan_by_key(key, len, msg, msglen);
}

// ---------------------------------------------------------------------------------- CPU

static void tgx_cpu_copy_in(const tgx_plan* p, const tgx_geom* g) {
    // in-out arrays that XLA did not alias (vmap with expand_dims/legacy_vectorized): copy, broadcasting
    for (int32_t i = 0; i < p->nslots; ++i) {
        const tgx_slot* s = &p->slots[i];
        if (s->kind == TG_XLA_OUT && g->item_bytes[i]) memset(g->out_ptr[i], 0, (size_t)(g->item_bytes[i] * g->nbatch));
        if (s->kind != TG_XLA_INOUT || g->in_ptr[i] == g->out_ptr[i]) continue;
        for (int64_t b = 0; b < g->nbatch; ++b)
            memcpy((char*)g->out_ptr[i] + tgx_offset(g, g->out_bstride[i], b),
                   (char*)g->in_ptr[i] + tgx_offset(g, g->in_bstride[i], b), (size_t)g->item_bytes[i]);
    }
}

// 1 when a launch met a runtime error (the library's error code, tapegrad.modules.ErrorSlot: a
// zero slice step; it ran to its end with that slice empty): the code is cleared, the batch stops
static int tgx_cpu_run(const tgx_plan* p, const tgx_geom* g) {
    // one launch per batch element, in order (each launch parallelises inside itself; an
    // OpenMP region over the batch would spawn a thread team per XLA worker thread)
    tgx_cpu_entry entry = (tgx_cpu_entry)p->cpu_entry;
    tgx_array arrs[TGX_MAX_SLOTS];
    void* argv[TGX_MAX_SLOTS];
    for (int64_t b = 0; b < g->nbatch; ++b) {
        tgx_fill(p, g, b, arrs, argv, 0);
        entry(&p->bounds, argv);
        if (p->cpu_error && __atomic_load_n(&p->cpu_error[0], __ATOMIC_RELAXED)) {
            __atomic_store_n(&p->cpu_error[0], 0, __ATOMIC_RELAXED);
            __atomic_store_n(&p->cpu_error[1], 0, __ATOMIC_RELAXED);
            return 1;
        }
    }
    return 0;
}

TGX_EXPORT XLA_FFI_Error* tgx_kernel_cpu(XLA_FFI_CallFrame* f) {
    if (tgx_metadata(f, 0)) return 0;
    if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return 0;
    char msg[1024];
    const tgx_plan* p = tgx_get_plan(f, msg, sizeof(msg));
    if (!p) return tgx_error(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
    if (!p->cpu_entry) {
        if (!p->loader || p->loader((tgx_plan*)p, 0, 0, msg, sizeof(msg)) != 0 || !p->cpu_entry) {
            if (!p->loader) snprintf(msg, sizeof(msg), "tapegrad jax_kernel '%s': not compiled for the CPU", p->kernel);
            return tgx_error(f->api, XLA_FFI_Error_Code_FAILED_PRECONDITION, msg);
        }
    }
    tgx_geom* g = &tgx_tls_geom;
    XLA_FFI_Error* err = 0;
    if (tgx_geometry(p, f, g, msg, sizeof(msg)) != 0) {
        err = tgx_error(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
    } else {
        tgx_cpu_copy_in(p, g);
        if (p->bounds.size > 0 && tgx_cpu_run(p, g)) {
            snprintf(msg, sizeof(msg), "tapegrad jax_kernel '%s': slice step cannot be zero (a slice a[i:j:s] with "
                     "s == 0 at run time; the launch ran with that slice empty)", p->kernel);
            err = tgx_error(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
        }
    }
    return err;
}

// --------------------------------------------------------------------------------- CUDA

typedef int CUresult;
typedef unsigned long long CUdeviceptr_t;
static struct {
    CUresult (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
    CUresult (*memset8)(CUdeviceptr_t, unsigned char, size_t, void*);
    CUresult (*memset32)(CUdeviceptr_t, unsigned int, size_t, void*);
    CUresult (*memcpy_dd)(CUdeviceptr_t, CUdeviceptr_t, size_t, void*);
    CUresult (*is_capturing)(void*, int*);
    CUresult (*stream_flags)(void*, unsigned int*);
    CUresult (*error_string)(CUresult, const char**);
    CUresult (*ctx_device)(int*);
    CUresult (*event_create)(void**, unsigned int);
    CUresult (*event_record)(void*, void*);
    CUresult (*event_destroy)(void*);
    CUresult (*stream_wait_event)(void*, void*, unsigned int);
    int ok;
    char why[256];
} tgx_cu;
static pthread_once_t tgx_cu_once = PTHREAD_ONCE_INIT;

static void tgx_cu_init(void) {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { snprintf(tgx_cu.why, sizeof(tgx_cu.why), "cannot load libcuda.so.1: %s", dlerror()); return; }
    *(void**)&tgx_cu.launch = dlsym(h, "cuLaunchKernel");
    *(void**)&tgx_cu.memset8 = dlsym(h, "cuMemsetD8Async");
    *(void**)&tgx_cu.memset32 = dlsym(h, "cuMemsetD32Async");
    *(void**)&tgx_cu.memcpy_dd = dlsym(h, "cuMemcpyDtoDAsync_v2");
    *(void**)&tgx_cu.is_capturing = dlsym(h, "cuStreamIsCapturing");
    *(void**)&tgx_cu.stream_flags = dlsym(h, "cuStreamGetFlags");
    *(void**)&tgx_cu.error_string = dlsym(h, "cuGetErrorString");
    *(void**)&tgx_cu.ctx_device = dlsym(h, "cuCtxGetDevice");
    *(void**)&tgx_cu.event_create = dlsym(h, "cuEventCreate");
    *(void**)&tgx_cu.event_record = dlsym(h, "cuEventRecord");
    *(void**)&tgx_cu.event_destroy = dlsym(h, "cuEventDestroy_v2");
    *(void**)&tgx_cu.stream_wait_event = dlsym(h, "cuStreamWaitEvent");
    tgx_cu.ok = tgx_cu.launch && tgx_cu.memset8 && tgx_cu.memset32 && tgx_cu.memcpy_dd;
    if (!tgx_cu.ok) snprintf(tgx_cu.why, sizeof(tgx_cu.why), "libcuda.so.1 lacks cuLaunchKernel/cuMemsetD8Async");
}

// Zero `n` bytes at `dst` on `stream`: 4-byte stores where the range allows (one memset node
// in a captured graph either way).
static CUresult tgx_cu_zero(CUdeviceptr_t dst, size_t n, void* stream) {
    if (!n) return 0;
    if ((dst & 3) == 0 && (n & 3) == 0) return tgx_cu.memset32(dst, 0u, n / 4, stream);
    return tgx_cu.memset8(dst, 0, n, stream);
}

static const char* tgx_cu_text(CUresult r) {
    const char* s = 0;
    if (tgx_cu.error_string) tgx_cu.error_string(r, &s);
    return s ? s : "unknown CUDA error";
}

static int tgx_stream_ordinal(XLA_FFI_CallFrame* f, void** stream, int32_t* ordinal) {
    XLA_FFI_Stream_Get_Args sa;
    memset(&sa, 0, sizeof(sa));
    sa.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
    sa.ctx = f->ctx;
    XLA_FFI_Error* e = f->api->XLA_FFI_Stream_Get(&sa);
    if (e) {
        XLA_FFI_Error_Destroy_Args d = {XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, 0, e};
        f->api->XLA_FFI_Error_Destroy(&d);
        return -1;
    }
    *stream = sa.stream;
    *ordinal = -1;
    if (f->api->struct_size >= offsetof(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get) + sizeof(void*) &&
        f->api->XLA_FFI_DeviceOrdinal_Get) {
        XLA_FFI_DeviceOrdinal_Get_Args oa;
        memset(&oa, 0, sizeof(oa));
        oa.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;
        oa.ctx = f->ctx;
        e = f->api->XLA_FFI_DeviceOrdinal_Get(&oa);
        if (!e) *ordinal = oa.device_ordinal;
        else {
            XLA_FFI_Error_Destroy_Args d = {XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, 0, e};
            f->api->XLA_FFI_Error_Destroy(&d);
        }
    }
    if (*ordinal < 0 && tgx_cu.ctx_device) {
        int dev = 0;
        if (tgx_cu.ctx_device(&dev) == 0) *ordinal = dev;
    }
    return *ordinal < 0 ? -1 : 0;
}

TGX_EXPORT XLA_FFI_Error* tgx_kernel_cuda(XLA_FFI_CallFrame* f) {
    if (tgx_metadata(f, XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE)) return 0;
    if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return 0;
    char msg[1024];
    const tgx_plan* p = tgx_get_plan(f, msg, sizeof(msg));
    if (!p) return tgx_error(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
    pthread_once(&tgx_cu_once, tgx_cu_init);
    if (!tgx_cu.ok) return tgx_error(f->api, XLA_FFI_Error_Code_FAILED_PRECONDITION, tgx_cu.why);
    void* stream = 0;
    int32_t ordinal = 0;
    if (tgx_stream_ordinal(f, &stream, &ordinal) != 0 || ordinal >= TGX_MAX_DEVICES) {
        snprintf(msg, sizeof(msg), "tapegrad jax_kernel '%s': cannot get XLA's CUDA stream and device", p->kernel);
        return tgx_error(f->api, XLA_FFI_Error_Code_INTERNAL, msg);
    }
    if (!p->cuda_fn[ordinal]) {
        if (!p->loader || p->loader((tgx_plan*)p, 1, ordinal, msg, sizeof(msg)) != 0 || !p->cuda_fn[ordinal]) {
            if (!p->loader) snprintf(msg, sizeof(msg), "tapegrad jax_kernel '%s': not loaded on cuda:%d", p->kernel, ordinal);
            return tgx_error(f->api, XLA_FFI_Error_Code_FAILED_PRECONDITION, msg);
        }
    }
    tgx_geom* g = &tgx_tls_geom;
    XLA_FFI_Error* err = 0;
    CUresult r = 0;
    if (tgx_geometry(p, f, g, msg, sizeof(msg)) != 0) {
        err = tgx_error(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
            return err;
    }
    for (int32_t i = 0; i < p->nslots && !r; ++i) {
        const tgx_slot* s = &p->slots[i];
        if (s->kind == TG_XLA_OUT && g->item_bytes[i])
            r = tgx_cu_zero((CUdeviceptr_t)g->out_ptr[i], (size_t)(g->item_bytes[i] * g->nbatch), stream);
        if (s->kind != TG_XLA_INOUT || g->in_ptr[i] == g->out_ptr[i]) continue;
        for (int64_t b = 0; b < g->nbatch && !r; ++b)
            r = tgx_cu.memcpy_dd((CUdeviceptr_t)((char*)g->out_ptr[i] + tgx_offset(g, g->out_bstride[i], b)),
                                 (CUdeviceptr_t)((char*)g->in_ptr[i] + tgx_offset(g, g->in_bstride[i], b)),
                                 (size_t)g->item_bytes[i], stream);
    }
    if (!r && p->bounds.size > 0) {
        int64_t bd = p->block_dim > 0 ? p->block_dim : TG_DEFAULT_BLOCK_DIM;
        int64_t blocks = tgx_plan_blocks(p, ordinal);
        tgx_launch bounds = p->bounds;
        tgx_array arrs[TGX_MAX_SLOTS];
        void* argv[TGX_MAX_SLOTS];
        void* params[TGX_MAX_SLOTS + 1];
        params[0] = &bounds;
        for (int64_t b = 0; b < g->nbatch && !r; ++b) {
            tgx_fill(p, g, b, arrs, argv, 1);
            for (int32_t i = 0; i < p->nslots; ++i) params[i + 1] = argv[i];
            r = tgx_cu.launch(p->cuda_fn[ordinal], (unsigned)blocks, 1, 1, (unsigned)bd, 1, 1, 0, stream, params, 0);
        }
    }
    if (r) {
        snprintf(msg, sizeof(msg), "tapegrad jax_kernel '%s': CUDA error %d (%s)", p->kernel, r, tgx_cu_text(r));
        err = tgx_error(f->api, XLA_FFI_Error_Code_INTERNAL, msg);
    }
    return err;
}

// ------------------------------------------------------------------------- jax_callable
// A callable runs Python by nature: the handler marshals the call frame into a flat int64
// record and calls the Python function registered for the call (one ctypes call).
// Record: [platform, ordinal, stream, nargs, nrets, capturing, blocking, then per buffer: data,
// rank, dims[8]]. `capturing`: whether XLA is recording the stream into a command buffer (1),
// not (0) or unknown (-1); `blocking`: the stream's flag when it could be read outside a capture
// (cuStreamGetFlags is refused on a capturing stream, and the refusal invalidates the capture), else -1.

#define TGX_REC_HEAD 7
typedef int32_t (*tgx_callable_fn)(int64_t call_id, const int64_t* record, char* msg, int64_t msglen);
static tgx_callable_fn tgx_callable_target = 0;

TGX_EXPORT void tgx_set_callable_target(tgx_callable_fn fn) { tgx_callable_target = fn; }

static XLA_FFI_Error* tgx_callable(XLA_FFI_CallFrame* f, int platform) {
    char msg[2048];
    int64_t call_id = -1, process = 0;
    if (tgx_attr_i64(f, "tapegrad_call", &call_id) != 0 || !tgx_callable_target)
        return tgx_error(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                         "tapegrad jax_callable handler: no 'tapegrad_call' attribute or no Python target");
    if (!tgx_process || tgx_attr_i64(f, "tapegrad_process", &process) != 0 || process != tgx_process) {
        // a call id numbers a Python function of the process that traced the call: elsewhere
        // (a program serialized by jax.export) it would name another function, or none
        const char* name = "?";
        size_t len = 1;
        tgx_attr_str(f, "tapegrad_name", &name, &len);
        snprintf(msg, sizeof(msg), "tapegrad jax_callable '%.*s': this call was traced in another process (a program "
                 "serialized with jax.export?); a jax_callable runs a Python function, which an exported program "
                 "cannot carry: trace the function again in this process (use tapegrad.jax_kernel for kernels that "
                 "must be exported)", (int)(len > 400 ? 400 : len), name);
        return tgx_error(f->api, XLA_FFI_Error_Code_FAILED_PRECONDITION, msg);
    }
    int64_t n = f->args.size + f->rets.size;
    int64_t* rec = (int64_t*)malloc(sizeof(int64_t) * (TGX_REC_HEAD + 10 * n));
    if (!rec) return tgx_error(f->api, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "tapegrad jax_callable: out of memory");
    void* stream = 0;
    int32_t ordinal = 0;
    if (platform == 1) {
        pthread_once(&tgx_cu_once, tgx_cu_init);
        if (tgx_stream_ordinal(f, &stream, &ordinal) != 0) {
            free(rec);
            return tgx_error(f->api, XLA_FFI_Error_Code_INTERNAL, "tapegrad jax_callable: no XLA CUDA stream");
        }
    }
    int32_t capturing = -1, blocking = -1;
    if (platform == 1 && tgx_cu.is_capturing) {
        int status = 0;
        if (tgx_cu.is_capturing(stream, &status) == 0) capturing = status != 0;
        unsigned int flags = 0;
        if (capturing == 0 && tgx_cu.stream_flags && tgx_cu.stream_flags(stream, &flags) == 0)
            blocking = (flags & 1) ? 0 : 1;   // CU_STREAM_NON_BLOCKING
    }
    rec[0] = platform;
    rec[1] = ordinal;
    rec[2] = (int64_t)stream;
    rec[3] = f->args.size;
    rec[4] = f->rets.size;
    rec[5] = capturing;
    rec[6] = blocking;
    for (int64_t i = 0; i < n; ++i) {
        const XLA_FFI_Buffer* b = (const XLA_FFI_Buffer*)(i < f->args.size ? f->args.args[i] : f->rets.rets[i - f->args.size]);
        int64_t* r = rec + TGX_REC_HEAD + 10 * i;
        r[0] = (int64_t)b->data;
        r[1] = b->rank;
        for (int64_t k = 0; k < 8; ++k) r[2 + k] = k < b->rank ? b->dims[k] : 0;
    }
    msg[0] = 0;
    int32_t rc = tgx_callable_target(call_id, rec, msg, sizeof(msg));
    free(rec);
    if (rc != 0) return tgx_error(f->api, XLA_FFI_Error_Code_UNKNOWN, msg[0] ? msg : "tapegrad jax_callable failed");
    return 0;
}

TGX_EXPORT XLA_FFI_Error* tgx_callable_cpu(XLA_FFI_CallFrame* f) {
    if (tgx_metadata(f, 0)) return 0;
    if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return 0;
    return tgx_callable(f, 0);
}

// graph mode JAX: XLA may record the call into a command buffer (CUDA graph)
TGX_EXPORT XLA_FFI_Error* tgx_callable_cuda_graphable(XLA_FFI_CallFrame* f) {
    if (tgx_metadata(f, XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE)) return 0;
    if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return 0;
    return tgx_callable(f, 1);
}

TGX_EXPORT XLA_FFI_Error* tgx_callable_cuda(XLA_FFI_CallFrame* f) {
    if (tgx_metadata(f, 0)) return 0;
    if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return 0;
    return tgx_callable(f, 1);
}

// ------------------------------------------------------------ ordering XLA's stream after another
// tapegrad_stream_wait: XLA's stream waits for the last record of the CUDA event in attribute
// `event` (recorded by the caller on tapegrad's stream before it dispatched the program). A
// jitted program that starts with this call reads what tapegrad's kernels wrote before it, with
// no host wait and no DLPack import per call (bridges/optax.py). Not command-buffer compatible:
// XLA runs it at every execution, so the wait is enqueued each time.
TGX_EXPORT XLA_FFI_Error* tgx_stream_wait_cuda(XLA_FFI_CallFrame* f) {
    if (tgx_metadata(f, 0)) return 0;
    if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return 0;
    pthread_once(&tgx_cu_once, tgx_cu_init);
    int64_t event = 0;
    if (tgx_attr_i64(f, "event", &event) != 0 || !event)
        return tgx_error(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "tapegrad_stream_wait: no 'event' attribute");
    if (!tgx_cu.stream_wait_event)
        return tgx_error(f->api, XLA_FFI_Error_Code_UNAVAILABLE, "tapegrad_stream_wait: libcuda.so.1 lacks cuStreamWaitEvent");
    void* stream = 0;
    int32_t ordinal = -1;
    if (tgx_stream_ordinal(f, &stream, &ordinal) != 0)
        return tgx_error(f->api, XLA_FFI_Error_Code_INTERNAL, "tapegrad_stream_wait: XLA gave no stream");
    CUresult r = tgx_cu.stream_wait_event(stream, (void*)(uintptr_t)event, 0);
    if (r) {
        char msg[256];
        snprintf(msg, sizeof(msg), "tapegrad_stream_wait: cuStreamWaitEvent failed: CUDA error %d (%s)", r, tgx_cu_text(r));
        return tgx_error(f->api, XLA_FFI_Error_Code_INTERNAL, msg);
    }
    return 0;
}

// An event without timing in the calling thread's current context (0 with *out set, else a CUresult;
// -1: no libcuda), its record on `stream`, its destruction.
TGX_EXPORT int32_t tgx_cuda_event_create(uint64_t* out) {
    pthread_once(&tgx_cu_once, tgx_cu_init);
    if (!tgx_cu.event_create || !tgx_cu.event_record || !tgx_cu.event_destroy) return -1;
    void* e = 0;
    CUresult r = tgx_cu.event_create(&e, 0x2 /* CU_EVENT_DISABLE_TIMING */);
    *out = (uint64_t)(uintptr_t)e;
    return r;
}

TGX_EXPORT int32_t tgx_cuda_event_record(uint64_t event, void* stream) {
    if (!tgx_cu.event_record) return -1;
    return tgx_cu.event_record((void*)(uintptr_t)event, stream);
}

TGX_EXPORT int32_t tgx_cuda_event_destroy(uint64_t event) {
    if (!tgx_cu.event_destroy) return -1;
    return tgx_cu.event_destroy((void*)(uintptr_t)event);
}

// ------------------------------------------------- driver operations for jax_callable's Python side
// Zeroing outputs and seeding unaliased in-out results run on XLA's stream through the driver:
// capturable (one node each when XLA records a command buffer), no runtime-API default-stream
// work, no synchronization, no allocation. Return a CUresult (0: success; -1: no libcuda).

TGX_EXPORT int32_t tgx_cuda_zero(uint64_t dst, uint64_t nbytes, void* stream) {
    pthread_once(&tgx_cu_once, tgx_cu_init);
    if (!tgx_cu.ok) return -1;
    return tgx_cu_zero((CUdeviceptr_t)dst, (size_t)nbytes, stream);
}

TGX_EXPORT int32_t tgx_cuda_copy(uint64_t dst, uint64_t src, uint64_t nbytes, void* stream) {
    pthread_once(&tgx_cu_once, tgx_cu_init);
    if (!tgx_cu.ok) return -1;
    if (!nbytes) return 0;
    return tgx_cu.memcpy_dd((CUdeviceptr_t)dst, (CUdeviceptr_t)src, (size_t)nbytes, stream);
}

TGX_EXPORT const char* tgx_cuda_error_text(int32_t r) {
    if (r == -1) return tgx_cu.why[0] ? tgx_cu.why : "libcuda.so.1 is not usable";
    return tgx_cu_text(r);
}

TGX_EXPORT int64_t tgx_abi_version(void) { return (int64_t)sizeof(tgx_plan) * 1000 + (int64_t)sizeof(tgx_slot); }

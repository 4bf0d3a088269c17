/* tapegrad host helpers: one native call zeroes or copies many host buffers
   (tapegrad.memory_ops: ZeroPlan, copy_regions). Built at install as
   tapegrad/native_libs/tg_hostops_*.so (setup.py), else on first use into the kernel cache
   (tapegrad.native); compiles as C or C++, with or without OpenMP.

   Large totals are split into 256 KiB pieces shared by an OpenMP team: one core's memset or
   memcpy reaches a fraction of a server's memory bandwidth (torch's zero_ and copy_ split large
   tensors too). Small totals stay on the calling thread: a team costs more than it saves. */
#include <stddef.h>
#include <string.h>

#define TG_HOST_PIECE ((size_t)1 << 18)       /* bytes a team thread takes at a time */
#define TG_HOST_TEAM_MIN ((size_t)1 << 21)    /* fewest bytes in all worth a team (2 MiB) */

#define TG_EXPORT_HOSTOP __attribute__((visibility("default")))

#ifdef _OPENMP
#define TG_HOST_OMP(directive) _Pragma(#directive)
#else   /* built without OpenMP (a compiler without its runtime): every region on the calling thread */
#define TG_HOST_OMP(directive)
#endif

static size_t total_bytes(const size_t* sizes, size_t n) {
    size_t t = 0;
    for (size_t i = 0; i < n; ++i) t += sizes[i];
    return t;
}

static void region(void* dst, const void* src, size_t len) {
    if (src)
        memcpy(dst, src, len);
    else
        memset(dst, 0, len);
}

/* dst[i] (and src[i] when copying) split into pieces; the team's threads take pieces of every
   buffer in turn (a buffer smaller than a piece is one piece). Under TG_HOST_TEAM_MIN bytes the
   calling thread does all (not even an inactive region: entering libgomp costs too) */
static void host_regions(void* const* dst, const void* const* src, const size_t* sizes, size_t n) {
    if (total_bytes(sizes, n) < TG_HOST_TEAM_MIN) {
        for (size_t i = 0; i < n; ++i) region(dst[i], src ? src[i] : NULL, sizes[i]);
        return;
    }
    TG_HOST_OMP(omp parallel)
    {
        for (size_t i = 0; i < n; ++i) {
            const long pieces = (long)((sizes[i] + TG_HOST_PIECE - 1) / TG_HOST_PIECE);
            TG_HOST_OMP(omp for schedule(dynamic, 1) nowait)
            for (long k = 0; k < pieces; ++k) {
                const size_t at = (size_t)k * TG_HOST_PIECE;
                const size_t len = sizes[i] - at < TG_HOST_PIECE ? sizes[i] - at : TG_HOST_PIECE;
                region((char*)dst[i] + at, src ? (const char*)src[i] + at : NULL, len);
            }
        }
    }
}

#ifdef __cplusplus
extern "C" {
#endif

/* sizes[i] zero bytes at ptrs[i], for i < n */
TG_EXPORT_HOSTOP void tg_zero_many(void* const* ptrs, const size_t* sizes, size_t n) {
    host_regions(ptrs, NULL, sizes, n);
}

/* sizes[i] bytes from src[i] to dst[i], for i < n; no two regions may overlap (the caller
   checks: memcpy, and pieces copied in any order) */
TG_EXPORT_HOSTOP void tg_copy_many(void* const* dst, const void* const* src, const size_t* sizes, size_t n) {
    host_regions(dst, src, sizes, n);
}

#ifdef __cplusplus
}
#endif

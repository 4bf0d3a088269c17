/* tapegrad host helpers: one native call zeroes many host buffers (tapegrad.memory_ops.ZeroPlan).
   Built at install as tapegrad/native_libs/tg_hostops_*.so (setup.py), else on first use into
   the kernel cache (tapegrad.native); compiles as C or C++. */
#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C"
#endif
__attribute__((visibility("default"))) void tg_zero_many(void* const* ptrs, const size_t* sizes, size_t n) {
    for (size_t i = 0; i < n; ++i) memset(ptrs[i], 0, sizes[i]);
}

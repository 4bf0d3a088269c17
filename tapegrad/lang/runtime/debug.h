// tapegrad runtime: debug-mode bounds checks (tg.config.mode = "debug").
// Every array access of a debug build is guarded by dbg_ok(): an index outside the array
// records the first violation of the launch in the module's error slot and the access is
// skipped (a read yields zero). The host reads the slot after the launch and raises
// (tapegrad.lang.debug). Inlined only into debug builds, so release builds are unchanged.
#pragma once

namespace tg {
// the kernel ABI's error slot (include/tg_abi.h; host side: tapegrad.abi.DebugSlot)
typedef ::tg_debug_slot_t dbg_slot_t;
}  // namespace tg

#ifdef TG_CUDA
extern "C" {
__device__ tg::dbg_slot_t tg_dbg_slot;
}
#else
static tg::dbg_slot_t tg_dbg_slot;
#endif

namespace tg {

TG_FUNC void dbg_record(const int64_t* shape, int n, const int64_t* ix, int32_t site) {
#ifdef TG_CUDA
    atomicAdd(&tg_dbg_slot.count, 1);
    if (atomicCAS(&tg_dbg_slot.flag, 0, 2) != 0) return;
#else
    __atomic_fetch_add(&tg_dbg_slot.count, 1, __ATOMIC_RELAXED);
    int32_t expected = 0;
    if (!__atomic_compare_exchange_n(&tg_dbg_slot.flag, &expected, 2, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return;
#endif
    tg_dbg_slot.site = site;
    tg_dbg_slot.ndim = n;
    for (int d = 0; d < 4; ++d) {
        tg_dbg_slot.index[d] = d < n ? ix[d] : 0;
        tg_dbg_slot.shape[d] = d < n ? shape[d] : 0;
    }
#ifdef TG_CUDA
    __threadfence();
    atomicExch(&tg_dbg_slot.flag, 1);
#else
    __atomic_store_n(&tg_dbg_slot.flag, 1, __ATOMIC_RELEASE);
#endif
}

// lo = 0: indices in [0, n) (vector/matrix components); lo = -1: array element indices, which
// may count from the end (addr wraps a negative one), so [-n, n)
TG_FUNC bool dbg_check(const int64_t* shape, int n, const int64_t* ix, int32_t site, int64_t lo = 0) {
    for (int d = 0; d < n; ++d) {
        if (ix[d] < lo * shape[d] || ix[d] >= shape[d]) {
            dbg_record(shape, n, ix, site);
            return false;
        }
    }
    return true;
}

// len(a) / a.shape[k] are int32 in a launch of at most 2^31 - 1 threads: an array with a
// larger dimension would wrap, so the debug build records it (the "index" is the shape)
template <typename T> TG_FUNC bool dbg_narrow(const array_t<T>& a, int32_t site) {
    for (int d = 0; d < a.ndim; ++d) {
        if (a.shape[d] > int64_t(0x7fffffff)) {
            dbg_record(a.shape, a.ndim, a.shape, site);
            return false;
        }
    }
    return true;
}

// a runtime vector/matrix component index (v[i], m[i, j]) against the type's extents
TG_FUNC bool dbg_comp(int32_t site, int64_t n, int64_t i) {
    int64_t shape[1] = {n}, ix[1] = {i};
    return dbg_check(shape, 1, ix, site);
}
TG_FUNC bool dbg_comp(int32_t site, int64_t n, int64_t i, int64_t m, int64_t j) {
    int64_t shape[2] = {n, m}, ix[2] = {i, j};
    return dbg_check(shape, 2, ix, site);
}

template <typename T> TG_FUNC bool dbg_ok(const array_t<T>& a, int32_t site, int64_t i) {
    int64_t ix[1] = {i};
    return dbg_check(a.shape, 1, ix, site, -1);
}
template <typename T> TG_FUNC bool dbg_ok(const array_t<T>& a, int32_t site, int64_t i, int64_t j) {
    int64_t ix[2] = {i, j};
    return dbg_check(a.shape, 2, ix, site, -1);
}
template <typename T> TG_FUNC bool dbg_ok(const array_t<T>& a, int32_t site, int64_t i, int64_t j, int64_t k) {
    int64_t ix[3] = {i, j, k};
    return dbg_check(a.shape, 3, ix, site, -1);
}
template <typename T> TG_FUNC bool dbg_ok(const array_t<T>& a, int32_t site, int64_t i, int64_t j, int64_t k,
                                          int64_t l) {
    int64_t ix[4] = {i, j, k, l};
    return dbg_check(a.shape, 4, ix, site, -1);
}

}  // namespace tg

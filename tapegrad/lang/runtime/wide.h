// tapegrad runtime: the wide variant of a kernel (launches of more than 2^31 - 1 threads, or
// arrays with a dimension past 2^31 - 1): tid(), len() and a.shape[k] are int64.
// Inlined only into units whose generated code uses it, so narrow builds are unchanged.
#pragma once

namespace tg {

TG_FUNC int64_t tid64(const launch_t& b, int64_t t, int k, int n) {
    if (n == 1) return t;
    int64_t rem = t;
    int nd = b.ndim;
    for (int d = nd - 1; d >= 0; --d) {
        int out = n - (nd - d);
        int64_t s = b.shape[d];
        if (out == k) return out == 0 ? rem : rem % s;
        rem /= s;
    }
    return 0;
}

template <typename T> TG_FUNC int64_t shape64(const array_t<T>& a, int k) { return a.shape[k]; }

}  // namespace tg

// tapegrad runtime: the remaining Warp builtins (lang/builtins_warp.py): error functions,
// copysign, frac, rint, skew, argmin/argmax, matrices from rows/columns. Inlined only into units
// that name tg::wx_ (emit.py's optional headers). Adjoints follow scalar.h's convention.
#pragma once

namespace tg {

#define TG_WX_C typedef typename compute<T>::type C

TG_FUNC float wx_erf_c(float x) { return ::erff(x); }
TG_FUNC double wx_erf_c(double x) { return ::erf(x); }
TG_FUNC float wx_erfc_c(float x) { return ::erfcf(x); }
TG_FUNC double wx_erfc_c(double x) { return ::erfc(x); }

// erf^-1 on (-1, 1): Giles' single-precision approximation refined by Newton steps on erf in
// double (the CPU has no erfinv; the same code runs on CUDA so both devices agree)
TG_FUNC double wx_erfinv_c(double x) {
    if (x <= -1.0 || x >= 1.0) {   // +-inf (no INFINITY macro under NVRTC)
        double inf = 1e308 * 10.0;
        return x == 1.0 ? inf : (x == -1.0 ? -inf : inf - inf);
    }
    double w = -::log((1.0 - x) * (1.0 + x)), p;
    if (w < 5.0) {
        w = w - 2.5;
        p = 2.81022636e-08; p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w; p = 0.00021858087 + p * w; p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w; p = 0.246640727 + p * w; p = 1.50140941 + p * w;
    } else {
        w = ::sqrt(w) - 3.0;
        p = -0.000200214257; p = 0.000100950558 + p * w; p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w; p = 0.00573950773 + p * w; p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w; p = 1.00167406 + p * w; p = 2.83297682 + p * w;
    }
    double y = p * x;
    for (int k = 0; k < 2; ++k) {   // Newton: f(y) = erf(y) - x, f' = 2/sqrt(pi) exp(-y^2)
        double e = ::erf(y) - x;
        y -= e / (1.1283791670955126 * ::exp(-y * y));
    }
    return y;
}
TG_FUNC float wx_erfinv_c(float x) { return float(wx_erfinv_c(double(x))); }

template <typename T> TG_FUNC T wx_erf(T x) { TG_WX_C; return T(wx_erf_c(C(x))); }
template <typename T> TG_FUNC T wx_erfc(T x) { TG_WX_C; return T(wx_erfc_c(C(x))); }
template <typename T> TG_FUNC T wx_erfinv(T x) { TG_WX_C; return T(wx_erfinv_c(C(x))); }
template <typename T> TG_FUNC void adj_wx_erf(T x_, T& adj_x, T adj_ret) {
    TG_WX_C; C x = C(x_); accum(adj_x, T(C(1.1283791670955126) * C(::exp(double(-x * x))) * C(adj_ret)));
}
template <typename T> TG_FUNC void adj_wx_erfc(T x_, T& adj_x, T adj_ret) {
    TG_WX_C; C x = C(x_); accum(adj_x, T(C(-1.1283791670955126) * C(::exp(double(-x * x))) * C(adj_ret)));
}
template <typename T> TG_FUNC void adj_wx_erfinv(T x_, T& adj_x, T adj_ret) {
    TG_WX_C; C y = C(wx_erfinv_c(C(x_)));
    accum(adj_x, T(C(0.88622692545275801) * C(::exp(double(y * y))) * C(adj_ret)));   // sqrt(pi)/2 e^{y^2}
}

TG_FUNC bool wx_negative(double v) { return ::copysign(1.0, v) < 0.0; }   // the sign bit (-0.0 too)
template <typename T> TG_FUNC T wx_erfcinv(T x) { TG_WX_C; return T(wx_erfinv_c(C(1) - C(x))); }
template <typename T> TG_FUNC void adj_wx_erfcinv(T x_, T& adj_x, T adj_ret) {
    TG_WX_C; C y = C(wx_erfinv_c(C(1) - C(x_)));
    accum(adj_x, T(C(-0.88622692545275801) * exp(y * y) * C(adj_ret)));   // tg::exp: duals keep tangents
}
template <typename T> TG_FUNC T wx_copysign(T x, T y) {
    TG_WX_C; return T(C(::copysign(double(C(x)), double(C(y)))));
}
template <typename T> TG_FUNC void adj_wx_copysign(T x, T y, T& adj_x, T& adj_y, T adj_ret) {
    TG_WX_C; bool flip = wx_negative(double(C(x))) != wx_negative(double(C(y)));
    accum(adj_x, T(flip ? -C(adj_ret) : C(adj_ret)));
}
template <typename T> TG_FUNC T wx_frac(T x) { TG_WX_C; C v = C(x); return T(v - C(::trunc(double(v)))); }
template <typename T> TG_FUNC void adj_wx_frac(T x, T& adj_x, T adj_ret) { accum(adj_x, adj_ret); }
template <typename T> TG_FUNC T wx_nonzero(T x) { return (x < T(0) || T(0) < x) ? T(1) : T(0); }
template <typename T> TG_FUNC T wx_rint(T x) { TG_WX_C; return T(C(::rint(double(C(x))))); }

template <typename T> TG_FUNC mat_t<3, 3, T> wx_skew(const vec_t<3, T>& v) {
    mat_t<3, 3, T> m;
    m.data[0][1] = T(-v[2]); m.data[0][2] = v[1];
    m.data[1][0] = v[2]; m.data[1][2] = T(-v[0]);
    m.data[2][0] = T(-v[1]); m.data[2][1] = v[0];
    return m;
}
template <typename T> TG_FUNC void adj_wx_skew(const vec_t<3, T>& v, vec_t<3, T>& adj_v, const mat_t<3, 3, T>& g) {
    adj_v[0] += T(g.data[2][1] - g.data[1][2]);
    adj_v[1] += T(g.data[0][2] - g.data[2][0]);
    adj_v[2] += T(g.data[1][0] - g.data[0][1]);
}

// index of the smallest / largest element, NaNs skipped (all NaN: 0), first one on ties
template <int N, typename T> TG_FUNC uint32_t wx_argmin(const vec_t<N, T>& a) {
    uint32_t best = 0; bool have = false;
    for (int i = 0; i < N; ++i) {
        if (!(a[i] == a[i])) continue;
        if (!have || a[i] < a[best]) { best = uint32_t(i); have = true; }
    }
    return best;
}
template <int N, typename T> TG_FUNC uint32_t wx_argmax(const vec_t<N, T>& a) {
    uint32_t best = 0; bool have = false;
    for (int i = 0; i < N; ++i) {
        if (!(a[i] == a[i])) continue;
        if (!have || a[best] < a[i]) { best = uint32_t(i); have = true; }
    }
    return best;
}

// Warp's vector norms (wp.norm_l1 ... wp.smooth_normalize); delta defaults to 1. tg::sqrt in
// compute<T>, no cast through double: dual numbers (forward mode) keep their tangents
template <int N, typename T> TG_FUNC T wx_norm_l1(const vec_t<N, T>& v) {
    TG_WX_C; C n = C(0);
    for (int i = 0; i < N; ++i) n += C(v[i]) < C(0) ? -C(v[i]) : C(v[i]);
    return T(n);
}
template <int N, typename T> TG_FUNC void adj_wx_norm_l1(const vec_t<N, T>& v, vec_t<N, T>& adj_v, T g) {
    for (int i = 0; i < N; ++i) adj_v[i] += v[i] < T(0) ? T(-g) : g;
}
template <int N, typename T> TG_FUNC T wx_sq(const vec_t<N, T>& v) {
    TG_WX_C; C a = C(0);
    for (int i = 0; i < N; ++i) a += C(v[i]) * C(v[i]);
    return T(a);
}
template <int N, typename T> TG_FUNC T wx_norm_l2(const vec_t<N, T>& v) {
    TG_WX_C; return T(sqrt(C(wx_sq(v))));
}
template <int N, typename T> TG_FUNC void adj_wx_norm_l2(const vec_t<N, T>& v, vec_t<N, T>& adj_v, T g) {
    TG_WX_C; C l = sqrt(C(wx_sq(v)));
    if (l > C(0)) for (int i = 0; i < N; ++i) adj_v[i] += T(C(v[i]) / l * C(g));
}
template <int N, typename T> TG_FUNC T wx_norm_huber(const vec_t<N, T>& v, T d_) {
    TG_WX_C; C a = C(wx_sq(v)), d = C(d_);
    return T(a <= d * d ? C(0.5) * a : d * (sqrt(a) - C(0.5) * d));
}
template <int N, typename T> TG_FUNC T wx_norm_huber(const vec_t<N, T>& v) { return wx_norm_huber(v, T(1)); }
template <int N, typename T> TG_FUNC void adj_wx_norm_huber(const vec_t<N, T>& v, T d_, vec_t<N, T>& adj_v, T& adj_d, T g_) {
    TG_WX_C; C a = C(wx_sq(v)), d = C(d_), g = C(g_);
    if (a <= d * d) {
        for (int i = 0; i < N; ++i) adj_v[i] += T(C(v[i]) * g);
    } else {
        C l = sqrt(a);
        for (int i = 0; i < N; ++i) adj_v[i] += T(d * C(v[i]) / l * g);
        accum(adj_d, T((l - d) * g));
    }
}
template <int N, typename T> TG_FUNC void adj_wx_norm_huber(const vec_t<N, T>& v, vec_t<N, T>& adj_v, T g) {
    T unused = T(0); adj_wx_norm_huber(v, T(1), adj_v, unused, g);
}
template <int N, typename T> TG_FUNC T wx_norm_pseudo_huber(const vec_t<N, T>& v, T d_) {
    TG_WX_C; C a = C(wx_sq(v)), d = C(d_);
    return T(d * sqrt(C(1) + a / (d * d)));
}
template <int N, typename T> TG_FUNC T wx_norm_pseudo_huber(const vec_t<N, T>& v) { return wx_norm_pseudo_huber(v, T(1)); }
template <int N, typename T> TG_FUNC void adj_wx_norm_pseudo_huber(const vec_t<N, T>& v, T d_, vec_t<N, T>& adj_v, T& adj_d, T g_) {
    TG_WX_C; C a = C(wx_sq(v)), d = C(d_), g = C(g_), s = sqrt(C(1) + a / (d * d));
    for (int i = 0; i < N; ++i) adj_v[i] += T(C(v[i]) / (d * s) * g);
    accum(adj_d, T((s - a / (d * d * s)) * g));
}
template <int N, typename T> TG_FUNC void adj_wx_norm_pseudo_huber(const vec_t<N, T>& v, vec_t<N, T>& adj_v, T g) {
    T unused = T(0); adj_wx_norm_pseudo_huber(v, T(1), adj_v, unused, g);
}
template <int N, typename T> TG_FUNC vec_t<N, T> wx_smooth_normalize(const vec_t<N, T>& v, T d) {
    TG_WX_C; C h = C(wx_norm_pseudo_huber(v, d));
    vec_t<N, T> r;
    for (int i = 0; i < N; ++i) r[i] = T(C(v[i]) / h);
    return r;
}
template <int N, typename T> TG_FUNC vec_t<N, T> wx_smooth_normalize(const vec_t<N, T>& v) { return wx_smooth_normalize(v, T(1)); }
template <int N, typename T> TG_FUNC void adj_wx_smooth_normalize(const vec_t<N, T>& v, T d_, vec_t<N, T>& adj_v, T& adj_d, const vec_t<N, T>& g) {
    // r = v / H:  dr/dv = I/H - v (dH/dv)^T / H^2,  dr/dd = -v (dH/dd) / H^2
    TG_WX_C; C a = C(wx_sq(v)), d = C(d_), s = sqrt(C(1) + a / (d * d)), h = d * s;
    C gv = C(0);
    for (int i = 0; i < N; ++i) gv += C(g[i]) * C(v[i]);
    for (int i = 0; i < N; ++i) adj_v[i] += T(C(g[i]) / h - gv * C(v[i]) / (d * s) / (h * h));
    accum(adj_d, T(-gv * (s - a / (d * d * s)) / (h * h)));
}
template <int N, typename T> TG_FUNC void adj_wx_smooth_normalize(const vec_t<N, T>& v, vec_t<N, T>& adj_v, const vec_t<N, T>& g) {
    T unused = T(0); adj_wx_smooth_normalize(v, T(1), adj_v, unused, g);
}

// Warp's transform_point / transform_vector of a 4x4 matrix: m (p, 1) and m (v, 0), first three rows
template <typename T> TG_FUNC vec_t<3, T> wx_mat_point(const mat_t<4, 4, T>& m, const vec_t<3, T>& p, T w) {
    vec_t<3, T> r;
    for (int i = 0; i < 3; ++i) r[i] = T(m.data[i][0] * p[0] + m.data[i][1] * p[1] + m.data[i][2] * p[2] + m.data[i][3] * w);
    return r;
}
template <typename T> TG_FUNC void adj_wx_mat_point(const mat_t<4, 4, T>& m, const vec_t<3, T>& p, T w, mat_t<4, 4, T>& adj_m,
                                                   vec_t<3, T>& adj_p, const vec_t<3, T>& g) {
    for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) { adj_m.data[i][j] += T(g[i] * p[j]); adj_p[j] += T(m.data[i][j] * g[i]); }
        adj_m.data[i][3] += T(g[i] * w);
    }
}
template <typename T> TG_FUNC vec_t<3, T> wx_transform_point_m(const mat_t<4, 4, T>& m, const vec_t<3, T>& p) {
    return wx_mat_point(m, p, T(1));
}
template <typename T> TG_FUNC void adj_wx_transform_point_m(const mat_t<4, 4, T>& m, const vec_t<3, T>& p, mat_t<4, 4, T>& adj_m,
                                                           vec_t<3, T>& adj_p, const vec_t<3, T>& g) {
    adj_wx_mat_point(m, p, T(1), adj_m, adj_p, g);
}
template <typename T> TG_FUNC vec_t<3, T> wx_transform_vector_m(const mat_t<4, 4, T>& m, const vec_t<3, T>& v) {
    return wx_mat_point(m, v, T(0));
}
template <typename T> TG_FUNC void adj_wx_transform_vector_m(const mat_t<4, 4, T>& m, const vec_t<3, T>& v, mat_t<4, 4, T>& adj_m,
                                                            vec_t<3, T>& adj_v, const vec_t<3, T>& g) {
    adj_wx_mat_point(m, v, T(0), adj_m, adj_v, g);
}

// expect_near(a, b, tolerance): prints both values when a component differs by more than tolerance
template <typename T> TG_FUNC bool wx_far(T a, T b, T tol) {
    TG_WX_C; C d = C(a) - C(b); return (d < C(0) ? -d : d) > C(tol);
}
template <int N, typename T> TG_FUNC bool wx_far(const vec_t<N, T>& a, const vec_t<N, T>& b, T tol) {
    for (int i = 0; i < N; ++i) if (wx_far(a.c[i], b.c[i], tol)) return true;
    return false;
}
template <int R, int C_, typename T> TG_FUNC bool wx_far(const mat_t<R, C_, T>& a, const mat_t<R, C_, T>& b, T tol) {
    for (int i = 0; i < R; ++i) for (int j = 0; j < C_; ++j) if (wx_far(a.data[i][j], b.data[i][j], tol)) return true;
    return false;
}
template <typename V, typename T> TG_FUNC void wx_expect_near(const V& actual, const V& expected, T tol, const char* where) {
    if (wx_far(actual, expected, tol)) {
        printf("Error, expect_near() failed at %s:\n\t Expected:", where); print_flat(expected);
        printf("\n\t Actual:"); print_flat(actual); printf("\n\t Tolerance: %g\n", as_double(tol));
    }
}

// tg.cast(a, T): a's bytes reinterpreted as a T of the same size (Warp's wp.cast); a byte
// copy (no memcpy needed under NVRTC), which compilers turn into a register move
template <typename T, typename S> TG_FUNC T wx_bit_cast(const S& s) {
    static_assert(sizeof(T) == sizeof(S), "tg.cast: the value and the target type differ in size");
    T t;
    const char* src = reinterpret_cast<const char*>(&s);
    char* dst = reinterpret_cast<char*>(&t);
    for (int i = 0; i < (int)sizeof(T); ++i) dst[i] = src[i];
    return t;
}

// block_dim(): the threads per block of the running launch (a CPU launch runs blocks of one)
TG_FUNC int32_t wx_block_dim() {
#if defined(__CUDA_ARCH__)
    return (int32_t)blockDim.x;
#else
    return 1;
#endif
}

#undef TG_WX_C
// lower_bound: the first index in [lo, hi) of a sorted 1-D array whose element is >= v, hi - 1 if
// none (Warp's: the result stays a valid index of the range)
template <typename T> TG_FUNC int32_t wx_lower_bound(const array_t<T>& a, int64_t lo, int64_t hi, T v) {
    hi = hi - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (*addr(a.data, a, mid) < v) lo = mid + 1; else hi = mid;
    }
    return int32_t(lo);
}
template <typename T> TG_FUNC int32_t wx_lower_bound(const array_t<T>& a, T v) { return wx_lower_bound(a, 0, a.shape[0], v); }

}  // namespace tg

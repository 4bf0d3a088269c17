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
template <typename T> TG_FUNC T wx_copysign(T x, T y) {
    TG_WX_C; return T(C(::copysign(double(C(x)), double(C(y)))));
}
template <typename T> TG_FUNC void adj_wx_copysign(T x, T y, T& adj_x, T& adj_y, T adj_ret) {
    TG_WX_C; bool flip = wx_negative(double(C(x))) != wx_negative(double(C(y)));
    accum(adj_x, T(flip ? -C(adj_ret) : C(adj_ret)));
}
template <typename T> TG_FUNC T wx_frac(T x) { TG_WX_C; C v = C(x); return T(v - C(::trunc(double(v)))); }
template <typename T> TG_FUNC void adj_wx_frac(T x, T& adj_x, T adj_ret) { accum(adj_x, adj_ret); }
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

#undef TG_WX_C
}  // namespace tg

// tapegrad runtime: dual overloads of warpx.h's builtins (issue 26). Inlined after warpx.h and
// dual.h into units that use both (emit.py), since these call warpx.h's scalar functions.
#pragma once

namespace tg {
// warpx.h's builtins (lang/builtins_warp.py) whose definitions leave the scalar type (through
// double): value and derivative here, so tangents and second derivatives stay exact.
#define TG_DC typedef typename compute<T>::type C
template <typename T> TG_FUNC dual<T> wx_erf_c(const dual<T>& a) {
    TG_DC; C x = C(a.v); return dual<T>(T(wx_erf_c(x)), T(C(1.1283791670955126) * exp(-x * x) * C(a.t)));
}
template <typename T> TG_FUNC dual<T> wx_erfc_c(const dual<T>& a) {
    TG_DC; C x = C(a.v); return dual<T>(T(wx_erfc_c(x)), T(C(-1.1283791670955126) * exp(-x * x) * C(a.t)));
}
template <typename T> TG_FUNC dual<T> wx_erfinv_c(const dual<T>& a) {
    TG_DC; C y = C(wx_erfinv_c(C(a.v)));
    return dual<T>(T(y), T(C(0.88622692545275801) * exp(y * y) * C(a.t)));
}
template <typename T> TG_FUNC void adj_wx_erf(dual<T> x_, dual<T>& adj_x, dual<T> adj_ret) {
    typedef dual<typename compute<T>::type> D; D x = D(x_);
    accum(adj_x, dual<T>(D(1.1283791670955126) * exp(-x * x) * D(adj_ret)));
}
template <typename T> TG_FUNC void adj_wx_erfc(dual<T> x_, dual<T>& adj_x, dual<T> adj_ret) {
    typedef dual<typename compute<T>::type> D; D x = D(x_);
    accum(adj_x, dual<T>(D(-1.1283791670955126) * exp(-x * x) * D(adj_ret)));
}
template <typename T> TG_FUNC void adj_wx_erfinv(dual<T> x_, dual<T>& adj_x, dual<T> adj_ret) {
    typedef dual<typename compute<T>::type> D; D y = wx_erfinv_c(D(x_));
    accum(adj_x, dual<T>(D(0.88622692545275801) * exp(y * y) * D(adj_ret)));
}
template <typename T> TG_FUNC dual<T> wx_copysign(dual<T> x, dual<T> y) {
    TG_DC; bool flip = (::copysign(1.0, double(C(x.v))) < 0.0) != (::copysign(1.0, double(C(y.v))) < 0.0);
    return flip ? -x : x;
}
template <typename T> TG_FUNC void adj_wx_copysign(dual<T> x, dual<T> y, dual<T>& adj_x, dual<T>&, dual<T> adj_ret) {
    TG_DC; bool flip = (::copysign(1.0, double(C(x.v))) < 0.0) != (::copysign(1.0, double(C(y.v))) < 0.0);
    accum(adj_x, flip ? -adj_ret : adj_ret);
}
template <typename T> TG_FUNC dual<T> wx_frac(dual<T> x) { return dual<T>(wx_frac(x.v), x.t); }
template <typename T> TG_FUNC dual<T> wx_rint(dual<T> x) { return dual<T>(wx_rint(x.v), T(0)); }
// lower_bound in dual code: the search reads the values (an index has no tangent)
template <typename T, typename U> TG_FUNC int32_t wx_lower_bound(const darray_t<T>& a, int64_t lo, int64_t hi, U v) {
    return wx_lower_bound(a.p, lo, hi, T(v));
}
template <typename T, typename U> TG_FUNC int32_t wx_lower_bound(const darray_t<T>& a, U v) { return wx_lower_bound(a.p, T(v)); }
#undef TG_DC
}  // namespace tg

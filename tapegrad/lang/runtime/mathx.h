// tapegrad runtime: Warp's interpolation, classification and angle builtins (issue 16):
// lerp, smoothstep, step, isnan/isinf/isfinite, degrees/radians, with their adjoints.
#pragma once

namespace tg {

#define TG_S typename enable_if<is_scalar<T>::value, int>::type = 0
#define TG_C typedef typename compute<T>::type C

template <typename T, TG_S> TG_FUNC T lerp(T a, T b, T t) { TG_C; return T(C(a) + (C(b) - C(a)) * C(t)); }
template <typename T, TG_S> TG_FUNC void adj_lerp(T a, T b, T t, T& adj_a, T& adj_b, T& adj_t, T adj_ret) {
    TG_C;
    accum(adj_a, T((C(1) - C(t)) * C(adj_ret))); accum(adj_b, T(C(t) * C(adj_ret)));
    accum(adj_t, T((C(b) - C(a)) * C(adj_ret)));
}
template <typename V, typename T> TG_FUNC V lerp_cw(const V& a, const V& b, T t) {
    V r; for (int i = 0; i < comp<V>::n; ++i) flat(r)[i] = lerp(flat(a)[i], flat(b)[i], t);
    return r;
}
template <typename V, typename T> TG_FUNC void adj_lerp_cw(const V& a, const V& b, T t, V& adj_a, V& adj_b, T& adj_t,
                                                           const V& adj_ret) {
    for (int i = 0; i < comp<V>::n; ++i)
        adj_lerp(flat(a)[i], flat(b)[i], t, flat(adj_a)[i], flat(adj_b)[i], adj_t, flat(adj_ret)[i]);
}
template <int N, typename T> TG_FUNC vec_t<N, T> lerp(const vec_t<N, T>& a, const vec_t<N, T>& b, T t) { return lerp_cw(a, b, t); }
template <int R, int C, typename T> TG_FUNC mat_t<R, C, T> lerp(const mat_t<R, C, T>& a, const mat_t<R, C, T>& b, T t) {
    return lerp_cw(a, b, t);
}
template <int N, typename T> TG_FUNC void adj_lerp(const vec_t<N, T>& a, const vec_t<N, T>& b, T t, vec_t<N, T>& aa,
                                                   vec_t<N, T>& ab, T& at, const vec_t<N, T>& g) { adj_lerp_cw(a, b, t, aa, ab, at, g); }
template <int R, int C, typename T> TG_FUNC void adj_lerp(const mat_t<R, C, T>& a, const mat_t<R, C, T>& b, T t,
                                                          mat_t<R, C, T>& aa, mat_t<R, C, T>& ab, T& at,
                                                          const mat_t<R, C, T>& g) { adj_lerp_cw(a, b, t, aa, ab, at, g); }

template <typename T, TG_S> TG_FUNC T smoothstep(T a, T b, T x) {
    TG_C;
    C t = clamp(C(C(x) - C(a)) / C(C(b) - C(a)), C(0), C(1));
    return T(t * t * (C(3) - C(2) * t));
}
template <typename T, TG_S> TG_FUNC void adj_smoothstep(T a, T b, T x, T& adj_a, T& adj_b, T& adj_x, T adj_ret) {
    TG_C;
    C w = C(b) - C(a), t = (C(x) - C(a)) / w;
    if (t <= C(0) || t >= C(1)) return;
    C g = C(6) * t * (C(1) - t) * C(adj_ret);
    accum(adj_x, T(g / w)); accum(adj_a, T(g * (C(x) - C(b)) / (w * w))); accum(adj_b, T(g * (C(a) - C(x)) / (w * w)));
}
template <typename T, TG_S> TG_FUNC T step(T x) { return x < T(0) ? T(1) : T(0); }

template <typename T, TG_S> TG_FUNC bool isnan_(T x) { TG_C; C y = C(x); return y != y; }
template <typename T, TG_S> TG_FUNC bool isinf_(T x) { TG_C; C y = C(x); return y == y && (y - y) != (y - y); }
template <typename T, TG_S> TG_FUNC bool isfinite_(T x) { TG_C; C y = C(x); return (y - y) == (y - y); }
#define TG_CLASSIFY_CW(NAME, ANY)                                                            \
    template <int N, typename T> TG_FUNC bool NAME(const vec_t<N, T>& v) {                    \
        for (int i = 0; i < N; ++i) if (NAME(v.c[i]) == ANY) return ANY;                      \
        return !ANY; }                                                                        \
    template <int R, int K, typename T> TG_FUNC bool NAME(const mat_t<R, K, T>& m) {          \
        for (int i = 0; i < R * K; ++i) if (NAME(flat(m)[i]) == ANY) return ANY;              \
        return !ANY; }
TG_CLASSIFY_CW(isnan_, true)
TG_CLASSIFY_CW(isinf_, true)
TG_CLASSIFY_CW(isfinite_, false)
#undef TG_CLASSIFY_CW

template <typename T, TG_S> TG_FUNC T degrees(T x) { TG_C; return T(C(x) * C(57.29577951308232)); }
template <typename T, TG_S> TG_FUNC T radians(T x) { TG_C; return T(C(x) * C(0.017453292519943295)); }
template <typename T, TG_S> TG_FUNC void adj_degrees(T, T& adj_x, T adj_ret) { TG_C; accum(adj_x, T(C(adj_ret) * C(57.29577951308232))); }
template <typename T, TG_S> TG_FUNC void adj_radians(T, T& adj_x, T adj_ret) { TG_C; accum(adj_x, T(C(adj_ret) * C(0.017453292519943295))); }

#undef TG_C
#undef TG_S

}  // namespace tg

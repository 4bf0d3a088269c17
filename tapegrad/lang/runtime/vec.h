// tapegrad runtime: fixed-size vectors, matrices, quaternions and their adjoints.
// Layouts match the ctypes/numpy layouts exactly (no padding, no over-alignment):
// vec_t<N,T> is T[N]; mat_t<R,C,T> is T[R][C] row-major; a quaternion is vec_t<4,T> (x,y,z,w).
#pragma once

namespace tg {

template <int N, typename T> struct vec_t {
    T c[N];
    TG_FUNC vec_t() { for (int i = 0; i < N; ++i) c[i] = T(0); }
    TG_FUNC T& operator[](int i) { return c[i]; }
    TG_FUNC const T& operator[](int i) const { return c[i]; }
};

template <int R, int C, typename T> struct mat_t {
    T data[R][C];
    TG_FUNC mat_t() { for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) data[i][j] = T(0); }
};

template <typename T> using quat_t = vec_t<4, T>;

template <int N, typename T, typename... A> TG_FUNC vec_t<N, T> make_vec(A... a) {
    T tmp[N] = {T(a)...};
    vec_t<N, T> r;
    for (int i = 0; i < N; ++i) r.c[i] = tmp[i];
    return r;
}
template <int N, typename T> TG_FUNC vec_t<N, T> splat_vec(T a) {
    vec_t<N, T> r;
    for (int i = 0; i < N; ++i) r.c[i] = a;
    return r;
}
template <int R, int C, typename T, typename... A> TG_FUNC mat_t<R, C, T> make_mat(A... a) {
    T tmp[R * C] = {T(a)...};
    mat_t<R, C, T> r;
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) r.data[i][j] = tmp[i * C + j];
    return r;
}
template <int R, int C, typename T> TG_FUNC mat_t<R, C, T> splat_mat(T a) {
    mat_t<R, C, T> r;
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) r.data[i][j] = a;
    return r;
}
template <int N, typename T> TG_FUNC mat_t<N, N, T> identity() {
    mat_t<N, N, T> r;
    for (int i = 0; i < N; ++i) r.data[i][i] = T(1);
    return r;
}

// component-wise helpers over the flat storage
template <int N, typename T> TG_FUNC T* flat(vec_t<N, T>& v) { return v.c; }
template <int N, typename T> TG_FUNC const T* flat(const vec_t<N, T>& v) { return v.c; }
template <int R, int C, typename T> TG_FUNC T* flat(mat_t<R, C, T>& m) { return &m.data[0][0]; }
template <int R, int C, typename T> TG_FUNC const T* flat(const mat_t<R, C, T>& m) { return &m.data[0][0]; }
template <typename V> struct comp;
template <int N, typename T> struct comp<vec_t<N, T> > { typedef T type; enum { n = N }; };
template <int R, int C, typename T> struct comp<mat_t<R, C, T> > { typedef T type; enum { n = R * C }; };

#define TG_CW_BINOP(OP, OPEQ)                                                              \
    template <int N, typename T> TG_FUNC vec_t<N, T> operator OP(const vec_t<N, T>& a, const vec_t<N, T>& b) { \
        vec_t<N, T> r; for (int i = 0; i < N; ++i) r.c[i] = T(a.c[i] OP b.c[i]); return r; }   \
    template <int R, int C, typename T> TG_FUNC mat_t<R, C, T> operator OP(const mat_t<R, C, T>& a, const mat_t<R, C, T>& b) { \
        mat_t<R, C, T> r; for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) r.data[i][j] = T(a.data[i][j] OP b.data[i][j]); return r; } \
    template <int N, typename T> TG_FUNC vec_t<N, T>& operator OPEQ(vec_t<N, T>& a, const vec_t<N, T>& b) { \
        for (int i = 0; i < N; ++i) a.c[i] = T(a.c[i] OP b.c[i]); return a; }                  \
    template <int R, int C, typename T> TG_FUNC mat_t<R, C, T>& operator OPEQ(mat_t<R, C, T>& a, const mat_t<R, C, T>& b) { \
        for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) a.data[i][j] = T(a.data[i][j] OP b.data[i][j]); return a; }
TG_CW_BINOP(+, +=)
TG_CW_BINOP(-, -=)
#undef TG_CW_BINOP

template <typename V> TG_FUNC V scale(const V& a, typename comp<V>::type s) {
    V r; const typename comp<V>::type* p = flat(a); typename comp<V>::type* q = flat(r);
    for (int i = 0; i < comp<V>::n; ++i) q[i] = typename comp<V>::type(p[i] * s);
    return r;
}
template <typename V> TG_FUNC typename comp<V>::type inner(const V& a, const V& b) {
    typedef typename comp<V>::type T;
    typename compute<T>::type s = 0;
    const T* p = flat(a); const T* q = flat(b);
    for (int i = 0; i < comp<V>::n; ++i) s += typename compute<T>::type(p[i]) * typename compute<T>::type(q[i]);
    return T(s);
}
template <int N, typename T> TG_FUNC vec_t<N, T> operator-(const vec_t<N, T>& a) { return scale(a, T(-1)); }
template <int R, int C, typename T> TG_FUNC mat_t<R, C, T> operator-(const mat_t<R, C, T>& a) { return scale(a, T(-1)); }

// ---- arithmetic overloads (names used by the builtin table)
#define TG_COMPOSITE_ARITH(V, TPL)                                                              \
    TPL TG_FUNC V add(const V& a, const V& b) { return a + b; }                                  \
    TPL TG_FUNC V sub(const V& a, const V& b) { return a - b; }                                  \
    TPL TG_FUNC V neg(const V& a) { return -a; }                                                 \
    TPL TG_FUNC V pos(const V& a) { return a; }                                                  \
    TPL TG_FUNC V mul(const V& a, T s) { return scale(a, s); }                                   \
    TPL TG_FUNC V mul(T s, const V& a) { return scale(a, s); }                                   \
    TPL TG_FUNC V div(const V& a, T s) { V r; for (int i = 0; i < comp<V>::n; ++i) flat(r)[i] = T(flat(a)[i] / s); return r; } \
    TPL TG_FUNC V div(T s, const V& a) { V r; for (int i = 0; i < comp<V>::n; ++i) flat(r)[i] = T(s / flat(a)[i]); return r; } \
    TPL TG_FUNC void adj_add(const V&, const V&, V& aa, V& ab, const V& g) { aa += g; ab += g; }  \
    TPL TG_FUNC void adj_sub(const V&, const V&, V& aa, V& ab, const V& g) { aa += g; ab -= g; }  \
    TPL TG_FUNC void adj_neg(const V&, V& aa, const V& g) { aa -= g; }                          \
    TPL TG_FUNC void adj_pos(const V&, V& aa, const V& g) { aa += g; }                          \
    TPL TG_FUNC void adj_mul(const V& a, T s, V& aa, T& as, const V& g) { aa += scale(g, s); accum(as, inner(a, g)); } \
    TPL TG_FUNC void adj_mul(T s, const V& a, T& as, V& aa, const V& g) { aa += scale(g, s); accum(as, inner(a, g)); } \
    TPL TG_FUNC void adj_div(const V& a, T s, V& aa, T& as, const V& g) {                        \
        aa += scale(g, T(T(1) / s)); accum(as, T(-inner(a, g) / (s * s))); }                     \
    TPL TG_FUNC void adj_div(T s, const V& a, T& as, V& aa, const V& g) {                        \
        for (int i = 0; i < comp<V>::n; ++i) { T x = flat(a)[i], gi = flat(g)[i];                \
            accum(as, T(gi / x)); accum(flat(aa)[i], T(-gi * s / (x * x))); } }                  \
    TPL TG_FUNC void accum(V& a, const V& b) { a += b; }
#define TG_COMMA ,
TG_COMPOSITE_ARITH(vec_t<N TG_COMMA T>, template <int N TG_COMMA typename T>)
TG_COMPOSITE_ARITH(mat_t<R TG_COMMA C TG_COMMA T>, template <int R TG_COMMA int C TG_COMMA typename T>)
#undef TG_COMPOSITE_ARITH

// component-wise products and min/max
template <typename V> TG_FUNC V cw_mul(const V& a, const V& b) { V r; for (int i = 0; i < comp<V>::n; ++i) flat(r)[i] = flat(a)[i] * flat(b)[i]; return r; }
template <typename V> TG_FUNC V cw_div(const V& a, const V& b) { V r; for (int i = 0; i < comp<V>::n; ++i) flat(r)[i] = flat(a)[i] / flat(b)[i]; return r; }
template <typename V> TG_FUNC void adj_cw_mul(const V& a, const V& b, V& aa, V& ab, const V& g) { aa += cw_mul(g, b); ab += cw_mul(g, a); }
template <typename V> TG_FUNC void adj_cw_div(const V& a, const V& b, V& aa, V& ab, const V& g) {
    for (int i = 0; i < comp<V>::n; ++i) { typename comp<V>::type x = flat(a)[i], y = flat(b)[i], gi = flat(g)[i];
        flat(aa)[i] += gi / y; flat(ab)[i] -= gi * x / (y * y); } }
template <int N, typename T> TG_FUNC vec_t<N, T> min(const vec_t<N, T>& a, const vec_t<N, T>& b) { vec_t<N, T> r; for (int i = 0; i < N; ++i) r.c[i] = min(a.c[i], b.c[i]); return r; }
template <int N, typename T> TG_FUNC vec_t<N, T> max(const vec_t<N, T>& a, const vec_t<N, T>& b) { vec_t<N, T> r; for (int i = 0; i < N; ++i) r.c[i] = max(a.c[i], b.c[i]); return r; }
template <int N, typename T> TG_FUNC void adj_min(const vec_t<N, T>& a, const vec_t<N, T>& b, vec_t<N, T>& aa, vec_t<N, T>& ab, const vec_t<N, T>& g) { for (int i = 0; i < N; ++i) adj_min(a.c[i], b.c[i], aa.c[i], ab.c[i], g.c[i]); }
template <int N, typename T> TG_FUNC void adj_max(const vec_t<N, T>& a, const vec_t<N, T>& b, vec_t<N, T>& aa, vec_t<N, T>& ab, const vec_t<N, T>& g) { for (int i = 0; i < N; ++i) adj_max(a.c[i], b.c[i], aa.c[i], ab.c[i], g.c[i]); }
template <int N, typename T> TG_FUNC vec_t<N, T> abs(const vec_t<N, T>& a) { vec_t<N, T> r; for (int i = 0; i < N; ++i) r.c[i] = abs(a.c[i]); return r; }
template <int N, typename T> TG_FUNC void adj_abs(const vec_t<N, T>& a, vec_t<N, T>& aa, const vec_t<N, T>& g) { for (int i = 0; i < N; ++i) adj_abs(a.c[i], aa.c[i], g.c[i]); }

// ---- component access
template <int N, typename T> TG_FUNC T extract(const vec_t<N, T>& v, int64_t i) { return v.c[i]; }
template <int N, typename T, typename I> TG_FUNC void adj_extract(const vec_t<N, T>&, I i, vec_t<N, T>& av, I&, T g) { accum(av.c[i], g); }
template <int R, int C, typename T> TG_FUNC vec_t<C, T> extract(const mat_t<R, C, T>& m, int64_t i) { vec_t<C, T> r; for (int j = 0; j < C; ++j) r.c[j] = m.data[i][j]; return r; }
template <int R, int C, typename T, typename I> TG_FUNC void adj_extract(const mat_t<R, C, T>&, I i, mat_t<R, C, T>& am, I&, const vec_t<C, T>& g) { for (int j = 0; j < C; ++j) accum(am.data[i][j], g.c[j]); }
template <int R, int C, typename T> TG_FUNC T extract(const mat_t<R, C, T>& m, int64_t i, int64_t j) { return m.data[i][j]; }
template <int R, int C, typename T, typename I, typename J> TG_FUNC void adj_extract(const mat_t<R, C, T>&, I i, J j, mat_t<R, C, T>& am, I&, J&, T g) { accum(am.data[i][j], g); }
// functional updates: v[i] = x on a local produces a new value (keeps the IR in SSA form)
template <int N, typename T> TG_FUNC vec_t<N, T> assign(vec_t<N, T> v, int64_t i, T x) { v.c[i] = x; return v; }
template <int N, typename T, typename I> TG_FUNC void adj_assign(const vec_t<N, T>&, I i, T, vec_t<N, T>& av, I&, T& ax, const vec_t<N, T>& g) {
    for (int k = 0; k < N; ++k) if (k != i) accum(av.c[k], g.c[k]);
    accum(ax, g.c[i]);
}
template <int R, int C, typename T> TG_FUNC mat_t<R, C, T> assign(mat_t<R, C, T> m, int64_t i, int64_t j, T x) { m.data[i][j] = x; return m; }
template <int R, int C, typename T, typename I, typename J> TG_FUNC void adj_assign(const mat_t<R, C, T>&, I i, J j, T, mat_t<R, C, T>& am, I&, J&, T& ax, const mat_t<R, C, T>& g) {
    for (int a = 0; a < R; ++a) for (int b = 0; b < C; ++b) if (a != i || b != j) accum(am.data[a][b], g.data[a][b]);
    accum(ax, g.data[i][j]);
}
template <int R, int C, typename T> TG_FUNC mat_t<R, C, T> assign(mat_t<R, C, T> m, int64_t i, const vec_t<C, T>& x) { for (int j = 0; j < C; ++j) m.data[i][j] = x.c[j]; return m; }
template <int R, int C, typename T, typename I> TG_FUNC void adj_assign(const mat_t<R, C, T>&, I i, const vec_t<C, T>&, mat_t<R, C, T>& am, I&, vec_t<C, T>& ax, const mat_t<R, C, T>& g) {
    for (int a = 0; a < R; ++a) for (int b = 0; b < C; ++b) { if (a != i) accum(am.data[a][b], g.data[a][b]); else accum(ax.c[b], g.data[a][b]); }
}

// a % b component-wise (C's fmod for floats, as Warp's)
template <int N, typename T> TG_FUNC vec_t<N, T> mod(const vec_t<N, T>& a, const vec_t<N, T>& b) {
    vec_t<N, T> r;
    for (int i = 0; i < N; ++i) r.c[i] = mod(a.c[i], b.c[i]);
    return r;
}
template <int N, typename T> TG_FUNC void adj_mod(const vec_t<N, T>& a, const vec_t<N, T>& b, vec_t<N, T>& aa,
                                                  vec_t<N, T>& ab, const vec_t<N, T>& g) {
    for (int i = 0; i < N; ++i) adj_mod(a.c[i], b.c[i], aa.c[i], ab.c[i], g.c[i]);
}
template <int R, int C, typename T> TG_FUNC mat_t<R, C, T> mod(const mat_t<R, C, T>& a, const mat_t<R, C, T>& b) {
    mat_t<R, C, T> r;
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) r.data[i][j] = mod(a.data[i][j], b.data[i][j]);
    return r;
}
template <int R, int C, typename T> TG_FUNC void adj_mod(const mat_t<R, C, T>& a, const mat_t<R, C, T>& b,
                                                         mat_t<R, C, T>& aa, mat_t<R, C, T>& ab, const mat_t<R, C, T>& g) {
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j)
        adj_mod(a.data[i][j], b.data[i][j], aa.data[i][j], ab.data[i][j], g.data[i][j]);
}
// v == w of two vectors/matrices: every component equal
template <typename V> TG_FUNC bool all_equal(const V& a, const V& b) {
    for (int k = 0; k < int(comp<V>::n); ++k) if (!(flat(a)[k] == flat(b)[k])) return false;
    return true;
}
// constant slices (v[1:3], m[:2, 1:]; lang/slices.py): the components at flat indices I...
template <typename Out, int... I, typename In> TG_FUNC Out gather(const In& a) {
    const int idx[] = {I...};
    Out r;
    for (int k = 0; k < int(sizeof...(I)); ++k) flat(r)[k] = flat(a)[idx[k]];
    return r;
}
template <typename Out, int... I, typename In> TG_FUNC void adj_gather(const In&, In& aa, const Out& g) {
    const int idx[] = {I...};
    for (int k = 0; k < int(sizeof...(I)); ++k) accum(flat(aa)[idx[k]], flat(g)[k]);
}
// a[slice] = v: a new value (the IR stays in SSA form)
template <int... I, typename In, typename V> TG_FUNC In scatter(In a, const V& v) {
    const int idx[] = {I...};
    for (int k = 0; k < int(sizeof...(I)); ++k) flat(a)[idx[k]] = flat(v)[k];
    return a;
}
template <int... I, typename In, typename V> TG_FUNC void adj_scatter(const In&, const V&, In& aa, V& av, const In& g) {
    const int idx[] = {I...};
    In rest = g;   // the components the update overwrote get nothing from the old value
    for (int k = 0; k < int(sizeof...(I)); ++k) { accum(flat(av)[k], flat(g)[idx[k]]); zero(flat(rest)[idx[k]]); }
    accum(aa, rest);
}

// ---- vector algebra
template <int N, typename T> TG_FUNC T dot(const vec_t<N, T>& a, const vec_t<N, T>& b) { return inner(a, b); }
template <int N, typename T> TG_FUNC void adj_dot(const vec_t<N, T>& a, const vec_t<N, T>& b, vec_t<N, T>& aa, vec_t<N, T>& ab, T g) { aa += scale(b, g); ab += scale(a, g); }
template <typename T> TG_FUNC vec_t<3, T> cross(const vec_t<3, T>& a, const vec_t<3, T>& b) {
    return make_vec<3, T>(a.c[1] * b.c[2] - a.c[2] * b.c[1], a.c[2] * b.c[0] - a.c[0] * b.c[2], a.c[0] * b.c[1] - a.c[1] * b.c[0]);
}
template <typename T> TG_FUNC void adj_cross(const vec_t<3, T>& a, const vec_t<3, T>& b, vec_t<3, T>& aa, vec_t<3, T>& ab, const vec_t<3, T>& g) {
    aa += cross(b, g); ab += cross(g, a);
}
template <int N, typename T> TG_FUNC T length_sq(const vec_t<N, T>& a) { return inner(a, a); }
template <int N, typename T> TG_FUNC void adj_length_sq(const vec_t<N, T>& a, vec_t<N, T>& aa, T g) { aa += scale(a, T(2 * g)); }
template <int N, typename T> TG_FUNC T length(const vec_t<N, T>& a) { return T(sqrt(typename compute<T>::type(inner(a, a)))); }
template <int N, typename T> TG_FUNC void adj_length(const vec_t<N, T>& a, vec_t<N, T>& aa, T g) {
    T l = length(a);
    if (l > T(0)) aa += scale(a, T(g / l));
}
// divides each component by the length (not times 1/length: Warp's rounding, bit for bit)
template <int N, typename T> TG_FUNC vec_t<N, T> normalize(const vec_t<N, T>& a) {
    T l = length(a);
    vec_t<N, T> r;
    if (l > T(0)) for (int i = 0; i < N; ++i) r.c[i] = T(a.c[i] / l);
    return r;
}
// a quaternion's normalize: times 1/length as Warp's, and the zero quaternion gives the identity
// rotation (0, 0, 0, 1) as Warp's (a vec4's gives zero); the adjoint is zero there
template <typename T> TG_FUNC vec_t<4, T> quat_normalize(const vec_t<4, T>& q) {
    T l = length(q);
    if (!(l > T(0))) { vec_t<4, T> r; r.c[3] = T(1); return r; }
    return scale(q, T(T(1) / l));
}
template <int N, typename T> TG_FUNC void adj_normalize(const vec_t<N, T>& a, vec_t<N, T>& aa, const vec_t<N, T>& g) {
    T l = length(a);
    if (l > T(0)) { vec_t<N, T> n = scale(a, T(T(1) / l)); aa += scale(g - scale(n, inner(n, g)), T(T(1) / l)); }
}
template <typename T> TG_FUNC void adj_quat_normalize(const vec_t<4, T>& q, vec_t<4, T>& aq, const vec_t<4, T>& g) {
    adj_normalize(q, aq, g);
}
template <int N, int M, typename T> TG_FUNC mat_t<N, M, T> outer(const vec_t<N, T>& a, const vec_t<M, T>& b) {
    mat_t<N, M, T> r; for (int i = 0; i < N; ++i) for (int j = 0; j < M; ++j) r.data[i][j] = a.c[i] * b.c[j]; return r;
}
template <int N, int M, typename T> TG_FUNC void adj_outer(const vec_t<N, T>& a, const vec_t<M, T>& b, vec_t<N, T>& aa, vec_t<M, T>& ab, const mat_t<N, M, T>& g) {
    for (int i = 0; i < N; ++i) for (int j = 0; j < M; ++j) { aa.c[i] += g.data[i][j] * b.c[j]; ab.c[j] += g.data[i][j] * a.c[i]; }
}

// ---- matrix algebra
template <int R, int C, typename T> TG_FUNC mat_t<C, R, T> transpose(const mat_t<R, C, T>& m) {
    mat_t<C, R, T> r; for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) r.data[j][i] = m.data[i][j]; return r;
}
template <int R, int C, typename T> TG_FUNC void adj_transpose(const mat_t<R, C, T>&, mat_t<R, C, T>& am, const mat_t<C, R, T>& g) { am += transpose(g); }
template <int R, int C, typename T> TG_FUNC vec_t<R, T> mul(const mat_t<R, C, T>& m, const vec_t<C, T>& v) {
    vec_t<R, T> r; for (int i = 0; i < R; ++i) { T s = T(0); for (int j = 0; j < C; ++j) s += m.data[i][j] * v.c[j]; r.c[i] = s; } return r;
}
template <int R, int C, typename T> TG_FUNC void adj_mul(const mat_t<R, C, T>& m, const vec_t<C, T>& v, mat_t<R, C, T>& am, vec_t<C, T>& av, const vec_t<R, T>& g) {
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) { am.data[i][j] += g.c[i] * v.c[j]; av.c[j] += m.data[i][j] * g.c[i]; }
}
template <int R, int C, typename T> TG_FUNC vec_t<C, T> mul(const vec_t<R, T>& v, const mat_t<R, C, T>& m) {
    vec_t<C, T> r; for (int j = 0; j < C; ++j) { T s = T(0); for (int i = 0; i < R; ++i) s += v.c[i] * m.data[i][j]; r.c[j] = s; } return r;
}
template <int R, int C, typename T> TG_FUNC void adj_mul(const vec_t<R, T>& v, const mat_t<R, C, T>& m, vec_t<R, T>& av, mat_t<R, C, T>& am, const vec_t<C, T>& g) {
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) { am.data[i][j] += v.c[i] * g.c[j]; av.c[i] += m.data[i][j] * g.c[j]; }
}
template <int R, int K, int C, typename T> TG_FUNC mat_t<R, C, T> mul(const mat_t<R, K, T>& a, const mat_t<K, C, T>& b) {
    mat_t<R, C, T> r;
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) { T s = T(0); for (int k = 0; k < K; ++k) s += a.data[i][k] * b.data[k][j]; r.data[i][j] = s; }
    return r;
}
template <int R, int K, int C, typename T> TG_FUNC void adj_mul(const mat_t<R, K, T>& a, const mat_t<K, C, T>& b, mat_t<R, K, T>& aa, mat_t<K, C, T>& ab, const mat_t<R, C, T>& g) {
    aa += mul(g, transpose(b)); ab += mul(transpose(a), g);
}
template <int N, typename T> TG_FUNC T trace(const mat_t<N, N, T>& m) { T s = T(0); for (int i = 0; i < N; ++i) s += m.data[i][i]; return s; }
template <int N, typename T> TG_FUNC void adj_trace(const mat_t<N, N, T>&, mat_t<N, N, T>& am, T g) { for (int i = 0; i < N; ++i) am.data[i][i] += g; }

// LU with partial pivoting: small N, so a generic loop beats hand-expanded cofactors in code size
template <int N, typename T> TG_FUNC T lu_inverse(const mat_t<N, N, T>& m, mat_t<N, N, T>* inv) {
    typedef typename compute<T>::type C;
    C a[N][N], b[N][N], det = C(1);
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) { a[i][j] = C(m.data[i][j]); b[i][j] = C(i == j); }
    for (int k = 0; k < N; ++k) {
        int p = k; C best = a[k][k] < C(0) ? -a[k][k] : a[k][k];
        for (int i = k + 1; i < N; ++i) { C v = a[i][k] < C(0) ? -a[i][k] : a[i][k]; if (v > best) { best = v; p = i; } }
        if (best == C(0)) { if (inv) *inv = mat_t<N, N, T>(); return T(0); }
        if (p != k) { for (int j = 0; j < N; ++j) { C t = a[k][j]; a[k][j] = a[p][j]; a[p][j] = t; t = b[k][j]; b[k][j] = b[p][j]; b[p][j] = t; } det = -det; }
        C piv = a[k][k]; det *= piv;
        for (int j = 0; j < N; ++j) { a[k][j] /= piv; b[k][j] /= piv; }
        for (int i = 0; i < N; ++i) if (i != k) { C f = a[i][k]; for (int j = 0; j < N; ++j) { a[i][j] -= f * a[k][j]; b[i][j] -= f * b[k][j]; } }
    }
    if (inv) for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) inv->data[i][j] = T(b[i][j]);
    return T(det);
}
template <typename T> TG_FUNC T determinant(const mat_t<2, 2, T>& m) { return m.data[0][0] * m.data[1][1] - m.data[0][1] * m.data[1][0]; }
template <typename T> TG_FUNC T determinant(const mat_t<3, 3, T>& m) {
    return m.data[0][0] * (m.data[1][1] * m.data[2][2] - m.data[1][2] * m.data[2][1])
         - m.data[0][1] * (m.data[1][0] * m.data[2][2] - m.data[1][2] * m.data[2][0])
         + m.data[0][2] * (m.data[1][0] * m.data[2][1] - m.data[1][1] * m.data[2][0]);
}
// 4x4: Laplace expansion by the 2x2 minors of the first two rows, float32 (and half) in double:
// finite differences of a determinant in float32 cancel most digits, so its last bits matter
template <typename C> struct det_wide { typedef C type; };
template <> struct det_wide<float> { typedef double type; };
template <typename T> TG_FUNC T determinant(const mat_t<4, 4, T>& m) {
    typedef typename det_wide<typename compute<T>::type>::type W;
    W a[4][4];
    for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) a[i][j] = W(m.data[i][j]);
    W s0 = a[0][0] * a[1][1] - a[1][0] * a[0][1], s1 = a[0][0] * a[1][2] - a[1][0] * a[0][2];
    W s2 = a[0][0] * a[1][3] - a[1][0] * a[0][3], s3 = a[0][1] * a[1][2] - a[1][1] * a[0][2];
    W s4 = a[0][1] * a[1][3] - a[1][1] * a[0][3], s5 = a[0][2] * a[1][3] - a[1][2] * a[0][3];
    W c5 = a[2][2] * a[3][3] - a[3][2] * a[2][3], c4 = a[2][1] * a[3][3] - a[3][1] * a[2][3];
    W c3 = a[2][1] * a[3][2] - a[3][1] * a[2][2], c2 = a[2][0] * a[3][3] - a[3][0] * a[2][3];
    W c1 = a[2][0] * a[3][2] - a[3][0] * a[2][2], c0 = a[2][0] * a[3][1] - a[3][0] * a[2][1];
    return T(s0 * c5 - s1 * c4 + s2 * c3 + s3 * c2 - s4 * c1 + s5 * c0);
}
template <int N, typename T> TG_FUNC void adj_determinant(const mat_t<N, N, T>& m, mat_t<N, N, T>& am, T g) {
    // d det / dM = cofactor matrix = det * inv(M)^T
    mat_t<N, N, T> inv; T d = lu_inverse<N, T>(m, &inv);
    am += scale(transpose(inv), T(d * g));
}
template <int N, typename T> TG_FUNC mat_t<N, N, T> inverse(const mat_t<N, N, T>& m) { mat_t<N, N, T> r; lu_inverse<N, T>(m, &r); return r; }
template <int N, typename T> TG_FUNC void adj_inverse(const mat_t<N, N, T>& m, mat_t<N, N, T>& am, const mat_t<N, N, T>& g) {
    mat_t<N, N, T> r = inverse(m), rt = transpose(r);
    am -= mul(mul(rt, g), rt);
}

// ---- quaternions (x, y, z, w)
template <typename T> TG_FUNC vec_t<4, T> quat_identity() { return make_vec<4, T>(0, 0, 0, 1); }
template <typename T> TG_FUNC vec_t<4, T> quat_mul(const vec_t<4, T>& a, const vec_t<4, T>& b) {
    return make_vec<4, T>(a.c[3] * b.c[0] + b.c[3] * a.c[0] + a.c[1] * b.c[2] - b.c[1] * a.c[2],
                          a.c[3] * b.c[1] + b.c[3] * a.c[1] + a.c[2] * b.c[0] - b.c[2] * a.c[0],
                          a.c[3] * b.c[2] + b.c[3] * a.c[2] + a.c[0] * b.c[1] - b.c[0] * a.c[1],
                          a.c[3] * b.c[3] - a.c[0] * b.c[0] - a.c[1] * b.c[1] - a.c[2] * b.c[2]);
}
template <typename T> TG_FUNC vec_t<4, T> quat_conj(const vec_t<4, T>& q) { return make_vec<4, T>(-q.c[0], -q.c[1], -q.c[2], q.c[3]); }
template <typename T> TG_FUNC void adj_quat_conj(const vec_t<4, T>&, vec_t<4, T>& aq, const vec_t<4, T>& g) { aq += quat_conj(g); }
template <typename T> TG_FUNC void adj_quat_mul(const vec_t<4, T>& a, const vec_t<4, T>& b, vec_t<4, T>& aa, vec_t<4, T>& ab, const vec_t<4, T>& g) {
    // right/left multiplication maps are transposed by conjugation
    aa += quat_mul(g, quat_conj(b)); ab += quat_mul(quat_conj(a), g);
}
template <typename T> TG_FUNC vec_t<3, T> quat_rotate(const vec_t<4, T>& q, const vec_t<3, T>& v) {
    vec_t<3, T> u = make_vec<3, T>(q.c[0], q.c[1], q.c[2]); T w = q.c[3];
    return scale(v, T(2 * w * w - 1)) + scale(cross(u, v), T(2 * w)) + scale(u, T(2 * dot(u, v)));
}
template <typename T> TG_FUNC void adj_quat_rotate(const vec_t<4, T>& q, const vec_t<3, T>& v, vec_t<4, T>& aq, vec_t<3, T>& av, const vec_t<3, T>& g) {
    vec_t<3, T> u = make_vec<3, T>(q.c[0], q.c[1], q.c[2]); T w = q.c[3];
    av += scale(g, T(2 * w * w - 1)) + scale(cross(g, u), T(2 * w)) + scale(u, T(2 * dot(g, u)));
    vec_t<3, T> au = scale(cross(v, g), T(2 * w)) + scale(g, T(2 * dot(u, v))) + scale(v, T(2 * dot(g, u)));
    aq.c[0] += au.c[0]; aq.c[1] += au.c[1]; aq.c[2] += au.c[2];
    aq.c[3] += T(4 * w * dot(g, v) + 2 * dot(g, cross(u, v)));
}
template <typename T> TG_FUNC vec_t<4, T> quat_from_axis_angle(const vec_t<3, T>& axis, T angle) {
    T s = T(sin(typename compute<T>::type(angle) / 2)), c = T(cos(typename compute<T>::type(angle) / 2));
    return make_vec<4, T>(axis.c[0] * s, axis.c[1] * s, axis.c[2] * s, c);
}
template <typename T> TG_FUNC void adj_quat_from_axis_angle(const vec_t<3, T>& axis, T angle, vec_t<3, T>& aa, T& aangle, const vec_t<4, T>& g) {
    T s = T(sin(typename compute<T>::type(angle) / 2)), c = T(cos(typename compute<T>::type(angle) / 2));
    for (int i = 0; i < 3; ++i) aa.c[i] += g.c[i] * s;
    aangle += T(0.5) * (c * (g.c[0] * axis.c[0] + g.c[1] * axis.c[1] + g.c[2] * axis.c[2]) - s * g.c[3]);
}

template <typename V> TG_FUNC bool nonzero_v(const V& v) {
    for (int i = 0; i < comp<V>::n; ++i) if (nonzero(flat(v)[i])) return true;
    return false;
}
template <int N, typename T> TG_FUNC bool nonzero(const vec_t<N, T>& v) { return nonzero_v(v); }
template <int R, int C, typename T> TG_FUNC bool nonzero(const mat_t<R, C, T>& v) { return nonzero_v(v); }
template <int N, typename T> TG_FUNC void zero(vec_t<N, T>& v) { v = vec_t<N, T>(); }
template <int R, int C, typename T> TG_FUNC void zero(mat_t<R, C, T>& v) { v = mat_t<R, C, T>(); }

// casts between composite types of another scalar type
template <typename V, int N, typename T> TG_FUNC V cast_vec(const vec_t<N, T>& v) { V r; for (int i = 0; i < N; ++i) r.c[i] = typename comp<V>::type(v.c[i]); return r; }

}  // namespace tg

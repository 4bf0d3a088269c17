// tapegrad runtime: dual numbers for forward mode and second order (issue 26).
// A dual<T> is a value and a tangent. The generated tangent code is the forward body with every
// float type T replaced by dual<T> (vectors and matrices: vec_t<N, dual<T>>...), so each
// builtin's tangent follows from its forward definition; the tangent-of-adjoint code is the
// adjoint body with duals, so the adjoints' templates (adj_sin...) give exact second
// derivatives. Only the functions that are not templates over their scalar (the math calls
// of scalar.h and mathx.h, the array accesses) have dual overloads here.
// Inlined only into units whose code names tg::dual, so other builds are unchanged.
#pragma once

namespace tg {

template <typename U> struct is_dual { enum { value = 0 }; };
// a builtin number (not a dual): what a dual converts to explicitly
template <typename U> struct is_num { enum { value = is_scalar<U>::value }; };

template <typename T> struct dual {
    T v;   // value
    T t;   // tangent
    TG_FUNC dual() : v(0), t(0) {}
    TG_FUNC dual(T x, T dx) : v(x), t(dx) {}
    template <typename U, typename enable_if<is_num<U>::value, int>::type = 0>
    TG_FUNC dual(U x) : v(T(x)), t(T(0)) {}   // constants, ints: zero tangent
    template <typename U> TG_FUNC dual(const dual<U>& o) : v(T(o.v)), t(T(o.t)) {}   // precision casts
    template <typename U, typename enable_if<is_num<U>::value, int>::type = 0>
    TG_FUNC explicit operator U() const { return U(v); }   // to ints, bools (printing too)
};
template <typename T> struct is_dual<dual<T> > { enum { value = 1 }; };
template <typename T> struct is_num<dual<T> > { enum { value = 0 }; };
template <typename T> struct is_scalar<dual<T> > { enum { value = 1 }; };
template <typename T> struct compute<dual<T> > { typedef dual<typename compute<T>::type> type; };

#define TG_DC typedef typename compute<T>::type C
#define TG_DN typename enable_if<is_num<U>::value, int>::type = 0

template <typename T> TG_FUNC dual<T> operator+(const dual<T>& a, const dual<T>& b) {
    TG_DC; return dual<T>(T(C(a.v) + C(b.v)), T(C(a.t) + C(b.t)));
}
template <typename T> TG_FUNC dual<T> operator-(const dual<T>& a, const dual<T>& b) {
    TG_DC; return dual<T>(T(C(a.v) - C(b.v)), T(C(a.t) - C(b.t)));
}
template <typename T> TG_FUNC dual<T> operator*(const dual<T>& a, const dual<T>& b) {
    TG_DC; return dual<T>(T(C(a.v) * C(b.v)), T(C(a.t) * C(b.v) + C(a.v) * C(b.t)));
}
template <typename T> TG_FUNC dual<T> operator/(const dual<T>& a, const dual<T>& b) {
    TG_DC; C q = C(a.v) / C(b.v);
    return dual<T>(T(q), T((C(a.t) - q * C(b.t)) / C(b.v)));
}
template <typename T> TG_FUNC dual<T> operator-(const dual<T>& a) { TG_DC; return dual<T>(T(-C(a.v)), T(-C(a.t))); }
template <typename T> TG_FUNC dual<T> operator+(const dual<T>& a) { return a; }
#define TG_DUAL_MIXED(OP)                                                                              \
    template <typename T, typename U, TG_DN> TG_FUNC dual<T> operator OP(const dual<T>& a, U b) { return a OP dual<T>(b); } \
    template <typename T, typename U, TG_DN> TG_FUNC dual<T> operator OP(U a, const dual<T>& b) { return dual<T>(a) OP b; } \
    template <typename T> TG_FUNC dual<T>& operator OP##=(dual<T>& a, const dual<T>& b) { a = a OP b; return a; }       \
    template <typename T, typename U, TG_DN> TG_FUNC dual<T>& operator OP##=(dual<T>& a, U b) { a = a OP dual<T>(b); return a; }
TG_DUAL_MIXED(+)
TG_DUAL_MIXED(-)
TG_DUAL_MIXED(*)
TG_DUAL_MIXED(/)
#undef TG_DUAL_MIXED
// comparisons look at the values (branches, min/max, clamp: the tangent follows the branch taken)
#define TG_DUAL_CMP(OP)                                                                                \
    template <typename T> TG_FUNC bool operator OP(const dual<T>& a, const dual<T>& b) { return a.v OP b.v; } \
    template <typename T, typename U, TG_DN> TG_FUNC bool operator OP(const dual<T>& a, U b) { return a.v OP T(b); } \
    template <typename T, typename U, TG_DN> TG_FUNC bool operator OP(U a, const dual<T>& b) { return T(a) OP b.v; }
TG_DUAL_CMP(<)
TG_DUAL_CMP(<=)
TG_DUAL_CMP(>)
TG_DUAL_CMP(>=)
TG_DUAL_CMP(==)
TG_DUAL_CMP(!=)
#undef TG_DUAL_CMP
template <typename T> TG_FUNC bool operator!(const dual<T>& a) { return !bool(a.v); }

// adjoint bookkeeping: a dual adjoint is nonzero when its value or its tangent is
template <typename T> TG_FUNC bool nonzero(const dual<T>& x) { return nonzero(x.v) || nonzero(x.t); }
template <typename T> TG_FUNC void accum(dual<T>& a, const dual<T>& b) { a = a + b; }

// ---- math: value and derivative in compute precision. A zero tangent in gives a zero tangent
// out, also where the derivative is infinite (sqrt at 0: the length of a vector that is zero
// whatever the inputs was NaN in forward mode, 0 in reverse mode, whose adjoint guards it)
#define TG_DUAL_UNARY(NAME, DERIV)                                                                     \
    template <typename T> TG_FUNC dual<T> NAME(const dual<T>& a) {                                     \
        TG_DC; C x = C(a.v);                                                                           \
        return dual<T>(T(NAME(x)), C(a.t) == C(0) ? T(0) : T(C(DERIV) * C(a.t)));                      \
    }
TG_DUAL_UNARY(sin, cos(x))
TG_DUAL_UNARY(cos, -sin(x))
TG_DUAL_UNARY(tan, C(1) + tan(x) * tan(x))
TG_DUAL_UNARY(asin, C(1) - x * x > C(0) ? C(1) / sqrt(C(1) - x * x) : C(0))   // no derivative where clamped (scalar.h)
TG_DUAL_UNARY(acos, C(1) - x * x > C(0) ? C(-1) / sqrt(C(1) - x * x) : C(0))
TG_DUAL_UNARY(atan, C(1) / (C(1) + x * x))
TG_DUAL_UNARY(sinh, cosh(x))
TG_DUAL_UNARY(cosh, sinh(x))
TG_DUAL_UNARY(tanh, C(1) - tanh(x) * tanh(x))
TG_DUAL_UNARY(exp, exp(x))
TG_DUAL_UNARY(log, C(1) / x)
TG_DUAL_UNARY(log2, C(1) / (x * C(0.693147180559945309417)))
TG_DUAL_UNARY(log10, C(1) / (x * C(2.302585092994045684018)))
TG_DUAL_UNARY(sqrt, C(0.5) / sqrt(x))
TG_DUAL_UNARY(cbrt, C(1) / (C(3) * cbrt(x) * cbrt(x)))
TG_DUAL_UNARY(floor, C(0))
TG_DUAL_UNARY(ceil, C(0))
TG_DUAL_UNARY(round, C(0))
TG_DUAL_UNARY(trunc, C(0))
#undef TG_DUAL_UNARY

template <typename T> TG_FUNC dual<T> atan2(const dual<T>& y, const dual<T>& x) {
    TG_DC; C yv = C(y.v), xv = C(x.v), r = C(1) / (xv * xv + yv * yv);
    if (C(y.t) == C(0) && C(x.t) == C(0)) return dual<T>(T(atan2(yv, xv)), T(0));
    return dual<T>(T(atan2(yv, xv)), T((xv * C(y.t) - yv * C(x.t)) * r));
}
template <typename T> TG_FUNC dual<T> pow(const dual<T>& a, const dual<T>& b) {
    TG_DC; C x = C(a.v), y = C(b.v), p = pow(x, y);
    if (C(a.t) == C(0) && C(b.t) == C(0)) return dual<T>(T(p), T(0));
    C d = y * pow(x, y - C(1)) * C(a.t);
    if (x > C(0)) d = d + log(x) * p * C(b.t);   // as adj_pow: no y-derivative where log(x) is undefined
    return dual<T>(T(p), T(d));
}
template <typename T> TG_FUNC dual<T> fmod_(const dual<T>& a, const dual<T>& b) {
    TG_DC; C x = C(a.v), y = C(b.v), q = x / y;
    q = q < C(0) ? C(-floor(-q)) : C(floor(q));
    return dual<T>(T(fmod_(x, y)), T(C(a.t) - q * C(b.t)));
}
template <typename T> TG_FUNC dual<T> mod(const dual<T>& a, const dual<T>& b) { return fmod_(a, b); }
template <typename T> TG_FUNC dual<T> floordiv(const dual<T>& a, const dual<T>& b) {
    return dual<T>(floordiv(a.v, b.v), T(0));
}

// ---- what a dual of a storage type is: dual<T> for floats, component-wise for vec/mat
// the value of a dual scalar (a plain value as is): the argument of a builtin that takes no
// tangent (a random draw's parameters), spelled without a type name the dual code rewrites
template <typename T> TG_FUNC T primal(const T& x) { return x; }
template <typename T> TG_FUNC T primal(const dual<T>& x) { return x.v; }

template <typename T> struct dual_of { typedef T type;
    static TG_FUNC T make(const T& v, const T&) { return v; }
    static TG_FUNC T val(const T& d) { return d; }
    static TG_FUNC T tan(const T&) { return T(); } };
#define TG_DUAL_OF(S)                                                                                  \
    template <> struct dual_of<S> { typedef dual<S> type;                                              \
        static TG_FUNC dual<S> make(const S& v, const S& t) { return dual<S>(v, t); }                  \
        static TG_FUNC S val(const dual<S>& d) { return d.v; }                                         \
        static TG_FUNC S tan(const dual<S>& d) { return d.t; } };
TG_DUAL_OF(float)
TG_DUAL_OF(double)
TG_DUAL_OF(half)
TG_DUAL_OF(bfloat16_t)
#undef TG_DUAL_OF
template <int N, typename T> struct dual_of<vec_t<N, T> > {
    typedef vec_t<N, typename dual_of<T>::type> type;
    static TG_FUNC type make(const vec_t<N, T>& v, const vec_t<N, T>& t) {
        type r; for (int i = 0; i < N; ++i) r.c[i] = dual_of<T>::make(v.c[i], t.c[i]); return r; }
    static TG_FUNC vec_t<N, T> val(const type& d) {
        vec_t<N, T> r; for (int i = 0; i < N; ++i) r.c[i] = dual_of<T>::val(d.c[i]); return r; }
    static TG_FUNC vec_t<N, T> tan(const type& d) {
        vec_t<N, T> r; for (int i = 0; i < N; ++i) r.c[i] = dual_of<T>::tan(d.c[i]); return r; }
};
template <int R, int K, typename T> struct dual_of<mat_t<R, K, T> > {
    typedef mat_t<R, K, typename dual_of<T>::type> type;
    static TG_FUNC type make(const mat_t<R, K, T>& v, const mat_t<R, K, T>& t) {
        type r; for (int i = 0; i < R; ++i) for (int j = 0; j < K; ++j) r.data[i][j] = dual_of<T>::make(v.data[i][j], t.data[i][j]);
        return r; }
    static TG_FUNC mat_t<R, K, T> val(const type& d) {
        mat_t<R, K, T> r; for (int i = 0; i < R; ++i) for (int j = 0; j < K; ++j) r.data[i][j] = dual_of<T>::val(d.data[i][j]);
        return r; }
    static TG_FUNC mat_t<R, K, T> tan(const type& d) {
        mat_t<R, K, T> r; for (int i = 0; i < R; ++i) for (int j = 0; j < K; ++j) r.data[i][j] = dual_of<T>::tan(d.data[i][j]);
        return r; }
};

// ---- arrays: the primal descriptor and its tangent (tangent data NULL: zero tangent, writes dropped)
// mode bit 0: stores and atomics write the primal values too (a tangent launch computes the
// outputs; the Tape's forward-mode replay writes tangents only); bit 1 (adjoint arrays of the
// tangent-of-adjoint code): the store's adjoint consumes the gradient (it stands for a.grad).
template <typename T> struct darray_t {
    array_t<T> p;
    array_t<T> t;
    int32_t mode;
};
template <typename T> TG_FUNC int32_t len(const darray_t<T>& a) { return int32_t(a.p.shape[0]); }
template <typename T> TG_FUNC int32_t shape(const darray_t<T>& a, int k) { return int32_t(a.p.shape[k]); }
// views of an array and of its tangent array, the same sub-array of each
template <typename T> TG_FUNC darray_t<T> view_index(const darray_t<T>& a, int d, int64_t i) {
    darray_t<T> r = a; r.p = view_index(a.p, d, i); r.t = a.t.data ? view_index(a.t, d, i) : a.t; return r;
}
template <typename T> TG_FUNC darray_t<T> view_slice(const darray_t<T>& a, int d, int64_t start, int64_t stop,
                                                     int64_t step, int given, int32_t line = 0) {
    darray_t<T> r = a; r.p = view_slice(a.p, d, start, stop, step, given, line);
    r.t = a.t.data ? view_slice(a.t, d, start, stop, step, given, line) : a.t; return r;
}
// an indexed array's index lookups and extents read the primal index arrays (indices carry no
// tangent; the tangent build's struct holds every array field as a dual array)
template <typename I> TG_FUNC I index_map(const darray_t<int32_t>& ix, I i) { return index_map(ix.p, i); }
template <typename T> TG_FUNC int32_t indexed_shape(const darray_t<T>& data, const darray_t<int32_t>& ix, int k) {
    return indexed_shape(data.p, ix.p, k);
}
template <typename T> TG_FUNC darray_t<T> make_darray(const array_t<T>& p, const array_t<T>& t, int32_t mode) {
    darray_t<T> r; r.p = p; r.t = t; r.mode = mode; return r;
}

template <typename T, typename... I> TG_FUNC typename dual_of<T>::type dload(const darray_t<T>& a, I... i) {
    return dual_of<T>::make(*addr(a.p.data, a.p, i...), a.t.data ? *addr(a.t.data, a.t, i...) : T());
}
template <typename T, typename... I> TG_FUNC void dstore_(const darray_t<T>& a, const typename dual_of<T>::type& x, I... i) {
    if (a.mode & 1) *addr(a.p.data, a.p, i...) = dual_of<T>::val(x);
    if (a.t.data) *addr(a.t.data, a.t, i...) = dual_of<T>::tan(x);
}
template <typename T, typename... I> TG_FUNC typename dual_of<T>::type datomic_add_(const darray_t<T>& a,
                                                                                    const typename dual_of<T>::type& x, I... i) {
    T* p = addr(a.p.data, a.p, i...);
    T old = (a.mode & 1) ? atomic_add_(p, dual_of<T>::val(x)) : *p;
    T oldt = a.t.data ? atomic_add_(addr(a.t.data, a.t, i...), dual_of<T>::tan(x)) : T();
    return dual_of<T>::make(old, oldt);
}
// adjoint arrays of the tangent-of-adjoint code: the gradient and its tangent
template <typename T, typename... I> TG_FUNC void dgrad_add_(const darray_t<T>& g, const typename dual_of<T>::type& x, I... i) {
    if (g.p.data) atomic_add_(addr(g.p.data, g.p, i...), dual_of<T>::val(x));
    if (g.t.data) atomic_add_(addr(g.t.data, g.t, i...), dual_of<T>::tan(x));
}
template <typename T, typename... I> TG_FUNC typename dual_of<T>::type dgrad_get_(const darray_t<T>& g, I... i) {
    if (!g.p.data) return typename dual_of<T>::type();
    return dload(g, i...);
}
template <typename T, typename... I> TG_FUNC void dgrad_consume_(const darray_t<T>& g, I... i) {
    if (!(g.mode & 2)) return;
    if (g.p.data) *addr(g.p.data, g.p, i...) = T();
    if (g.t.data) *addr(g.t.data, g.t, i...) = T();
}

#undef TG_DN
#undef TG_DC

}  // namespace tg

namespace tg {
// the gradient an array held in a struct uses in the tangent of the adjoint: the adjoint
// struct's (a gradient and its tangent), else the array's own .grad, whose tangent is the
// tangent array's .grad (Tape.hvp passes its own buffers there)
// random.h's sample_cdf on a dual array reads the values (a draw has no tangent); declared through
// its return type so units without random.h never instantiate it
template <typename T> TG_FUNC auto rng_sample_cdf(uint32_t s, const darray_t<T>& cdf) -> decltype(rng_sample_cdf(s, cdf.p)) {
    return rng_sample_cdf(s, cdf.p);
}
template <typename T> TG_FUNC bool array_nonnull(const darray_t<T>& a) { return array_nonnull(a.p); }
template <typename T> TG_FUNC darray_t<T> grad_array(const darray_t<T>& a, const darray_t<T>& adj) {
    if (adj.p.data) return adj;
    darray_t<T> r;
    r.p = a.p; r.p.data = a.p.grad; r.p.grad = 0;
    r.t = a.t; r.t.data = a.t.data ? a.t.grad : 0; r.t.grad = 0;
    r.mode = (a.p.flags & 2u) ? 0 : 2;
    return r;
}
}  // namespace tg

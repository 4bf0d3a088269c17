// tapegrad runtime: atomics for every scalar type on both targets, plus component-wise
// versions for vectors and matrices. All return the previous value.
#pragma once

namespace tg {

template <int S> struct uint_of;
template <> struct uint_of<1> { typedef uint8_t type; };
template <> struct uint_of<2> { typedef uint16_t type; };
template <> struct uint_of<4> { typedef uint32_t type; };
template <> struct uint_of<8> { typedef uint64_t type; };

template <typename T> TG_FUNC typename uint_of<sizeof(T)>::type to_bits(T v) {
    typename uint_of<sizeof(T)>::type u;
#ifdef TG_CUDA
    u = *reinterpret_cast<typename uint_of<sizeof(T)>::type*>(&v);
#else
    memcpy(&u, &v, sizeof(T));
#endif
    return u;
}
template <typename T> TG_FUNC T from_bits(typename uint_of<sizeof(T)>::type u) {
    T v;
#ifdef TG_CUDA
    v = *reinterpret_cast<T*>(&u);
#else
    memcpy(&v, &u, sizeof(T));
#endif
    return v;
}

struct op_add { template <typename T> TG_FUNC T operator()(T a, T b) const { return T(a + b); } };
struct op_min { template <typename T> TG_FUNC T operator()(T a, T b) const { return b < a ? b : a; } };
struct op_max { template <typename T> TG_FUNC T operator()(T a, T b) const { return a < b ? b : a; } };

// read-modify-write with compare-and-swap; works for any 1/2/4/8-byte type
template <typename T, typename Op> TG_FUNC T atomic_rmw(T* p, T v, Op op) {
#ifdef TG_CUDA
    if (sizeof(T) == 8) {
        unsigned long long* a = reinterpret_cast<unsigned long long*>(p);
        unsigned long long old = *a, assumed;
        do {
            assumed = old;
            T nv = op(from_bits<T>((uint64_t)assumed), v);
            old = atomicCAS(a, assumed, (unsigned long long)to_bits(nv));
        } while (assumed != old);
        return from_bits<T>((uint64_t)old);
    } else if (sizeof(T) == 4) {
        unsigned int* a = reinterpret_cast<unsigned int*>(p);
        unsigned int old = *a, assumed;
        do {
            assumed = old;
            T nv = op(from_bits<T>((uint32_t)assumed), v);
            old = atomicCAS(a, assumed, (unsigned int)to_bits(nv));
        } while (assumed != old);
        return from_bits<T>((uint32_t)old);
    } else {
        // sub-word: CAS on the aligned 32-bit word that holds it
        typedef typename uint_of<sizeof(T)>::type U;
        unsigned long long addr = reinterpret_cast<unsigned long long>(p);
        unsigned int* a = reinterpret_cast<unsigned int*>(addr & ~3ull);
        unsigned int shift = (unsigned int)(addr & 3) * 8u;
        unsigned int mask = ((1u << (sizeof(T) * 8)) - 1u) << shift;
        unsigned int old = *a, assumed;
        do {
            assumed = old;
            T cur = from_bits<T>(U((assumed & mask) >> shift));
            unsigned int nb = (unsigned int)to_bits(op(cur, v));
            old = atomicCAS(a, assumed, (assumed & ~mask) | ((nb << shift) & mask));
        } while (assumed != old);
        return from_bits<T>(U((old & mask) >> shift));
    }
#else
    typedef typename uint_of<sizeof(T)>::type U;
    U* a = reinterpret_cast<U*>(p);
    U old = __atomic_load_n(a, __ATOMIC_RELAXED);
    while (true) {
        U nb = to_bits(op(from_bits<T>(old), v));
        if (__atomic_compare_exchange_n(a, &old, nb, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return from_bits<T>(old);
    }
#endif
}

template <typename T> TG_FUNC T atomic_add_(T* p, T v) { return atomic_rmw(p, v, op_add()); }
template <typename T> TG_FUNC T atomic_min_(T* p, T v) { return atomic_rmw(p, v, op_min()); }
template <typename T> TG_FUNC T atomic_max_(T* p, T v) { return atomic_rmw(p, v, op_max()); }
template <typename K> TG_FUNC f16_t<K> atomic_add_(f16_t<K>* p, f16_t<K> v) {
    struct f { TG_FUNC f16_t<K> operator()(f16_t<K> a, f16_t<K> b) const { return f16_t<K>(float(a) + float(b)); } };
    return atomic_rmw(p, v, f());
}
template <typename K> TG_FUNC f16_t<K> atomic_min_(f16_t<K>* p, f16_t<K> v) {
    struct f { TG_FUNC f16_t<K> operator()(f16_t<K> a, f16_t<K> b) const { return float(b) < float(a) ? b : a; } };
    return atomic_rmw(p, v, f());
}
template <typename K> TG_FUNC f16_t<K> atomic_max_(f16_t<K>* p, f16_t<K> v) {
    struct f { TG_FUNC f16_t<K> operator()(f16_t<K> a, f16_t<K> b) const { return float(a) < float(b) ? b : a; } };
    return atomic_rmw(p, v, f());
}

// native fast paths
#ifdef TG_CUDA
TG_FUNC float atomic_add_(float* p, float v) { return atomicAdd(p, v); }
TG_FUNC double atomic_add_(double* p, double v) { return atomicAdd(p, v); }
TG_FUNC int32_t atomic_add_(int32_t* p, int32_t v) { return atomicAdd(p, v); }
TG_FUNC uint32_t atomic_add_(uint32_t* p, uint32_t v) { return atomicAdd(p, v); }
TG_FUNC int64_t atomic_add_(int64_t* p, int64_t v) { return (int64_t)atomicAdd((unsigned long long*)p, (unsigned long long)v); }
TG_FUNC uint64_t atomic_add_(uint64_t* p, uint64_t v) { return atomicAdd((unsigned long long*)p, (unsigned long long)v); }
TG_FUNC int32_t atomic_min_(int32_t* p, int32_t v) { return atomicMin(p, v); }
TG_FUNC int32_t atomic_max_(int32_t* p, int32_t v) { return atomicMax(p, v); }
TG_FUNC uint32_t atomic_min_(uint32_t* p, uint32_t v) { return atomicMin(p, v); }
TG_FUNC uint32_t atomic_max_(uint32_t* p, uint32_t v) { return atomicMax(p, v); }
TG_FUNC int64_t atomic_min_(int64_t* p, int64_t v) { return atomicMin((long long*)p, (long long)v); }
TG_FUNC int64_t atomic_max_(int64_t* p, int64_t v) { return atomicMax((long long*)p, (long long)v); }
TG_FUNC uint64_t atomic_min_(uint64_t* p, uint64_t v) { return atomicMin((unsigned long long*)p, (unsigned long long)v); }
TG_FUNC uint64_t atomic_max_(uint64_t* p, uint64_t v) { return atomicMax((unsigned long long*)p, (unsigned long long)v); }
#else
#define TG_FETCH_ADD(T) TG_FUNC T atomic_add_(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
TG_FETCH_ADD(int8_t) TG_FETCH_ADD(int16_t) TG_FETCH_ADD(int32_t) TG_FETCH_ADD(int64_t)
TG_FETCH_ADD(uint8_t) TG_FETCH_ADD(uint16_t) TG_FETCH_ADD(uint32_t) TG_FETCH_ADD(uint64_t)
#undef TG_FETCH_ADD
#endif

// exchange, compare-and-swap and bitwise atomics (issue 16): one CAS loop for every width
template <typename T> struct op_exch { TG_FUNC T operator()(T, T b) const { return b; } };
template <typename T> struct op_cas {
    T cmp;
    TG_FUNC T operator()(T a, T b) const { return to_bits(a) == to_bits(cmp) ? b : a; }
};
struct op_and { template <typename T> TG_FUNC T operator()(T a, T b) const { return T(a & b); } };
struct op_or { template <typename T> TG_FUNC T operator()(T a, T b) const { return T(a | b); } };
struct op_xor { template <typename T> TG_FUNC T operator()(T a, T b) const { return T(a ^ b); } };
template <typename T> TG_FUNC T atomic_exch_(T* p, T v) { return atomic_rmw(p, v, op_exch<T>()); }
template <typename T> TG_FUNC T atomic_cas_(T* p, T cmp, T v) { op_cas<T> f; f.cmp = cmp; return atomic_rmw(p, v, f); }
template <typename T> TG_FUNC T atomic_and_(T* p, T v) { return atomic_rmw(p, v, op_and()); }
template <typename T> TG_FUNC T atomic_or_(T* p, T v) { return atomic_rmw(p, v, op_or()); }
template <typename T> TG_FUNC T atomic_xor_(T* p, T v) { return atomic_rmw(p, v, op_xor()); }

// expect_eq(a, b): prints both values when they differ (as Warp's does; never aborts)
template <typename T> TG_FUNC bool differ(const T& a, const T& b) { return !(a == b); }
template <typename K> TG_FUNC bool differ(const f16_t<K>& a, const f16_t<K>& b) { return float(a) != float(b); }
template <int N, typename T> TG_FUNC bool differ(const vec_t<N, T>& a, const vec_t<N, T>& b) {
    for (int i = 0; i < N; ++i) if (differ(a.c[i], b.c[i])) return true;
    return false;
}
template <int R, int C, typename T> TG_FUNC bool differ(const mat_t<R, C, T>& a, const mat_t<R, C, T>& b) {
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) if (differ(a.data[i][j], b.data[i][j])) return true;
    return false;
}
template <typename T> TG_FUNC double as_double(const T& x) { return double(x); }
template <typename K> TG_FUNC double as_double(const f16_t<K>& x) { return double(float(x)); }
template <typename T> TG_FUNC void print_flat(const T& x) { printf(" %g", as_double(x)); }
template <int N, typename T> TG_FUNC void print_flat(const vec_t<N, T>& v) { for (int i = 0; i < N; ++i) print_flat(v.c[i]); }
template <int R, int C, typename T> TG_FUNC void print_flat(const mat_t<R, C, T>& m) {
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) print_flat(m.data[i][j]);
}
template <typename T> TG_FUNC void expect_eq(const T& actual, const T& expected, const char* where) {
    if (differ(actual, expected)) {
        printf("Error, expect_eq() failed at %s:\n\t Expected:", where); print_flat(expected);
        printf("\n\t Actual:"); print_flat(actual); printf("\n");
    }
}
template <typename T> TG_FUNC void expect_neq(const T& actual, const T& expected, const char* where) {
    if (!differ(actual, expected)) {
        printf("Error, expect_neq() failed at %s:\n\t Expected a value other than:", where); print_flat(expected);
        printf("\n");
    }
}

// component-wise on composite values
#define TG_ATOMIC_CW(NAME)                                                                   \
    template <int N, typename T> TG_FUNC vec_t<N, T> NAME(vec_t<N, T>* p, const vec_t<N, T>& v) { \
        vec_t<N, T> old; for (int i = 0; i < N; ++i) old.c[i] = NAME(&p->c[i], v.c[i]); return old; } \
    template <int R, int C, typename T> TG_FUNC mat_t<R, C, T> NAME(mat_t<R, C, T>* p, const mat_t<R, C, T>& v) { \
        mat_t<R, C, T> old;                                                                   \
        for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) old.data[i][j] = NAME(&p->data[i][j], v.data[i][j]); \
        return old; }
TG_ATOMIC_CW(atomic_add_)
TG_ATOMIC_CW(atomic_min_)
TG_ATOMIC_CW(atomic_max_)
#undef TG_ATOMIC_CW

// Adjoints of atomic_min/max (issue 23). The slot's final content is the value of one contender:
// the value equal to it takes the slot's gradient, and the slot's previous content gets none when
// another value won. The winner takes it with an exchange, so with ties the first thread takes it
// all (a valid subgradient: the sum is kept). consume: the buffer is the array's own gradient and
// the array does not retain it (as a store's adjoint); otherwise the buffer is only read.
template <typename T> TG_FUNC void adj_atomic_minmax_s(const T& cur, const T& v, T& av, T* slot, bool consume) {
    if (!(cur == v)) return;
    if (consume) accum(av, atomic_exch_(slot, T(0)));
    else accum(av, *slot);
}
template <typename T> TG_FUNC void adj_atomic_minmax(const T& cur, const T& v, T& av, T* slot, bool consume) {
    adj_atomic_minmax_s(cur, v, av, slot, consume);
}
template <int N, typename T> TG_FUNC void adj_atomic_minmax(const vec_t<N, T>& cur, const vec_t<N, T>& v,
                                                            vec_t<N, T>& av, vec_t<N, T>* slot, bool consume) {
    for (int i = 0; i < N; ++i) adj_atomic_minmax_s(cur.c[i], v.c[i], av.c[i], &slot->c[i], consume);
}
template <int R, int C, typename T> TG_FUNC void adj_atomic_minmax(const mat_t<R, C, T>& cur, const mat_t<R, C, T>& v,
                                                                   mat_t<R, C, T>& av, mat_t<R, C, T>* slot, bool consume) {
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) adj_atomic_minmax_s(cur.data[i][j], v.data[i][j], av.data[i][j], &slot->data[i][j], consume);
}
// whether indices name an element of array a (the loads lang/inplace.py adds where the kernel
// may not touch the element are guarded by it)
template <typename A, typename... I> TG_FUNC bool cell_in_bounds(const A& a, I... idx) {
    int64_t ix[] = {int64_t(idx)...};
    for (int k = 0; k < int(sizeof...(I)); ++k) if (ix[k] < 0 || ix[k] >= a.shape[k]) return false;
    return true;
}
// the value an atomic returns is the slot's content before it: its gradient goes there
template <typename T> TG_FUNC void adj_atomic_old(T* slot, const T& g) { if (nonzero(g)) atomic_add_(slot, g); }

}  // namespace tg

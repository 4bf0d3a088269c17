// tapegrad runtime: the array descriptor (the kernel ABI's tg_array_desc_t: tapegrad.abi.ARRAY),
// element addressing, loads/stores/atomics on arrays and their adjoints.
#pragma once

#ifndef TG_CUDA
// The module's runtime-error slot (CPU builds; one per loaded library: static, and exported as
// tg_error_slot()): {code, C++ line of the first error}, code 0 when none. The host reads the
// code after each launch (one load) and clears the slot when it raises.
#define TG_ERR_SLICE_STEP_ZERO 1
static int32_t tg_err_slot[2];
extern "C" TG_EXPORT int32_t* tg_error_slot() { return tg_err_slot; }
#endif

namespace tg {

template <typename T> struct array_t {
    T* data;
    T* grad;               // shares `strides` with data
    int64_t shape[4];
    int64_t strides[4];    // bytes
    int32_t ndim;
    uint32_t flags;
};

// array_t<T> is the kernel ABI's tg_array_desc_t (include/tg_abi.h) with typed pointers: a
// layout drift fails to compile (offsets checked by the host compiler; NVRTC sees the same text)
static_assert(sizeof(array_t<float>) == TG_SIZEOF_ARRAY_DESC, "array_t: the kernel ABI's size");
#ifndef TG_CUDA
static_assert(__builtin_offsetof(array_t<float>, data) == TG_OFFSETOF_ARRAY_DESC_DATA &&
              __builtin_offsetof(array_t<float>, grad) == TG_OFFSETOF_ARRAY_DESC_GRAD &&
              __builtin_offsetof(array_t<float>, shape) == TG_OFFSETOF_ARRAY_DESC_SHAPE &&
              __builtin_offsetof(array_t<float>, strides) == TG_OFFSETOF_ARRAY_DESC_STRIDES &&
              __builtin_offsetof(array_t<float>, ndim) == TG_OFFSETOF_ARRAY_DESC_NDIM &&
              __builtin_offsetof(array_t<float>, flags) == TG_OFFSETOF_ARRAY_DESC_FLAGS,
              "array_t: the kernel ABI's field offsets");
#endif

// an array's truth value (Warp's `if arr:` / `not arr`): whether it has elements (Warp's empty
// arrays have no memory, so its test of the pointer is this one)
template <typename T> TG_FUNC bool array_nonnull(const array_t<T>& a) {
    if (a.data == 0) return false;
    for (int d = 0; d < a.ndim; ++d) if (a.shape[d] <= 0) return false;
    return true;
}

// Warp's in-kernel wp.array(ptr=..., shape=..., dtype=...): a contiguous array over an address,
// with no gradient (lang/ptr_arrays.py); a.ptr: the address of an array's first element
template <typename T> TG_FUNC array_t<T> array_from_ptr(int ndim, uint64_t ptr, int64_t n0, int64_t n1 = 0,
                                                        int64_t n2 = 0, int64_t n3 = 0) {
    array_t<T> r;
    const int64_t n[4] = {n0, n1, n2, n3};
    int64_t stride = int64_t(sizeof(T));
    for (int d = 3; d >= 0; --d) {
        const int64_t e = d < ndim && n[d] > 0 ? n[d] : 0;   // a negative extent is an empty one
        r.shape[d] = e;
        r.strides[d] = d < ndim ? stride : 0;
        if (d < ndim) stride *= e;
    }
    r.data = reinterpret_cast<T*>(ptr);
    r.grad = 0;
    r.ndim = ndim;
    r.flags = 0;
    return r;
}
template <typename T> TG_FUNC uint64_t array_ptr(const array_t<T>& a) { return uint64_t(a.data); }

// Warp's indexed arrays (lang/indexed.py): an index through a dimension's int32 index array
// (null: the dimension is not indexed), and a dimension's extent
template <typename I> TG_FUNC I index_map(const array_t<int32_t>& ix, I i) {
    if (!ix.data) return i;
    const int64_t n = ix.shape[0];
    const int64_t k = int64_t(i) < 0 ? int64_t(i) + n : int64_t(i);
    return I(*reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(ix.data) + k * ix.strides[0]));
}
template <typename T> TG_FUNC int32_t indexed_shape(const array_t<T>& data, const array_t<int32_t>& ix, int k) {
    return ix.data ? int32_t(ix.shape[0]) : int32_t(data.shape[k]);
}

// an element index counted from the end when negative (Warp's and Python's a[-1]); one compare
// and select per dimension, which the compiler drops where it can see the index is not negative
TG_FUNC int64_t wrap_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

template <typename T> TG_FUNC T* addr(T* base, const array_t<T>& a, int64_t i) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base) + wrap_index(i, a.shape[0]) * a.strides[0]);
}
template <typename T> TG_FUNC T* addr(T* base, const array_t<T>& a, int64_t i, int64_t j) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base) + wrap_index(i, a.shape[0]) * a.strides[0] +
                                wrap_index(j, a.shape[1]) * a.strides[1]);
}
template <typename T> TG_FUNC T* addr(T* base, const array_t<T>& a, int64_t i, int64_t j, int64_t k) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base) + wrap_index(i, a.shape[0]) * a.strides[0] +
                                wrap_index(j, a.shape[1]) * a.strides[1] + wrap_index(k, a.shape[2]) * a.strides[2]);
}
template <typename T> TG_FUNC T* addr(T* base, const array_t<T>& a, int64_t i, int64_t j, int64_t k, int64_t l) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base) + wrap_index(i, a.shape[0]) * a.strides[0] +
                                wrap_index(j, a.shape[1]) * a.strides[1] + wrap_index(k, a.shape[2]) * a.strides[2] +
                                wrap_index(l, a.shape[3]) * a.strides[3]);
}

// The gradient buffer an adjoint uses: the explicit adjoint descriptor when given, else (for
// arrays reached through struct fields, which have no adjoint descriptor) the array's own grad.
template <typename T> TG_FUNC array_t<T> grad_array(const array_t<T>& a, const array_t<T>& adj) {
    if (adj.data) return adj;
    array_t<T> r = a;
    r.data = a.grad;
    r.grad = 0;
    return r;
}

// Sub-array views (a[i] of a 2-D array, a[i:j, k]...): a descriptor over the same memory. The
// data and grad pointers move together (a null one stays null, so an absent gradient stays
// absent); negative indices count from the end, as in Python and Warp.
template <typename T> TG_FUNC T* view_offset(T* p, int64_t bytes) {
    return p ? reinterpret_cast<T*>(reinterpret_cast<char*>(p) + bytes) : p;
}
// a[..., i, ...] with the index at dimension d: that dimension removed
template <typename T> TG_FUNC array_t<T> view_index(const array_t<T>& a, int d, int64_t i) {
    if (i < 0) i += a.shape[d];
    array_t<T> r = a;
    const int64_t off = i * a.strides[d];
    r.data = view_offset(a.data, off);
    r.grad = view_offset(a.grad, off);
    for (int k = d; k < 3; ++k) { r.shape[k] = a.shape[k + 1]; r.strides[k] = a.strides[k + 1]; }
    r.shape[3] = 0; r.strides[3] = 0;
    r.ndim = a.ndim - 1;
    r.flags &= ~2u;   // a view does not retain its gradient (as Warp's: its store adjoint consumes it)
    return r;
}
// A step of 0 at run time (a constant 0 is refused at compile time, lang/slices.py). CUDA: the
// kernel traps (the context is lost, as in Warp). CPU: the first such slice of a launch records
// its C++ line (the host maps it to the Python line through the unit's "// @file:line" markers)
// in the module's error slot, and the slice is an empty view; the host raises after the launch
// (tapegrad.modules.ErrorSlot). Several OpenMP threads may get here: the first one wins.
TG_FUNC void slice_step_zero(int32_t line) {
#ifdef TG_CUDA
    (void)line;
    printf("tapegrad: slice step cannot be zero\n");
    __trap();
#else
    int32_t expected = 0;
    if (__atomic_compare_exchange_n(&tg_err_slot[0], &expected, int32_t(TG_ERR_SLICE_STEP_ZERO), false,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        __atomic_store_n(&tg_err_slot[1], line, __ATOMIC_RELAXED);
#endif
}
// Python's rule for one slice bound (PySlice_AdjustIndices) against extent n
TG_FUNC int64_t slice_bound(int64_t v, int64_t n, int64_t step) {
    if (v < 0) { v += n; if (v < 0) v = step < 0 ? -1 : 0; }
    else if (v >= n) v = step < 0 ? n - 1 : n;
    return v;
}
// a[..., start:stop:step, ...] at dimension d; `given` bit 0: start given, bit 1: stop given
template <typename T> TG_FUNC array_t<T> view_slice(const array_t<T>& a, int d, int64_t start, int64_t stop,
                                                    int64_t step, int given, int32_t line = 0) {
    if (step == 0) {   // (CPU: the error is recorded, the kernel goes on with an empty view)
        slice_step_zero(line);
        array_t<T> r = a;
        r.shape[d] = 0;
        r.flags &= ~2u;
        return r;
    }
    const int64_t n = a.shape[d];
    start = (given & 1) ? slice_bound(start, n, step) : (step < 0 ? n - 1 : 0);
    stop = (given & 2) ? slice_bound(stop, n, step) : (step < 0 ? -1 : n);
    int64_t count = 0;
    if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
    if (step < 0 && stop < start) count = (start - stop - 1) / (-step) + 1;
    array_t<T> r = a;
    const int64_t off = count > 0 ? start * a.strides[d] : 0;
    r.data = view_offset(a.data, off);
    r.grad = view_offset(a.grad, off);
    r.shape[d] = count;
    r.strides[d] = a.strides[d] * step;
    r.flags &= ~2u;
    return r;
}

template <typename T> TG_FUNC int32_t len(const array_t<T>& a) { return int32_t(a.shape[0]); }
template <typename T> TG_FUNC int32_t shape(const array_t<T>& a, int k) { return int32_t(a.shape[k]); }

}  // namespace tg

namespace tg {
// atomic_min/max adjoint: the value gets the gradient where it is what the array holds
template <typename T> TG_FUNC void adj_minmax_pick(const T& cur, const T& v, T& av, const T& g) {
    if (cur == v) accum(av, g);
}
template <int N, typename T> TG_FUNC void adj_minmax_pick(const vec_t<N, T>& cur, const vec_t<N, T>& v, vec_t<N, T>& av, const vec_t<N, T>& g) {
    for (int i = 0; i < N; ++i) if (cur.c[i] == v.c[i]) accum(av.c[i], g.c[i]);
}
template <int R, int C, typename T> TG_FUNC void adj_minmax_pick(const mat_t<R, C, T>& cur, const mat_t<R, C, T>& v, mat_t<R, C, T>& av, const mat_t<R, C, T>& g) {
    for (int i = 0; i < R; ++i) for (int j = 0; j < C; ++j) if (cur.data[i][j] == v.data[i][j]) accum(av.data[i][j], g.data[i][j]);
}
}  // namespace tg

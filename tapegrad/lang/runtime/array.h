// tapegrad runtime: the array descriptor (the kernel ABI's tg_array_desc_t: tapegrad.abi.ARRAY),
// element addressing, loads/stores/atomics on arrays and their adjoints.
#pragma once

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

template <typename T> TG_FUNC T* addr(T* base, const array_t<T>& a, int64_t i) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base) + i * a.strides[0]);
}
template <typename T> TG_FUNC T* addr(T* base, const array_t<T>& a, int64_t i, int64_t j) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base) + i * a.strides[0] + j * a.strides[1]);
}
template <typename T> TG_FUNC T* addr(T* base, const array_t<T>& a, int64_t i, int64_t j, int64_t k) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base) + i * a.strides[0] + j * a.strides[1] + k * a.strides[2]);
}
template <typename T> TG_FUNC T* addr(T* base, const array_t<T>& a, int64_t i, int64_t j, int64_t k, int64_t l) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base) + i * a.strides[0] + j * a.strides[1] + k * a.strides[2] + l * a.strides[3]);
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

// tapegrad runtime: register windows for elementwise CUDA kernels (lang/elementwise.py).
// A window holds L consecutive elements of a dense 1-D array starting at element `origin`,
// moved with one L*sizeof(T)-byte load and store; the kernel body addresses it with the same
// tg::addr / tg::len calls it uses on an array_t, at indices origin .. origin + L - 1.
#pragma once
#ifdef TG_CUDA

namespace tg {

template <int N> struct vbytes_t;
template <> struct vbytes_t<2> { typedef unsigned short type; };
template <> struct vbytes_t<4> { typedef unsigned int type; };
template <> struct vbytes_t<8> { typedef uint2 type; };
template <> struct vbytes_t<16> { typedef uint4 type; };

template <typename T, int L> struct window_t {
    typedef typename vbytes_t<int(sizeof(T)) * L>::type raw_t;
    static constexpr T* data = nullptr;   // the body passes `a.data` to addr(); the window ignores it
    alignas(sizeof(T) * L) T buf[L];
    int64_t origin;
    int64_t shape[1];

    __device__ __forceinline__ void load(const array_t<T>& a) {
        *reinterpret_cast<raw_t*>(buf) = *reinterpret_cast<const raw_t*>(a.data + origin);
    }
    __device__ __forceinline__ void store(const array_t<T>& a) const {
        *reinterpret_cast<raw_t*>(a.data + origin) = *reinterpret_cast<const raw_t*>(buf);
    }
};

// The lane is computed in 32-bit unsigned arithmetic: the body's index is an int32 tid() (the
// launch's int64 thread index truncated), and uint32(int32(b + k)) - uint32(b) folds to the
// constant k once the lanes are unrolled, so the window stays in registers (a lane the compiler
// cannot prove constant puts the window in local memory: 1.7 TB/s instead of 4.3 on an H200).
template <typename T, int L> __device__ __forceinline__ T* addr(T*, window_t<T, L>& w, int64_t i) {
    return w.buf + (uint32_t(i) - uint32_t(w.origin));
}
template <typename T, int L> __device__ __forceinline__ int32_t len(const window_t<T, L>& w) { return int32_t(w.shape[0]); }

// Whether `a` can be windowed: dense (innermost stride = element size) and its data aligned to
// the window's byte size, so every window starting at a multiple of L is an aligned vector.
template <int L, typename T> __device__ __forceinline__ bool window_ok(const array_t<T>& a) {
    return a.data && a.strides[0] == int64_t(sizeof(T)) &&
           (reinterpret_cast<unsigned long long>(a.data) % (unsigned long long)(sizeof(T) * L)) == 0;
}

}  // namespace tg
#endif  // TG_CUDA

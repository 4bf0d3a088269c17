// tapegrad runtime: target macros, fixed-width ints, half, scalar helpers.
// Shared verbatim by the CPU (system C++ compiler) and CUDA (NVRTC) targets, so it may
// only use what NVRTC offers without headers.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TG_CUDA 1
#define TG_FUNC __device__ inline
#else
#define TG_FUNC inline
#define TG_EXPORT __attribute__((visibility("default")))
#endif

#if defined(__CUDACC_RTC__)
// NVRTC has no <stdint.h> unless the toolkit headers are on its path.
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#endif

namespace tg {

TG_FUNC uint32_t float_bits(float f) {
#ifdef TG_CUDA
    return __float_as_uint(f);
#else
    uint32_t u; memcpy(&u, &f, 4); return u;
#endif
}
TG_FUNC float bits_float(uint32_t u) {
#ifdef TG_CUDA
    return __uint_as_float(u);
#else
    float f; memcpy(&f, &u, 4); return f;
#endif
}

// IEEE binary16 <-> binary32, round to nearest even. Software on the CPU (no F16C needed),
// one PTX instruction on the GPU.
TG_FUNC uint16_t float_to_half_bits(float f) {
#ifdef TG_CUDA
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    uint32_t x = float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t mant = x & 0x7fffffu;
    int exp = int((x >> 23) & 0xffu);
    if (exp == 0xff) return uint16_t(sign | 0x7c00u | (mant ? 0x200u : 0u));
    int e = exp - 127 + 15;
    if (e >= 0x1f) return uint16_t(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return uint16_t(sign);
        mant |= 0x800000u;
        int shift = 14 - e;
        uint32_t h = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1u))) h++;
        return uint16_t(sign | h);
    }
    uint32_t h = (uint32_t(e) << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;  // a carry into the exponent is correct
    return uint16_t(sign | h);
#endif
}

TG_FUNC float half_bits_to_float(uint16_t h) {
#ifdef TG_CUDA
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
#else
    uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
    if (exp == 0) {
        if (mant == 0) {
            x = sign;
        } else {
            int e = 113;
            while (!(mant & 0x400u)) { mant <<= 1; --e; }
            x = sign | (uint32_t(e) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        x = sign | 0x7f800000u | (mant << 13);
    } else {
        x = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    return bits_float(x);
#endif
}

// bfloat16 <-> binary32: the top 16 bits of a float, round to nearest even (NaN stays quiet).
// Software on both targets, so CPU and CUDA results are bit-identical.
TG_FUNC uint16_t float_to_bf16_bits(float f) {
    uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return uint16_t(x >> 16);
}
TG_FUNC float bf16_bits_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

struct half_codec {
    static TG_FUNC uint16_t encode(float f) { return float_to_half_bits(f); }
    static TG_FUNC float decode(uint16_t b) { return half_bits_to_float(b); }
};
struct bf16_codec {
    static TG_FUNC uint16_t encode(float f) { return float_to_bf16_bits(f); }
    static TG_FUNC float decode(uint16_t b) { return bf16_bits_to_float(b); }
};

// Storage type of the 16-bit floats (float16: half, bfloat16: bfloat16_t): loads and stores
// convert, arithmetic promotes to float, as numpy/torch do for accuracy. Overloads for these
// types are templates on the codec K, so both types share every one of them.
template <typename K> struct f16_t {
    uint16_t bits;
    TG_FUNC f16_t() : bits(0) {}
    template <typename U> TG_FUNC f16_t(U f) : bits(K::encode(float(f))) {}
    TG_FUNC operator float() const { return K::decode(bits); }
};
typedef f16_t<half_codec> half;
typedef f16_t<bf16_codec> bfloat16_t;
template <typename K> TG_FUNC f16_t<K>& operator+=(f16_t<K>& a, float b) { a = f16_t<K>(float(a) + b); return a; }
template <typename K> TG_FUNC f16_t<K>& operator-=(f16_t<K>& a, float b) { a = f16_t<K>(float(a) - b); return a; }

// the type math is done in: the 16-bit floats compute in float
template <typename T> struct compute { typedef T type; };
template <typename K> struct compute<f16_t<K> > { typedef float type; };

template <typename T> TG_FUNC bool nonzero(const T& x) { return x != T(0); }
template <typename K> TG_FUNC bool nonzero(const f16_t<K>& x) { return (x.bits & 0x7fffu) != 0; }

template <typename T> TG_FUNC void zero(T& x) { x = T(0); }

// adjoint accumulation; overloaded for composite types (vec, mat, structs)
template <typename T> TG_FUNC void accum(T& a, const T& b) { a += b; }
template <typename K> TG_FUNC void accum(f16_t<K>& a, const f16_t<K>& b) { a = f16_t<K>(float(a) + float(b)); }
TG_FUNC void accum(bool&, const bool&) {}

// launch grid and thread coordinates: the kernel ABI's bounds struct (include/tg_abi.h, inlined
// before this file)
typedef ::tg_bounds_t launch_t;

#ifndef TG_CUDA
// The calling thread's floating-point mode (x86: MXCSR, with its flush-to-zero, denormals-are-
// zero and rounding bits; AArch64: FPCR). An OpenMP team's threads are the process's pool,
// shared with every library linked to the same libgomp (torch's CPU ops run on it): one that
// leaves flush-to-zero set on a pool thread would make a launch's subnormal results depend on
// which thread ran a chunk (0 in some rows only, seen in CI). Each team thread runs its chunks
// under the launching thread's mode (fp_scope_t, at the top of every region) and gets its own
// mode back at the region's end, so a launch computes as it would on the calling thread alone.
#if defined(__x86_64__) || defined(__i386__)
typedef unsigned fp_mode_t;
inline fp_mode_t fp_mode() { return __builtin_ia32_stmxcsr(); }
inline void set_fp_mode(fp_mode_t m) { __builtin_ia32_ldmxcsr(m); }
#elif defined(__aarch64__)
typedef uint64_t fp_mode_t;
inline fp_mode_t fp_mode() { uint64_t m; __asm__ __volatile__("mrs %0, fpcr" : "=r"(m)); return m; }
inline void set_fp_mode(fp_mode_t m) { __asm__ __volatile__("msr fpcr, %0" : : "r"(m)); }
#else
typedef int fp_mode_t;   // no known mode register: nothing to carry over
inline fp_mode_t fp_mode() { return 0; }
inline void set_fp_mode(fp_mode_t) {}
#endif

struct fp_scope_t {
    fp_mode_t own;
    explicit fp_scope_t(fp_mode_t caller) : own(fp_mode()) { if (own != caller) set_fp_mode(caller); }
    ~fp_scope_t() { if (fp_mode() != own) set_fp_mode(own); }
    fp_scope_t(const fp_scope_t&) = delete;
    fp_scope_t& operator=(const fp_scope_t&) = delete;
};

// OpenMP chunk for a grid of n threads, inside a parallel region: about 32 chunks per thread,
// so a thread whose core is shared with another process hands its work to the others, and at
// least `grain` grid threads (the kernel's cpu_grain: a chunk's work outweighs taking it).
inline int64_t omp_chunk(int64_t n, int64_t grain = 1024) {
#ifdef _OPENMP
    int64_t c = n / (32 * int64_t(omp_get_num_threads()));
#else
    int64_t c = n;
#endif
    if (c < grain) c = grain;
    return c < 1 ? 1 : c;   // never 0 (Kernel.cpu_grain checks the option; a chunk of 0 hangs or divides by 0)
}

// The chunks of a dense CPU launch shared by an OpenMP team (lang.emit._cpu_forward_loops):
// `blocks` contiguous blocks of chunks, one per thread, each drained in order by its owner and,
// once a thread's own block is done, by it from the others'. Launch after launch a thread
// touches the same memory (it stays in its core's caches, as with a static schedule), and a
// thread whose core another process shares hands its work over (as with a dynamic schedule).
// Each block's count of chunks taken has a cache line of its own, so the owner's claims are
// uncontended atomics (one shared counter for every chunk: each claim a contended cache line).
// A team smaller than `blocks` (thread limits) is correct too: ownerless blocks are drained by
// the others.
struct alignas(64) omp_block_t { int64_t taken; };

struct omp_plan_t {
    enum { LOCAL = 32 };
    int64_t chunk, chunks;   // grid threads per chunk, chunk count
    int blocks;              // threads asked for, blocks of chunks
    omp_block_t* block;
    omp_block_t local[LOCAL];
    // a grid of n threads (n >= 1): chunks of tg::omp_chunk's size for the team OpenMP would
    // start (at least `grain` grid threads), and no more threads than chunks (a small launch
    // starts a small team)
    omp_plan_t(int64_t n, int64_t grain) {
#ifdef _OPENMP
        int64_t t = omp_get_max_threads();
#else
        int64_t t = 1;
#endif
        chunk = n / (32 * t);
        if (chunk < grain) chunk = grain;
        if (chunk < 1) chunk = 1;
        chunks = (n - 1) / chunk + 1;
        blocks = int(chunks < t ? chunks : t);
        block = blocks <= LOCAL ? local : new omp_block_t[blocks];
        memset(static_cast<void*>(block), 0, sizeof(omp_block_t) * size_t(blocks));
    }
    ~omp_plan_t() { if (block != local) delete[] block; }
    omp_plan_t(const omp_plan_t&) = delete;
    omp_plan_t& operator=(const omp_plan_t&) = delete;
};

// one team thread's walk over an omp_plan_t: next() is the next chunk index, -1 when none is left
struct omp_walk_t {
    const omp_plan_t& p;
    int me, k;   // this thread's block; k: blocks after it already drained
    explicit omp_walk_t(const omp_plan_t& plan) : p(plan), k(0) {
#ifdef _OPENMP
        me = omp_get_thread_num() % plan.blocks;
#else
        me = 0;
#endif
    }
    int64_t next() {
        for (; k < p.blocks; ++k) {
            int b = me + k < p.blocks ? me + k : me + k - p.blocks;
            int64_t lo = p.chunks * b / p.blocks, len = p.chunks * (b + 1) / p.blocks - lo;
            int64_t* taken = &p.block[b].taken;
            // a plain read first: a drained block costs the thief no write to the owner's line
            if (__atomic_load_n(taken, __ATOMIC_RELAXED) >= len) continue;
            int64_t i = __atomic_fetch_add(taken, 1, __ATOMIC_RELAXED);
            if (i < len) return lo + i;
        }
        return -1;
    }
};
#endif

// Coordinate k of n requested outputs of tid(): with n == 1 the linear index (Warp), else
// the row-major coordinates of the last n grid dims (leading dims folded into the first).
TG_FUNC int32_t tid(const launch_t& b, int64_t t, int k, int n) {
    if (n == 1) return int32_t(t);
    int64_t rem = t;
    int nd = b.ndim;
    for (int d = nd - 1; d >= 0; --d) {
        int out = n - (nd - d);
        int64_t s = b.shape[d];
        if (out == k) return int32_t(out == 0 ? rem : rem % s);
        rem /= s;
    }
    return 0;
}

}  // namespace tg

using tg::half;
using tg::bfloat16_t;

namespace tg {
// trip count of range(start, stop, step), as Python computes it
template <typename I> TG_FUNC int64_t range_count(I start, I stop, I step) {
    int64_t a = int64_t(start), b = int64_t(stop), s = int64_t(step);
    if (s > 0) return b > a ? (b - a + s - 1) / s : 0;
    if (s < 0) return a > b ? (a - b - s - 1) / (-s) : 0;
    return 0;
}
}  // namespace tg

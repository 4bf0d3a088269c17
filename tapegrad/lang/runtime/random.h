// tapegrad runtime: random numbers and gradient noise, one implementation for both targets.
// Included in a translation unit only when its generated code calls a tg::rng_ function.
//
// The generator is Warp's: a PCG hash (Jarzynski & Olano, "Hash Functions for GPU Rendering",
// JCGT 9(3), 2020) applied to a 32-bit state, so a (seed, offset) gives the same sequence on the
// CPU and on CUDA (and the same numbers as wp.rand_init/randf/randi/randn). Every draw returns
// the new state with the value (rng_out), which the generated code writes back to the state
// variable. Noise is Warp's gradient (Perlin) noise with its adjoints; curlnoise's adjoint uses the
// noise's Hessian.
#pragma once

namespace tg {

template <typename V> struct rng_out { uint32_t state; V value; };
template <typename V> TG_FUNC void zero(rng_out<V>& r) { r = rng_out<V>(); }

TG_FUNC uint32_t rng_pcg(uint32_t s) {
    uint32_t b = s * 747796405u + 2891336453u;
    uint32_t c = ((b >> ((b >> 28u) + 4u)) ^ b) * 277803737u;
    return (c >> 22u) ^ c;
}
TG_FUNC uint32_t rng_init(uint32_t seed) { return rng_pcg(seed); }
TG_FUNC uint32_t rng_init(uint32_t seed, uint32_t offset) { return rng_pcg(seed + rng_pcg(offset)); }

// the draws, advancing a state in place
TG_FUNC uint32_t rng_u32(uint32_t& s) { s = rng_pcg(s); return s; }
TG_FUNC float rng_f32(uint32_t& s) { return float(rng_u32(s) >> 8) * (1.0f / 16777216.0f); }
TG_FUNC float rng_f32(uint32_t& s, float lo, float hi) { return (hi - lo) * rng_f32(s) + lo; }
TG_FUNC float rng_normal(uint32_t& s) {
    float u1 = rng_f32(s) + 5.96e-8f;     // in (0, 1): log stays finite
    float u2 = rng_f32(s);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

template <typename V> TG_FUNC rng_out<V> rng_pack(uint32_t s, V v) { rng_out<V> r; r.state = s; r.value = v; return r; }

// what kernels call: the value drawn from a state, and the state after the draw
TG_FUNC rng_out<int32_t> rng_randi(uint32_t s) { int32_t v = int32_t(rng_u32(s)); return rng_pack(s, v); }
TG_FUNC rng_out<int32_t> rng_randi(uint32_t s, int32_t lo, int32_t hi) {
    uint32_t u = rng_u32(s);
    return rng_pack(s, int32_t(u % uint32_t(hi - lo)) + lo);      // Warp's modulo (hi > lo)
}
TG_FUNC rng_out<uint32_t> rng_randu(uint32_t s) { uint32_t v = rng_u32(s); return rng_pack(s, v); }
TG_FUNC rng_out<uint32_t> rng_randu(uint32_t s, uint32_t lo, uint32_t hi) {
    uint32_t u = rng_u32(s);
    return rng_pack(s, u % (hi - lo) + lo);
}
TG_FUNC rng_out<float> rng_randf(uint32_t s) { float v = rng_f32(s); return rng_pack(s, v); }
TG_FUNC rng_out<float> rng_randf(uint32_t s, float lo, float hi) { float v = rng_f32(s, lo, hi); return rng_pack(s, v); }
TG_FUNC rng_out<float> rng_randn(uint32_t s) { float v = rng_normal(s); return rng_pack(s, v); }

TG_FUNC rng_out<vec_t<2, float> > rng_sample_triangle(uint32_t s) {
    float r = sqrtf(rng_f32(s));
    float u = 1.0f - r;
    float v = rng_f32(s) * r;
    return rng_pack(s, make_vec<2, float>(u, v));
}
TG_FUNC rng_out<vec_t<2, float> > rng_sample_unit_ring(uint32_t s) {
    float t = rng_f32(s, 0.0f, 6.2831853071795864f);
    return rng_pack(s, make_vec<2, float>(cosf(t), sinf(t)));
}
TG_FUNC rng_out<vec_t<2, float> > rng_sample_unit_disk(uint32_t s) {
    float r = sqrtf(rng_f32(s));
    float t = rng_f32(s, 0.0f, 6.2831853071795864f);
    return rng_pack(s, make_vec<2, float>(r * cosf(t), r * sinf(t)));
}
TG_FUNC rng_out<vec_t<2, float> > rng_sample_unit_square(uint32_t s) {
    float x = rng_f32(s) - 0.5f;
    float y = rng_f32(s) - 0.5f;
    return rng_pack(s, make_vec<2, float>(x, y));
}
TG_FUNC rng_out<vec_t<3, float> > rng_sample_unit_cube(uint32_t s) {
    float x = rng_f32(s) - 0.5f;
    float y = rng_f32(s) - 0.5f;
    float z = rng_f32(s) - 0.5f;
    return rng_pack(s, make_vec<3, float>(x, y, z));
}
TG_FUNC rng_out<vec_t<4, float> > rng_sample_unit_hypercube(uint32_t s) {
    float a = rng_f32(s) - 0.5f;
    float b = rng_f32(s) - 0.5f;
    float c = rng_f32(s) - 0.5f;
    float d = rng_f32(s) - 0.5f;
    return rng_pack(s, make_vec<4, float>(a, b, c, d));
}
// sample_cdf: a uniform u, then the first index of the CDF array whose value is >= u (binary search;
// clamped to the last index when the CDF ends below u)
template <typename T> TG_FUNC rng_out<int32_t> rng_sample_cdf(uint32_t s, const array_t<T>& cdf) {
    float u = rng_f32(s);
    int64_t lo = 0, hi = cdf.shape[0];
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (float(*addr(cdf.data, cdf, mid)) < u) lo = mid + 1; else hi = mid;
    }
    if (lo > cdf.shape[0] - 1) lo = cdf.shape[0] - 1;
    return rng_pack(s, int32_t(lo < 0 ? 0 : lo));
}
// poisson: a Poisson(lam) count. lam < 10: Knuth's product of uniforms; else Hoermann's transformed
// rejection with squeeze (PTRS, 1993). lam <= 0 returns 0 without drawing.
TG_FUNC double rng_lgamma(double x) { return ::lgamma(x); }
TG_FUNC rng_out<uint32_t> rng_poisson(uint32_t s, float lam_) {
    double lam = double(lam_);
    if (!(lam > 0.0)) return rng_pack(s, uint32_t(0));
    if (lam < 10.0) {
        double limit = ::exp(-lam), prod = double(rng_f32(s));
        uint32_t k = 0;
        while (prod > limit) { prod *= double(rng_f32(s)); ++k; }
        return rng_pack(s, k);
    }
    double slam = ::sqrt(lam), loglam = ::log(lam);
    double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
    double inv_alpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2.0);
    for (;;) {
        double u = double(rng_f32(s)) - 0.5, v = double(rng_f32(s));
        double us = 0.5 - (u < 0.0 ? -u : u);
        double k = ::floor((2.0 * a / us + b) * u + lam + 0.43);
        if (us >= 0.07 && v <= vr) return rng_pack(s, uint32_t(k));
        if (k < 0.0 || (us < 0.013 && v > us)) continue;
        if (v > 0.0 && ::log(v) + ::log(inv_alpha) - ::log(a / (us * us) + b) <= -lam + k * loglam - rng_lgamma(k + 1.0))
            return rng_pack(s, uint32_t(k));
    }
}
// points on / in the unit sphere and the z >= 0 hemisphere (inverse-CDF sampling, no rejection)
TG_FUNC vec_t<3, float> rng_sphere(uint32_t& s, bool hemi, bool solid) {
    float phi = acosf(1.0f - (hemi ? 1.0f : 2.0f) * rng_f32(s));
    float t = rng_f32(s, 0.0f, 6.2831853071795864f);
    float r = solid ? powf(rng_f32(s), 1.0f / 3.0f) : 1.0f;
    return make_vec<3, float>(r * cosf(t) * sinf(phi), r * sinf(t) * sinf(phi), r * cosf(phi));
}
TG_FUNC rng_out<vec_t<3, float> > rng_sample_unit_sphere_surface(uint32_t s) { vec_t<3, float> v = rng_sphere(s, false, false); return rng_pack(s, v); }
TG_FUNC rng_out<vec_t<3, float> > rng_sample_unit_sphere(uint32_t s) { vec_t<3, float> v = rng_sphere(s, false, true); return rng_pack(s, v); }
TG_FUNC rng_out<vec_t<3, float> > rng_sample_unit_hemisphere_surface(uint32_t s) { vec_t<3, float> v = rng_sphere(s, true, false); return rng_pack(s, v); }
TG_FUNC rng_out<vec_t<3, float> > rng_sample_unit_hemisphere(uint32_t s) { vec_t<3, float> v = rng_sphere(s, true, true); return rng_pack(s, v); }

// ---- gradient (Perlin) noise, Warp's: the same lattice hash, lattice gradients, quintic fade
// and order of interpolation (x first, then y, z, t), so values agree with wp.noise / wp.pnoise /
// wp.curlnoise to float32 rounding. Value, gradient and (for curlnoise's adjoint) Hessian come
// from one pass over the cell's corners: each corner is linear in the point (v = d . g), and
// interpolating A, B along axis k with S = fade(f_k) gives
//   F = (B - A) S + A,  dF = (dB - dA) S + (B - A) S' e_k + dA,
//   HF = (HB - HA) S + S' ((dB - dA) e_k^T + e_k (dB - dA)^T) + (B - A) S'' e_k e_k^T + HA.
// T is float (Warp's) or double (float64 points; the lattice gradients stay Warp's float32 ones).
template <typename T> TG_FUNC T rng_fade(T t) { return t * t * t * (t * (t * T(6) - T(15)) + T(10)); }
template <typename T> TG_FUNC T rng_dfade(T t) { return T(30) * t * t * (t * (t - T(2)) + T(1)); }
template <typename T> TG_FUNC T rng_ddfade(T t) { return T(60) * t * (t * (t * T(2) - T(3)) + T(1)); }

// the gradient at lattice point q: 1-D uniform in [-1, 1), else a normalized point of the unit
// square / cube / hypercube drawn from the hash of q and the state
template <int N> TG_FUNC void rng_lattice_gradient(uint32_t s, const int32_t* q, float* g) {
    const uint32_t P[4] = {73856093u, 19349663u, 53471161u, 10000019u};
    uint32_t h = uint32_t(q[N - 1]) * P[N - 1] + s;
    for (int k = N - 2; k >= 0; --k) h ^= uint32_t(q[k]) * P[k];
    if (N == 1) { g[0] = rng_f32(h, -1.0f, 1.0f); return; }
    float l2 = 0.0f;
    for (int k = 0; k < N; ++k) { g[k] = rng_f32(h) - 0.5f; l2 += g[k] * g[k]; }
    float l = sqrtf(l2);
    for (int k = 0; k < N; ++k) g[k] = l > 0.0f ? g[k] / l : 0.0f;
}

// value of the noise in the cell with lower corner i0 and upper corner i1 (already wrapped for
// pnoise) at fractional position f; grad (N) and hess (N x N, row-major) when not null
template <typename T, int N, bool HESS> TG_FUNC T rng_cell_noise(uint32_t s, const int32_t* i0, const int32_t* i1,
                                                                 const T* f, T* grad, T* hess) {
    const int C = 1 << N;
    T v[C], g[C][N];
    T H[HESS ? C : 1][HESS ? N * N : 1];
    for (int c = 0; c < C; ++c) {
        int32_t q[N]; float gf[N];
        for (int k = 0; k < N; ++k) q[k] = ((c >> k) & 1) ? i1[k] : i0[k];
        rng_lattice_gradient<N>(s, q, gf);
        T dot = T(0);
        for (int k = 0; k < N; ++k) {
            g[c][k] = T(gf[k]);
            dot += (f[k] - T((c >> k) & 1)) * g[c][k];
        }
        v[c] = dot;
        if (HESS) for (int e = 0; e < N * N; ++e) H[c][e] = T(0);
    }
    for (int k = 0; k < N; ++k) {           // interpolate along x, then y, z, t
        T S = rng_fade(f[k]), S1 = rng_dfade(f[k]), S2 = rng_ddfade(f[k]);
        for (int c = 0; c < (C >> (k + 1)); ++c) {
            int a = 2 * c, b = 2 * c + 1;
            T dv = v[b] - v[a];
            T dg[N];
            for (int i = 0; i < N; ++i) dg[i] = g[b][i] - g[a][i];
            if (HESS) {
                for (int i = 0; i < N; ++i)
                    for (int j = 0; j < N; ++j) {
                        T x = (H[b][i * N + j] - H[a][i * N + j]) * S;
                        if (j == k) x += dg[i] * S1;
                        if (i == k) x += dg[j] * S1;
                        if (i == k && j == k) x += dv * S2;
                        H[c][i * N + j] = x + H[a][i * N + j];
                    }
            }
            for (int i = 0; i < N; ++i) g[c][i] = dg[i] * S + (i == k ? dv * S1 : T(0)) + g[a][i];
            v[c] = dv * S + v[a];
        }
    }
    if (grad) for (int i = 0; i < N; ++i) grad[i] = g[0][i];
    if (HESS) for (int e = 0; e < N * N; ++e) hess[e] = H[0][e];
    return v[0];
}

// the cell of point p: Warp's lattice, wrapped by period[k] > 0 for pnoise. Warp wraps with
// C's remainder, which for negative coordinates neither repeats nor stays continuous; this wraps
// with the floor modulo (the same for coordinates >= 0, periodic everywhere).
template <typename T, int N> TG_FUNC void rng_cell(const T* p, const int32_t* period, int32_t* i0, int32_t* i1, T* f) {
    for (int k = 0; k < N; ++k) {
        T fl = floor(p[k]);
        f[k] = p[k] - fl;
        i0[k] = int32_t(fl);
        i1[k] = i0[k] + 1;
        if (period) {
            int32_t m = period[k];
            i0[k] %= m; if (i0[k] < 0) i0[k] += m;
            i1[k] = (i0[k] + 1) % m;
        }
    }
}
template <typename T, int N, bool HESS = false> TG_FUNC T rng_noise_at(uint32_t s, const T* p, const int32_t* period,
                                                                        T* grad, T* hess) {
    int32_t i0[N], i1[N]; T f[N];
    rng_cell<T, N>(p, period, i0, i1, f);
    return rng_cell_noise<T, N, HESS>(s, i0, i1, f, grad, hess);
}

template <typename T> TG_FUNC T rng_noise(uint32_t s, T x) { return rng_noise_at<T, 1>(s, &x, 0, 0, 0); }
template <int N, typename T> TG_FUNC T rng_noise(uint32_t s, const vec_t<N, T>& x) { return rng_noise_at<T, N>(s, x.c, 0, 0, 0); }
template <typename T> TG_FUNC void adj_rng_noise(uint32_t s, T x, uint32_t, T& ax, T g) {
    T d; rng_noise_at<T, 1>(s, &x, 0, &d, 0); ax += d * g;
}
template <int N, typename T> TG_FUNC void adj_rng_noise(uint32_t s, const vec_t<N, T>& x, uint32_t, vec_t<N, T>& ax, T g) {
    T d[N]; rng_noise_at<T, N>(s, x.c, 0, d, 0);
    for (int k = 0; k < N; ++k) ax.c[k] += d[k] * g;
}

// pnoise: periods must be positive (a zero period would divide by zero)
template <typename T> TG_FUNC T rng_pnoise(uint32_t s, T x, int32_t px) {
    int32_t p[1] = {px > 0 ? px : 1}; return rng_noise_at<T, 1>(s, &x, p, 0, 0);
}
template <typename T> TG_FUNC T rng_pnoise(uint32_t s, const vec_t<2, T>& x, int32_t px, int32_t py) {
    int32_t p[2] = {px > 0 ? px : 1, py > 0 ? py : 1}; return rng_noise_at<T, 2>(s, x.c, p, 0, 0);
}
template <typename T> TG_FUNC T rng_pnoise(uint32_t s, const vec_t<3, T>& x, int32_t px, int32_t py, int32_t pz) {
    int32_t p[3] = {px > 0 ? px : 1, py > 0 ? py : 1, pz > 0 ? pz : 1}; return rng_noise_at<T, 3>(s, x.c, p, 0, 0);
}
template <typename T> TG_FUNC T rng_pnoise(uint32_t s, const vec_t<4, T>& x, int32_t px, int32_t py, int32_t pz, int32_t pt) {
    int32_t p[4] = {px > 0 ? px : 1, py > 0 ? py : 1, pz > 0 ? pz : 1, pt > 0 ? pt : 1};
    return rng_noise_at<T, 4>(s, x.c, p, 0, 0);
}
template <typename T> TG_FUNC void adj_rng_pnoise(uint32_t s, T x, int32_t px, uint32_t, T& ax, int32_t, T g) {
    int32_t p[1] = {px > 0 ? px : 1}; T d; rng_noise_at<T, 1>(s, &x, p, &d, 0); ax += d * g;
}
template <typename T> TG_FUNC void adj_rng_pnoise(uint32_t s, const vec_t<2, T>& x, int32_t px, int32_t py, uint32_t,
                                                  vec_t<2, T>& ax, int32_t, int32_t, T g) {
    int32_t p[2] = {px > 0 ? px : 1, py > 0 ? py : 1}; T d[2]; rng_noise_at<T, 2>(s, x.c, p, d, 0);
    for (int k = 0; k < 2; ++k) ax.c[k] += d[k] * g;
}
template <typename T> TG_FUNC void adj_rng_pnoise(uint32_t s, const vec_t<3, T>& x, int32_t px, int32_t py, int32_t pz,
                                                  uint32_t, vec_t<3, T>& ax, int32_t, int32_t, int32_t, T g) {
    int32_t p[3] = {px > 0 ? px : 1, py > 0 ? py : 1, pz > 0 ? pz : 1}; T d[3]; rng_noise_at<T, 3>(s, x.c, p, d, 0);
    for (int k = 0; k < 3; ++k) ax.c[k] += d[k] * g;
}
template <typename T> TG_FUNC void adj_rng_pnoise(uint32_t s, const vec_t<4, T>& x, int32_t px, int32_t py, int32_t pz,
                                                  int32_t pt, uint32_t, vec_t<4, T>& ax, int32_t, int32_t, int32_t,
                                                  int32_t, T g) {
    int32_t p[4] = {px > 0 ? px : 1, py > 0 ? py : 1, pz > 0 ? pz : 1, pt > 0 ? pt : 1};
    T d[4]; rng_noise_at<T, 4>(s, x.c, p, d, 0);
    for (int k = 0; k < 4; ++k) ax.c[k] += d[k] * g;
}

// curlnoise (Warp's): per octave i (freq = lacunarity^i, amp = gain^i) the gradients g_j of
// the noise fields at freq * x summed with weight amp; 2-D: one field, the curl (-g.y, g.x);
// 3-D and 4-D (x, y, z, t): three fields, the states s, rand_init(s, 10019689) and
// rand_init(that, 13112221) (the last one carries to the next octave), curl
// (g3.y - g2.z, g1.z - g3.x, g2.x - g1.y). M = 1 (2-D) or 3 fields; R = outputs.
template <typename T, int N, int M, int R, bool ADJ> TG_FUNC void rng_curl(uint32_t s, const T* x, uint32_t octaves, T lac,
                                                               T gain, T* out, T* ax, T* alac, T* again,
                                                               const T* g_out) {
    T freq = T(1), amp = T(1), dfreq = T(0), damp = T(0);
    for (int r = 0; r < R; ++r) out[r] = T(0);
    for (uint32_t o = 0; o < octaves; ++o) {
        T p[N], G[3][N], H[ADJ ? 3 : 1][ADJ ? N * N : 1];
        for (int k = 0; k < N; ++k) p[k] = freq * x[k];
        for (int j = 0; j < M; ++j) {
            if (j > 0) s = rng_init(s, j == 1 ? 10019689u : 13112221u);
            rng_noise_at<T, N, ADJ>(s, p, 0, G[j], H[ADJ ? j : 0]);
        }
        // row r of the curl as a linear map of the fields' gradients: out[r] = G[fa][ia] - G[fb][ib]
        // (2-D: out = (0 - g.y, g.x - 0))
        int fa[3], ia[3], fb[3], ib[3];
        if (M == 1) { fa[0] = -1; ia[0] = 0; fb[0] = 0; ib[0] = 1; fa[1] = 0; ia[1] = 0; fb[1] = -1; ib[1] = 0; }
        else {
            fa[0] = 2; ia[0] = 1; fb[0] = 1; ib[0] = 2;
            fa[1] = 0; ia[1] = 2; fb[1] = 2; ib[1] = 0;
            fa[2] = 1; ia[2] = 0; fb[2] = 0; ib[2] = 1;
        }
        for (int r = 0; r < R; ++r) {
            T c = (fa[r] >= 0 ? G[fa[r]][ia[r]] : T(0)) - (fb[r] >= 0 ? G[fb[r]][ib[r]] : T(0));
            out[r] += amp * c;
            if (ADJ) {
                T gr = g_out[r];
                *again += damp * c * gr;
                for (int k = 0; k < N; ++k) {
                    T J = (fa[r] >= 0 ? H[fa[r]][ia[r] * N + k] : T(0)) - (fb[r] >= 0 ? H[fb[r]][ib[r] * N + k] : T(0));
                    ax[k] += amp * freq * J * gr;
                    *alac += amp * dfreq * x[k] * J * gr;
                }
            }
        }
        damp = damp * gain + amp;   // d(gain^(i+1))/dgain
        dfreq = dfreq * lac + freq;
        amp *= gain;
        freq *= lac;
    }
}
template <typename T> TG_FUNC vec_t<2, T> rng_curlnoise(uint32_t s, const vec_t<2, T>& x, uint32_t octaves, T lac, T gain) {
    vec_t<2, T> r; rng_curl<T, 2, 1, 2, false>(s, x.c, octaves, lac, gain, r.c, 0, 0, 0, 0); return r;
}
template <int N, typename T> TG_FUNC vec_t<3, T> rng_curlnoise(uint32_t s, const vec_t<N, T>& x, uint32_t octaves, T lac, T gain) {
    vec_t<3, T> r; rng_curl<T, N, 3, 3, false>(s, x.c, octaves, lac, gain, r.c, 0, 0, 0, 0); return r;
}
template <typename T> TG_FUNC void adj_rng_curlnoise(uint32_t s, const vec_t<2, T>& x, uint32_t octaves, T lac, T gain,
                                                     uint32_t, vec_t<2, T>& ax, uint32_t, T& alac, T& again,
                                                     const vec_t<2, T>& g) {
    T r[2]; rng_curl<T, 2, 1, 2, true>(s, x.c, octaves, lac, gain, r, ax.c, &alac, &again, g.c);
}
template <int N, typename T> TG_FUNC void adj_rng_curlnoise(uint32_t s, const vec_t<N, T>& x, uint32_t octaves, T lac,
                                                            T gain, uint32_t, vec_t<N, T>& ax, uint32_t, T& alac,
                                                            T& again, const vec_t<3, T>& g) {
    T r[3]; rng_curl<T, N, 3, 3, true>(s, x.c, octaves, lac, gain, r, ax.c, &alac, &again, g.c);
}

}  // namespace tg

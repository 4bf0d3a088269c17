// tapegrad runtime: random numbers and gradient noise, one implementation for both targets.
// Included in a translation unit only when its generated code calls a tg::rng_ function.
//
// The generator is Warp's: a PCG hash (Jarzynski & Olano, "Hash Functions for GPU Rendering",
// JCGT 9(3), 2020) applied to a 32-bit state, so a (seed, offset) gives the same sequence on the
// CPU and on CUDA (and the same numbers as wp.rand_init/randf/randi/randn). Every draw returns
// the new state with the value (rng_out), which the generated code writes back to the state
// variable. Noise is gradient (Perlin) noise with a quintic fade, gradients hashed from the state
// and the lattice point; curlnoise takes the curl of noise potentials analytically.
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

// ---- gradient noise in N = 1..4 dimensions; period[k] > 0 wraps the lattice (pnoise)
TG_FUNC float rng_fade(float t) { return t * t * t * (t * (t * 6.0f - 15.0f) + 10.0f); }
TG_FUNC float rng_dfade(float t) { return 30.0f * t * t * (t * (t - 2.0f) + 1.0f); }

template <int N> TG_FUNC float rng_perlin(uint32_t seed, const float* p, const int32_t* period, float* grad) {
    int32_t cell[N]; float f[N], w0[N], w1[N], d0[N];
    for (int k = 0; k < N; ++k) {
        float fl = floorf(p[k]);
        cell[k] = int32_t(fl);
        f[k] = p[k] - fl;
        w1[k] = rng_fade(f[k]); w0[k] = 1.0f - w1[k]; d0[k] = rng_dfade(f[k]);
        if (grad) grad[k] = 0.0f;
    }
    float value = 0.0f;
    for (int c = 0; c < (1 << N); ++c) {
        uint32_t h = seed;
        float g[N], dotv = 0.0f, w = 1.0f;
        for (int k = 0; k < N; ++k) {
            int bit = (c >> k) & 1;
            int32_t q = cell[k] + bit;
            if (period && period[k] > 0) { q %= period[k]; if (q < 0) q += period[k]; }
            h = rng_pcg(h ^ uint32_t(q) * 0x9E3779B9u + uint32_t(k));
        }
        for (int k = 0; k < N; ++k) {
            h = rng_pcg(h);
            g[k] = float(h >> 8) * (2.0f / 16777216.0f) - 1.0f;     // gradient components in [-1, 1)
            int bit = (c >> k) & 1;
            dotv += g[k] * (f[k] - float(bit));
            w *= bit ? w1[k] : w0[k];
        }
        value += w * dotv;
        if (grad) {
            for (int k = 0; k < N; ++k) {
                int bit = (c >> k) & 1;
                float wk = 1.0f;        // the weight without dimension k
                for (int j = 0; j < N; ++j) if (j != k) wk *= ((c >> j) & 1) ? w1[j] : w0[j];
                grad[k] += w * g[k] + dotv * wk * (bit ? d0[k] : -d0[k]);
            }
        }
    }
    return value;
}

TG_FUNC float rng_noise(uint32_t s, float x) { return rng_perlin<1>(s, &x, 0, 0); }
template <int N> TG_FUNC float rng_noise(uint32_t s, const vec_t<N, float>& x) { return rng_perlin<N>(s, x.c, 0, 0); }
TG_FUNC float rng_pnoise(uint32_t s, float x, int32_t px) { return rng_perlin<1>(s, &x, &px, 0); }
TG_FUNC float rng_pnoise(uint32_t s, const vec_t<2, float>& x, int32_t px, int32_t py) {
    int32_t p[2] = {px, py}; return rng_perlin<2>(s, x.c, p, 0);
}
TG_FUNC float rng_pnoise(uint32_t s, const vec_t<3, float>& x, int32_t px, int32_t py, int32_t pz) {
    int32_t p[3] = {px, py, pz}; return rng_perlin<3>(s, x.c, p, 0);
}
TG_FUNC float rng_pnoise(uint32_t s, const vec_t<4, float>& x, int32_t px, int32_t py, int32_t pz, int32_t pt) {
    int32_t p[4] = {px, py, pz, pt}; return rng_perlin<4>(s, x.c, p, 0);
}

// fractal sum of the potentials' gradients over octaves; 2-D: curl of a scalar potential,
// 3-D and 4-D (x, y, z, t): curl of a vector potential of three noise fields
template <int N> TG_FUNC void rng_fbm_grad(uint32_t s, const float* x, uint32_t octaves, float lacunarity,
                                           float gain, float* grad) {
    float freq = 1.0f, amp = 1.0f, p[N], g[N];
    for (int k = 0; k < N; ++k) grad[k] = 0.0f;
    for (uint32_t o = 0; o < octaves; ++o) {
        for (int k = 0; k < N; ++k) p[k] = x[k] * freq;
        rng_perlin<N>(s, p, 0, g);
        for (int k = 0; k < N; ++k) grad[k] += amp * freq * g[k];
        freq *= lacunarity; amp *= gain;
    }
}
TG_FUNC vec_t<2, float> rng_curlnoise(uint32_t s, const vec_t<2, float>& x, uint32_t octaves, float lac, float gain) {
    float g[2];
    rng_fbm_grad<2>(s, x.c, octaves, lac, gain, g);
    return make_vec<2, float>(g[1], -g[0]);
}
template <int N> TG_FUNC vec_t<3, float> rng_curl3(uint32_t s, const vec_t<N, float>& x, uint32_t octaves, float lac,
                                                 float gain) {
    float a[N], b[N], c[N];
    rng_fbm_grad<N>(rng_pcg(s ^ 0x1234567u), x.c, octaves, lac, gain, a);
    rng_fbm_grad<N>(rng_pcg(s ^ 0x89abcdeu), x.c, octaves, lac, gain, b);
    rng_fbm_grad<N>(rng_pcg(s ^ 0x5f3759du), x.c, octaves, lac, gain, c);
    return make_vec<3, float>(c[1] - b[2], a[2] - c[0], b[0] - a[1]);
}
TG_FUNC vec_t<3, float> rng_curlnoise(uint32_t s, const vec_t<3, float>& x, uint32_t octaves, float lac, float gain) {
    return rng_curl3<3>(s, x, octaves, lac, gain);
}
TG_FUNC vec_t<3, float> rng_curlnoise(uint32_t s, const vec_t<4, float>& x, uint32_t octaves, float lac, float gain) {
    return rng_curl3<4>(s, x, octaves, lac, gain);
}

}  // namespace tg

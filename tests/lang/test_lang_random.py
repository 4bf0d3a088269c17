"""Random numbers and noise in kernels (issue 16, item 7): deterministic per (seed, offset),
checked against a NumPy port of the generator (the same numbers on every device), sample
domains, normal statistics, and the noise functions' continuity, periodicity and divergence."""

import numpy as np
import pytest

import tapegrad as tg

M32 = 0xFFFFFFFF


def pcg(s):
    s = np.asarray(s, dtype=np.uint64)
    b = (s * 747796405 + 2891336453) & M32
    c = (((b >> ((b >> 28) + 4)) ^ b) * 277803737) & M32
    return ((c >> 22) ^ c) & M32


def ref_init(seed, offset):
    return pcg((np.uint64(seed) + pcg(offset)) & M32)


@tg.kernel(enable_backward=False)
def k_draws(seed: int, fs: tg.array(dtype=float), ints: tg.array(dtype=int), us: tg.array(dtype=tg.uint32),
            ranged: tg.array(dtype=float), states: tg.array(dtype=tg.uint32)):
    i = tg.tid()
    state = tg.rand_init(seed, i)
    states[i] = state
    fs[i] = tg.randf(state)
    ints[i] = tg.randi(state, -5, 5)
    us[i] = tg.randu(state)
    ranged[i] = tg.randf(state, 2.0, 3.0)


def _draws(seed, n, device):
    outs = [tg.zeros(n, dtype=t, device=device) for t in (float, int, tg.uint32, float, tg.uint32)]
    tg.launch(k_draws, dim=n, inputs=[seed] + outs, device=device)
    return [o.numpy() for o in outs]


def test_draws_match_the_generator(device):
    n = 64
    fs, ints, us, ranged, states = _draws(42, n, device)
    s = ref_init(42, np.arange(n))
    np.testing.assert_array_equal(states, s)
    s = pcg(s)
    np.testing.assert_array_equal(fs, ((s >> 8).astype(np.float32) * np.float32(1.0 / 16777216.0)))
    s = pcg(s)
    np.testing.assert_array_equal(ints, (s % 10).astype(np.int64) - 5)
    s = pcg(s)
    np.testing.assert_array_equal(us, s)
    s = pcg(s)
    exp = np.float32(1.0) * ((s >> 8).astype(np.float32) * np.float32(1.0 / 16777216.0)) + np.float32(2.0)
    np.testing.assert_allclose(ranged, exp, rtol=1e-7)
    again = _draws(42, n, device)
    for a, b in zip(again, (fs, ints, us, ranged, states)):
        np.testing.assert_array_equal(a, b)
    other = _draws(43, n, device)
    assert not np.array_equal(other[0], fs)


@tg.kernel(enable_backward=False)
def k_samples(seed: int, normal: tg.array(dtype=float), v2: tg.array(dtype=tg.vec2), v3: tg.array(dtype=tg.vec3),
              tri: tg.array(dtype=tg.vec2), cube: tg.array(dtype=tg.vec3)):
    i = tg.tid()
    rng = tg.rand_init(seed, i)
    normal[i] = tg.randn(rng)
    disk = tg.sample_unit_disk(rng)
    ring = tg.sample_unit_ring(rng)
    v2[i] = tg.vec2(tg.length(disk), tg.length(ring))
    ball = tg.sample_unit_sphere(rng)
    surf = tg.sample_unit_sphere_surface(rng)
    hemi = tg.sample_unit_hemisphere_surface(rng)
    v3[i] = tg.vec3(tg.length(ball), tg.length(surf), hemi[2])
    tri[i] = tg.sample_triangle(rng)
    sq = tg.sample_unit_square(rng)
    cube[i] = tg.sample_unit_cube(rng) + tg.vec3(sq[0], sq[1], 0.0) * 0.0


def test_sample_domains_and_normal_statistics(device):
    n = 20000
    outs = [tg.zeros(n, dtype=t, device=device) for t in (float, tg.vec2, tg.vec3, tg.vec2, tg.vec3)]
    tg.launch(k_samples, dim=n, inputs=[7] + outs, device=device)
    normal, v2, v3, tri, cube = [o.numpy() for o in outs]
    assert abs(normal.mean()) < 0.03 and abs(normal.std() - 1) < 0.03
    assert (v2[:, 0] <= 1 + 1e-6).all() and np.allclose(v2[:, 1], 1, atol=1e-5)
    assert (v3[:, 0] <= 1 + 1e-6).all() and np.allclose(v3[:, 1], 1, atol=1e-5) and (v3[:, 2] >= -1e-6).all()
    assert abs((v3[:, 0] ** 3).mean() - 0.5) < 0.02       # uniform in the ball: r^3 ~ U(0, 1)
    assert (tri >= 0).all() and (tri.sum(1) <= 1 + 1e-6).all()
    assert (np.abs(cube) <= 0.5).all() and abs(cube.mean()) < 0.01


@tg.kernel(enable_backward=False)
def k_noise(seed: int, xs: tg.array(dtype=float), n1: tg.array(dtype=float), n3: tg.array(dtype=float),
            p2: tg.array(dtype=float), p2s: tg.array(dtype=float)):
    i = tg.tid()
    s = tg.rand_init(seed)
    x = xs[i]
    n1[i] = tg.noise(s, x)
    n3[i] = tg.noise(s, tg.vec3(x, 0.5 * x, 0.25))
    p2[i] = tg.pnoise(s, tg.vec2(x, 1.3), 4, 3)
    p2s[i] = tg.pnoise(s, tg.vec2(x + 4.0, 1.3 + 3.0), 4, 3)


def test_noise_continuous_periodic_deterministic(device):
    xs = np.linspace(-3, 3, 601).astype(np.float32)
    outs = [tg.zeros(len(xs), dtype=float, device=device) for _ in range(4)]
    tg.launch(k_noise, dim=len(xs), inputs=[3, tg.array(xs, device=device)] + outs, device=device)
    n1, n3, p2, p2s = [o.numpy() for o in outs]
    for a in (n1, n3, p2):
        assert np.abs(np.diff(a)).max() < 0.1          # continuous (step 0.01)
        assert a.std() > 0.05 and np.abs(a).max() < 2.0
    np.testing.assert_allclose(n1[::100], 0, atol=1e-6)   # gradient noise vanishes on the lattice
    np.testing.assert_allclose(p2, p2s, atol=1e-5)       # periods 4 and 3


@tg.kernel(enable_backward=False)
def k_curl(seed: int, pts: tg.array(dtype=tg.vec3), h: float, div: tg.array(dtype=float),
           c2: tg.array(dtype=tg.vec2)):
    i = tg.tid()
    s = tg.rand_init(seed)
    p = pts[i]
    ex = tg.vec3(h, 0.0, 0.0)
    ey = tg.vec3(0.0, h, 0.0)
    ez = tg.vec3(0.0, 0.0, h)
    d = (tg.curlnoise(s, p + ex)[0] - tg.curlnoise(s, p - ex)[0] + tg.curlnoise(s, p + ey, 2)[1] * 0.0
         + tg.curlnoise(s, p + ey)[1] - tg.curlnoise(s, p - ey)[1]
         + tg.curlnoise(s, p + ez)[2] - tg.curlnoise(s, p - ez)[2]) / (2.0 * h)
    div[i] = d
    c2[i] = tg.curlnoise(s, tg.vec2(p[0], p[1]), octaves=3, lacunarity=2.0, gain=0.5)


def test_curlnoise_is_divergence_free(device):
    rng = np.random.default_rng(0)
    n = 200
    pts = rng.uniform(-2, 2, (n, 3)).astype(np.float32)
    div = tg.zeros(n, dtype=float, device=device)
    c2 = tg.zeros(n, dtype=tg.vec2, device=device)
    tg.launch(k_curl, dim=n, inputs=[5, tg.array(pts, dtype=tg.vec3, device=device), 1e-2, div, c2], device=device)
    mag = np.abs(c2.numpy()).mean()
    assert mag > 0.05
    assert np.abs(div.numpy()).max() < 0.05 * 3 * mag


def test_random_errors():
    @tg.kernel
    def bad(out: tg.array(dtype=float)):
        x = 1.5
        out[0] = tg.randf(x)

    with pytest.raises(tg.KernelError, match="state must be a uint32"):
        tg.launch(bad, dim=1, inputs=[tg.zeros(1, dtype=float)])


@tg.kernel
def k_random_weights(x: tg.array(dtype=tg.float64), n: int, out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    state = tg.rand_init(11, i)
    s = tg.float64(0.0)
    for k in range(n):          # the state is carried through the loop: the adjoint replays it
        s += tg.float64(tg.randf(state)) * x[i] * x[i]
    out[i] = s


def test_draws_in_a_differentiable_loop():
    import warnings

    from ._lang_util import check_grad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.TapeCompileWarning)
        x = np.array([0.5, -1.5, 2.0])
        check_grad(k_random_weights, 3, [x, 5], [np.zeros(3)])
        out = tg.zeros(3, dtype=tg.float64)
        tg.launch(k_random_weights, dim=3, inputs=[tg.array(x, dtype=tg.float64), 5, out])
    s = ref_init(11, np.arange(3))
    total = np.zeros(3)
    for _ in range(5):
        s = pcg(s)
        total += (s >> 8).astype(np.float32) * np.float32(1.0 / 16777216.0)
    np.testing.assert_allclose(out.numpy(), total * x * x, rtol=1e-12)


@tg.kernel
def k_ranged_draw(lo: tg.array(dtype=float), hi: tg.array(dtype=float), out: tg.array(dtype=float)):
    i = tg.tid()
    state = tg.rand_init(5, i)
    out[i] = tg.randf(state, lo[i] * lo[i], hi[i])


def test_ranged_randf_is_differentiable_in_its_bounds(device):
    """randf(state, lo, hi) = lo + (hi - lo) u: d/dlo = 1 - u, d/dhi = u (a silent 0 before),
    in reverse and forward mode; the draw u itself is a constant. The values are unchanged."""
    n = 16
    lo_v = np.linspace(-1.0, 1.0, n).astype(np.float32)
    hi_v = np.linspace(2.0, 3.0, n).astype(np.float32)
    lo = tg.array(lo_v, dtype=float, requires_grad=True, device=device)
    hi = tg.array(hi_v, dtype=float, requires_grad=True, device=device)
    out = tg.zeros(n, dtype=float, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(k_ranged_draw, dim=n, inputs=[lo, hi, out], device=device)
    s = pcg(ref_init(5, np.arange(n)))
    u = (s >> 8).astype(np.float32) * np.float32(1.0 / 16777216.0)
    a = lo_v * lo_v
    np.testing.assert_allclose(out.numpy(), (hi_v - a) * u + a, rtol=1e-6, atol=1e-7)
    tape.backward(grads={out: np.ones(n, dtype=np.float32)})
    u64 = u.astype(np.float64)
    np.testing.assert_allclose(lo.grad.numpy(), 2.0 * lo_v * (1.0 - u64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hi.grad.numpy(), u64, rtol=1e-6, atol=1e-7)
    tan = tape.jvp({lo: np.ones(n, dtype=np.float32), hi: np.full(n, 2.0, dtype=np.float32)})[out].numpy()
    np.testing.assert_allclose(tan, 2.0 * lo_v * (1.0 - u64) + 2.0 * u64, rtol=1e-5, atol=1e-6)


@tg.kernel
def k_poisson_scaled(x: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    state = tg.rand_init(3, i)
    n = tg.poisson(state, float(x[i]) * 3.0)      # a count: a constant for derivatives
    out[i] = tg.float64(n) * x[i] * x[i]


def test_forward_mode_of_a_draw_with_a_float_parameter(device):
    """poisson(state, lam) with lam from the data under forward mode: the count is a constant
    (its tangent build passed a dual lam to the draw: a C++ compile error); jvp and backward
    agree: d/dx (n x^2) = 2 n x."""
    x0 = np.array([0.3, 0.7, 1.9])
    x = tg.array(x0, dtype=tg.float64, requires_grad=True, device=device)
    out = tg.zeros(3, dtype=tg.float64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(k_poisson_scaled, dim=3, inputs=[x, out], device=device)
    n = out.numpy() / (x0 * x0)
    np.testing.assert_allclose(n, np.round(n))
    tan = tape.jvp({x: np.ones(3)})[out].numpy()
    np.testing.assert_allclose(tan, 2 * n * x0, rtol=1e-12)
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_allclose(x.grad.numpy(), 2 * n * x0, rtol=1e-12)

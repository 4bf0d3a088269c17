"""Noise is Warp's noise, with gradients (issue 23 item 6): ``noise``, ``pnoise`` and ``curlnoise``
give Warp's values (Warp's golden images; a NumPy port of Warp's algorithm on points of every
dimension) and their adjoints match central differences (the builtin table's samples check every
overload; here a tape through float64 points). Before, tapegrad's noise was its own (the pnoise
golden image was off by 122.6 of 255) and every gradient with respect to the position was 0.

``tests/lang/data/warp_noise_golden.npz`` holds every 17th pixel of Warp's
``warp/tests/assets/pnoise_golden.npy`` and every 7th vector of ``curlnoise_golden.npy``
(NVIDIA Warp, Apache-2.0)."""
import os

import numpy as np
import pytest

import tapegrad as tg

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]
GOLDEN = np.load(os.path.join(os.path.dirname(__file__), "data", "warp_noise_golden.npz"))


@tg.kernel
def pnoise_image(seed: int, W: int, px: int, py: int, pixel_values: tg.array(dtype=float)):
    tid = tg.tid()
    state = tg.rand_init(seed)
    x = (float(tid % W) + 0.5) * 0.2
    y = (float(tid / W) + 0.5) * 0.2
    n = tg.pnoise(state, tg.vec2(x, y), px, py)
    pixel_values[tid] = ((n + 1.0) / 2.0) * 255.0


@tg.kernel
def curlnoise_field(seed: int, W: int, coords: tg.array(dtype=tg.vec2), vectors: tg.array(dtype=tg.vec2)):
    tid = tg.tid()
    state = tg.rand_init(seed)
    x = (float(tid % W) + 0.5) * 0.2
    y = (float(tid / W) + 0.5) * 0.2
    p = tg.vec2(x, y)
    coords[tid] = p
    vectors[tid] = tg.curlnoise(state, p)


@pytest.mark.parametrize("device", DEVICES)
def test_pnoise_matches_warps_golden_image(device):
    img = tg.zeros(256 * 256, dtype=float, device=device)
    tg.launch(pnoise_image, dim=256 * 256, inputs=[42, 256, 16, 16, img], device=device)
    got = img.numpy()[GOLDEN["pnoise_index"]]
    assert np.abs(got - GOLDEN["pnoise"]).max() < 1.5e-3     # Warp's own tolerance (was 122.6)


@pytest.mark.parametrize("device", DEVICES)
def test_curlnoise_matches_warps_golden_field(device):
    n = 128 * 128
    xy = tg.zeros(n, dtype=tg.vec2, device=device)
    uv = tg.zeros(n, dtype=tg.vec2, device=device)
    tg.launch(curlnoise_field, dim=n, inputs=[42, 128, xy, uv], device=device)
    u = uv.numpy()
    u = u / np.sqrt(np.max((u * u).sum(axis=1)))
    np.testing.assert_allclose(xy.numpy()[GOLDEN["curl_index"]], GOLDEN["curl_xy"], atol=1e-6)
    assert np.abs(u[GOLDEN["curl_index"]] - GOLDEN["curl_uv"]).max() < 1e-4


# ---------------------------------------------------------------- a NumPy port of Warp's noise

M32 = np.uint64(0xFFFFFFFF)
PRIMES = [73856093, 19349663, 53471161, 10000019]


def _pcg(s):
    s = np.asarray(s, dtype=np.uint64)
    b = (s * np.uint64(747796405) + np.uint64(2891336453)) & M32
    c = (((b >> ((b >> np.uint64(28)) + np.uint64(4))) ^ b) * np.uint64(277803737)) & M32
    return (c >> np.uint64(22)) ^ c


def _randf(h):
    h = _pcg(h)
    return h, (h >> np.uint64(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def _gradient(state, q):
    """Warp's lattice gradient at integer points ``q`` (n, N), float32."""
    n_dim = q.shape[1]
    qq = q.astype(np.int64).astype(np.uint64) & M32
    h = (qq[:, -1] * np.uint64(PRIMES[n_dim - 1]) + np.uint64(state)) & M32
    for k in range(n_dim - 2, -1, -1):
        h = h ^ ((qq[:, k] * np.uint64(PRIMES[k])) & M32)
    if n_dim == 1:
        _, r = _randf(h)
        return (np.float32(2.0) * r - np.float32(1.0))[:, None]
    g = []
    for _ in range(n_dim):
        h, r = _randf(h)
        g.append(r - np.float32(0.5))
    g = np.stack(g, axis=1)
    ln = np.sqrt((g * g).sum(axis=1, dtype=np.float32))
    return g / ln[:, None]


def _fade(t):
    return t * t * t * (t * (t * 6.0 - 15.0) + 10.0)


def noise_ref(state, p, period=None):
    """Warp's (p)noise of points ``p`` (n, N) in float64 arithmetic."""
    p = np.asarray(p, dtype=np.float64)
    n_dim = p.shape[1]
    fl = np.floor(p)
    f = p - fl
    i0 = fl.astype(np.int64)
    i1 = i0 + 1
    if period is not None:
        per = np.asarray(period)
        i0 = np.mod(i0, per)
        i1 = np.mod(i0 + 1, per)
    vals = []
    for c in range(1 << n_dim):
        bits = np.array([(c >> k) & 1 for k in range(n_dim)])
        q = np.where(bits[None, :] == 1, i1, i0)
        g = _gradient(state, q).astype(np.float64)
        vals.append(((f - bits[None, :]) * g).sum(axis=1))
    for k in range(n_dim):
        s = _fade(f[:, k])
        vals = [(vals[2 * c + 1] - vals[2 * c]) * s + vals[2 * c] for c in range(len(vals) // 2)]
    return vals[0]


def _rand_init(seed, offset):
    return int(_pcg((np.uint64(seed) + _pcg(np.uint64(offset))) & M32))


def curl_ref(state, p, octaves=1, lacunarity=2.0, gain=0.5, h=1e-6):
    """Warp's curlnoise from the reference noise's gradients (central differences in float64)."""
    p = np.asarray(p, dtype=np.float64)
    n, n_dim = p.shape
    fields = 1 if n_dim == 2 else 3
    sums = np.zeros((fields, n, n_dim))
    freq, amp = 1.0, 1.0
    for _ in range(octaves):
        for j in range(fields):
            if j:
                state = _rand_init(state, 10019689 if j == 1 else 13112221)
            for k in range(n_dim):
                e = np.zeros(n_dim)
                e[k] = h
                sums[j, :, k] += amp * (noise_ref(state, freq * p + e) - noise_ref(state, freq * p - e)) / (2 * h)
        amp *= gain
        freq *= lacunarity
    if fields == 1:
        return np.stack([-sums[0, :, 1], sums[0, :, 0]], axis=1)
    g1, g2, g3 = sums
    return np.stack([g3[:, 1] - g2[:, 2], g1[:, 2] - g3[:, 0], g2[:, 0] - g1[:, 1]], axis=1)


@tg.kernel
def noise_all(x1: tg.array(dtype=float), x2: tg.array(dtype=tg.vec2), x3: tg.array(dtype=tg.vec3),
              x4: tg.array(dtype=tg.vec4), n: tg.array(dtype=float, ndim=2), pn: tg.array(dtype=float, ndim=2),
              c2: tg.array(dtype=tg.vec2), c3: tg.array(dtype=tg.vec3), c4: tg.array(dtype=tg.vec3)):
    i = tg.tid()
    s = tg.rand_init(42)
    n[i, 0] = tg.noise(s, x1[i])
    n[i, 1] = tg.noise(s, x2[i])
    n[i, 2] = tg.noise(s, x3[i])
    n[i, 3] = tg.noise(s, x4[i])
    pn[i, 0] = tg.pnoise(s, x1[i], 3)
    pn[i, 1] = tg.pnoise(s, x2[i], 3, 5)
    pn[i, 2] = tg.pnoise(s, x3[i], 3, 5, 2)
    pn[i, 3] = tg.pnoise(s, x4[i], 3, 5, 2, 4)
    c2[i] = tg.curlnoise(s, x2[i], tg.uint32(3), 2.0, 0.5)
    c3[i] = tg.curlnoise(s, x3[i], tg.uint32(2), 2.0, 0.5)
    c4[i] = tg.curlnoise(s, x4[i])


@pytest.mark.parametrize("device", DEVICES)
def test_noise_values_match_warps_algorithm(device):
    rng = np.random.default_rng(3)
    n = 64
    pts = {d: rng.uniform(-6.0, 6.0, size=(n, d)).astype(np.float32) for d in (1, 2, 3, 4)}
    xs = [tg.array(pts[1][:, 0], dtype=float, device=device)] + \
        [tg.array(pts[d], dtype=t, device=device) for d, t in ((2, tg.vec2), (3, tg.vec3), (4, tg.vec4))]
    outs = [tg.zeros((n, 4), dtype=float, device=device), tg.zeros((n, 4), dtype=float, device=device),
            tg.zeros(n, dtype=tg.vec2, device=device), tg.zeros(n, dtype=tg.vec3, device=device),
            tg.zeros(n, dtype=tg.vec3, device=device)]
    tg.launch(noise_all, dim=n, inputs=xs + outs, device=device)
    noise, pnoise = outs[0].numpy(), outs[1].numpy()
    periods = {1: [3], 2: [3, 5], 3: [3, 5, 2], 4: [3, 5, 2, 4]}
    state = int(_pcg(42))          # tg.rand_init(42)
    for d in (1, 2, 3, 4):
        np.testing.assert_allclose(noise[:, d - 1], noise_ref(state, pts[d]), atol=2e-6)
        np.testing.assert_allclose(pnoise[:, d - 1], noise_ref(state, pts[d], periods[d]), atol=2e-6)
    np.testing.assert_allclose(outs[2].numpy(), curl_ref(state, pts[2], 3), atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(outs[3].numpy(), curl_ref(state, pts[3], 2), atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(outs[4].numpy(), curl_ref(state, pts[4], 1), atol=2e-4, rtol=1e-4)


@tg.kernel
def noise_loss(x: tg.array(dtype=tg.vec3d), gain: tg.array(dtype=tg.float64), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    s = tg.rand_init(5)
    c = tg.curlnoise(s, x[i], tg.uint32(3), tg.float64(1.7), gain[0])
    v = tg.noise(s, x[i]) + tg.pnoise(s, x[i] * 0.5, 2, 3, 4) + c[0] - 2.0 * c[1] + c[2]
    tg.atomic_add(loss, 0, v * v)


@pytest.mark.parametrize("device", DEVICES)
def test_noise_gradients_through_a_tape_match_central_differences(device):
    rng = np.random.default_rng(4)
    xn = rng.uniform(-3.0, 3.0, size=(6, 3))
    gn = np.array([0.6])

    def f(xv, gv):
        loss = tg.zeros(1, dtype=tg.float64, device=device)
        tg.launch(noise_loss, dim=6, inputs=[tg.array(xv, dtype=tg.vec3d, device=device),
                                            tg.array(gv, dtype=tg.float64, device=device), loss], device=device)
        return loss.numpy()[0]

    x = tg.array(xn, dtype=tg.vec3d, requires_grad=True, device=device)
    g = tg.array(gn, dtype=tg.float64, requires_grad=True, device=device)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(noise_loss, dim=6, inputs=[x, g, loss], device=device)
    tape.backward(loss=loss)
    h = 1e-6
    fd = np.zeros_like(xn)
    for idx in np.ndindex(*xn.shape):
        e = np.zeros_like(xn)
        e[idx] = h
        fd[idx] = (f(xn + e, gn) - f(xn - e, gn)) / (2 * h)
    assert np.abs(fd).max() > 0.1
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-5, atol=1e-6)
    fd_gain = (f(xn, gn + h) - f(xn, gn - h)) / (2 * h)
    np.testing.assert_allclose(g.grad.numpy()[0], fd_gain, rtol=1e-5, atol=1e-6)


@tg.kernel
def pnoise_shift(x: tg.array(dtype=tg.vec2), a: tg.array(dtype=float), b: tg.array(dtype=float)):
    i = tg.tid()
    s = tg.rand_init(1)
    a[i] = tg.pnoise(s, x[i], 3, 4)
    b[i] = tg.pnoise(s, x[i] + tg.vec2(-3.0, -8.0), 3, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_pnoise_is_periodic_at_negative_coordinates(device):
    """Warp wraps with C's remainder, which repeats neither below 0; tapegrad's floor modulo does."""
    xn = np.random.default_rng(5).uniform(0.0, 6.0, size=(50, 2)).astype(np.float32)
    a = tg.zeros(50, dtype=float, device=device)
    b = tg.zeros(50, dtype=float, device=device)
    tg.launch(pnoise_shift, dim=50, inputs=[tg.array(xn, dtype=tg.vec2, device=device), a, b], device=device)
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-6)
